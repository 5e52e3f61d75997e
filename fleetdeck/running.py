"""A local stack that outlives one TUI: its run file, its two locks, and whether its process lives.

A running `fleetdeck local` writes `run.json` in its data folder (base URL, pid, version) and
removes it when it stops. A TUI start takes the start lock (exclusive), finds the stack that file
names or starts one, takes the attach lock (shared) for as long as it runs, and releases the start
lock. A stack started for the TUI (`--idle-minutes`) exits once it has been idle that long: it can
lock both files exclusively (no TUI is starting, none is attached) and no API request came. Locks
are flock(2)s, released by the kernel however their holder ends, so a killed TUI never keeps a
stack alive, and a stack going away holds the start lock until its process is gone.

Light on purpose (no third-party imports at the top): the TUI builds its `SharedStack` and reads
the run file before its first frame; the launcher and the API client come in `connect`, which runs
in a worker thread.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import select
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from fleetdeck.paths import StackLayout, stack_dir

if TYPE_CHECKING:
    from fleetdeck.launcher import LocalStack, StackCredentials

log = logging.getLogger(__name__)

POLL_S = 0.05
STOP_TIMEOUT_S = 30.0  # SIGTERM's grace before SIGKILL (its services stop first: slow on a loaded host)
ANSWER_TIMEOUT_S = 5.0


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


class SharedStack:
    """The TUI's local stack on `data_dir`: the one running there if it answers as that dir's
    stack, else a new one, started with `idle_minutes` so that it outlives the TUI
    (`new_launcher(data_dir, idle_minutes)` makes its launcher: a `LocalStack` by default). Two
    TUIs starting at once share one stack: the start lock makes the second wait for the first.
    Attached from `connect` until `detach` (or until this process ends, however it ends)."""

    def __init__(
        self,
        data_dir: Path,
        idle_minutes: float,
        new_launcher: Callable[[Path, float], LocalStack] | None = None,
    ) -> None:
        self.data_dir = data_dir.expanduser()
        self.layout = StackLayout(self.data_dir)
        self.idle_minutes = idle_minutes
        self._new_launcher = new_launcher
        self.launcher: LocalStack | None = None  # the launcher of the stack this start started
        self.reused: bool | None = None
        self._attachment: int | None = None

    def seems_running(self) -> bool:
        """Quick enough for the first frame (no network): a run file naming a live process."""
        return live_run_file(self.layout.run_file) is not None

    def connect(self) -> StackCredentials:
        """Join the running stack or start one (seconds), and stay attached to it."""
        stack_dir(self.data_dir)
        with locked(self.layout.start_lock):
            credentials = find_running(self.layout)
            self.reused = credentials is not None
            if credentials is None:
                stop_running(self.data_dir)  # one of another version, if any: a data dir has one stack
                self.launcher = self._launcher()
                credentials = self.launcher.start()
            self._attachment = lock(self.layout.attach_lock, shared=True)
        return credentials

    def detach(self) -> None:
        """Leave the stack to its idle timer (with 0 minutes, it stops now)."""
        if self._attachment is not None:
            os.close(self._attachment)
            self._attachment = None

    def _launcher(self) -> LocalStack:
        if self._new_launcher is not None:
            return self._new_launcher(self.data_dir, self.idle_minutes)
        from fleetdeck.launcher import LocalStack

        return LocalStack(self.data_dir, idle_minutes=self.idle_minutes)


def stack_version() -> str:
    """The version a stack started from this code runs (a stack of another version is replaced)."""
    from control_plane import __version__

    return __version__


def find_running(layout: StackLayout, *, any_version: bool = False) -> StackCredentials | None:
    """The credentials of the stack running on this data dir, if one does and answers as this
    dir's stack: its run file names a live process of this version, its URL answers, and the dir's
    credentials work there (the token, else the demo login: a fresh token is returned)."""
    from fleetdeck.launcher import read_credentials

    run = live_run_file(layout.run_file)
    if run is None or (run.version != stack_version() and not any_version):
        return None
    try:
        credentials = read_credentials(layout.credentials)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if credentials.base_url != run.base_url:
        return None
    return _working_credentials(credentials)


def _working_credentials(credentials: StackCredentials) -> StackCredentials | None:
    import trio

    from api_client import Client
    from api_client import errors as api_errors

    async def check() -> StackCredentials:
        async with Client(credentials.base_url, token=credentials.token, timeout=ANSWER_TIMEOUT_S) as client:
            try:
                await client.auth.me()
                return credentials
            except api_errors.Unauthenticated:  # the session expired: the stack's demo login makes another
                login = await client.auth.login(credentials.email, credentials.password)
                return replace(credentials, token=login.token)

    try:
        return trio.run(check)
    except api_errors.FleetdeckError as exc:
        log.info("the stack at %s does not answer as this data dir's (%s)", credentials.base_url, exc)
        return None


def stop_running(data_dir: Path, timeout: float = STOP_TIMEOUT_S) -> RunFile | None:
    """Stop the stack running on `data_dir` (of any version), if one answers as its stack; its
    run file, once its process has exited, or None if there was none."""
    layout = StackLayout(data_dir.expanduser())
    run = live_run_file(layout.run_file)
    if run is None or find_running(layout, any_version=True) is None:
        return None
    terminate(run.pid, timeout)
    if (left := read_run_file(layout.run_file)) is not None and left.pid == run.pid:
        layout.run_file.unlink(missing_ok=True)  # killed before it could remove it itself
    return run
