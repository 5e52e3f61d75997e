"""Fixtures that start the real stack: `fleetdeck local` (control plane + agent + demo) as a
subprocess on 127.0.0.1, through the one launcher (`fleetdeck.launcher`), plus helpers to run
more agents and admin commands against it."""

from __future__ import annotations

import random
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from fleetdeck.launcher import child_environment
from fleetdeck.launcher import start_agent as start_agent
from tests.helpers.agent_jobs import Env, agent_env
from tests.helpers.stacks import STACK_ENV as STACK_ENV
from tests.helpers.stacks import AgentProcess as AgentProcess
from tests.helpers.stacks import ControlPlane as ControlPlane
from tests.helpers.stacks import Stack as Stack
from tests.helpers.stacks import start_local as start_local

if TYPE_CHECKING:
    from tests.helpers.hosting import Hosting
    from tests.helpers.postgres_server import PostgresDatabases

ROOT = Path(__file__).resolve().parent.parent


def python_env(**extra: str) -> dict[str, str]:
    return child_environment(extra)


@pytest.fixture
def anyio_backend() -> str:
    return "trio"


@pytest.fixture(scope="session", autouse=True)
def no_stack_left_behind(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A stack started for a TUI outlives it: after the session, none of the session's may run."""
    from tests.helpers.stacks import stop_stacks

    yield
    left = stop_stacks(tmp_path_factory.getbasetemp())
    assert left == [], f"stacks left running after the tests (now stopped): {left}"


# The session's stacks come in variants. A module runs each of its tests once per variant it
# names: `pytestmark = pytest.mark.stack_variants("sqlite", "postgresql")`; the others run on
# DEFAULT_VARIANT. Each variant is the environment its `fleetdeck local` child gets on top of
# STACK_ENV, made when the variant's stack first starts (a variant may start a service first).
DEFAULT_VARIANT = "sqlite"
StackVariant = Callable[[pytest.FixtureRequest], dict[str, str]]
STACK_VARIANTS: dict[str, StackVariant] = {
    "sqlite": lambda _request: {},
    # The same stack with its control plane under uvicorn on asyncio (the agent on a trio thread).
    "uvicorn": lambda _request: {"FLEETDECK_SERVER": "uvicorn"},
    # A fresh database per stack on the session's control-plane PostgreSQL server.
    "postgresql": lambda request: {
        "FLEETDECK_LOCAL_DB": request.getfixturevalue("control_plane_postgres").create("stack")
    },
}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "stack_variants(*names): run each test once per named stack variant")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--module-order",
        default="file",
        help="the order whole test modules run in: file (by path, the default), reverse, or an integer"
        " seed of a random order (the same seed, the same order): a module that passes only after another shows",
    )


def pytest_report_header(config: pytest.Config) -> str:
    return f"module order: {config.getoption('module_order')}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Reorder whole modules as `--module-order` asks; each module's tests keep their own order
    (its module fixtures are set up once, and its tests may build on each other's service)."""
    order: str = config.getoption("module_order")
    if order == "file":
        return
    modules = list(dict.fromkeys(item.path for item in items))
    if order == "reverse":
        modules.reverse()
    elif order.isdigit():
        random.Random(int(order)).shuffle(modules)
    else:
        raise pytest.UsageError(f"--module-order: file, reverse or an integer seed, not {order!r}")
    rank = {path: n for n, path in enumerate(modules)}
    items.sort(key=lambda item: rank[item.path])  # stable: within a module, the order stays


# What each module costs (setup, calls and teardown of its tests), summed as reports arrive (on
# xdist's controller too), and the costliest printed after pytest's slowest tests: a module whose
# cost grows shows where the suite's time goes, and how whole modules share out over the workers.
MODULE_SECONDS: dict[str, float] = {}
SLOWEST_MODULES = 15


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    module = report.nodeid.split("::", 1)[0]
    MODULE_SECONDS[module] = MODULE_SECONDS.get(module, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not MODULE_SECONDS:
        return
    terminalreporter.write_sep("=", f"slowest {SLOWEST_MODULES} modules")
    costliest = sorted(MODULE_SECONDS.items(), key=lambda item: item[1], reverse=True)[:SLOWEST_MODULES]
    for module, seconds in costliest:
        terminalreporter.write_line(f"{seconds:8.2f}s {module}")
    terminalreporter.write_line(f"{sum(MODULE_SECONDS.values()):8.2f}s in all {len(MODULE_SECONDS)} modules")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marker = metafunc.definition.get_closest_marker("stack_variants")
    if marker is None or "stack" not in metafunc.fixturenames:
        return
    unknown = set(marker.args) - STACK_VARIANTS.keys()
    assert not unknown, f"unknown stack variants {sorted(unknown)}; known: {sorted(STACK_VARIANTS)}"
    metafunc.parametrize("stack", marker.args, indirect=True, scope="session")


class SessionStacks:
    """One running stack per variant, started when a test first asks for it, all stopped at the end."""

    def __init__(self) -> None:
        # Outside pytest's temporary folder (0700): as root, the stacks' sites' users and nginx's
        # workers pass through to the sites, as they do through /var/lib/fleetdeck.
        self._folder = Path(tempfile.mkdtemp(prefix="fleetdeck-session-stacks-"))
        self._folder.chmod(0o711)
        self._running: dict[str, Stack] = {}

    def get(self, variant: str, request: pytest.FixtureRequest) -> Stack:
        """The variant's stack; `request` (the asking fixture's) lets the variant start its services."""
        if variant not in self._running:
            env = STACK_VARIANTS[variant](request)
            self._running[variant] = start_local(self._folder / f"local-{variant}", env=env)
        return self._running[variant]

    def stop_all(self) -> None:
        """Stop every stack started (again: a no-op)."""
        died = {variant: s.process.poll() for variant, s in self._running.items()}
        logs = {variant: s.log()[-4000:] for variant, s in self._running.items() if died[variant] is not None}
        for running in self._running.values():
            running.stop()
        self._running.clear()
        shutil.rmtree(self._folder, ignore_errors=True)
        # A stack that died mid-session fails every later test with ConnectError: say why, once.
        said = "\n".join(f"{variant} ({died[variant]}):\n{log}" for variant, log in logs.items())
        assert not logs, f"fleetdeck local exited early: {said}"


@pytest.fixture(scope="session")
def session_stacks() -> Iterator[SessionStacks]:
    stacks = SessionStacks()
    yield stacks
    stacks.stop_all()


@pytest.fixture(scope="session")
def control_plane_postgres(session_stacks: SessionStacks) -> Iterator[PostgresDatabases]:
    """The session's PostgreSQL server for control planes (stacks of the "postgresql" variant,
    `serve` processes, migrations): a server of its own, apart from the one the `pg.*` job tests
    drive, in a folder the `postgres` user can reach (pytest's own is private to root)."""
    from tests.helpers.postgres_server import PostgresDatabases, start_postgres

    folder = Path(tempfile.mkdtemp(prefix="fleetdeck-control-plane-pg-"))
    folder.chmod(0o755)
    server = start_postgres(folder / "server", log_statements=False)
    try:
        yield PostgresDatabases(server)
    finally:
        session_stacks.stop_all()  # the stacks on it before it: none may see its database vanish
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database of each kind the control plane runs on (a test using it runs on both):
    a SQLite file, or a fresh database on the session's control-plane PostgreSQL server."""
    if request.param == "postgresql":
        url: str = request.getfixturevalue("control_plane_postgres").create("test")
        return url
    return f"sqlite:///{tmp_path / 'fleet.db'}"


@pytest.fixture(scope="session")
def stack(request: pytest.FixtureRequest, session_stacks: SessionStacks) -> Stack:
    """The session's stack of the test's variant (`stack_variants`), else of the default one."""
    return session_stacks.get(getattr(request, "param", DEFAULT_VARIANT), request)


@pytest.fixture(scope="session")
def hosting(stack: Stack) -> Iterator[Hosting]:
    """The session's hosting server (`tests.helpers.hosting`): its folder is outside pytest's
    private temporary folder (mode 0700), so the sites' users and the web server's workers can
    reach the sites."""
    from tests.helpers.hosting import start_hosting, stop_hosting

    folder = Path(tempfile.mkdtemp(prefix="fleetdeck-hosting-"))
    folder.chmod(0o755)
    started = start_hosting(stack, folder)
    yield started
    stop_hosting(started)
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def system_folders(hosting: Hosting) -> dict[str, Path]:
    """The system's log folder and apt cache of the hosting server's layout, in the session's
    folders (set once: the storage and logs kinds both read them)."""
    folder = hosting.folder / "system"
    folders = {"log_dir": folder / "log", "apt_archives": folder / "apt-archives"}
    for made in folders.values():
        (made / "partial").mkdir(parents=True)
    hosting.configure("system", {**hosting.layout.get("system", {}), **{k: str(v) for k, v in folders.items()}})
    return folders


@pytest.fixture
def static_site(hosting: Hosting) -> Iterator[tuple[str, Path]]:
    """A static site of the hosting server, its domain and folder (deleted after the test, with
    its user): the one the storage and logs kinds look into."""
    domain = f"ops-{uuid.uuid4().hex[:6]}.test"
    hosting.run("site.create", domain=domain, profile="static").ok()
    yield domain, hosting.home / domain.replace(".", "-")
    hosting.run("site.delete", domain=domain).ok()


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    """An agent's job context on a temporary home, without the hosting stack (tests.helpers.agent_jobs)."""
    yield from agent_env(tmp_path)
