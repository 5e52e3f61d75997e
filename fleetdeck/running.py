"""A local stack that outlives one TUI: its run file, its two locks, and whether its process lives.

A running `fleetdeck local` writes `run.json` in its data folder (base URL, pid, version) and
removes it when it stops. A TUI start takes the start lock (exclusive), finds the stack that file
names or starts one, takes the attach lock (shared) for as long as it runs, and releases the start
lock. A stack started for the TUI (`--idle-minutes`) exits once it has been idle that long: it can
lock both files exclusively (no TUI is starting, none is attached) and no API request came. Locks
are flock(2)s, released by the kernel however their holder ends, so a killed TUI never keeps a
stack alive, and a stack going away holds the start lock until its process is gone.

Light on purpose (no third-party imports): the TUI reads the run file before its first frame.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

POLL_S = 0.05


@dataclass(frozen=True)
class RunFile:
    """What a running `fleetdeck local` writes to `run.json`."""

    base_url: str
    pid: int
    version: str

    def to_json(self) -> str:
        return json.dumps({"base_url": self.base_url, "pid": self.pid, "version": self.version}, indent=2)


def read_run_file(path: Path) -> RunFile | None:
    """The run file at `path`, or None if there is none or it cannot be read."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return RunFile(base_url=str(data["base_url"]), pid=int(data["pid"]), version=str(data["version"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def live_run_file(path: Path) -> RunFile | None:
    """The run file at `path` if the process it names still runs (quick: no network)."""
    run = read_run_file(path)
    return run if run is not None and process_lives(run.pid) else None


def process_lives(pid: int) -> bool:
    """Whether process `pid` exists and has not exited (an exited child not yet reaped has)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive, and certainly not our stack
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True  # no /proc: kill(0) said it exists


def wait_for_exit(pid: int, timeout: float) -> bool:
    """Wait until process `pid` has exited, at most `timeout` seconds; whether it has."""
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None  # not Linux 5.3+, or already gone
    if pidfd is not None:
        try:
            select.select([pidfd], [], [], timeout)  # readable once the process has exited
        finally:
            os.close(pidfd)
        return not process_lives(pid)
    deadline = time.monotonic() + timeout
    while process_lives(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_S)
    return True


def terminate(pid: int, timeout: float) -> None:
    """SIGTERM to `pid`, SIGKILL if it has not exited after `timeout` seconds; returns once it has."""
    try:
        os.kill(pid, signal.SIGTERM)
        if not wait_for_exit(pid, timeout):
            os.kill(pid, signal.SIGKILL)
            wait_for_exit(pid, timeout)
    except ProcessLookupError:
        pass


def _open_lock(path: Path) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)


def lock(path: Path, *, shared: bool = False) -> int:
    """Lock `path` (made if missing), waiting as long as it takes; the descriptor: closing it unlocks."""
    descriptor = _open_lock(path)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


def lock_if_free(path: Path) -> int | None:
    """Lock `path` exclusively if nobody holds it; the descriptor, or None."""
    descriptor = _open_lock(path)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        return None
    return descriptor


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """`path` locked exclusively for the block."""
    descriptor = lock(path)
    try:
        yield
    finally:
        os.close(descriptor)


def wait_until_unlocked(path: Path) -> None:
    """Return once nobody holds a lock on `path` (locks it for an instant)."""
    os.close(lock(path))
