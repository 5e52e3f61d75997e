"""The stacks the tests start: `fleetdeck local` (`Stack`, `start_local`) and agent processes of
their own (`AgentProcess`), here rather than in the conftest so that a benchmark may start them
too; and which `fleetdeck local` processes run on a data folder: a stack the TUI starts outlives
it, so a test that starts one must find and stop it, and the session checks none is left behind."""

from __future__ import annotations

import signal
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import httpx

from fleetdeck import running
from fleetdeck.launcher import LocalStack, StackCredentials, start_agent

STARTUP_TIMEOUT_S = 60.0


# Quick heartbeats and a short job grace period: losing an agent is noticed in seconds.
STACK_ENV = {"FLEETDECK_HEARTBEAT_S": "1", "FLEETDECK_JOB_GRACE_S": "2", "FLEETDECK_LOG": "INFO"}


@dataclass(frozen=True)
class Stack(StackCredentials):
    """A running `fleetdeck local`, and what its credentials file says."""

    launcher: LocalStack
    data_dir: Path

    def admin(self, *args: str) -> dict[str, object]:
        """Run `fleetdeck admin ... --json` against this stack's database."""
        from tests.helpers.control_planes import admin

        return admin(self.db_url, *args)

    def login(self, email: str, password: str) -> str:
        """A session token for another user of this stack."""
        answer = httpx.post(f"{self.base_url}/v1/auth/login", json={"email": email, "password": password})
        answer.raise_for_status()
        token: str = answer.json()["token"]
        return token

    def new_owner(self, prefix: str, plan: str = "max") -> str:
        """The session token of the owner of a new org `<prefix>-<random>` on `plan`."""
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.admin("create-org", name, "--plan", plan)
        email = f"owner@{name}.test"
        self.admin("create-user", email, "--org", name, "--role", "owner", "--password", "pw-123456")
        return self.login(email, "pw-123456")

    def http(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token or self.token}"}
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=30)

    @property
    def process(self) -> subprocess.Popen[str]:
        assert self.launcher.process is not None
        return self.launcher.process

    def stop(self) -> int | None:
        return self.launcher.stop(15)

    def log(self) -> str:
        return self.launcher.log_file.read_text(errors="replace")


def start_local(data_dir: Path, port: int = 0, env: dict[str, str] | None = None) -> Stack:
    """Start `fleetdeck local` on `data_dir` and wait until it says it runs (its agent is linked);
    `env` adds to (or overrides) the stack's variables."""
    launcher = LocalStack(
        data_dir,
        port=port,
        env={**STACK_ENV, **(env or {})},
        log_file=data_dir.parent / f"{data_dir.name}-control-plane.log",
        startup_timeout=STARTUP_TIMEOUT_S,
    )
    credentials = launcher.start()
    return Stack(launcher=launcher, data_dir=data_dir, **credentials.__dict__)


class ControlPlane(Protocol):
    """What an agent process links to and is seen through: a `Stack`, or an `OwnControlPlane`
    (`tests.helpers.control_planes`: a `fleetdeck serve` of a test's own, a replica)."""

    base_url: str

    def http(self, token: str) -> httpx.Client: ...


class AgentProcess:
    """An agent process of its own (the agent of a second server) that a test may kill and
    restart; `stop` at the end of the test. `extra` are more of its options (`start_agent`);
    `api_token` sees the server through the API (default: the stack's owner, for a demo-org
    server; needed for another control plane than a `Stack`)."""

    def __init__(
        self,
        stack: ControlPlane,
        server_id: str,
        token: str,
        home: Path,
        state: Path,
        *extra: str,
        api_token: str | None = None,
    ) -> None:
        if api_token is None:
            assert isinstance(stack, Stack), "an agent of another control plane is seen with an api_token"
            api_token = stack.token
        self.stack, self.server_id, self.api_token = stack, server_id, api_token
        self._args = (stack.base_url, token, home, state, *extra)
        # Its log goes to a file beside its state folder: a pipe nobody reads would fill up and
        # block a long-lived agent (the session's hosting server logs every job).
        self.log_file = state.parent / f"{state.name}-agent.log"
        self.process = self._start()
        try:
            self.wait_online()
        except BaseException:
            self.stop()  # a test that cannot start its agent leaves no process behind
            raise

    def online(self) -> bool:
        with self.stack.http(self.api_token) as http:
            return bool(http.get(f"/v1/servers/{self.server_id}").json()["agent"]["online"])

    def wait_online(self) -> None:
        from tests.helpers import wait_until

        wait_until(self.online, timeout=20)

    def kill(self) -> None:
        """SIGKILL, and wait until the control plane counts it offline."""
        from tests.helpers import wait_until

        self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        wait_until(lambda: not self.online(), timeout=10)

    def restart(self) -> None:
        self.process = self._start()
        self.wait_online()

    def _start(self) -> subprocess.Popen[str]:
        with open(self.log_file, "a", encoding="utf-8") as log:
            return start_agent(*self._args, stderr=log)

    def stop(self) -> None:
        """A graceful stop: the nginx and HAProxy the agent runs for its load balancers stop with it."""
        self.process.terminate()
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def stack_processes(under: Path) -> list[int]:
    """The live `fleetdeck local` processes whose data folder is `under` or inside it."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if "fleetdeck" not in argv or "local" not in argv or "--data-dir" not in argv:
            continue
        data_dir = Path(argv[argv.index("--data-dir") + 1])
        if data_dir.is_relative_to(under) and running.process_lives(int(entry.name)):
            found.append(int(entry.name))
    return found


def stop_stacks(under: Path) -> list[int]:
    """Stop every stack still running on `under` or below it (SIGTERM, then SIGKILL); their pids."""
    left = stack_processes(under)
    for pid in left:
        running.terminate(pid, 15)
    return left
