"""An agent's jobs without the hosting stack: a job context on a temporary home, a job manager,
and a link from it to a hub served by hypercorn's trio worker (`linked`), for the tests of the
job machinery and of kinds that need no real web server. The `env` fixture (tests/conftest.py)
gives each test its own `Env`."""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from agent import __version__
from agent.jobs.manager import JobManager
from agent.jobs.toolkit.base import JobContext
from agent.jobs.toolkit.host import LayoutFile
from agent.link.client import AgentLink
from agent.runner import AgentConfig, build_handlers
from agent.sites import SiteRegistry
from contract.link import protocol
from control_plane.hub import AgentHub
from tests.helpers import eventually
from tests.helpers.link import FAST, serving

TOKEN = "agent-token-jobs"
SERVER_ID = "srv-jobs"
IS_ROOT = os.geteuid() == 0


@dataclass
class Env:
    home: Path
    state: Path
    ctx: JobContext
    layout: Path  # the host layout file
    logs: Path  # the sites' log folders (root's, outside the sites)
    users: list[str] = field(default_factory=list)  # system users a test may leave behind

    def add_site(self, domain: str, *, owner: pwd.struct_passwd | None = None) -> Path:
        """A site written straight into the registry (no system user of its own), with its log folder."""
        slug = domain.replace(".", "-")
        folder = self.home / slug
        (folder / "logs").mkdir(parents=True)  # the site's own (cron's run histories)
        self.site_logs(folder).mkdir(parents=True)
        registry = self.state / "sites.json"
        document = json.loads(registry.read_text()) if registry.exists() else {"sites": []}
        document["sites"].append({"domain": domain, "slug": slug})
        registry.write_text(json.dumps(document))
        if owner is not None:
            for path in (folder, folder / "logs"):
                os.chown(path, owner.pw_uid, owner.pw_gid)
        return folder

    def site_logs(self, folder: Path) -> Path:
        """The log folder of the site whose folder is `folder`."""
        return self.logs / folder.name

    def add_cron_entry(self, entry_id: str, domain: str, command: str) -> None:
        path = self.state / "cron.json"
        document = json.loads(path.read_text()) if path.exists() else {"entries": []}
        document["entries"].append(
            {"id": entry_id, "domain": domain, "schedule": "@daily", "command": command, "paused": True}
        )
        path.write_text(json.dumps(document))


def agent_env(tmp_path: Path) -> Iterator[Env]:
    """An agent's job context on `tmp_path` (a home, a state folder, a host layout without a web
    server); afterwards, the system users the test named in `Env.users` are removed."""
    home, state = tmp_path / "home", tmp_path / "state"
    home.mkdir()
    state.mkdir()
    if IS_ROOT:
        os.chmod(tmp_path, 0o755)  # site users must reach their folders
    # A server without a web server (no nginx sites folder, no PHP-FPM pool folder): its sites are
    # files, users and registry entries only (tests/agent/jobs/test_site.py serves them for real).
    layout = tmp_path / "host-layout.json"
    no_web = {"nginx": {"sites_dir": str(tmp_path / "no-nginx")}, "php": {"pool_dir": str(tmp_path / "no-php")}}
    logs = tmp_path / "site-logs"
    layout.write_text(json.dumps({**no_web, "system": {"sites_log_dir": str(logs)}}))
    ctx = JobContext(str(home), str(state), SiteRegistry(str(state)), __version__, layout=LayoutFile(str(layout)))
    made = Env(home, state, ctx, layout, logs)
    yield made
    for name in made.users:  # whatever a failed test left behind
        if shutil.which("crontab"):
            subprocess.run(["crontab", "-u", name, "-r"], capture_output=True, check=False)
        subprocess.run(["userdel", name], capture_output=True, check=False)


def temporary_domain(prefix: str = "t") -> str:
    return f"{prefix}{secrets.token_hex(4)}.example.com"


@dataclass
class Outcome:
    items: list[dict[str, Any]]
    exit_code: int | None

    @property
    def stdout(self) -> list[str]:
        return [i["text"] for i in self.items if i["stream"] == "stdout"]

    @property
    def stderr(self) -> list[str]:
        return [i["text"] for i in self.items if i["stream"] == "stderr"]

    def json(self) -> Any:
        assert self.exit_code == 0, self.stderr
        return json.loads("\n".join(self.stdout))


@dataclass
class Linked:
    hub: AgentHub
    jobs: JobManager
    env: Env
    url: str
    nursery: trio.Nursery
    link_scope: trio.CancelScope = field(default_factory=trio.CancelScope)

    async def connect(self) -> None:
        config = AgentConfig(urls=(self.url,), token=TOKEN, home=str(self.env.home), state_dir=str(self.env.state))
        link = AgentLink(self.url, TOKEN, build_handlers(config, self.jobs), version=__version__, backoff=FAST)
        self.link_scope = trio.CancelScope()

        async def run_link(scope: trio.CancelScope) -> None:
            with scope:
                await link.run()

        self.nursery.start_soon(run_link, self.link_scope)
        await self.wait_online(True)

    async def disconnect(self) -> None:
        self.link_scope.cancel()
        await self.wait_online(False)

    async def wait_online(self, online: bool) -> None:
        await eventually(lambda: self.hub.is_online(SERVER_ID) == online)

    async def stream(
        self, method: str, params: dict[str, Any], *, window: int = protocol.DEFAULT_WINDOW, stop_after: int = 0
    ) -> Outcome:
        """The items of a streamed call and its exit code; leaves early after `stop_after` items."""
        items: list[dict[str, Any]] = []
        async with self.hub.open_stream(SERVER_ID, method, params, window=window) as stream:
            async for chunk in stream:
                assert isinstance(chunk, list)
                items.extend(chunk)
                if stop_after and len(items) >= stop_after:
                    return Outcome(items, None)
            result = stream.result
        assert set(result) == {"exit_code"}
        return Outcome(items, result["exit_code"])

    async def run(self, *argv: str, job_id: str | None = None, **kwargs: Any) -> Outcome:
        params = {"job_id": job_id or secrets.token_hex(8), "kind": f"{argv[0]}.{argv[1]}", "argv": list(argv)}
        return await self.stream("job.run", {**params, "secrets": {}}, **kwargs)


@asynccontextmanager
async def linked(env: Env, **manager_options: Any) -> AsyncIterator[Linked]:
    """A hub under hypercorn's trio worker, a job manager, and an agent link to the hub."""

    async def authenticate(token: str) -> str | None:
        return SERVER_ID if token == TOKEN else None

    hub = AgentHub(authenticate=authenticate)
    async with serving(hub) as url, trio.open_nursery() as nursery:
        jobs = JobManager(env.ctx, **manager_options)
        await nursery.start(jobs.run)
        setup = Linked(hub, jobs, env, url, nursery)
        await setup.connect()
        try:
            yield setup
        finally:
            nursery.cancel_scope.cancel()


def assert_complete(items: list[dict[str, Any]], count: int, first: int = 1) -> None:
    assert [i["seq"] for i in items] == list(range(first, first + count))


def write_log(path: Path, count: int) -> None:
    with open(path, "wb") as f:
        f.write(b"".join(b"line %d\n" % i for i in range(1, count + 1)))


def live_members(pgid: int) -> list[int]:
    """The processes of the group `pgid` that are not zombies."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members
