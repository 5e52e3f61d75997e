"""``storage usage [--path P] --depth N --json``: what takes the space under the home.

The walk works on directory descriptors (``O_NOFOLLOW`` for every step below the start, which
is resolved inside the home's jail), never follows a symlink, counts a hard-linked file once,
and keeps one descriptor pair per level of depth, not per directory seen.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from typing import Any

import trio

from agent.files.entries import entry_type, wire_name
from agent.files.jail import Jail, normalize
from agent.jobs.base import JobContext, JobError, Output, handler
from agent.link.protocol import RpcError
from api_client.job_kinds.system import StorageUsage

MAX_ENTRIES = 5000
_O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK


@dataclass
class Totals:
    bytes: int = 0  # apparent sizes
    disk_bytes: int = 0  # allocated blocks
    files: int = 0  # everything that is not a directory
    dirs: int = 0
    errors: int = 0  # entries that could not be read

    def add(self, other: Totals) -> None:
        self.bytes += other.bytes
        self.disk_bytes += other.disk_bytes
        self.files += other.files
        self.dirs += other.dirs
        self.errors += other.errors


def measure(dir_fd: int, max_depth: int = 0) -> tuple[Totals, list[dict[str, Any]]]:
    """The totals beneath the directory `dir_fd` (not closed here), and every entry down to
    `max_depth` levels with its own totals (a directory's include all it holds)."""
    seen: set[tuple[int, int]] = set()
    entries: list[dict[str, Any]] = []
    root = Totals()
    fd = os.dup(dir_fd)
    try:
        iterator = os.scandir(fd)
    except OSError:
        os.close(fd)
        root.errors += 1
        return root, entries
    stack: list[tuple[int, Any, str, int, Totals]] = [(fd, iterator, "", 0, root)]
    try:
        while stack:
            fd, iterator, rel, depth, totals = stack[-1]
            try:
                item = next(iterator, None)
            except OSError:
                totals.errors += 1
                item = None
            if item is None:
                iterator.close()
                os.close(fd)
                stack.pop()
                if stack:
                    stack[-1][4].add(totals)
                    if depth <= max_depth:
                        entries.append(_record(rel, "dir", totals))
                continue
            try:
                st = item.stat(follow_symlinks=False)
            except OSError:
                totals.errors += 1
                continue
            child = f"{rel}/{item.name}" if rel else item.name
            size, disk = st.st_size, st.st_blocks * 512
            if stat.S_ISDIR(st.st_mode):
                own = Totals(size, disk, 0, 1)
                try:
                    sub = os.open(item.name, _O_DIR, dir_fd=fd)
                except OSError:
                    own.errors += 1
                    totals.add(own)
                    if depth + 1 <= max_depth:
                        entries.append(_record(child, "dir", own))
                    continue
                try:
                    sub_iterator = os.scandir(sub)
                except OSError:
                    os.close(sub)
                    own.errors += 1
                    totals.add(own)
                    continue
                stack.append((sub, sub_iterator, child, depth + 1, own))
                continue
            if st.st_nlink > 1:
                key = (st.st_dev, st.st_ino)
                if key in seen:
                    size = disk = 0
                seen.add(key)
            totals.bytes += size
            totals.disk_bytes += disk
            totals.files += 1
            if depth + 1 <= max_depth:
                entries.append(_record(child, entry_type(st.st_mode), Totals(size, disk, 1, 0)))
    finally:
        for fd, iterator, *_ in stack:
            iterator.close()
            os.close(fd)
    return root, entries


def _record(path: str, kind: str, totals: Totals) -> dict[str, Any]:
    return {
        "path": wire_name(path),
        "type": kind,
        "depth": path.count("/") + 1,
        "bytes": totals.bytes,
        "disk_bytes": totals.disk_bytes,
        "files": totals.files,
        "dirs": totals.dirs,
    }


def measure_path(home: str, path: str, max_depth: int = 0) -> tuple[Totals, list[dict[str, Any]]]:
    """`measure` of the folder `path` inside the home's jail (a symlink out of the home is refused)."""
    with Jail(home) as jail:
        try:
            is_dir = stat.S_ISDIR(jail.stat(path).st_mode)
        except RpcError as exc:
            if exc.code == "not_found":
                raise JobError(f"{path or '.'}: no such folder in {home}") from None
            raise
        if not is_dir:
            raise JobError(f"{path}: not a folder")
        with jail.opened(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NONBLOCK, follow_last=True) as fd:
            return measure(fd, max_depth)


def usage(home: str, path: str, depth: int) -> dict[str, Any]:
    rel = normalize(path)
    totals, entries = measure_path(home, rel, depth)
    entries.sort(key=lambda e: (-e["bytes"], e["path"]))
    prefix = f"{rel}/" if rel else ""
    for e in entries:
        e["path"] = prefix + e["path"]
    return {
        "path": rel,
        "depth": depth,
        "bytes": totals.bytes,
        "disk_bytes": totals.disk_bytes,
        "files": totals.files,
        "dirs": totals.dirs,
        "errors": totals.errors,
        "entries": entries[:MAX_ENTRIES],
        "truncated": len(entries) > MAX_ENTRIES,
    }


async def _usage(args: StorageUsage, ctx: JobContext, out: Output) -> int:
    result = await trio.to_thread.run_sync(usage, ctx.home, args.path, args.depth)
    out.result(result, as_json=ctx.as_json)
    return 0


KINDS = [
    handler("storage.usage", _usage),
]
