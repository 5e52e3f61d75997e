"""Which of this agent's kinds can run on this host now, rechecked when the host may have changed.

Each kind declares what it needs (`agent.jobs.toolkit.needs`); `Availability` holds the kinds
that lack something (``{kind: Debian package}``) and tells the link when that map changes, which
then says it to the control plane (the hello carries it, a ``needs`` frame carries a change: see
`contract.link.protocol`). A check is a few dozen ``stat`` calls, made:

- at start;
- after a job that changes the server ends (`JobManager.after_change`: ``updates.apply``,
  ``php.install``... install and remove packages);
- when dpkg's status file is replaced (an administrator's ``apt-get``) or the host layout file
  changes: inotify wakes the agent, so nothing polls.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import os
import struct
from collections.abc import Callable, Mapping

import trio

from agent.jobs.toolkit.base import Kind
from agent.jobs.toolkit.host import HostLayout
from agent.jobs.toolkit.needs import unmet_by_kind

log = logging.getLogger("fleetdeck.agent.jobs")

DPKG_STATUS = "/var/lib/dpkg/status"  # dpkg writes status-new, then renames it over this

# inotify(7): the events that say a file was written or replaced, or went.
IN_CLOSE_WRITE = 0x008
IN_MOVED_FROM = 0x040
IN_MOVED_TO = 0x080
IN_DELETE = 0x200
IN_Q_OVERFLOW = 0x4000
WATCHED_EVENTS = IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE
EVENT_HEAD = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of name
READ_SIZE = 64 * 1024

OnChange = Callable[[], None]


class Availability:
    """The kinds of `kinds` this host cannot run now (`unmet`), rechecked on the occasions above.

    Args:
        kinds: the agent's handler table.
        host: the host layout now (the job context's, re-read when its file changes).
        watched: the files whose change means a recheck (dpkg's status, the layout file).
    """

    def __init__(
        self, kinds: Mapping[str, Kind], host: Callable[[], HostLayout], watched: tuple[str, ...] = (DPKG_STATUS,)
    ) -> None:
        self._needs = {name: kind.needs for name, kind in kinds.items() if kind.needs}
        self._host = host
        self.watched = watched
        self.unmet: dict[str, str] = unmet_by_kind(self._needs, host())
        self.on_change: OnChange | None = None  # the link's: says the new map to the control plane

    def recheck(self) -> bool:
        """Check every kind's needs again; True (and `on_change` told) when the map changed."""
        unmet = unmet_by_kind(self._needs, self._host())
        if unmet == self.unmet:
            return False
        said = ", ".join(f"{kind} needs {package}" for kind, package in unmet.items())
        log.info("job kinds that cannot run here now: %s", said or "none")
        self.unmet = unmet
        if self.on_change is not None:
            self.on_change()
        return True

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Recheck whenever a watched file changes, until cancelled (only rechecks after jobs
        where the kernel has no inotify)."""
        self.recheck()
        try:
            watch = FileWatch(self.watched)
        except OSError as exc:
            log.warning("availability is rechecked after jobs only: no inotify (%s)", os.strerror(exc.errno or 0))
            task_status.started()
            await trio.sleep_forever()
        with watch:
            task_status.started()
            while True:
                await watch.changed()
                self.recheck()


class FileWatch:
    """inotify on the folders of some files: `changed` returns once one of the files was written,
    replaced or removed. A folder that does not exist (yet) is not watched.

    Raises:
        OSError: the kernel has no inotify (or allows no more instances).
    """

    def __init__(self, files: tuple[str, ...]) -> None:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        self._fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self._fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self._names: dict[int, set[bytes]] = {}  # watch descriptor -> the file names of its folder
        for path in files:
            folder, name = os.path.split(os.path.abspath(path))
            wd = libc.inotify_add_watch(self._fd, os.fsencode(folder), WATCHED_EVENTS)
            if wd < 0:
                log.info("not watching %s: %s", path, os.strerror(ctypes.get_errno()))
                continue
            self._names.setdefault(wd, set()).add(os.fsencode(name))

    def __enter__(self) -> FileWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self._fd)

    async def changed(self) -> None:
        while True:
            await trio.lowlevel.wait_readable(self._fd)
            try:
                data = os.read(self._fd, READ_SIZE)
            except BlockingIOError:
                continue
            except OSError as exc:
                if exc.errno == errno.EINTR:
                    continue
                raise
            if self._concerns(data):
                return

    def _concerns(self, data: bytes) -> bool:
        offset = 0
        while offset + EVENT_HEAD.size <= len(data):
            wd, mask, _, length = EVENT_HEAD.unpack_from(data, offset)
            name = data[offset + EVENT_HEAD.size : offset + EVENT_HEAD.size + length].rstrip(b"\0")
            offset += EVENT_HEAD.size + length
            if mask & IN_Q_OVERFLOW or name in self._names.get(wd, ()):
                return True
        return False
