"""``logs tail <domain> --log access|error --lines N``: the last lines of a site's log.

The file is ``<site>/logs/<log>.log``, opened inside the site's jail. The start of the last N
lines is found by reading blocks backwards from the end (counting newlines per block, so a
million lines cost a few hundred reads), then the lines are streamed forwards block by block
up to the size the file had when the job started.
"""

from __future__ import annotations

import os
import stat

import trio

from agent.files.jail import Jail
from agent.jobs.base import STDOUT, JobContext, JobError, Output, handler
from agent.jobs.common import find_site
from agent.jobs.proc import LineSplitter
from api_client.job_kinds.system import LogsTail

BACK_BLOCK = 1024 * 1024
FORWARD_BLOCK = 256 * 1024
MAX_LINES = 1_000_000


def start_of_last_lines(fd: int, size: int, n: int) -> int:
    """The offset where the last `n` lines of the file begin (a final newline ends the last line)."""
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


async def tail(fd: int, n: int, out: Output) -> int:
    """Stream the last `n` lines of the open file `fd`; how many were sent."""
    size = os.fstat(fd).st_size
    offset = await trio.to_thread.run_sync(start_of_last_lines, fd, size, n)
    splitter = LineSplitter()
    sent = 0
    while offset < size:
        data = await trio.to_thread.run_sync(os.pread, fd, min(FORWARD_BLOCK, size - offset), offset)
        if not data:
            break  # truncated meanwhile
        offset += len(data)
        lines = splitter.feed(data)
        if lines:
            out.lines(STDOUT, lines)
            sent += len(lines)
            await out.drain()
    last = splitter.close()
    if last:
        out.lines(STDOUT, last)
        sent += 1
    return sent


def _open_log(home: str, slug: str, name: str) -> int:
    with Jail(home) as jail, jail.subjail(slug) as site:
        fd = site.open(f"logs/{name}", os.O_RDONLY | os.O_NONBLOCK, follow_last=True)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise JobError(f"logs/{name} is not a regular file")
    return fd


async def _tail(args: LogsTail, ctx: JobContext, out: Output) -> int:
    site = await find_site(ctx, args.domain)
    name = f"{args.log}.log"
    try:
        fd = await trio.to_thread.run_sync(_open_log, ctx.home, site.slug, name)
    except JobError:
        raise
    except Exception as exc:
        code = getattr(exc, "code", None)
        if code == "not_found":
            raise JobError(f"site {site.domain} has no {args.log} log (logs/{name})") from None
        raise
    try:
        await tail(fd, args.lines, out)
    finally:
        os.close(fd)
    return 0


KINDS = [
    handler("logs.tail", _tail),
]
