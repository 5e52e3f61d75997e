"""``storage usage|largest|disks|inodes|cleanup``: what takes the space, and safe ways to free some.

``usage`` drills down under a site or the home (each entry to ``--depth`` levels with its
totals), ``largest`` lists the biggest files there. Both go through the site's (or the home's) jail, and
their walk is the file workspace's own
(`agent.files.fdops.walk`: directory descriptors, never a symlink followed), counting like
``du``: allocated blocks beside apparent sizes, a hard-linked file once, and a folder it cannot
read as an error rather than a stop. ``disks`` and ``inodes`` list the real file systems
(``findmnt``); ``cleanup`` does only what cannot hurt: ``apt-get clean`` and rotated logs (the
system's, and the sites' in their root-owned log folder: nothing in a site's own tree).
"""

from __future__ import annotations

import heapq
import os
import re
import stat
import time
from typing import Any

import orjson
import trio

from agent.files.entries import wire_name
from agent.files.fdops import never, walk
from agent.files.jail import normalize
from agent.jobs.toolkit.base import JobContext, handler, rfc3339
from agent.jobs.toolkit.boundary import scope_jail
from agent.jobs.toolkit.common import find_site
from agent.jobs.toolkit.disk_usage import measure_path
from agent.jobs.toolkit.machine import disk
from agent.jobs.toolkit.output import JobError, Output
from agent.jobs.toolkit.proc import capture_command, require
from contract.job_kinds.base import NoArgs
from contract.job_kinds.storage import StorageCleanup, StorageLargest, StorageUsage
from contract.link.protocol import RpcError

MAX_ENTRIES = 5000


def usage(home: str, path: str, depth: int, site: str | None = None) -> dict[str, Any]:
    rel = normalize(path)
    totals, entries = measure_path(home, rel, depth, site=site)
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
    """In the site of ``--domain``, or (no domain: the control plane allowed the home) the home."""
    slug = (await find_site(ctx, args.domain)).slug if args.domain else None
    result = await trio.to_thread.run_sync(usage, ctx.home, args.path, args.depth, slug)
    if args.domain:
        result["domain"] = args.domain
    out.result(result, as_json=ctx.as_json)
    return 0


# --- largest -------------------------------------------------------------------------------


def largest(home: str, path: str, limit: int, site: str | None = None) -> dict[str, Any]:
    """The `limit` biggest regular files under `path` (by allocated blocks: what freeing them
    gives back), through the same jail and walk as `usage`."""
    rel = normalize(path)
    top: list[tuple[int, str, int, float]] = []  # a min-heap of (disk bytes, path, bytes, mtime)
    scanned = errors = 0

    def unreadable(_path: str, _st: os.stat_result | None, _exc: OSError) -> None:
        nonlocal errors
        errors += 1

    with scope_jail(home, site) as jail:
        try:
            fd = jail.open(rel, os.O_RDONLY | os.O_DIRECTORY | os.O_NONBLOCK, follow_last=True)
        except RpcError as exc:
            if exc.code == "not_found":
                raise JobError(f"{rel or '.'}: no such folder") from None
            raise
        try:
            for item in walk(fd, rel, never(), on_unreadable=unreadable):
                if not stat.S_ISREG(item.st.st_mode):
                    continue
                scanned += 1
                entry = (item.st.st_blocks * 512, wire_name(item.path), item.st.st_size, item.st.st_mtime)
                if len(top) < limit:
                    heapq.heappush(top, entry)
                elif entry > top[0]:
                    heapq.heapreplace(top, entry)
        finally:
            os.close(fd)
    files = [
        {"path": p, "bytes": size, "disk_bytes": blocks, "modified": rfc3339(mtime)}
        for blocks, p, size, mtime in sorted(top, reverse=True)
    ]
    return {"path": rel, "scanned": scanned, "errors": errors, "files": files}


async def _largest(args: StorageLargest, ctx: JobContext, out: Output) -> int:
    slug = (await find_site(ctx, args.domain)).slug if args.domain else None
    result = await trio.to_thread.run_sync(largest, ctx.home, args.path, args.limit, slug)
    if args.domain:
        result["domain"] = args.domain
    out.result(result, as_json=ctx.as_json)
    return 0


# --- disks and inodes ----------------------------------------------------------------------


async def file_systems() -> list[dict[str, Any]]:
    """The real file systems (no proc, tmpfs, cgroup...) as findmnt lists them, each with its
    figures from statvfs."""
    findmnt = require("findmnt", "list the file systems")
    code, text, err = await capture_command([findmnt, "--json", "--real", "--output", "SOURCE,TARGET,FSTYPE"])
    if code != 0:
        raise JobError(f"findmnt failed (exit {code}): {' '.join(err.split())}")
    systems = []
    for entry in parse_findmnt(text):
        try:
            figures = await trio.to_thread.run_sync(disk, entry["target"])
        except OSError:
            continue  # unmounted meanwhile, or not ours to read
        systems.append({"source": entry["source"], "fstype": entry["fstype"], **figures})
    return systems


def parse_findmnt(text: str) -> list[dict[str, str]]:
    """``findmnt --json`` (flat or as a tree: ``children``) as a flat list of mounts."""
    found: list[dict[str, str]] = []

    def visit(entries: list[dict[str, Any]]) -> None:
        for entry in entries:
            found.append({key: str(entry.get(key) or "") for key in ("source", "target", "fstype")})
            visit(entry.get("children") or [])

    visit(orjson.loads(text).get("filesystems") or [])
    return found


async def _disks(args: NoArgs, ctx: JobContext, out: Output) -> int:
    systems = await file_systems()
    for system in systems:
        system.pop("inodes_total", None)
        system.pop("inodes_free", None)
    out.result({"filesystems": systems}, as_json=ctx.as_json)
    return 0


async def _inodes(args: NoArgs, ctx: JobContext, out: Output) -> int:
    rows = []
    for system in await file_systems():
        total, free = system["inodes_total"], system["inodes_free"]
        rows.append(
            {
                "source": system["source"],
                "path": system["path"],
                "fstype": system["fstype"],
                "inodes_total": total,
                "inodes_used": total - free,
                "inodes_free": free,
                "used_percent": round(100 * (total - free) / total, 1) if total else 0.0,
            }
        )
    out.result({"filesystems": rows}, as_json=ctx.as_json)
    return 0


# --- cleanup -------------------------------------------------------------------------------

SAFE_TARGETS = ("cache", "logs")
ROTATED_LOG = re.compile(r"\.(?:\d+(?:\.gz)?|gz|old)$")  # access.log.1, syslog.2.gz, error.log-2026.gz...


def rotated_logs(root: str, older_than_s: float, remove: bool) -> tuple[list[dict[str, Any]], int]:
    """The rotated log files beneath `root` (not the live ones) older than `older_than_s`,
    removed unless it is a dry run: (files, errors). Walked from descriptors, links never
    followed, each file unlinked from its own folder's descriptor."""
    files: list[dict[str, Any]] = []
    errors = 0
    cutoff = time.time() - older_than_s
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return files, 0
    try:
        for item in walk(fd, "", never(), on_unreadable=lambda *_: None):
            st = item.st
            if not stat.S_ISREG(st.st_mode) or not ROTATED_LOG.search(item.name) or st.st_mtime > cutoff:
                continue
            if remove:
                try:
                    os.unlink(item.name, dir_fd=item.dir_fd)
                except OSError:
                    errors += 1
                    continue
            files.append({"path": os.path.join(root, item.path), "bytes": st.st_size})
    finally:
        os.close(fd)
    return files, errors


def _beneath(path: str, folder: str) -> bool:
    """`path` is `folder` or lies in it (spelt so: both are the layout's own paths)."""
    return os.path.normpath(path) == os.path.normpath(folder) or os.path.normpath(path).startswith(
        os.path.normpath(folder).rstrip("/") + "/"
    )


def apt_archives(folder: str) -> list[dict[str, Any]]:
    """The downloaded packages ``apt-get clean`` would remove."""
    found = []
    for sub in ("", "partial"):
        try:
            with os.scandir(os.path.join(folder, sub)) as entries:
                for entry in entries:
                    if entry.is_file(follow_symlinks=False) and entry.name != "lock":
                        found.append({"path": entry.path, "bytes": entry.stat(follow_symlinks=False).st_size})
        except OSError:
            continue
    return found


async def _cleanup(args: StorageCleanup, ctx: JobContext, out: Output) -> int:
    unsafe = [t for t in args.targets if t not in SAFE_TARGETS]
    if unsafe:
        raise JobError(f"this agent only does the safe cleanups {', '.join(SAFE_TARGETS)}; not {', '.join(unsafe)}", 2)
    result: dict[str, Any] = {"dry_run": args.dry_run, "targets": {}}
    if "cache" in args.targets:
        folder = ctx.host.system.apt_archives
        files = await trio.to_thread.run_sync(apt_archives, folder)
        if not args.dry_run:
            apt_get = require("apt-get", "empty the package cache")
            code, _, err = await capture_command([apt_get, "clean", "-o", f"Dir::Cache::archives={folder}/"])
            if code != 0:
                raise JobError(f"apt-get clean failed (exit {code}): {' '.join(err.split())}")
        result["targets"]["cache"] = {"folder": folder, "files": files, "bytes": sum(f["bytes"] for f in files)}
    if "logs" in args.targets:
        roots = [ctx.host.system.log_dir, ctx.host.system.sites_log_dir]  # the sites' logs are root's
        roots = [root for i, root in enumerate(roots) if not any(_beneath(root, other) for other in roots[:i])]
        files, errors = [], 0
        for root in roots:
            found, failed = await trio.to_thread.run_sync(
                rotated_logs, root, args.older_than_days * 86400, not args.dry_run
            )
            files += found
            errors += failed
        result["targets"]["logs"] = {"files": files, "bytes": sum(f["bytes"] for f in files), "errors": errors}
    result["bytes"] = sum(t["bytes"] for t in result["targets"].values())
    out.result(result, as_json=ctx.as_json)
    return 0


KINDS = [
    handler("storage.usage", _usage),
    handler("storage.largest", _largest),
    handler("storage.disks", _disks),
    handler("storage.inodes", _inodes),
    handler("storage.cleanup", _cleanup),
]
