"""How much a folder holds, walked from a descriptor beneath its scope's jail (no link followed, a
hard-linked file's blocks counted once): for ``storage.usage`` and a site's inspection."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from typing import Any

from agent.files.entries import entry_type, wire_name
from agent.files.fdops import Identity, identity, never, walk
from agent.jobs.toolkit.boundary import scope_jail
from agent.jobs.toolkit.output import JobError
from contract.link.protocol import RpcError


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
    seen: set[Identity] = set()
    entries: list[dict[str, Any]] = []
    levels = [Totals()]  # the folder being walked at each depth, the start first

    def unreadable(path: str, st: os.stat_result | None, _exc: OSError) -> None:
        own = Totals(errors=1) if st is None else Totals(st.st_size, st.st_blocks * 512, 0, 1, errors=1)
        levels[-1].add(own)
        if st is not None and path.count("/") < max_depth:
            entries.append(_record(path, "dir", own))

    for item in walk(dir_fd, "", never(), on_unreadable=unreadable):
        st = item.st
        listed = item.depth + 1 <= max_depth
        if stat.S_ISDIR(st.st_mode):
            if not item.post:
                levels.append(Totals(st.st_size, st.st_blocks * 512, 0, 1))
                continue
            own = levels.pop()
            levels[-1].add(own)
            if listed:
                entries.append(_record(item.path, "dir", own))
            continue
        size, disk = st.st_size, st.st_blocks * 512
        if st.st_nlink > 1:  # a hard-linked file's blocks are counted once
            if identity(st) in seen:
                size = disk = 0
            seen.add(identity(st))
        levels[-1].add(Totals(size, disk, 1, 0))
        if listed:
            entries.append(_record(item.path, entry_type(st.st_mode), Totals(size, disk, 1, 0)))
    return levels[0], entries


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


def measure_path(
    home: str, path: str, max_depth: int = 0, *, site: str | None = None
) -> tuple[Totals, list[dict[str, Any]]]:
    """`measure` of the folder `path` inside the home's jail, or inside the jail of the site folder
    `site` (a slug) when given: a symlink out of the scope is refused. Blocking.

    Why: ``storage.usage`` and ``site.inspect`` count what a user's tree holds without following a
    link the user planted.

    Args:
        home: the home.
        path: the folder, relative to the scope ("" for the scope itself).
        max_depth: how many levels of entries to list with their own totals (0: none).
        site: a site's folder name, or None for the home.

    Raises:
        JobError: no such folder, or it is not a folder.
        RpcError: the path leads out of the scope.
    """
    with scope_jail(home, site) as jail:
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
