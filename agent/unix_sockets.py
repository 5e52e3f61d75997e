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
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

MAX_SOCKET_PATH = 107  # bytes: sun_path is 108, with its NUL
DIGEST_CHARS = 12
ROOT_RUNTIME = Path("/run/fleetdeck")
SHARED_TMP = Path("/tmp")


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
    same folder for the same `owner_folder` each time.

    Raises:
        OSError: the folder cannot be made, or a shared parent is not this account's own.
    """
    folder = runtime_path(owner_folder)
    mode = 0o755 if os.geteuid() == 0 else 0o700
    folder.parent.mkdir(mode=mode, parents=True, exist_ok=True)
    _check_own_folder(folder.parent)
    folder.mkdir(mode=mode, exist_ok=True)
    _check_own_folder(folder)
    return folder


def runtime_path(owner_folder: Path) -> Path:
    """Where `runtime_dir` keeps the sockets of `owner_folder`'s services, made or not."""
    parent = ROOT_RUNTIME if os.geteuid() == 0 else _user_runtime_parent()
    return parent / digest(str(owner_folder.resolve()))


def remove_runtime_dir(folder: Path) -> None:
    """Remove `folder` (a `runtime_dir`) once its services have gone, with its parent when empty;
    a folder still holding a socket (a service that outlived its stack) stays."""
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
