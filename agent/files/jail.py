"""The jail: every file operation of the workspace resolves its path here, beneath a scope root.

Paths are relative to the scope root. ``""`` and ``"/"`` are the root itself; any other leading
``/``, a NUL byte or any ``..`` component is refused lexically, before the file system is
touched, so ``../etc/passwd`` and ``../nonexistent`` get the same answer and reveal nothing.
``.`` and empty components (double or trailing slashes) are skipped.

Resolution never compares strings. With ``openat2(2)`` (Linux 5.6+) the kernel resolves the path
beneath the root's descriptor with ``RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS``: an absolute
symlink, or ``..`` above the root, fails with EXDEV. Where openat2 is missing or filtered
(ENOSYS, or EPERM from seccomp) the same answers come from a walk: one component at a time with
``O_PATH | O_NOFOLLOW`` relative to the previous directory's descriptor; a symlink is read and
its target resolved here, within the root (an absolute target is outside; ``..`` pops a stack of
directory descriptors, and popping the root is outside; more than 40 links is ELOOP). An ELOOP
from openat2 (a symlink loop, a magic link, or a final symlink opened without following) is
settled by the walk, so both ways give the same answer.

Errors are `RpcError`s: ``path_outside_scope`` (never saying what lies outside), ``not_found``,
``validation_error`` (a symlink loop, a symlink where none may be followed, an over-long path)
and ``forbidden``; other OSErrors (EEXIST, EISDIR, ENXIO, ...) are left to the caller.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import stat
import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import cast

from contract.link.protocol import KERNEL_PROTECTIONS, RpcError

RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_BENEATH = 0x08
MAX_SYMLINKS = 40  # the kernel's MAXSYMLINKS
MAX_PATH_BYTES = 4095
MAX_NAME_BYTES = 255  # NAME_MAX: one component
_SYS_OPENAT2 = {"x86_64": 437, "aarch64": 437}.get(platform.machine())

_O_PATH_DIR = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def is_foreign_to(st: os.stat_result, uid: int) -> bool:
    """The hard-link rule: a regular file with more than one link is the scope's to read or change
    only when it belongs to `uid`, the scope's user, and that user is not root. A hard link is a
    second name of an inode that may lie anywhere on the same file system; its owner is the one
    thing that tells whose it is. Root never vouches: a root-owned site folder does not make every
    root-owned file linked into it (``/etc/shadow`` where ``fs.protected_hardlinks`` is off) the
    scope's."""
    return stat.S_ISREG(st.st_mode) and st.st_nlink > 1 and (st.st_uid != uid or uid == 0)


def kernel_protections(folder: str = "/proc/sys/fs") -> dict[str, bool | None]:
    """Whether the kernel's ``fs.protected_hardlinks`` and ``fs.protected_symlinks`` are on (None:
    not readable here). With hard links protected, a user cannot link a file they do not own
    into their tree; the jail's hard-link rule (`is_foreign_to`) holds either way."""
    found: dict[str, bool | None] = {}
    for name in KERNEL_PROTECTIONS:
        try:
            with open(os.path.join(folder, name), encoding="ascii") as f:
                found[name] = int(f.read().strip()) > 0
        except (OSError, ValueError):
            found[name] = None
    return found


def outside_scope() -> RpcError:
    return RpcError("path_outside_scope", "path is outside the scope")


def split_path(path: str) -> tuple[str, ...]:
    """The components of a scope-relative path, checked lexically (see the module docstring)."""
    if not isinstance(path, str):
        raise RpcError("validation_error", "path must be a string")
    if "\x00" in path:
        raise outside_scope()
    if path in ("", "/"):
        return ()
    if path.startswith("/"):
        raise outside_scope()
    parts = tuple(part for part in path.split("/") if part not in ("", "."))
    if ".." in parts:
        raise outside_scope()
    if len(os.fsencode(path)) > MAX_PATH_BYTES:
        raise RpcError("validation_error", "path is too long")
    if any(len(os.fsencode(part)) > MAX_NAME_BYTES for part in parts):
        raise RpcError("validation_error", f"a name is longer than {MAX_NAME_BYTES} bytes", {"path": path})
    return parts


def normalize(path: str) -> str:
    """The canonical spelling of a scope-relative path: no leading, double or trailing slash."""
    return "/".join(split_path(path))


# --- openat2 ---------------------------------------------------------------------------------

_detect_lock = threading.Lock()
_openat2_works: bool | None = None


def _openat2(dir_fd: int, path: bytes, flags: int, mode: int, resolve: int) -> int:
    assert _SYS_OPENAT2 is not None and _syscall is not None
    how = _OpenHow(flags, mode, resolve)
    fd = _syscall(
        ctypes.c_long(_SYS_OPENAT2),
        ctypes.c_int(dir_fd),
        ctypes.c_char_p(path),
        ctypes.byref(how),
        ctypes.c_size_t(ctypes.sizeof(how)),
    )
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return int(fd)


def _load_syscall() -> Callable[..., int] | None:
    try:
        function = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    function.restype = ctypes.c_long
    return cast("Callable[..., int]", function)


_syscall = _load_syscall()


def openat2_supported() -> bool:
    """Whether this kernel (and seccomp policy) lets us use openat2; probed once per process."""
    global _openat2_works
    with _detect_lock:
        if _openat2_works is None:
            _openat2_works = _probe_openat2()
        return _openat2_works


def _probe_openat2() -> bool:
    if _SYS_OPENAT2 is None or _syscall is None:
        return False
    try:
        fd = _openat2(-100, b"/", _O_PATH_DIR, 0, RESOLVE_NO_MAGICLINKS)  # -100 = AT_FDCWD
    except OSError:
        return False  # ENOSYS (old kernel), EPERM (seccomp), E2BIG/EINVAL (unknown struct or flag)
    os.close(fd)
    return True


# --- the jail --------------------------------------------------------------------------------


class Jail:
    """A scope root held open (O_PATH); paths resolve beneath it or not at all.

    ``use_openat2=False`` forces the walk (tests); ``None`` uses openat2 when the kernel has it.
    """

    def __init__(self, root: str, *, use_openat2: bool | None = None) -> None:
        fd = os.open(root, _O_PATH_DIR)  # the root itself is configuration, trusted
        self._setup(fd, root, use_openat2)

    @classmethod
    def at(cls, dir_fd: int, name: str, root: str, *, use_openat2: bool | None = None) -> Jail:
        """A jail rooted at the directory `name` inside `dir_fd`, opened without following a link.

        For a folder the workspace itself just created (an extraction's temporary folder), so no
        path is resolved twice.
        """
        fd = os.open(name, _O_PATH_DIR | os.O_NOFOLLOW, dir_fd=dir_fd)
        jail = cls.__new__(cls)
        jail._setup(fd, root, use_openat2)
        return jail

    def _setup(self, fd: int, root: str, use_openat2: bool | None) -> None:
        self._fd = fd
        self.root = root
        # (uid, gid) that whatever the workspace creates beneath this root is given (fchown),
        # or None to leave it to the agent's own. Set by the handlers for a site scope as root.
        self.owner: tuple[int, int] | None = None
        # True for the root scope (the home): there the user a path belongs to is the owner of
        # the site folder it lies in (see `scope_uid`).
        self.sites_beneath = False
        if use_openat2 and not openat2_supported():
            os.close(fd)
            raise OSError(errno.ENOSYS, "openat2 is not available")
        self.uses_openat2 = openat2_supported() if use_openat2 is None else use_openat2

    def fileno(self) -> int:
        return self._fd

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> Jail:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

    def subjail(self, path: str) -> Jail:
        """A jail rooted at a directory beneath this one (a site beneath /home)."""
        fd = self.open(path, _O_PATH_DIR, follow_last=True)
        jail = Jail.__new__(Jail)
        jail._setup(fd, os.path.join(self.root, normalize(path)), self.uses_openat2)
        jail.owner = self.owner
        return jail

    def scope_uid(self, path: str) -> int:
        """The user a path of this scope belongs to: the owner of the scope root (a site's user);
        in the root scope, the owner of the folder directly beneath the home that holds it (each
        site's user), or of the home itself for what lies directly in it."""
        parts = split_path(path)
        if self.sites_beneath and len(parts) > 1:
            st = self.lstat(parts[0])
            if stat.S_ISDIR(st.st_mode):
                return st.st_uid
        return os.fstat(self._fd).st_uid

    def is_foreign_link(self, st: os.stat_result, path: str) -> bool:
        """Whether `st` (of `path`, relative to the scope) is a file `refuse_foreign_link` refuses.
        Walks over a tree (copy, compress, content search) leave such files out."""
        return is_foreign_to(st, self.scope_uid(path))

    def refuse_foreign_link(self, st: os.stat_result, path: str) -> None:
        """Refuse a regular file with more than one link that is not the scope user's: it may be a
        hard link to a file outside the scope (another site's, or /etc/shadow where hard links are
        not protected), and reading it or changing it would reach that file. The scope's user
        could make the same change to a file of their own anyway. Every ``fs.*`` path that reads,
        changes or replaces a file it names calls this (see `is_foreign_to`)."""
        if self.is_foreign_link(st, path):
            raise RpcError(
                "forbidden",
                "a file with several hard links that belongs to another user: it may lie outside the scope",
                {"path": normalize(path)},
            )

    def identity(self) -> tuple[int, int]:
        """(st_dev, st_ino) of the root."""
        st = os.fstat(self._fd)
        return st.st_dev, st.st_ino

    # --- resolution ---------------------------------------------------------------------

    def open(self, path: str, flags: int, *, follow_last: bool, mode: int = 0o644) -> int:
        """A descriptor for `path` opened with `flags` (the caller closes it).

        `follow_last` says whether a symlink as the final component is followed (within the
        root) or opened itself (with O_PATH; any other access to it is refused).
        """
        return self._resolve(split_path(path), flags, follow_last, mode, path)

    @contextmanager
    def opened(self, path: str, flags: int, *, follow_last: bool, mode: int = 0o644) -> Iterator[int]:
        fd = self.open(path, flags, follow_last=follow_last, mode=mode)
        try:
            yield fd
        finally:
            os.close(fd)

    def open_parent(self, path: str) -> tuple[int, str]:
        """(descriptor of the parent directory, final name): for create, rename and delete.

        The final name is not resolved: operations on ``(dir_fd, name)`` act on the entry itself.
        """
        parts = split_path(path)
        if not parts:
            raise RpcError("validation_error", "the scope root itself cannot be the target")
        return self._resolve(parts[:-1], _O_PATH_DIR, True, 0, path), parts[-1]

    def resolve_entry(self, path: str) -> tuple[int, str, str]:
        """(parent directory descriptor, final name, scope-relative path) of what `path` names
        once an in-root symlink at its end is followed: for writing *through* a link (an editor
        saving ``index-link`` replaces the file it points to, not the link).

        The followed path is read back from the kernel (``/proc/self/fd``) and resolved through
        the jail again, and the entry found must be the very inode the link led to: the string is
        only a hint, every access still goes through the jail.
        """
        with self.opened(path, os.O_PATH, follow_last=True) as fd:
            st = os.fstat(fd)
            real = _fd_path(fd)
            root = _fd_path(self._fd)
        prefix = root.rstrip("/") + "/"
        if not real.startswith(prefix):
            if real == root:
                raise RpcError("validation_error", "the scope root itself cannot be the target")
            raise RpcError("conflict", "the path changed while it was resolved", {"path": path})
        rel = real[len(prefix) :]
        dir_fd, name = self.open_parent(rel)
        try:
            found = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            found = None
        if found is None or (found.st_dev, found.st_ino) != (st.st_dev, st.st_ino):
            os.close(dir_fd)
            raise RpcError("conflict", "the path changed while it was resolved", {"path": path})
        return dir_fd, name, normalize(rel)

    def lstat(self, path: str) -> os.stat_result:
        """Status of the entry itself (a symlink is reported as a symlink)."""
        with self.opened(path, os.O_PATH, follow_last=False) as fd:
            return os.fstat(fd)

    def stat(self, path: str) -> os.stat_result:
        """Status after following an in-root symlink at the end."""
        with self.opened(path, os.O_PATH, follow_last=True) as fd:
            return os.fstat(fd)

    def readlink(self, path: str) -> str:
        dir_fd, name = self.open_parent(path)
        try:
            return os.readlink(name, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno == errno.EINVAL:
                raise RpcError("validation_error", "not a symbolic link") from None
            raise _translate(exc, path) from None
        finally:
            os.close(dir_fd)

    def _resolve(self, parts: tuple[str, ...], flags: int, follow_last: bool, mode: int, path: str) -> int:
        flags |= os.O_CLOEXEC
        if not flags & os.O_CREAT:
            mode = 0  # openat2 insists
        try:
            if self.uses_openat2:
                try:
                    return self._open_kernel(parts, flags, follow_last, mode)
                except OSError as exc:
                    if exc.errno != errno.ELOOP:
                        raise
                # A loop, a magic link or a final symlink not followed: the walk tells which.
            return self._walk(parts, flags, follow_last, mode)
        except OSError as exc:
            raise _translate(exc, path) from None

    def _open_kernel(self, parts: tuple[str, ...], flags: int, follow_last: bool, mode: int) -> int:
        if not follow_last:
            flags |= os.O_NOFOLLOW
        relative = os.fsencode("/".join(parts)) if parts else b"."
        for _ in range(8):
            try:
                return _openat2(self._fd, relative, flags, mode, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)
            except OSError as exc:
                if exc.errno == errno.EXDEV:
                    raise outside_scope() from None
                # EAGAIN: a rename raced a ".." inside a symlink target; the kernel asks to retry.
                if exc.errno not in (errno.EAGAIN, errno.EINTR):
                    raise
        return self._walk(parts, flags, follow_last, mode)

    def _walk(self, parts: tuple[str, ...], flags: int, follow_last: bool, mode: int) -> int:
        if flags & os.O_CREAT and flags & os.O_EXCL:
            follow_last = False  # as the kernel does: O_EXCL never creates through a symlink
        stack: list[int] = []  # descriptors of the directories entered below the root
        todo = deque(parts)
        links = 0
        try:
            while todo:
                name = todo.popleft()
                if name == ".":  # only from symlink targets; the current directory stays
                    continue
                if name == "..":  # only from symlink targets
                    if not stack:
                        raise outside_scope()
                    os.close(stack.pop())
                    continue
                where = stack[-1] if stack else self._fd
                last = not todo
                if last and not follow_last:
                    return _open_final(name, flags, mode, where)
                try:
                    fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=where)
                except FileNotFoundError:
                    if last and flags & os.O_CREAT:
                        return _open_final(name, flags, mode, where)
                    raise
                kind = stat.S_IFMT(os.fstat(fd).st_mode)
                if kind == stat.S_IFLNK:
                    os.close(fd)
                    links += 1
                    if links > MAX_SYMLINKS:
                        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP))
                    target = os.readlink(name, dir_fd=where)
                    if target.startswith("/"):
                        raise outside_scope()
                    todo.extendleft(reversed(_split_target(target)))
                    continue
                if last:
                    os.close(fd)
                    return _open_final(name, flags, mode, where)
                if kind != stat.S_IFDIR:
                    os.close(fd)
                    raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
                stack.append(fd)
            # The path ended on a directory held open ("", or a target ending in "." or ".."):
            return os.open(".", flags, mode, dir_fd=stack[-1] if stack else self._fd)
        finally:
            for fd in stack:
                os.close(fd)


def _fd_path(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        raise RpcError("validation_error", "cannot follow the link here (/proc is not mounted)") from None


def _open_final(name: str, flags: int, mode: int, dir_fd: int) -> int:
    """Open the last component itself: O_NOFOLLOW, so a symlink swapped in meanwhile is refused."""
    try:
        return os.open(name, flags | os.O_NOFOLLOW, mode, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise RpcError("validation_error", "the path is a symbolic link") from None
        raise


def _split_target(target: str) -> list[str]:
    parts = [part for part in target.split("/") if part]
    if target.endswith("/") and parts:
        parts.append(".")  # "file/" must be a directory: "." makes the name before it a directory step
    return parts


def _translate(exc: OSError, path: str) -> Exception:
    code = exc.errno
    if code in (errno.ENOENT, errno.ENOTDIR):
        return RpcError("not_found", "no such file or directory", {"path": path})
    if code == errno.EXDEV:
        return outside_scope()
    if code == errno.ELOOP:
        return RpcError("validation_error", "too many levels of symbolic links", {"path": path})
    return refusal(exc, path) or exc


def refusal(exc: OSError, path: str) -> RpcError | None:
    """The contract's error for what the file system refuses whatever the operation (permission
    denied, a read-only file system, a name too long, a full disk or quota), or None for anything else. Every ``fs.*``
    call answers these errors this way, wherever in the operation they were raised."""
    if exc.errno in (errno.EACCES, errno.EPERM):
        return RpcError("forbidden", "permission denied", {"path": path})
    if exc.errno == errno.EROFS:
        return RpcError("forbidden", "the file system is read-only", {"path": path})
    if exc.errno == errno.ENAMETOOLONG:
        return RpcError("validation_error", "file name too long", {"path": path})
    return storage_refusal(exc, path)


def storage_refusal(exc: OSError, path: str) -> RpcError | None:
    """``insufficient_storage`` for a full disk (ENOSPC) or quota (EDQUOT), naming `path`, the
    place being written; None for any other error. The operation's own cleanup has already
    removed what it had written when this reaches the caller."""
    if exc.errno == errno.ENOSPC:
        return RpcError("insufficient_storage", "the disk is full (no space left on the device)", {"path": path})
    if exc.errno == errno.EDQUOT:
        return RpcError("insufficient_storage", "the disk quota is exceeded", {"path": path})
    return None
