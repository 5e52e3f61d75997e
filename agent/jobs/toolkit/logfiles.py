"""The end of a log file, read from a descriptor: for the log readers of several domains (a
site's web logs, cron's run histories, the logs domain)."""

from __future__ import annotations

import os
import stat

from agent.files.jail import Jail
from agent.jobs.toolkit.output import JobError
from contract.link.protocol import RpcError

BACK_BLOCK = 1024 * 1024


def start_of_last_lines(fd: int, size: int, n: int) -> int:
    """The offset where the last `n` lines of the file begin (a final newline ends the last line).

    Why: a log's end is read from the back, a block at a time, so a tail of a huge log costs what the
    lines cost, not the file.

    Args:
        fd: a readable descriptor of the file (`open_log`'s).
        size: the file's size, taken once by the caller.
        n: how many lines.
    """
    if size == 0:
        return 0
    end = size - 1 if os.pread(fd, 1, size - 1) == b"\n" else size
    found = 0
    pos = end
    while pos > 0:
        start = max(0, pos - BACK_BLOCK)
        chunk = os.pread(fd, pos - start, start)
        count = chunk.count(b"\n")
        if found + count < n:
            found += count
            pos = start
            continue
        index = len(chunk)
        while True:
            index = chunk.rindex(b"\n", 0, index)
            found += 1
            if found == n:
                return start + index + 1
    return 0


def open_log(folder: str, name: str) -> int:
    """A readable descriptor of the log `name` of a site's log folder `folder` (blocking): the
    name is opened beneath the folder, never through a link, and must be a regular file.

    Raises:
        RpcError: ``not_found`` (no such log, or no log folder yet).
        JobError: it is not a regular file.
    """
    try:
        jail = Jail(folder)
    except FileNotFoundError:
        raise RpcError("not_found", "no such file or directory", {"path": name}) from None
    with jail:
        fd = jail.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY, follow_last=False)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise JobError(f"{name} is not a regular file")
    return fd
