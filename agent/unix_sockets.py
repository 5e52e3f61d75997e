"""Unix socket paths the kernel takes: at most 107 bytes, whatever folder they are made in.

A unix socket is bound and reached by a path that must fit ``sun_path`` (108 bytes on Linux, with
its NUL): a longer one fails at ``bind`` or ``connect`` (PHP-FPM refuses the pool, nginx the whole
configuration that names it). A site's pool socket is named after the site's folder (up to 63
characters), and the embedded stack's and the tests' services live under data folders of any
length, so a path is never assumed to fit:

- `socket_name` names a socket after its owner when the whole path fits, else after a digest of it;
- `runtime_dir` is a short private folder for the sockets of services whose own folder is long
  (``/run/fleetdeck/<digest>`` as root, as Debian keeps ``/run/php``; else under the user's
  ``$XDG_RUNTIME_DIR``, or ``/tmp/fleetdeck-<uid>``), the same one for the same folder each time,
  so configuration written once (a site's server block) stays right across restarts.

A process that makes or uses such a folder holds a shared lock on it (`flock`) while it lives: a
stack killed on purpose cannot remove its folder, and the lock going with it is what tells
`sweep_stale_runtime_dirs` (run as a stack starts) that nobody owns the folder any more.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import socket
import stat
from pathlib import Path

MAX_SOCKET_PATH = 107  # bytes: sun_path is 108, with its NUL
DIGEST_CHARS = 12
ROOT_RUNTIME = Path("/run/fleetdeck")
SHARED_TMP = Path("/tmp")
# The runtime folders this process holds (`runtime_dir`): an open descriptor each, with its lock.
_held: dict[Path, int] = {}


class SocketPathError(ValueError):
    """A folder so long that not even a digest-named socket in it fits the kernel's limit."""


def fits(path: str | Path, limit: int = MAX_SOCKET_PATH) -> bool:
    """Whether `path` can be bound as a unix socket (by a program that takes `limit` bytes at most)."""
    return len(os.fsencode(str(path))) <= limit


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:DIGEST_CHARS]


def socket_name(folder: str, prefix: str, name: str, suffix: str = ".sock") -> str:
    """``<folder>/<prefix><name><suffix>`` when it fits, else ``<folder>/<prefix><digest of name><suffix>``.

    Raises:
        SocketPathError: `folder` is too long for even the digest's name (the message says by how much).
    """
    path = os.path.join(folder, f"{prefix}{name}{suffix}")
    if fits(path):
        return path
    short = os.path.join(folder, f"{prefix}{digest(name)}{suffix}")
    if not fits(short):
        excess = len(os.fsencode(short)) - MAX_SOCKET_PATH
        raise SocketPathError(
            f"the sockets folder {folder} is too long for a unix socket path ({MAX_SOCKET_PATH} bytes at most):"
            f" shorten it by {excess} bytes"
        )
    return short


def runtime_dir(owner_folder: Path) -> Path:
    """A short private folder (made 0755 as root, where the services' other accounts connect; 0700
    otherwise) for the unix sockets of the services that keep their files in `owner_folder`: the
    same folder for the same `owner_folder` each time. This process holds it (a shared lock) until
    `remove_runtime_dir` or its end, so no sweep takes it meanwhile.

    Raises:
        OSError: the folder cannot be made, or a shared parent is not this account's own.
    """
    folder = runtime_path(owner_folder)
    mode = 0o755 if os.geteuid() == 0 else 0o700
    while True:
        folder.parent.mkdir(mode=mode, parents=True, exist_ok=True)
        _check_own_folder(folder.parent)
        try:
            folder.mkdir(mode=mode, exist_ok=True)
        except FileNotFoundError:
            continue  # another owner's `remove_runtime_dir` took the emptied parent meanwhile
        _check_own_folder(folder)
        if _hold(folder):
            return folder


def _hold(folder: Path) -> bool:
    """Keep a shared lock on `folder` while this process lives; False when a sweep removed it
    before the lock was taken (the caller makes it again)."""
    held = _held.get(folder)
    if held is not None and _same_folder(held, folder):
        return True
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return False
    fcntl.flock(fd, fcntl.LOCK_SH)  # waits out a sweep that holds it, then sees whether it survived
    if not _same_folder(fd, folder):
        os.close(fd)
        return False
    if held is not None:
        os.close(held)
    _held[folder] = fd
    return True


def _same_folder(fd: int, folder: Path) -> bool:
    try:
        return os.path.samestat(os.fstat(fd), folder.lstat())
    except FileNotFoundError:
        return False


def sweep_stale_runtime_dirs() -> list[Path]:
    """Remove the runtime folders nobody owns: no process holds their lock (their owner was
    killed) and no socket left in them answers (no service outlived it). A folder with anything
    but sockets in it stays. Returns those removed.

    Raises:
        OSError: the runtime parent could not be read.
    """
    parent = ROOT_RUNTIME if os.geteuid() == 0 else _user_runtime_parent()
    try:
        _check_own_folder(parent)
        names = os.listdir(parent)
    except FileNotFoundError:
        return []
    removed = []
    for name in names:
        folder = parent / name
        try:
            fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            continue  # gone meanwhile, or not a folder: not one of ours to judge
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue  # its owner lives
        try:
            if _only_dead_sockets(fd, folder):
                for left in os.listdir(fd):
                    os.unlink(left, dir_fd=fd)
                folder.rmdir()
                removed.append(folder)
        except OSError:
            pass  # changed under the sweep (another sweep took it): left as it is
        finally:
            os.close(fd)
    return removed


def _only_dead_sockets(fd: int, folder: Path) -> bool:
    """Whether the folder (open as `fd`) holds nothing but sockets no one listens on."""
    for name in os.listdir(fd):
        if not stat.S_ISSOCK(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
            return False
        with socket.socket(socket.AF_UNIX) as probe:
            probe.settimeout(1.0)  # a listener with a full backlog still answers: not dead
            try:
                probe.connect(str(folder / name))
            except OSError as exc:
                if exc.errno == errno.ECONNREFUSED:
                    continue
                return False
            return False  # a service still answers on it
    return True


def runtime_path(owner_folder: Path) -> Path:
    """Where `runtime_dir` keeps the sockets of `owner_folder`'s services, made or not."""
    parent = ROOT_RUNTIME if os.geteuid() == 0 else _user_runtime_parent()
    return parent / digest(str(owner_folder.resolve()))


def remove_runtime_dir(folder: Path) -> None:
    """Remove `folder` (a `runtime_dir`) once its services have gone, with its parent when empty;
    a folder still holding a socket (a service that outlived its stack) stays."""
    held = _held.pop(folder, None)
    if held is not None:
        os.close(held)
    for empty in (folder, folder.parent):
        try:
            empty.rmdir()
        except OSError:
            return


def _user_runtime_parent() -> Path:
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isabs(xdg) and os.path.isdir(xdg):
        return Path(xdg) / "fleetdeck"
    return SHARED_TMP / f"fleetdeck-{os.geteuid()}"


def _check_own_folder(folder: Path) -> None:
    """A folder in a shared place (``/tmp``) may have been made by someone else, or be a link:
    refuse anything but a real folder of this account that only it may change."""
    st = folder.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise PermissionError(f"{folder} is not a folder of this account's own (mode 0755 or tighter)")
