"""``logs tail|search|list|rotate|journal``: the sites' logs and the system's.

``tail <domain> --log access|error --lines N``: the file is ``<log>.log`` in the site's log
folder (`agent.jobs.toolkit.site_web.site_log_dir`: root's, outside the site's tree), opened beneath it
without following a link. The start of the last N lines is found by reading blocks backwards from
the end (counting newlines per block, so a million lines cost a few hundred reads), then the
lines are streamed forwards block by block up to the size the file had when the job started.
``search`` reads the same file forwards and streams the lines holding a fixed text (``--since``
keeps the lines stamped within that time). ``rotate`` runs logrotate with a configuration made
for the sites' log folders (as root: they are root's folders; ``copytruncate``: nginx keeps
writing to the same file, and is never asked to reopen it). ``journal`` reads systemd's
journal; a server whose PID 1 is not systemd has none and the job says so (exit 69).
"""

from __future__ import annotations

import calendar
import os
import re
import stat
import tempfile
import time
from collections.abc import Callable
from typing import Any

import trio

from agent.files.fdops import listdir, lstat_at
from agent.jobs.toolkit.base import JobContext, handler, rfc3339
from agent.jobs.toolkit.common import find_site
from agent.jobs.toolkit.logfiles import open_log, start_of_last_lines
from agent.jobs.toolkit.output import EXIT_MISSING, STDOUT, JobError, Output
from agent.jobs.toolkit.proc import LineSplitter, require, stream_command
from agent.jobs.toolkit.site_web import site_log_dir
from agent.sites import Site
from contract.job_kinds.base import OptionalDomain
from contract.job_kinds.logs import LogsJournal, LogsSearch, LogsTail
from contract.link.protocol import RpcError

FORWARD_BLOCK = 256 * 1024
MAX_LINES = 1_000_000


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


async def open_site_log(ctx: JobContext, domain: str, log: str) -> int:
    site = await find_site(ctx, domain)
    name = f"{log}.log"
    try:
        return await trio.to_thread.run_sync(open_log, site_log_dir(ctx.host, site.slug), name)
    except RpcError as exc:
        if exc.code == "not_found":
            raise JobError(f"site {site.domain} has no {log} log yet ({name})") from None
        raise


async def _tail(args: LogsTail, ctx: JobContext, out: Output) -> int:
    fd = await open_site_log(ctx, args.domain, args.log)
    try:
        await tail(fd, args.lines, out)
    finally:
        os.close(fd)
    return 0


# --- search --------------------------------------------------------------------------------

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MONTHS = {name: i for i, name in enumerate(calendar.month_abbr) if name}
ACCESS_TIME = re.compile(r"\[(\d{2})/([A-Z][a-z]{2})/(\d{4}):(\d{2}):(\d{2}):(\d{2}) ([+-])(\d{2})(\d{2})\]")
ERROR_TIME = re.compile(r"^(\d{4})/(\d{2})/(\d{2}) (\d{2}):(\d{2}):(\d{2})")


def seconds(duration: str) -> int:
    return int(duration[:-1]) * UNITS[duration[-1]]


def line_time(line: str) -> float | None:
    """When a log line was written (nginx's access or error format; an error log's time is the
    server's local time), or None."""
    match = ACCESS_TIME.search(line)
    if match:
        day, month, year, hh, mm, ss, sign, oh, om = match.groups()
        if month not in MONTHS:
            return None
        offset = (int(oh) * 3600 + int(om) * 60) * (1 if sign == "+" else -1)
        return calendar.timegm((int(year), MONTHS[month], int(day), int(hh), int(mm), int(ss))) - offset
    match = ERROR_TIME.match(line)
    if match:
        year, month_, day_, hh_, mm_, ss_ = (int(x) for x in match.groups())
        return time.mktime((year, month_, day_, hh_, mm_, ss_, 0, 0, -1))
    return None


def matcher(text: str, since_s: int | None, now: float) -> Callable[[str], bool]:
    """A line filter: holds `text`, and (with `since_s`) was stamped that recently; a line without
    a time of its own goes with the line before it (a stack trace with its error)."""
    cutoff = now - since_s if since_s is not None else None
    recent = cutoff is None

    def keep(line: str) -> bool:
        nonlocal recent
        if cutoff is not None:
            stamped = line_time(line)
            if stamped is not None:
                recent = stamped >= cutoff
        return recent and text in line

    return keep


async def search(fd: int, keep: Callable[[str], bool], limit: int, out: Output) -> int:
    """Stream the lines of `fd` that `keep` accepts, at most `limit`; how many were sent."""
    size = os.fstat(fd).st_size
    splitter = LineSplitter()
    offset = sent = 0
    while offset < size and sent < limit:
        data = await trio.to_thread.run_sync(os.pread, fd, min(FORWARD_BLOCK, size - offset), offset)
        if not data:
            break
        offset += len(data)
        found = [line for line in splitter.feed(data) if keep(line)][: limit - sent]
        if found:
            out.lines(STDOUT, found)
            sent += len(found)
            await out.drain()
    last = [line for line in splitter.close() if keep(line)][: limit - sent]
    if last:
        out.lines(STDOUT, last)
        sent += len(last)
    return sent


async def _search(args: LogsSearch, ctx: JobContext, out: Output) -> int:
    fd = await open_site_log(ctx, args.domain, args.log)
    try:
        keep = matcher(args.text, seconds(args.since) if args.since else None, time.time())
        sent = await search(fd, keep, args.limit, out)
    finally:
        os.close(fd)
    if sent >= args.limit:
        out.stderr(f"note: stopped at {args.limit} lines (--limit)")
    return 0


# --- list ----------------------------------------------------------------------------------


def site_logs(folder: str, site: Site) -> list[dict[str, Any]]:
    """The files of a site's log folder `folder` (root's; none when it is not made yet)."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return []
    try:
        found = []
        for name in listdir(fd):
            st = lstat_at(fd, name)
            if st is not None and stat.S_ISREG(st.st_mode):
                path = os.path.join(folder, name)
                found.append({"scope": "site", "domain": site.domain, "path": path, **_figures(st)})
        return found
    finally:
        os.close(fd)


def system_logs(root: str, max_depth: int = 1) -> list[dict[str, Any]]:
    """The files of the system's log folder and its subfolders (one level), links not followed."""
    found = []
    for folder, dirs, files in os.walk(root):
        depth = os.path.relpath(folder, root).count(os.sep) + (folder != root)
        if depth >= max_depth:
            dirs[:] = []
        for name in sorted(files):
            try:
                st = os.lstat(os.path.join(folder, name))
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                found.append({"scope": "system", "domain": None, "path": os.path.join(folder, name), **_figures(st)})
    return sorted(found, key=lambda entry: entry["path"])


def _figures(st: os.stat_result) -> dict[str, Any]:
    return {"bytes": st.st_size, "modified": rfc3339(st.st_mtime)}


async def _list(args: OptionalDomain, ctx: JobContext, out: Output) -> int:
    sites = [await find_site(ctx, args.domain)] if args.domain else await trio.to_thread.run_sync(ctx.sites.sites)
    logs: list[dict[str, Any]] = []
    for site in sites:
        logs += await trio.to_thread.run_sync(site_logs, site_log_dir(ctx.host, site.slug), site)
    if not args.domain:
        logs += await trio.to_thread.run_sync(system_logs, ctx.host.system.log_dir)
    out.result({"logs": logs}, as_json=ctx.as_json)
    return 0


# --- rotate --------------------------------------------------------------------------------

KEEP_ROTATIONS = 14


def logrotate_config(folders: list[str]) -> str:
    """A logrotate configuration for the sites' log folders (root's: no ``su``)."""
    blocks = []
    for folder in folders:
        blocks.append(
            f'"{folder}/*.log" {{\n'
            f"    rotate {KEEP_ROTATIONS}\n"
            "    compress\n    delaycompress\n    missingok\n    notifempty\n    copytruncate\n"
            "}\n"
        )
    return "".join(blocks)


async def _rotate(args: OptionalDomain, ctx: JobContext, out: Output) -> int:
    logrotate = require("logrotate", "rotate the logs")
    sites = [await find_site(ctx, args.domain)] if args.domain else await trio.to_thread.run_sync(ctx.sites.sites)
    entries = [site_log_dir(ctx.host, site.slug) for site in sites]
    if not entries:
        out.stdout("no site logs to rotate")
        return 0
    status = os.path.join(ctx.state_dir, "logrotate.status")
    with tempfile.NamedTemporaryFile("w", dir=ctx.state_dir, prefix="logrotate-", suffix=".conf") as config:
        config.write(logrotate_config(entries))
        config.flush()
        code = await stream_command(out, [logrotate, "--force", "--verbose", "--state", status, config.name])
    if code != 0:
        raise JobError(f"logrotate failed (exit {code})")
    out.stdout(f"rotated the logs of {len(entries)} site(s)")
    return 0


# --- journal -------------------------------------------------------------------------------


def journal_argv(journalctl: str, args: LogsJournal) -> list[str]:
    argv = [journalctl, "--no-pager", "--output=short-iso", f"--lines={args.lines}"]
    if args.unit:
        argv.append(f"--unit={args.unit}")
    if args.priority:
        argv.append(f"--priority={args.priority}")
    if args.since:
        argv.append(f"--since=-{args.since}")
    return argv


async def _journal(args: LogsJournal, ctx: JobContext, out: Output) -> int:
    init = ctx.host.init
    if not init.systemd:
        raise JobError("no journal on this server: PID 1 is not systemd (read the files of logs list)", EXIT_MISSING)
    argv = journal_argv(init.tool("journalctl", "read the system journal"), args)
    return await stream_command(out, argv)


KINDS = [
    handler("logs.tail", _tail),
    handler("logs.search", _search),
    handler("logs.list", _list),
    handler("logs.rotate", _rotate),
    handler("logs.journal", _journal),
]
