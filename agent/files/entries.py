"""The contract's `Entry` as a plain dict (listings of 50,000 entries are not pydantic models)."""

from __future__ import annotations

import grp
import os
import pwd
import stat
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any


def entry(name: str, path: str, st: os.stat_result, link_target: str | None) -> dict[str, Any]:
    """`Entry` from an lstat result; `path` is relative to the scope root, without leading slash."""
    return {
        "name": wire_name(name),
        "path": wire_name(path),
        "type": entry_type(st.st_mode),
        "size": st.st_size,
        "mode": st.st_mode,
        "permissions": stat.filemode(st.st_mode)[1:],
        "owner": user_name(st.st_uid),
        "group": group_name(st.st_gid),
        "mtime": rfc3339_ns(st.st_mtime_ns),
        "link_target": wire_name(link_target) if link_target is not None else None,
    }


def entry_type(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "other"


def rfc3339(timestamp: float) -> str:
    """`timestamp` (seconds since the epoch) as RFC 3339 UTC to the second: the agent's one formatter."""
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_SECONDS: dict[int, str] = {}
_MODES: dict[int, tuple[str, str]] = {}
_CACHE_BOUND = 65_536


def rfc3339_ns(timestamp_ns: int) -> str:
    """`rfc3339` of a nanosecond timestamp (an `st_mtime_ns`), cached per second: the files of
    one folder share few distinct seconds, and formatting a datetime is the slow part."""
    second = timestamp_ns // 1_000_000_000
    text = _SECONDS.get(second)
    if text is None:
        if len(_SECONDS) >= _CACHE_BOUND:
            _SECONDS.clear()
        text = _SECONDS[second] = rfc3339(second)
    return text


def mode_fields(mode: int) -> tuple[str, str]:
    """``(type, permissions)`` of an `st_mode`, cached (a folder holds few distinct modes)."""
    fields = _MODES.get(mode)
    if fields is None:
        if len(_MODES) >= _CACHE_BOUND:
            _MODES.clear()
        fields = _MODES[mode] = (entry_type(mode), stat.filemode(mode)[1:])
    return fields


def entries(dir_fd: int, directory: str, names: list[str]) -> list[dict[str, Any]]:
    """The `Entry` dicts of `names` in the open directory `dir_fd` (lstat each, relative to it);
    `directory` is the folder's scope-relative path. Names removed meanwhile are left out.

    The same dicts as `entry`, built with the per-value caches: a 50,000-entry page is mostly
    this loop.
    """
    out: list[dict[str, Any]] = []
    append = out.append
    prefix = f"{wire_name(directory)}/" if directory else ""
    lstat, S_ISLNK = os.lstat, stat.S_ISLNK
    for name in names:
        try:
            st = lstat(name, dir_fd=dir_fd)
            mode = st.st_mode
            target = os.readlink(name, dir_fd=dir_fd) if S_ISLNK(mode) else None
        except FileNotFoundError:
            continue  # removed since the directory was read
        kind, permissions = _MODES.get(mode) or mode_fields(mode)
        second = st.st_mtime_ns // 1_000_000_000
        mtime = _SECONDS.get(second) or rfc3339_ns(st.st_mtime_ns)
        if not name.isascii():
            name = wire_name(name)
        append(
            {
                "name": name,
                "path": prefix + name,
                "type": kind,
                "size": st.st_size,
                "mode": mode,
                "permissions": permissions,
                "owner": user_name(st.st_uid),
                "group": group_name(st.st_gid),
                "mtime": mtime,
                "link_target": wire_name(target) if target is not None else None,
            }
        )
    return out


def wire_name(name: str) -> str:
    """A name JSON can carry: bytes that are not UTF-8 (surrogate-escaped) become U+FFFD.

    Lossy on purpose: such names are displayed, not addressed, until the wire carries bytes.
    """
    try:
        name.encode()
    except UnicodeEncodeError:
        return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return name


def join(directory: str, name: str) -> str:
    return f"{directory}/{name}" if directory else name


@lru_cache(maxsize=4096)
def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


@lru_cache(maxsize=4096)
def group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)
