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
        "mtime": rfc3339(st.st_mtime),
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
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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
