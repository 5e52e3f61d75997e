"""The embedded default: run `fleetdeck local` as a child process and connect to it.

The child prints a line with its base URL once its control plane and agent are up, after writing
`demo-credentials.json` in its data directory; the TUI then connects with the token found there.
The child is stopped (SIGTERM, then SIGKILL after a grace period) when the TUI exits.
"""

from __future__ import annotations

import atexit
import ctypes
import json
import logging
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO

import platformdirs

from tui.connection import Connection

log = logging.getLogger(__name__)

STARTUP_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 10.0
STDERR_TAIL_LINES = 15
BASE_URL_PATTERN = re.compile(r"https?://127\.0\.0\.1:\d+")
# The directory holding the `tui` package: the child must import the same code as this process.
PROJECT_ROOT = Path(__file__).resolve().parent.parent


def default_data_dir() -> Path:
    return Path(platformdirs.user_data_dir("fleetdeck")) / "local"


@dataclass(frozen=True)
class DemoCredentials:
    """What `fleetdeck local` writes to `demo-credentials.json`."""

    base_url: str
    email: str
    password: str
    token: str
    server_id: str
    db_url: str


class EmbeddedStartError(Exception):
    """The embedded stack did not start; the message includes the end of its stderr."""


class EmbeddedStack:
    """`fleetdeck local --data-dir DIR --port 0` as a child process. A context manager."""

    def __init__(self, data_dir: Path | None = None, *, startup_timeout: float = STARTUP_TIMEOUT_S) -> None:
        self.data_dir = (data_dir or default_data_dir()).expanduser()
        self.startup_timeout = startup_timeout
        self.process: subprocess.Popen[str] | None = None
        self.credentials: DemoCredentials | None = None
        self._stdout_lines: queue.Queue[str | None] = queue.Queue()
        self._stderr_tail: deque[str] = deque(maxlen=STDERR_TAIL_LINES)

    @property
    def command(self) -> list[str]:
        return [sys.executable, "-m", "fleetdeck", "local", "--data-dir", str(self.data_dir), "--port", "0"]

    def start(self) -> DemoCredentials:
        """Start the child and wait for its base URL; raise `EmbeddedStartError` if it fails."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            self.process = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL,  # the terminal's input belongs to the TUI
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                bufsize=1,
                env=_child_environment(),
                start_new_session=True,  # keys the TUI handles (ctrl+c, ctrl+z) must not reach it
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )
        except OSError as exc:
            raise EmbeddedStartError(f"Cannot start the local control plane: {exc}") from exc
        atexit.register(self.stop)
        assert self.process.stdout is not None and self.process.stderr is not None
        _drain(self.process.stdout, self._stdout_lines.put, "fleetdeck-local-stdout", self._on_stdout_closed)
        _drain(self.process.stderr, self._stderr_tail.append, "fleetdeck-local-stderr")
        try:
            base_url = self._wait_for_base_url()
            self.credentials = self._read_credentials(base_url)
        except EmbeddedStartError:
            self.stop()
            raise
        return self.credentials

    def connection(self) -> Connection:
        if self.credentials is None:
            raise RuntimeError("the embedded stack is not started")
        return Connection(self.credentials.base_url, self.credentials.token, f"local demo ({self.credentials.email})")

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int | None:
        """Terminate the child (SIGTERM, then SIGKILL after `timeout`); its exit code."""
        process = self.process
        if process is None:
            return None
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                log.warning("the local control plane ignored SIGTERM for %ss: killing it", timeout)
                process.kill()
                process.wait()
        atexit.unregister(self.stop)
        return process.returncode

    def __enter__(self) -> EmbeddedStack:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # --- internals ------------------------------------------------------------------------

    def _on_stdout_closed(self) -> None:
        self._stdout_lines.put(None)

    def _wait_for_base_url(self) -> str:
        assert self.process is not None
        deadline = time.monotonic() + self.startup_timeout
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                line = self._stdout_lines.get(timeout=min(remaining, 0.2))
            except queue.Empty:
                if self.process.poll() is not None and self._stdout_lines.empty():
                    time.sleep(0.1)  # let the stderr reader catch the last words
                    raise EmbeddedStartError(self._failure(f"exited with code {self.process.returncode}")) from None
                continue
            if line is None:
                continue  # stdout closed: the exit is noticed on the next round
            if match := BASE_URL_PATTERN.search(line):
                return match.group()
        raise EmbeddedStartError(self._failure(f"did not report its address within {self.startup_timeout:.0f}s"))

    def _read_credentials(self, base_url: str) -> DemoCredentials:
        path = self.data_dir / "demo-credentials.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            credentials = DemoCredentials(**{field: str(data[field]) for field in DemoCredentials.__dataclass_fields__})
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise EmbeddedStartError(self._failure(f"left no usable {path} ({exc})")) from exc
        if credentials.base_url.rstrip("/") != base_url.rstrip("/"):
            log.warning("credentials say %s, the process said %s: using the latter", credentials.base_url, base_url)
            credentials = DemoCredentials(**{**credentials.__dict__, "base_url": base_url})
        return credentials

    def _failure(self, what: str) -> str:
        tail = "\n".join(f"    {line.rstrip()}" for line in self._stderr_tail) or "    (nothing on stderr)"
        return f"The local control plane ({' '.join(self.command[2:])}) {what}.\nLast lines of its stderr:\n{tail}"


_PR_SET_PDEATHSIG = 1
# Looked up here, not in the forked child, where loading a library could deadlock.
_prctl = ctypes.CDLL(None).prctl if sys.platform == "linux" else None


def _die_with_parent() -> None:
    """In the child, before exec: get SIGTERM if the TUI dies without cleaning up.

    A closed terminal (SSH drop) kills the TUI with SIGHUP, which runs no `finally` and no
    `atexit`; the child, in its own session, would live on. The kernel tells it instead.
    """
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _child_environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH", "")]))
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _drain(
    stream: IO[str], on_line: Callable[[str], object], name: str, on_end: Callable[[], object] | None = None
) -> None:
    """Read `stream` to its end in a daemon thread, so the child never blocks on a full pipe."""

    def pump() -> None:
        with stream:
            for line in stream:
                on_line(line)
        if on_end is not None:
            on_end()

    threading.Thread(target=pump, name=name, daemon=True).start()
