"""Descriptor-level building blocks of the write operations: act on ``(directory fd, name)``.

The jail resolves a request's path once; everything below a resolved directory is reached
from its descriptor, one component at a time, never following a symbolic link
(``O_NOFOLLOW``, ``AT_SYMLINK_NOFOLLOW``, ``*at`` calls). A recursive walk therefore stays in
the tree it started in even when a folder is swapped for a link to elsewhere while it runs:
the swap makes an open fail (ELOOP, ENOTDIR) or shows a link, which is skipped or copied as a
link, never entered.

Long operations take a `CancelToken` and check it between files and between chunks of a file;
`OperationCancelled` then unwinds through the callers' cleanup.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast

from agent.files import inflight
from agent.files.entries import join
from agent.files.inflight import temp_name as temp_name  # the one spelling of a temporary name
from contract.link.protocol import RpcError

O_DIR_READ = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
O_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
O_READ_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
MAX_DEPTH = 256
COPY_CHUNK = 8 * 1024 * 1024
RENAME_NOREPLACE = 1
SWAPPED = (errno.ELOOP, errno.ENOTDIR, errno.ENOENT)  # what a folder swapped for a link (or removed) gives

Identity = tuple[int, int]


# --- cancellation and progress ---------------------------------------------------------------


class OperationCancelled(Exception):
    """The call was cancelled; raised between files by `CancelToken.check`."""


class CancelToken:
    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def check(self) -> None:
        if self._event.is_set():
            raise OperationCancelled()


def never() -> CancelToken:
    """A token nobody cancels: for cleanup that must run to its end."""
    return CancelToken()


class Progress:
    """Counters a worker thread updates and the streaming side reads (``snapshot``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.version = 0
        self._state: dict[str, Any] = {
            "done_files": 0,
            "total_files": 0,
            "done_bytes": 0,
            "total_bytes": 0,
            "current": None,
        }

    def update(self, **changes: Any) -> None:
        with self._lock:
            self._state.update(changes)
            self.version += 1

    def add(self, *, files: int = 0, nbytes: int = 0, current: str | None = None) -> None:
        with self._lock:
            self._state["done_files"] += files
            self._state["done_bytes"] += nbytes
            if current is not None:
                self._state["current"] = current
            self.version += 1

    def snapshot(self) -> tuple[int, dict[str, Any]]:
        with self._lock:
            return self.version, dict(self._state)


# --- single entries --------------------------------------------------------------------------


def identity(st: os.stat_result) -> Identity:
    return st.st_dev, st.st_ino


def lstat_at(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def open_dir_at(dir_fd: int, name: str) -> int:
    """A readable descriptor of the folder `name` itself (OSError ELOOP/ENOTDIR if it is not one)."""
    return os.open(name, O_DIR_READ, dir_fd=dir_fd)


def open_dir_if_still(dir_fd: int, name: str) -> int | None:
    """`open_dir_at`, or None when `name` is no longer a folder (swapped for a link, or removed)
    since the caller's lstat: a tree walk skips it instead of failing."""
    try:
        return open_dir_at(dir_fd, name)
    except OSError as exc:
        if exc.errno in SWAPPED:
            return None
        raise


def reopen_dir(dir_fd: int) -> int:
    """A readable descriptor of the folder an O_PATH descriptor holds."""
    return os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)


def listdir(dir_fd: int) -> list[str]:
    fd = reopen_dir(dir_fd)
    try:
        with os.scandir(fd) as it:
            return sorted(e.name for e in it)
    finally:
        os.close(fd)


def fsync_dir(dir_fd: int) -> None:
    fd = reopen_dir(dir_fd)
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.EROFS):
            raise
    finally:
        os.close(fd)


def chown_fd(fd: int, owner: tuple[int, int] | None) -> None:
    if owner is not None:
        os.fchown(fd, *owner)


def _load_fchownat() -> Callable[..., int] | None:
    try:
        function = ctypes.CDLL(None, use_errno=True).fchownat
    except (OSError, AttributeError):
        return None
    function.restype = ctypes.c_int
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint, ctypes.c_uint, ctypes.c_int]
    return cast("Callable[..., int]", function)


_fchownat = _load_fchownat()
_AT_EMPTY_PATH = 0x1000


def chown_path_fd(fd: int, owner: tuple[int, int]) -> None:
    """chown the inode an O_PATH descriptor holds, a symbolic link itself included
    (``fchownat(fd, "", AT_EMPTY_PATH)``): what was checked through that descriptor is what
    changes owner, whatever its name is made to point at meanwhile."""
    if _fchownat is None:
        raise RpcError("validation_error", "this agent's C library has no fchownat")
    if _fchownat(fd, b"", owner[0], owner[1], _AT_EMPTY_PATH) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def keep_owner(fd: int, st: os.stat_result) -> None:
    """Give a replacement the owner of what it replaces (only root may give a file away)."""
    try:
        os.fchown(fd, st.st_uid, st.st_gid)
    except PermissionError:
        if os.geteuid() == 0:
            raise


def chmod_fd(fd: int, mode: int) -> None:
    """chmod the inode an O_PATH descriptor holds (fchmod refuses O_PATH): through /proc, which
    resolves to that very inode, so a rename or swap of its name cannot redirect it."""
    try:
        os.chmod(f"/proc/self/fd/{fd}", mode)
    except FileNotFoundError:
        if not os.path.isdir("/proc/self/fd"):
            raise RpcError("validation_error", "chmod needs /proc on this agent") from None
        raise


def journaled_temp(dir_fd: int, name: str, kind: str = "tmp", *, restore: str | None = None) -> str:
    """A temporary name beside `name` (`temp_name`), journalled before anything is made with it
    (`agent.files.inflight`): a process killed before it is placed or removed leaves a name the
    next start removes. Whoever makes it calls `release` once it is renamed into place or removed."""
    temp = temp_name(name, kind)
    inflight.record(dir_fd, temp, restore)
    return temp


def release(temp: str) -> None:
    """The temporary name was renamed into place or removed: its journal entry goes."""
    inflight.forget(temp)


def create_temp(dir_fd: int, name: str, mode: int = 0o600) -> tuple[int, str]:
    """(descriptor, name) of a new file beside `name`, created exclusively (never through a link),
    journalled (the caller `release`s it)."""
    for _ in range(16):
        temp = journaled_temp(dir_fd, name)
        try:
            return os.open(temp, O_NEW_FILE, mode, dir_fd=dir_fd), temp
        except FileExistsError:
            release(temp)
            continue
        except BaseException:
            release(temp)
            raise
    raise RpcError("conflict", "could not pick a temporary name")


def mkdir_temp(dir_fd: int, name: str) -> str:
    """A new folder beside `name` (0700), journalled (the caller `release`s it)."""
    for _ in range(16):
        temp = journaled_temp(dir_fd, name)
        try:
            os.mkdir(temp, 0o700, dir_fd=dir_fd)
            return temp
        except FileExistsError:
            release(temp)
            continue
        except BaseException:
            release(temp)
            raise
    raise RpcError("conflict", "could not pick a temporary name")


def unlink_quietly(dir_fd: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except OSError:
        pass


# --- renames ---------------------------------------------------------------------------------


def _load_renameat2() -> Callable[..., int] | None:
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    function.restype = ctypes.c_int
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return cast("Callable[..., int]", function)


_renameat2 = _load_renameat2()


def rename_noreplace(src_dir: int, src: str, dst_dir: int, dst: str) -> None:
    """Rename that refuses to replace: FileExistsError when `dst` is taken (atomically, with
    ``renameat2(RENAME_NOREPLACE)``; a file system without it gets link + unlink for files)."""
    if _renameat2 is not None:
        if _renameat2(src_dir, os.fsencode(src), dst_dir, os.fsencode(dst), RENAME_NOREPLACE) == 0:
            return
        err = ctypes.get_errno()
        if err not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            raise OSError(err, os.strerror(err), dst)
    st = os.stat(src, dir_fd=src_dir, follow_symlinks=False)
    if not stat.S_ISDIR(st.st_mode):
        os.link(src, dst, src_dir_fd=src_dir, dst_dir_fd=dst_dir, follow_symlinks=False)
        os.unlink(src, dir_fd=src_dir)
        return
    if lstat_at(dst_dir, dst) is not None:  # a folder on such a file system: best effort
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), dst)
    os.rename(src, dst, src_dir_fd=src_dir, dst_dir_fd=dst_dir)


def put(src_dir: int, src: str, dst_dir: int, dst: str, *, overwrite: bool) -> None:
    """Move the entry `src` to `dst`; with `overwrite`, whatever is at `dst` is replaced (a file
    atomically; a folder is renamed aside, replaced, then removed; put back if the move fails).

    Something else may change `dst` at any step (created, removed, a file become a folder): each
    step is tried again on what is there now, and a destination that keeps changing is
    ``conflict``, never an unexplained failure."""
    for _ in range(8):
        try:
            rename_noreplace(src_dir, src, dst_dir, dst)
            return
        except FileExistsError:
            if not overwrite:
                raise RpcError("conflict", "the name is already taken", {"name": dst}) from None
        try:
            if _replace(src_dir, src, dst_dir, dst):
                return
        except OSError as exc:
            if exc.errno not in _DESTINATION_CHANGED:
                raise
    raise RpcError("conflict", "the destination kept changing while it was replaced", {"name": dst})


# What a rename gives when its destination changed since it was looked at.
_DESTINATION_CHANGED = (errno.EEXIST, errno.ENOENT, errno.EISDIR, errno.ENOTDIR, errno.ENOTEMPTY)


def _replace(src_dir: int, src: str, dst_dir: int, dst: str) -> bool:
    """Replace the entry at `dst` with `src`; False when `dst` is gone (the caller tries again)."""
    existing = lstat_at(dst_dir, dst)
    if existing is None:
        return False
    incoming = os.stat(src, dir_fd=src_dir, follow_symlinks=False)
    if not stat.S_ISDIR(existing.st_mode) and not stat.S_ISDIR(incoming.st_mode):
        os.rename(src, dst, src_dir_fd=src_dir, dst_dir_fd=dst_dir)
        return True
    aside = journaled_temp(dst_dir, dst, "old", restore=dst)  # killed before dst is taken again: put back
    try:
        os.rename(dst, aside, src_dir_fd=dst_dir, dst_dir_fd=dst_dir)
        try:
            rename_noreplace(src_dir, src, dst_dir, dst)
        except BaseException:
            _put_back(dst_dir, aside, dst)
            raise
        remove_entry(dst_dir, aside, never())
    finally:
        release(aside)
    return True


def _put_back(dir_fd: int, aside: str, name: str) -> None:
    """The entry set aside returns to its name; if something took the name meanwhile, it stays
    aside (and is reported) rather than be lost or replace the newcomer."""
    try:
        rename_noreplace(dir_fd, aside, dir_fd, name)
    except FileExistsError:
        raise RpcError(
            "conflict", "the destination changed while it was replaced; the old item was kept aside", {"kept_as": aside}
        ) from None


# --- trees -----------------------------------------------------------------------------------


def remove_entry(dir_fd: int, name: str, token: CancelToken, depth: int = 0) -> None:
    """Remove `name` and, for a folder, everything in it; a link is removed, never followed.

    A folder is emptied through its own descriptor (opened O_NOFOLLOW); if it is swapped for a
    link meanwhile, the open fails or the rmdir does, and the entry is looked at again.
    """
    if depth > MAX_DEPTH:
        raise RpcError("validation_error", "the folder is nested too deeply")
    for _ in range(16):
        token.check()
        st = lstat_at(dir_fd, name)
        if st is None:
            return
        if not stat.S_ISDIR(st.st_mode):
            try:
                os.unlink(name, dir_fd=dir_fd)
                return
            except FileNotFoundError:
                return
            except IsADirectoryError:
                continue  # became a folder
        sub = open_dir_if_still(dir_fd, name)
        if sub is None:
            continue
        try:
            for child in listdir(sub):
                remove_entry(sub, child, token, depth + 1)
        finally:
            os.close(sub)
        try:
            os.rmdir(name, dir_fd=dir_fd)
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno not in (errno.ENOTDIR, errno.ENOTEMPTY, errno.EEXIST):
                raise
    raise RpcError("conflict", "the folder kept changing while it was removed", {"name": name})


@dataclass
class Item:
    """One entry met by `walk`.

    ``dir_fd`` is the readable descriptor of its folder; a folder is met twice (``post`` False,
    then True after its contents) with ``fd``, its own readable descriptor, open both times.
    ``st`` is the lstat of the entry (for a folder: the fstat of the folder actually opened).
    """

    dir_fd: int
    name: str
    path: str
    st: os.stat_result
    fd: int | None = None
    post: bool = False
    depth: int = 0


# Told of an entry `walk` could not read (its path, its lstat when known, the error) when the
# caller would rather count such entries than stop at the first.
OnUnreadable = Callable[[str, os.stat_result | None, OSError], None]


def walk(
    dir_fd: int,
    base: str,
    token: CancelToken,
    *,
    exclude: frozenset[Identity] = frozenset(),
    depth: int = 0,
    on_unreadable: OnUnreadable | None = None,
) -> Iterator[Item]:
    """Every entry beneath the readable folder `dir_fd`, sorted by name, links not followed.

    Paths are `base`-relative joins. Entries whose identity is in `exclude` are left out (with
    their contents). A folder that cannot be entered any more (swapped, removed) is left out.
    A folder that cannot be read (permission denied...) raises, or with `on_unreadable` is
    reported to it and left out.
    """
    if depth >= MAX_DEPTH:
        raise RpcError("validation_error", "the folder is nested too deeply")
    try:
        names = listdir(dir_fd)
    except OSError as exc:
        if on_unreadable is None:
            raise
        on_unreadable(base, None, exc)
        return
    for name in names:
        token.check()
        st = lstat_at(dir_fd, name)
        if st is None or identity(st) in exclude:
            continue
        path = join(base, name)
        if not stat.S_ISDIR(st.st_mode):
            yield Item(dir_fd, name, path, st, depth=depth)
            continue
        try:
            sub = open_dir_if_still(dir_fd, name)
        except OSError as exc:
            if on_unreadable is None:
                raise
            on_unreadable(path, st, exc)
            continue
        if sub is None:
            continue
        try:
            sub_st = os.fstat(sub)
            if identity(sub_st) in exclude:
                continue
            yield Item(dir_fd, name, path, sub_st, sub, depth=depth)
            yield from walk(sub, path, token, exclude=exclude, depth=depth + 1, on_unreadable=on_unreadable)
            yield Item(dir_fd, name, path, sub_st, sub, post=True, depth=depth)
        finally:
            os.close(sub)


def tree_size(dir_fd: int, name: str, st: os.stat_result, token: CancelToken) -> tuple[int, int, int]:
    """(bytes of regular files, files, folders) of an entry (a folder's own entry not counted)."""
    if not stat.S_ISDIR(st.st_mode):
        return (st.st_size, 1, 0) if stat.S_ISREG(st.st_mode) else (0, 0, 0)
    fd = open_dir_if_still(dir_fd, name)
    if fd is None:
        return 0, 0, 0
    try:
        return dir_totals(fd, token)
    finally:
        os.close(fd)


def dir_totals(fd: int, token: CancelToken, exclude: frozenset[Identity] = frozenset()) -> tuple[int, int, int]:
    nbytes = files = dirs = 0
    seen: set[Identity] = set()
    for item in walk(fd, "", token, exclude=exclude):
        if item.post:
            continue
        if stat.S_ISDIR(item.st.st_mode):
            dirs += 1
        elif stat.S_ISREG(item.st.st_mode):
            files += 1
            if item.st.st_nlink > 1:  # a hard-linked file's bytes are counted once
                if identity(item.st) in seen:
                    continue
                seen.add(identity(item.st))
            nbytes += item.st.st_size
    return nbytes, files, dirs


def ancestors(dir_fd: int, stop: Identity | None) -> Iterator[Identity]:
    """Identities of the folder `dir_fd` and of each folder above it, up to `stop` (included) or
    the file system's root: to tell whether a target lies inside a source (``..`` is read through
    descriptors, only to compare identities)."""
    fd = os.dup(dir_fd)
    try:
        for _ in range(4096):
            st = os.fstat(fd)
            here = identity(st)
            yield here
            if here == stop:
                return
            parent = os.open("..", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = parent
            if identity(os.fstat(fd)) == here:  # "/" is its own parent
                return
    finally:
        os.close(fd)


def is_within(dir_fd: int, target: Identity, stop: Identity | None) -> bool:
    """Whether the folder `dir_fd` is `target` or lies beneath it."""
    return any(here == target for here in ancestors(dir_fd, stop))


def copy_data(
    src: int,
    dst: int,
    token: CancelToken,
    on_bytes: Callable[[int], None] | None = None,
    limit: int | None = None,
) -> int:
    """Copy from the current offsets to the end of `src` (or `limit` bytes); returns the count."""
    total = 0
    use_range = True
    while limit is None or total < limit:
        token.check()
        want = COPY_CHUNK if limit is None else min(COPY_CHUNK, limit - total)
        n = -1
        if use_range:
            try:
                n = os.copy_file_range(src, dst, want)
            except OSError as exc:
                if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EBADF):
                    raise
                use_range = False
        if not use_range:
            data = os.read(src, min(want, 1024 * 1024))
            n = len(data)
            view = memoryview(data)
            while view:
                view = view[os.write(dst, view) :]
        if n == 0:
            break
        total += n
        if on_bytes is not None:
            on_bytes(n)
    return total
