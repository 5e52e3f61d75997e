"""The layering rule, read from the imports: towers import only what sits below them, and only the
composition root (`fleetdeck/`) imports more than one tower."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("fleetdeck", "tui", "api_client", "contract", "themes", "control_plane", "agent")

# What each package may import of the project's packages (itself always). Everything both sides of
# a wire need is `contract`'s: the agent and the control plane never import the client, nor each other.
ALLOWED: dict[str, tuple[str, ...]] = {
    "contract": (),
    "api_client": ("contract",),
    "themes": (),
    "tui": ("api_client", "contract", "themes"),
    "agent": ("contract",),
    "control_plane": ("contract",),
    "fleetdeck": ("tui", "api_client", "contract", "themes", "control_plane", "agent"),
}


def _project_imports(path: Path) -> set[str]:
    modules: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules.add(node.module)
    return {m for m in modules if m.split(".")[0] in PACKAGES}


def _allowed(package: str, module: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in (package, *ALLOWED[package]))


@pytest.mark.parametrize("package", PACKAGES)
def test_a_package_imports_only_what_sits_below_it(package: str) -> None:
    wrong = {
        f"{path.relative_to(ROOT)}: {module}"
        for path in sorted((ROOT / package).rglob("*.py"))
        for module in _project_imports(path)
        if not _allowed(package, module)
    }
    assert not wrong, "imports against the layering:\n" + "\n".join(sorted(wrong))


def test_no_relative_imports_anywhere() -> None:
    """Every import names its module in full, so moving a module is a search for its name."""
    relative = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom) and node.level > 0
    ]
    assert not relative, relative


def _test_module_imports(path: Path) -> set[str]:
    """The test modules (`tests[.<folder>...].test_*`) that `path` imports, in either form of import."""
    modules: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.startswith("tests"):
            modules.add(node.module)
            modules.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {m for m in modules if m.startswith("tests.") and any(p.startswith("test_") for p in m.split("."))}


def test_no_test_module_imports_another() -> None:
    """Shared test helpers live in `tests/helpers/`: a test module importing another would run the
    other's module-level code, and moving or deleting a test would break unrelated ones."""
    wrong = {
        f"{path.relative_to(ROOT)}: {module}"
        for path in sorted((ROOT / "tests").rglob("*.py"))
        for module in _test_module_imports(path)
    }
    assert not wrong, "import these helpers from tests/helpers/ instead:\n" + "\n".join(sorted(wrong))


# --- inside the agent's jobs: domains build on the toolkit, never on each other -----------------------

AGENT_JOBS = ROOT / "agent" / "jobs"


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def _jobs_domain(module: str) -> str | None:
    """The domain of a module of `agent.jobs` (`agent.jobs.<domain>[...]`), None for the rest."""
    from agent.jobs.kinds import NOT_DOMAINS

    parts = module.split(".")
    if parts[:2] != ["agent", "jobs"] or len(parts) < 3 or parts[2] in NOT_DOMAINS:
        return None
    return parts[2]


def _all_imports(path: Path) -> set[str]:
    """Every module `path` imports, at any depth of its code (`from agent.jobs import cron` included)."""
    modules = _project_imports(path)
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in ("agent.jobs", "agent.jobs.toolkit"):
            modules.update(f"{node.module}.{alias.name}" for alias in node.names)
    return modules


def test_a_domain_imports_no_other_domain_and_the_toolkit_none() -> None:
    """A handler builds on the toolkit (`agent.jobs.toolkit`) and the contract; work that spans
    domains goes through a toolkit service (`site_web`, `php_fpm`, `site_teardown`...). The load
    balancers' engines are held to the same rule."""
    wrong = set()
    for path in sorted([*AGENT_JOBS.rglob("*.py"), *(ROOT / "agent" / "load_balancers").rglob("*.py")]):
        mine = _jobs_domain(_module_name(path))
        for module in _all_imports(path):
            theirs = _jobs_domain(module)
            if theirs is not None and theirs != mine:
                wrong.add(f"{path.relative_to(ROOT)}: {module}")
    assert not wrong, "a domain's module imported from outside it:\n" + "\n".join(sorted(wrong))


def test_the_toolkit_has_no_import_cycle() -> None:
    toolkit = {_module_name(path): path for path in (AGENT_JOBS / "toolkit").rglob("*.py")}
    graph = {name: {m for m in _all_imports(path) if m in toolkit and m != name} for name, path in toolkit.items()}
    done: set[str] = set()

    def visit(name: str, trail: tuple[str, ...]) -> None:
        assert name not in trail, "import cycle: " + " -> ".join((*trail[trail.index(name) :], name))
        if name not in done:
            for imported in sorted(graph[name]):
                visit(imported, (*trail, name))
            done.add(name)

    for name in sorted(graph):
        visit(name, ())


def test_each_toolkit_function_a_domain_calls_says_what_it_does() -> None:
    toolkit_functions = {
        (_module_name(path), node.name): node
        for path in (AGENT_JOBS / "toolkit").rglob("*.py")
        for node in ast.parse(path.read_text(encoding="utf-8")).body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    undocumented = set()
    for path in sorted(AGENT_JOBS.rglob("*.py")):
        if _jobs_domain(_module_name(path)) is None:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("agent.jobs.toolkit."):
                for alias in node.names:
                    function = toolkit_functions.get((node.module, alias.name))
                    if function is not None and not ast.get_docstring(function):
                        undocumented.add(f"{node.module}.{alias.name}")
    assert not undocumented, "toolkit functions without a docstring:\n" + "\n".join(sorted(undocumented))
