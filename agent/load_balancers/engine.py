"""What both engines share: the files of a load balancer, the tools, the proxy processes.

An engine renders one file per load balancer, validates a candidate with its own checker, and
reloads without dropping connections, then checks that the reload took (a new worker
generation). Its messages (the validator's, the reload's) are returned as text: they become the
`degraded` error of the apply.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import trio

from agent.jobs.toolkit.output import Output
from agent.jobs.toolkit.proc import APT_WAITS_FOR_ITS_LOCK, apt_env, capture_command, which
from agent.load_balancers.acme import CertFiles
from agent.load_balancers.settings import LbSettings
from contract.job_kinds.lb import LbApply

log = logging.getLogger("fleetdeck.agent.lb")

RELOAD_TIMEOUT_S = 15.0
POLL_S = 0.05


@dataclass(frozen=True)
class RenderInput:
    """Everything a render needs besides the spec: where to listen, the ACME responder, the certificate."""

    bind: str | None
    port: int  # the port actually listened on (mapped)
    http_port: int  # where port 80 is (mapped): the TLS load balancer's challenge and redirect listener
    acme_port: int | None  # the HTTP-01 responder on 127.0.0.1 (None: no responder)
    cert: CertFiles | None  # the certificate, when TLS and it exists
    hook: str  # the test hook's text (added verbatim), "" normally


class Engine(ABC):
    kind: str
    package: str
    binary: str
    system_conf_dir: Path  # where the node's own engine reads one file per load balancer
    file_suffix: str

    def __init__(self, settings: LbSettings, root: Path) -> None:
        self.settings = settings
        self.root = root / self.kind  # agent-run: the engine's own folder
        self._lock = trio.Lock()

    @property
    def agent_run(self) -> bool:
        return self.settings.agent_run

    @property
    def conf_dir(self) -> Path:
        return self.root / "conf.d" if self.agent_run else self.system_conf_dir

    def path(self, lb_id: str) -> Path:
        """The file of one load balancer."""
        return self.conf_dir / f"fleetdeck-lb-{lb_id}{self.file_suffix}"

    @abstractmethod
    def render(self, spec: LbApply, given: RenderInput) -> str: ...

    @abstractmethod
    async def validate(self, lb_id: str, text: str) -> str | None:
        """The checker's message when `text` as the file of `lb_id` is refused, else None."""

    @abstractmethod
    async def reload(self) -> str | None:
        """Start (agent-run, first use) or reload the engine and check it took; the error text or None."""

    @abstractmethod
    async def stop(self) -> None:
        """Stop the agent-run engine (tests, the demo); nothing for the system's."""

    async def set_runtime(self, spec: LbApply) -> str | None:
        """Apply the spec's weights and drains to the running engine at once; its refusal, or None.
        Nothing by default: nginx has no runtime API (its file and a reload are all there is)."""
        return None

    def same_but_weights(self, lb_id: str, text: str) -> bool:
        """Whether `text` may replace the file of `lb_id` through `set_runtime` alone, without a
        reload. Never by default."""
        return False

    def hook_text(self) -> str:
        """The test hook: `<lb root>/test-hook-<engine>.conf`, added verbatim to every render."""
        if not self.settings.broken_render_hook:
            return ""
        try:
            return (self.root.parent / f"test-hook-{self.kind}.conf").read_text()
        except FileNotFoundError:
            return ""

    async def take_port(self, spec: LbApply, out: Output) -> None:
        """Before rendering `spec` on the node's own engine: clear what the system ships that
        would shadow it (what, and how to undo it, said on `out`). Nothing by default."""
        return None

    async def ensure_installed(self, out: Output) -> str:
        """The engine's binary, installed with apt on first use; EngineMissing when that fails."""
        found = which(self.binary)
        if found:
            return found
        out.stderr(f"{self.binary} is not installed: installing the {self.package} package with apt-get (first use)")
        lock = APT_WAITS_FOR_ITS_LOCK
        install = ["apt-get", "install", "-y", "-q", *lock, self.package]
        code, _, err = await capture_command(install, env=apt_env())
        if code != 0:  # a fresh image has no package lists, an old node stale ones: refreshed once
            out.stderr(f"apt-get install {self.package} failed; refreshing the package lists (apt-get update)")
            code, _, err = await capture_command(["apt-get", "update", "-q", *lock], env=apt_env())
            if code == 0:
                code, _, err = await capture_command(install, env=apt_env())
        found = which(self.binary)
        if code != 0 or not found:
            raise EngineMissing(f"{self.package} could not be installed with apt-get: {err.strip()[-500:]}")
        return found


class EngineMissing(Exception):
    """The engine's binary is missing and apt could not install it."""


# --- processes ---------------------------------------------------------------------------------


def log_offset(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def log_since(path: Path, offset: int, keep: Callable[[str], bool]) -> str:
    """The lines `keep` selects, written to `path` after `offset` (an engine's own error log)."""
    try:
        with path.open("rb") as f:
            f.seek(offset)
            data = f.read(256 * 1024).decode("utf-8", "replace")
    except FileNotFoundError:
        return ""
    return "\n".join(line for line in data.splitlines() if keep(line)).strip()


async def wait_for(check: Callable[[], object], within: float = RELOAD_TIMEOUT_S) -> object:
    """Poll `check` (blocking work stays short: /proc and small files) until truthy or the timeout; its last value."""
    deadline = time.monotonic() + within
    while True:
        value = check()
        if value or time.monotonic() >= deadline:
            return value
        await trio.sleep(POLL_S)


def ipv6_available() -> bool:
    """The kernel has IPv6 (a node booted with ipv6.disable=1 has no such file): listening on all
    addresses then includes [::], as Debian's default site does."""
    return Path("/proc/net/if_inet6").exists()


def host_port(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
