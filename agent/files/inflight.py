"""The journal of work-in-progress names: what a killed agent left behind is found again.

Every write of the workspace builds its result under a temporary name beside the destination
(``.NAME.fleetdeck-<tag>-<random>.tmp``, a file or a whole folder; ``.old`` for a folder set aside
while it is replaced) and renames it into place at the end, or removes it on failure. A process
killed in between (``kill -9``, the OOM killer, a power cut) runs no cleanup: the name stays. The
agent cannot walk all of the home at start to look for such names, so it writes them down: before
a temporary name is made, one small file in ``<state>/inflight/`` records where (the folder's path
below the home and its device and inode), the name, and the process that made it (pid, start time
and the kernel's boot id); the file goes once the name has been renamed into place or removed.

`agent.files.sweep` reads the journal when the agent starts and when it first touches a scope, and
removes what a dead process left (never a live one's: another agent's receive command may be
writing). ``<tag>`` is random per process, so the name itself says which process made it.

Nothing is journalled until `activate` is called (the agent's start does): the file functions
used on their own, as in tests, write no journal.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import threading
from dataclasses import dataclass
from typing import Any

import orjson

log = logging.getLogger("fleetdeck.agent.files")

FOLDER = "inflight"
TAG = secrets.token_hex(4)  # this process's: in every temporary name it makes
_TEMP = re.compile(r"^\..*\.fleetdeck-(?P<tag>[0-9a-f]{8})-(?P<token>[0-9a-f]{12})\.(?:tmp|old)$", re.DOTALL)
_ENTRY = re.compile(r"^(?P<tag>[0-9a-f]{8})-(?P<token>[0-9a-f]{12})\.json$")


def temp_name(name: str, kind: str = "tmp") -> str:
    """A hidden name beside `name` for work in progress: ``.name.fleetdeck-<tag>-<random>.kind``."""
    base = os.fsencode(name)[:120].decode("utf-8", "ignore") or "x"
    return f".{base}.fleetdeck-{TAG}-{secrets.token_hex(6)}.{kind}"


def parse_temp(name: str) -> tuple[str, str] | None:
    """(tag, token) of a temporary name made by `temp_name`, or None for any other name."""
    found = _TEMP.match(name)
    return (found["tag"], found["token"]) if found else None


@dataclass(frozen=True)
class ProcessId:
    """A process, told apart from a later one with the same pid (its start time since boot, and
    the boot itself)."""

    pid: int
    start: int
    boot: str

    def alive(self) -> bool:
        return self.boot == boot_id() and process_start(self.pid) == self.start


def boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return ""


def process_start(pid: int) -> int | None:
    """A process's start time (clock ticks since boot, ``/proc/<pid>/stat`` field 22), or None
    when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return int(fields[19])  # field 22; fields[0] is field 3 (the state)
    except (OSError, IndexError, ValueError):
        return None


@dataclass(frozen=True)
class Entry:
    """One journalled name: `name` in the folder `folder` (relative to the home; its device and
    inode say it is still that folder), made by `process`; `restore` is the name an ``.old``
    entry puts back when that name is free (a replace killed half-way)."""

    file: str  # the journal file's own name
    process: ProcessId
    folder: str
    device: int
    inode: int
    name: str
    restore: str | None


class Journal:
    """The journal in ``<state_dir>/inflight`` for the names made beneath `home`."""

    def __init__(self, state_dir: str, home: str) -> None:
        self.folder = os.path.join(state_dir, FOLDER)
        self.home = os.path.realpath(home)
        os.makedirs(self.folder, mode=0o700, exist_ok=True)
        start = process_start(os.getpid())
        self.process = ProcessId(os.getpid(), start if start is not None else -1, boot_id())

    def record(self, dir_fd: int, temp: str, restore: str | None = None) -> None:
        """Write the entry of `temp` in the folder `dir_fd` (before it is made). A folder outside
        the home is not journalled (the workspace makes none there)."""
        parsed = parse_temp(temp)
        folder = self._below_home(dir_fd)
        if parsed is None or folder is None:
            return
        st = os.fstat(dir_fd)
        record = {
            "pid": self.process.pid,
            "start": self.process.start,
            "boot": self.process.boot,
            "folder": folder,
            "device": st.st_dev,
            "inode": st.st_ino,
            "name": temp,
            "restore": restore,
        }
        path = os.path.join(self.folder, f"{parsed[0]}-{parsed[1]}.json")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, orjson.dumps(record))
        finally:
            os.close(fd)

    def forget(self, temp: str) -> None:
        """Drop the entry of `temp` (renamed into place, or removed)."""
        parsed = parse_temp(temp)
        if parsed is None:
            return
        try:
            os.unlink(os.path.join(self.folder, f"{parsed[0]}-{parsed[1]}.json"))
        except FileNotFoundError:
            pass

    def entries(self) -> list[Entry]:
        """Every readable entry; an unreadable one (cut by a crash while written) is dropped."""
        found = []
        for file in sorted(os.listdir(self.folder)):
            if not _ENTRY.match(file):
                continue
            entry = self._read(file)
            if entry is None:
                self.drop(file)
            else:
                found.append(entry)
        return found

    def drop(self, file: str) -> None:
        try:
            os.unlink(os.path.join(self.folder, file))
        except FileNotFoundError:
            pass

    def _read(self, file: str) -> Entry | None:
        try:
            with open(os.path.join(self.folder, file), "rb") as f:
                record: Any = orjson.loads(f.read(64 * 1024))
            process = ProcessId(int(record["pid"]), int(record["start"]), str(record["boot"]))
            restore = record.get("restore")
            return Entry(
                file,
                process,
                str(record["folder"]),
                int(record["device"]),
                int(record["inode"]),
                str(record["name"]),
                str(restore) if restore is not None else None,
            )
        except (OSError, orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            return None

    def _below_home(self, dir_fd: int) -> str | None:
        try:
            real = os.readlink(f"/proc/self/fd/{dir_fd}")
        except OSError:
            return None
        if real == self.home:
            return ""
        if real.startswith(self.home.rstrip("/") + "/"):
            return real[len(self.home.rstrip("/")) + 1 :]
        return None


_lock = threading.Lock()
_active: Journal | None = None


def activate(journal: Journal | None) -> None:
    """Journal the temporary names this process makes from now on (None: stop)."""
    global _active
    with _lock:
        _active = journal


def active() -> Journal | None:
    return _active


def record(dir_fd: int, temp: str, restore: str | None = None) -> None:
    """Journal `temp` in the folder `dir_fd` before it is made (nothing when no journal is active)."""
    journal = _active
    if journal is not None:
        journal.record(dir_fd, temp, restore)


def forget(temp: str) -> None:
    """`temp` was renamed into place or removed: its entry goes."""
    journal = _active
    if journal is not None:
        journal.forget(temp)
