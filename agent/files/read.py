"""Read operations of the file workspace: blocking functions on a `Jail` (run them in a thread)."""

from __future__ import annotations

import base64
import binascii
import bisect
import errno
import hashlib
import os
import stat
import threading
import time
from collections import OrderedDict
from typing import Any

import orjson

from agent.files.entries import entries, entry, rfc3339, wire_name
from agent.files.jail import Jail, normalize, split_path
from contract.link.params import DEFAULT_LIST_LIMIT as DEFAULT_LIMIT
from contract.link.protocol import RpcError

READ_LIMIT = 10 * 1024 * 1024
BINARY_SNIFF = 8192


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

    The first page (no cursor) reads the names afresh. A later page reuses the sorted names its
    first page read, as long as the folder has not changed since (`SNAPSHOTS`); otherwise it
    reads them again. Either way a page holds the names after the cursor, so entries added or
    removed between pages never make a name appear twice. Only the page's entries are lstat'ed.
    """
    rel = normalize(path)
    after = decode_cursor(cursor) if cursor else None
    dir_fd = _open_dir(jail, path, rel)
    try:
        names = _sorted_names(dir_fd, fresh=after is None)
        start = bisect.bisect_right(names, after) if after is not None else 0
        page = names[start : start + limit]
        more = start + limit < len(names)
        return {
            "path": wire_name(rel),
            "entries": entries(dir_fd, rel, page),
            "next_cursor": encode_cursor(page[-1]) if more else None,
            "total": len(names),
        }
    finally:
        os.close(dir_fd)


def list_dir_json(jail: Jail, path: str, *, cursor: str | None = None, limit: int = DEFAULT_LIMIT) -> bytes:
    """`list_dir` as the JSON document of the `/v1` answer, encoded here in one go: the control
    plane passes these bytes on without decoding them."""
    return orjson.dumps(list_dir(jail, path, cursor=cursor, limit=limit))


class Snapshots:
    """The sorted names of recently listed folders, so the later pages of one listing neither
    re-read nor re-sort a big folder.

    Keyed by the folder's (device, inode), valid while its mtime and ctime are those seen before
    the names were read (adding, removing or renaming an entry sets both to the current time). A
    folder whose mtime is less than `RACY_NS` before the read is not kept: a change within the
    same timestamp tick would not show (one after an older mtime always does). Bounded in
    folders, in names, and in time.
    """

    TTL_S = 30.0
    MAX_FOLDERS = 16
    MAX_NAMES = 500_000
    RACY_NS = 1_000_000_000

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: OrderedDict[tuple[int, int], tuple[tuple[int, int], float, list[str]]] = OrderedDict()
        self._names = 0

    def get(self, st: os.stat_result) -> list[str] | None:
        key, version = (st.st_dev, st.st_ino), (st.st_mtime_ns, st.st_ctime_ns)
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return None
            if item[0] != version or time.monotonic() - item[1] > self.TTL_S:
                self._drop(key)
                return None
            self._items.move_to_end(key)
            return item[2]

    def put(self, st: os.stat_result, read_at_ns: int, names: list[str]) -> None:
        key, version = (st.st_dev, st.st_ino), (st.st_mtime_ns, st.st_ctime_ns)
        with self._lock:
            self._drop(key)
            if len(names) > self.MAX_NAMES or read_at_ns - st.st_mtime_ns < self.RACY_NS:
                return
            now = time.monotonic()
            for old in [k for k, (_, at, _) in self._items.items() if now - at > self.TTL_S]:
                self._drop(old)
            while self._items and (len(self._items) >= self.MAX_FOLDERS or self._names + len(names) > self.MAX_NAMES):
                self._drop(next(iter(self._items)))
            self._items[key] = (version, now, names)
            self._names += len(names)

    def _drop(self, key: tuple[int, int]) -> None:
        item = self._items.pop(key, None)
        if item is not None:
            self._names -= len(item[2])

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._names = 0


SNAPSHOTS = Snapshots()


def _sorted_names(dir_fd: int, *, fresh: bool) -> list[str]:
    st = os.fstat(dir_fd)  # before reading: a change while the names are read shows as a new version
    if not fresh:
        names = SNAPSHOTS.get(st)
        if names is not None:
            return names
    read_at_ns = time.time_ns()
    with os.scandir(dir_fd) as it:
        names = sorted([e.name for e in it])
    SNAPSHOTS.put(st, read_at_ns, names)
    return names


def _open_dir(jail: Jail, path: str, rel: str) -> int:
    # O_PATH first: opening a FIFO or a device for reading could block or have side effects.
    with jail.opened(path, os.O_PATH, follow_last=True) as path_fd:
        if not stat.S_ISDIR(os.fstat(path_fd).st_mode):
            raise RpcError("validation_error", "not a directory", {"path": rel})
        return os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=path_fd)


def stat_entry(jail: Jail, path: str) -> dict[str, Any]:
    """The `Entry` of a path itself: a symlink is reported as a symlink, with its target."""
    parts = split_path(path)
    st = jail.lstat(path)
    target = jail.readlink(path) if stat.S_ISLNK(st.st_mode) else None
    return entry(parts[-1] if parts else "", "/".join(parts), st, target)


def open_regular(jail: Jail, path: str) -> tuple[int, os.stat_result]:
    """A readable descriptor of a regular file (an in-root link at the end is followed)."""
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
        jail.refuse_foreign_link(st, rel)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_text(jail: Jail, path: str, *, limit: int = READ_LIMIT) -> dict[str, Any]:
    """A text file's content (an in-root link at the end is followed)."""
    rel = normalize(path)
    fd, st = open_regular(jail, path)
    try:
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


def read_window(jail: Jail, path: str, offset: int, length: int) -> dict[str, Any]:
    """`length` bytes of any regular file from `offset`: text or binary, of any size (the viewer
    pages with it). A window past the end is empty; `eof` says nothing follows it."""
    rel = normalize(path)
    fd, opened = open_regular(jail, path)
    try:
        # Past the end there is nothing to read (and pread refuses offsets near 2**63).
        data = os.pread(fd, length, offset) if length and offset < opened.st_size else b""
        st = os.fstat(fd)  # after the read: a log may have grown meanwhile
    finally:
        os.close(fd)
    size = max(st.st_size, offset + len(data)) if data else st.st_size  # truncated meanwhile: what was read
    return {
        "path": wire_name(rel),
        "offset": offset,
        "length": len(data),
        "size": size,
        "mtime": rfc3339(st.st_mtime),
        "data_base64": base64.b64encode(data).decode("ascii"),
        "eof": offset + len(data) >= size,
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
