"""Read operations of the file workspace: blocking functions on a `Jail` (run them in a thread)."""

from __future__ import annotations

import base64
import binascii
import errno
import hashlib
import heapq
import os
import stat
from typing import Any

from agent.link.protocol import RpcError

from .entries import entry, join, rfc3339, wire_name
from .jail import Jail, normalize, split_path

READ_LIMIT = 10 * 1024 * 1024
BINARY_SNIFF = 8192
DEFAULT_LIMIT = 5000
MAX_LIMIT = 50_000


def content_etag(data: bytes) -> str:
    """The etag of a file's content: the first 32 hex digits of its SHA-256.

    A content hash, not (inode, size, mtime): an edit that keeps the size and the mtime still
    changes it, and writing back identical bytes does not make other editors' copies stale.
    """
    return hashlib.sha256(data).hexdigest()[:32]


def encode_cursor(name: str) -> str:
    return base64.urlsafe_b64encode(os.fsencode(name)).decode().rstrip("=")


def decode_cursor(cursor: str) -> str:
    try:
        padded = (cursor + "=" * (-len(cursor) % 4)).encode()
        return os.fsdecode(base64.b64decode(padded, altchars=b"-_", validate=True))
    except (binascii.Error, ValueError):
        raise RpcError("validation_error", "invalid cursor") from None


def list_dir(jail: Jail, path: str, *, cursor: str | None = None, limit: int = DEFAULT_LIMIT) -> dict[str, Any]:
    """One page of a directory, sorted by name; the cursor is the last name of the previous page.

    Every page re-reads the names (cheap next to the lstat of each entry, done for the page
    only), so entries added or removed between pages never make a name appear twice.
    """
    rel = normalize(path)
    after = decode_cursor(cursor) if cursor else None
    dir_fd = _open_dir(jail, path, rel)
    try:
        with os.scandir(dir_fd) as it:
            names = [e.name for e in it]
        total = len(names)
        if after is not None:
            names = [n for n in names if n > after]
        page = heapq.nsmallest(limit, names) if limit < len(names) else sorted(names)
        entries = []
        for name in page:
            item = _entry_at(dir_fd, name, join(rel, name))
            if item is not None:
                entries.append(item)
        more = len(names) > len(page)
        return {
            "path": rel,
            "entries": entries,
            "next_cursor": encode_cursor(page[-1]) if more else None,
            "total": total,
        }
    finally:
        os.close(dir_fd)


def _open_dir(jail: Jail, path: str, rel: str) -> int:
    # O_PATH first: opening a FIFO or a device for reading could block or have side effects.
    with jail.opened(path, os.O_PATH, follow_last=True) as path_fd:
        if not stat.S_ISDIR(os.fstat(path_fd).st_mode):
            raise RpcError("validation_error", "not a directory", {"path": rel})
        return os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=path_fd)


def _entry_at(dir_fd: int, name: str, path: str) -> dict[str, Any] | None:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        target = os.readlink(name, dir_fd=dir_fd) if stat.S_ISLNK(st.st_mode) else None
    except FileNotFoundError:
        return None  # removed since the directory was read
    return entry(name, path, st, target)


def stat_entry(jail: Jail, path: str) -> dict[str, Any]:
    """The `Entry` of a path itself: a symlink is reported as a symlink, with its target."""
    parts = split_path(path)
    st = jail.lstat(path)
    target = jail.readlink(path) if stat.S_ISLNK(st.st_mode) else None
    return entry(parts[-1] if parts else "", "/".join(parts), st, target)


def read_text(jail: Jail, path: str, *, limit: int = READ_LIMIT) -> dict[str, Any]:
    """A text file's content (an in-root symlink at the end is followed)."""
    rel = normalize(path)
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; the fstat below refuses it.
        fd = jail.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY, follow_last=True)
    except OSError as exc:
        if exc.errno in (errno.ENXIO, errno.ENODEV, errno.EOPNOTSUPP):  # a socket, a device
            raise RpcError("validation_error", "not a regular file", {"path": rel}) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RpcError("validation_error", "not a regular file", {"path": rel})
        if st.st_size > limit:
            raise RpcError("too_large", "the file is too large to open", {"limit": limit, "size": st.st_size})
        data = _read_up_to(fd, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:  # grew since the fstat
        raise RpcError("too_large", "the file is too large to open", {"limit": limit, "size": len(data)})
    if b"\0" in data[:BINARY_SNIFF]:
        raise RpcError("binary_file", "the file is binary", {"path": rel})
    try:
        content = data.decode("utf-8")
    except UnicodeDecodeError:
        raise RpcError("binary_file", "the file is not UTF-8 text", {"path": rel}) from None
    return {
        "path": wire_name(rel),
        "content": content,
        "encoding": "utf-8",
        "size": len(data),
        "mtime": rfc3339(st.st_mtime),
        "etag": content_etag(data),
    }


def _read_up_to(fd: int, n: int) -> bytes:
    chunks, size = [], 0
    while size < n:
        chunk = os.read(fd, min(n - size, 1024 * 1024))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)
