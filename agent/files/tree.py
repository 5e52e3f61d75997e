"""``fs.chmod``, ``fs.dirsize`` and ``fs.search``: walks that never follow a link.

The path named by the request is resolved by the jail (an in-root link at its end is followed,
as chmod(1) and du(1) do); beneath it, `fdops.walk` goes through descriptors only and skips links.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from typing import Any

from agent.files.entries import entry, wire_name
from agent.files.fdops import (
    O_READ_FILE,
    CancelToken,
    Identity,
    Item,
    chmod_fd,
    dir_totals,
    identity,
    lstat_at,
    reopen_dir,
    walk,
)
from agent.files.find import SEARCH_BLOCK, Needle
from agent.files.jail import Jail, normalize
from agent.files.read import BINARY_SNIFF
from contract.link.protocol import RpcError
from contract.models import TRASH_FOLDER

SPECIAL_BITS = stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX
MAX_LINE_TEXT = 500
MAX_LINE_BYTES = 1024 * 1024


def _applies(mode: int, only: str | None) -> bool:
    if stat.S_ISREG(mode):
        return only in (None, "files")
    if stat.S_ISDIR(mode):
        return only in (None, "dirs")
    return False  # links, FIFOs, sockets, devices: never


def chmod(
    jail: Jail, paths: list[str], mode: int, *, recursive: bool, only: str | None, token: CancelToken
) -> dict[str, Any]:
    """``fs.chmod``: ``{changed}``, the number of files and folders given `mode`.

    A file with several hard links that is not the scope user's is refused when named, and left
    alone beneath a folder changed recursively (see `Jail.refuse_foreign_link`)."""
    if mode & SPECIAL_BITS or not 0 <= mode <= 0o777:
        raise RpcError("validation_error", "mode may only hold permission bits (no setuid, setgid or sticky)")
    if any(normalize(path) == "" for path in paths):
        raise RpcError("validation_error", "the scope root itself cannot be changed")
    fds: list[tuple[int, str]] = []
    try:
        for path in paths:  # resolve and check every path first: a bad one changes nothing
            fds.append((jail.open(path, os.O_PATH, follow_last=True), normalize(path)))
            jail.refuse_foreign_link(os.fstat(fds[-1][0]), path)
        changed = 0
        for fd, rel in fds:
            st = os.fstat(fd)
            if recursive and stat.S_ISDIR(st.st_mode):
                changed += _chmod_tree(jail, rel, fd, mode, only, token)
            if _applies(st.st_mode, only):
                chmod_fd(fd, mode)
                changed += 1
        return {"changed": changed}
    finally:
        for fd, _ in fds:
            os.close(fd)


def _chmod_tree(jail: Jail, rel: str, path_fd: int, mode: int, only: str | None, token: CancelToken) -> int:
    changed = 0
    dir_fd = reopen_dir(path_fd)
    try:
        for item in walk(dir_fd, "", token):
            if item.fd is not None:
                # A folder is done after its contents, so a mode without x never locks the walk out.
                if item.post and _applies(item.st.st_mode, only):
                    os.fchmod(item.fd, mode)
                    changed += 1
                continue
            if not stat.S_ISREG(item.st.st_mode) or only == "dirs":
                continue
            try:
                fd = os.open(item.name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=item.dir_fd)
            except FileNotFoundError:
                continue  # gone meanwhile
            try:
                st = os.fstat(fd)
                if stat.S_ISREG(st.st_mode):  # still a file (a link swapped in is left alone)
                    try:
                        jail.refuse_foreign_link(st, f"{rel}/{item.path}" if rel else item.path)
                    except RpcError:
                        continue
                    chmod_fd(fd, mode)
                    changed += 1
            finally:
                os.close(fd)
    finally:
        os.close(dir_fd)
    return changed


def dirsize(jail: Jail, path: str, *, token: CancelToken) -> dict[str, Any]:
    """``fs.dirsize``: ``{path, bytes, files, dirs}`` beneath `path` (the folder itself not counted)."""
    rel = normalize(path)
    with jail.opened(path, os.O_PATH, follow_last=True) as fd:
        st = os.fstat(fd)
        if not stat.S_ISDIR(st.st_mode):
            regular = stat.S_ISREG(st.st_mode)
            return {"path": rel, "bytes": st.st_size if regular else 0, "files": int(regular), "dirs": 0}
        dir_fd = reopen_dir(fd)
    try:
        nbytes, files, dirs = dir_totals(dir_fd, token)
    finally:
        os.close(dir_fd)
    return {"path": rel, "bytes": nbytes, "files": files, "dirs": dirs}


def search(jail: Jail, path: str, query: str, *, content: bool, limit: int, token: CancelToken) -> dict[str, Any]:
    """``fs.search``: names containing `query` (case-insensitive), or with `content`, the lines
    of text files containing it. Files of any size are searched, streamed in blocks (a 20 MB log
    is where one looks for an error); binaries (a NUL byte in their first 8 KiB) are skipped."""
    needle = Needle(query)
    rel = normalize(path)
    matches: list[dict[str, Any]] = []
    with jail.opened(path, os.O_PATH, follow_last=True) as fd:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            raise RpcError("validation_error", "not a directory", {"path": rel})
        dir_fd = reopen_dir(fd)
    exclude: frozenset[Identity] = frozenset()
    if rel == "":  # the scope's own trash is not searched
        trash = lstat_at(dir_fd, TRASH_FOLDER)
        if trash is not None and stat.S_ISDIR(trash.st_mode):
            exclude = frozenset({identity(trash)})
    try:
        for item in walk(dir_fd, rel, token, exclude=exclude):
            if item.post:
                continue
            if not content:
                if needle.in_line(item.name):
                    if len(matches) >= limit:
                        return {"matches": matches, "truncated": True}
                    matches.append({"entry": _entry(item.dir_fd, item.name, item.path, item.st)})
                continue
            if not stat.S_ISREG(item.st.st_mode):
                continue
            for number, text in _matching_lines(jail, item, needle, token):
                if len(matches) >= limit:
                    return {"matches": matches, "truncated": True}
                found = {"entry": _entry(item.dir_fd, item.name, item.path, item.st), "line": number, "text": text}
                matches.append(found)
    finally:
        os.close(dir_fd)
    return {"matches": matches, "truncated": False}


def _entry(dir_fd: int, name: str, path: str, st: os.stat_result) -> dict[str, Any]:
    target = None
    if stat.S_ISLNK(st.st_mode):
        try:
            target = os.readlink(name, dir_fd=dir_fd)
        except OSError:
            target = ""
    return entry(name, path, st, target)


def _matching_lines(jail: Jail, item: Item, needle: Needle, token: CancelToken) -> Iterator[tuple[int, str]]:
    """The lines of the file `item` holding `needle`; none for a file with several hard links that
    is not the scope user's (it may lie outside the scope: see `Jail.refuse_foreign_link`)."""
    try:
        fd = os.open(item.name, O_READ_FILE, dir_fd=item.dir_fd)
    except OSError:
        return  # gone, swapped for a link, unreadable
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or jail.is_foreign_link(st, item.path):
            return
        yield from _lines_holding(fd, needle, token)
    finally:
        os.close(fd)


def _lines_holding(fd: int, needle: Needle, token: CancelToken) -> Iterator[tuple[int, str]]:
    """Numbered lines of the text in `fd` that hold `needle`, read a block of whole lines at a
    time: a block without the needle is only counted, so a big log costs little more than its
    reading. A line longer than `MAX_LINE_BYTES` is cut there (a minified file, a binary without
    NUL early on): the search never holds more than a block and one line."""
    number, pending, first, last = 0, b"", True, 0
    while True:
        chunk = os.read(fd, SEARCH_BLOCK)
        token.check()
        if first and b"\0" in chunk[:BINARY_SNIFF]:
            return
        first = False
        pending += chunk
        cut = pending.rfind(b"\n") + 1 or (len(pending) if len(pending) > MAX_LINE_BYTES or not chunk else 0)
        block, pending = pending[:cut], pending[cut:]
        for found in _block_lines(block, number, needle):
            if found[0] != last:  # a long line cut in pieces is found once
                last = found[0]
                yield found
        number += block.count(b"\n")  # the rest of a cut line goes on under its number
        if not chunk:
            return


def _block_lines(block: bytes, before: int, needle: Needle) -> Iterator[tuple[int, str]]:
    if needle.find(block) < 0:
        return  # most blocks of a log: ruled out without decoding them (an ASCII needle)
    text = block.decode("utf-8", "replace")
    for number, line in enumerate(text.split("\n"), before + 1):  # numbered as `wc -l` counts
        if needle.in_line(line):
            yield number, wire_name(line.rstrip("\r")[:MAX_LINE_TEXT])
