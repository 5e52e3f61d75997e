"""The one launcher of a local stack: `fleetdeck local` as a child process, and more agents for it.

The TUI's embedded default, the tests' fixtures and the benchmarks all start their stacks here.
The child prints a line with its base URL once its control plane and agent are up, after writing
`demo-credentials.json` in its data folder; the launcher reads it then. Its stderr goes to a log
file (a pipe nobody reads would stall it once full), whose tail explains a failed start. It is
stopped with SIGTERM, then SIGKILL after a grace period.

The TUI does not own its stack: `fleetdeck.running.SharedStack` joins the one already running on
the data dir, or starts one here with `--idle-minutes`, which outlives the TUI, in a worker
thread, so its first frame never waits for the stack.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from types import TracebackType
from typing import IO

from agent import unix_sockets
from fleetdeck import paths
from fleetdeck.running import STOP_TIMEOUT_S

log = logging.getLogger(__name__)

STARTUP_TIMEOUT_S = 120.0
LOG_TAIL_LINES = 15
BASE_URL_PATTERN = re.compile(r"https?://127\.0\.0\.1:\d+")
# The directory holding the packages: children must import the same code as this process.
PROJECT_ROOT = Path(__file__).resolve().parent.parent


def child_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment for a child running our code: our packages first on its path,
    unbuffered output (its lines are read as they come), and `extra` on top."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH", "")]))
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


@dataclass(frozen=True)
class StackCredentials:
    """What `fleetdeck local` writes to `demo-credentials.json`."""

    base_url: str
    email: str
    password: str
    token: str
    server_id: str
    db_url: str
    lb_ports: dict[str, int]  # "80"/"443" -> the port its load balancers listen on (127.0.0.1)


def read_credentials(path: Path) -> StackCredentials:
    """The credentials file a stack wrote; OSError, ValueError, KeyError or TypeError if it is unusable."""
    data = json.loads(path.read_text(encoding="utf-8"))
    return StackCredentials(
        **{f.name: str(data[f.name]) for f in fields(StackCredentials) if f.name != "lb_ports"},
        lb_ports={str(k): int(v) for k, v in data.get("lb_ports", {}).items()},
    )


class StackStartError(Exception):
    """The local stack did not start; the message includes the end of its stderr."""


class LocalStack:
    """`fleetdeck local --data-dir DIR --port PORT` as a child process. A context manager.

    `env`: variables added to the child's environment. `log_file`: where its stderr goes
    (appended to; default `stack.log` in the data folder). `idle_minutes`: the child outlives
    this process and exits once idle that long (`fleetdeck local --idle-minutes`; the TUI's
    stack, see `fleetdeck.running.SharedStack`); otherwise it is stopped when this process exits.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int = 0,
        env: Mapping[str, str] | None = None,
        log_file: Path | None = None,
        startup_timeout: float = STARTUP_TIMEOUT_S,
        idle_minutes: float | None = None,
    ) -> None:
        self.data_dir = data_dir.expanduser()
        self.layout = paths.StackLayout(self.data_dir)
        self.port = port
        self.env = dict(env or {})
        self.log_file = log_file or self.layout.stderr_log
        self.startup_timeout = startup_timeout
        self.idle_minutes = idle_minutes
        self.process: subprocess.Popen[str] | None = None
        self.credentials: StackCredentials | None = None
        self._log_start = 0
        self._stdout_lines: queue.Queue[str | None] = queue.Queue()

    @property
    def command(self) -> list[str]:
        idle = [] if self.idle_minutes is None else ["--idle-minutes", str(self.idle_minutes)]
        return [
            *[sys.executable, "-m", "fleetdeck", "local", "--data-dir", str(self.data_dir), "--port", str(self.port)],
            *idle,
        ]

    def start(self) -> StackCredentials:
        """Spawn the child and wait until it runs; `StackStartError` if it does not."""
        self.spawn()
        return self.wait_ready()

    def spawn(self) -> None:
        """Start the child process without waiting for it; `StackStartError` if it cannot run."""
        paths.stack_dir(self.data_dir)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        try:
            # Its owner's alone (0600): a root stack's data folder may be passed through by others.
            with open(self.log_file, "a", encoding="utf-8", opener=_private_opener) as stderr:
                self._log_start = stderr.tell()
                self.process = subprocess.Popen(
                    self.command,
                    stdin=subprocess.DEVNULL,  # a terminal's input belongs to the TUI
                    stdout=subprocess.PIPE,
                    stderr=stderr,
                    text=True,
                    bufsize=1,
                    env=child_environment(self.env),
                    # Keys the TUI handles (ctrl+c, ctrl+z) and the terminal's hangup must not reach it.
                    start_new_session=True,
                )
        except OSError as exc:
            raise StackStartError(f"Cannot start the local control plane: {exc}") from exc
        if self.idle_minutes is None:
            atexit.register(self.stop)
        assert self.process.stdout is not None
        _drain(self.process.stdout, self._stdout_lines)

    def wait_ready(self) -> StackCredentials:
        """Block until the spawned child reports its URL; its credentials. Stops it on failure."""
        try:
            base_url = self._wait_for_base_url()
            self.credentials = self._read_credentials(base_url)
        except StackStartError:
            self.stop()
            raise
        return self.credentials

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int | None:
        """Terminate the child (SIGTERM, then SIGKILL after `timeout`); its exit code."""
        process = self.process
        if process is None:
            return None
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                log.warning("the local control plane ignored SIGTERM for %ss: killing it", timeout)
                process.kill()
                process.wait()
        # A stack that was killed (or crashed) could not remove its short sockets folder; its
        # services died with it (their parent-death signal), so the folder is empty.
        unix_sockets.remove_runtime_dir(unix_sockets.runtime_path(self.layout.root))
        atexit.unregister(self.stop)
        return process.returncode

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> list[str]:
        """The last lines its stderr wrote since this launcher started it."""
        try:
            with open(self.log_file, encoding="utf-8", errors="replace") as handle:
                handle.seek(self._log_start)
                return handle.read().splitlines()[-lines:]
        except OSError:
            return []

    def __enter__(self) -> LocalStack:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # --- internals ------------------------------------------------------------------------

    def _wait_for_base_url(self) -> str:
        if self.process is None:
            raise RuntimeError("spawn() the stack first")
        deadline = time.monotonic() + self.startup_timeout
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                line = self._stdout_lines.get(timeout=remaining)
            except queue.Empty:
                break
            if line is None:  # stdout closed: the child is gone, or going
                try:
                    code = self.process.wait(STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    raise StackStartError(self._failure("closed its output without its address")) from None
                raise StackStartError(self._failure(f"exited with code {code}"))
            if match := BASE_URL_PATTERN.search(line):
                return match.group()
        raise StackStartError(self._failure(f"did not report its address within {self.startup_timeout:.0f}s"))

    def _read_credentials(self, base_url: str) -> StackCredentials:
        path = self.layout.credentials
        try:
            credentials = read_credentials(path)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise StackStartError(self._failure(f"left no usable {path} ({exc})")) from exc
        if credentials.base_url.rstrip("/") != base_url.rstrip("/"):
            log.warning("credentials say %s, the process said %s: using the latter", credentials.base_url, base_url)
            credentials = StackCredentials(**{**credentials.__dict__, "base_url": base_url})
        return credentials

    def _failure(self, what: str) -> str:
        tail = "\n".join(f"    {line.rstrip()}" for line in self.log_tail()) or "    (nothing on stderr)"
        return f"The local control plane ({' '.join(self.command[2:])}) {what}.\nLast lines of its stderr:\n{tail}"


def start_agent(
    base_url: str,
    token: str,
    home: Path,
    state_dir: Path,
    *extra: str,
    ingress: str | None = None,
    ingress_url: str | None = None,
    stderr: int | IO[str] | None = subprocess.PIPE,
    env: Mapping[str, str] | None = None,
) -> subprocess.Popen[str]:
    """An agent process for the control plane at `base_url`, as on a real server; `extra` are
    more of its options (``--ssh-port``, ...); `ingress` (HOST:PORT, port 0 for any) gives it a
    direct-upload ingress, announced as `ingress_url` when given. Its load balancers listen on
    127.0.0.1 on free ports (its own nginx and HAProxy, stopped with it), never on the node's 80/443
    unless `extra` says otherwise. The caller stops it (SIGTERM stops its load balancers too)."""
    if "--lb-port-map" not in extra:
        http, https = free_ports(2)
        extra = (*extra, "--lb-bind", "127.0.0.1", "--lb-port-map", f"80:{http},443:{https}")
    return subprocess.Popen(
        [
            *[sys.executable, "-m", "agent", "--url", base_url, "--token", token],
            *["--home", str(home), "--state-dir", str(state_dir)],
            *extra,
            *(["--ingress", ingress] if ingress else []),
            *(["--ingress-url", ingress_url] if ingress_url else []),
        ],
        env=child_environment(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        text=True,
    )


def free_port() -> int:
    """A port free on 127.0.0.1 now."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """`count` different ports free on 127.0.0.1 now. They are held open together while they are
    picked: the kernel may hand out a port it just freed again at once (in a fresh network
    namespace two `free_port()` in a row gave the same port to two listeners)."""
    with contextlib.ExitStack() as held:
        probes = [held.enter_context(socket.socket()) for _ in range(count)]
        for probe in probes:
            probe.bind(("127.0.0.1", 0))
        return [int(probe.getsockname()[1]) for probe in probes]


def _drain(stream: IO[str], lines: queue.Queue[str | None]) -> None:
    """Read `stream` to its end in a daemon thread (the child never blocks on a full pipe);
    None in `lines` marks the end."""

    def pump() -> None:
        with stream:
            for line in stream:
                lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, name="fleetdeck-local-stdout", daemon=True).start()


def _private_opener(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_CLOEXEC, 0o600)
