"""Writes of single files and folders: ``fs.write``, ``fs.mkdir`` and the file side of
``fs.upload`` and ``fs.download``. Blocking functions on a `Jail` (run them in a thread).

A file is never written in place: the bytes go to a temporary file created exclusively
(``O_CREAT | O_EXCL | O_NOFOLLOW``) in the destination folder through its descriptor, are
fsynced, and the file is renamed over the destination (``renameat``), then the folder is fsynced.
A reader sees the old content or the new, never half of it, and an interrupted write leaves
no half file behind.
"""

from __future__ import annotations

import hashlib
import os
import stat
import threading
from dataclasses import dataclass
from typing import Any

from agent.files.entries import entry
from agent.files.fdops import (
    O_READ_FILE,
    chown_fd,
    create_temp,
    fsync_dir,
    keep_owner,
    lstat_at,
    open_dir_at,
    release,
    rename_noreplace,
    unlink_quietly,
)
from agent.files.jail import Jail, normalize, split_path
from agent.files.read import READ_LIMIT, content_etag
from contract.link.protocol import RpcError

WRITE_LIMIT = READ_LIMIT
# A conditional save checks the etag, then renames: two saves with the same etag must not both pass
# the check before either renames. The agent serialises them per destination (folder inode and
# name), over a fixed set of locks so that the table never grows.
_SAVE_LOCKS = tuple(threading.Lock() for _ in range(64))
NEW_FILE_MODE = 0o644
NEW_DIR_MODE = 0o755
_O_PATH_DIR = os.O_PATH | os.O_DIRECTORY


@dataclass
class Target:
    """Where a file write lands: the folder's descriptor (O_PATH), the name in it, the scope-relative
    path, and the lstat of what is there now (None when the name is free)."""

    dir_fd: int
    name: str
    rel: str
    existing: os.stat_result | None

    def close(self) -> None:
        if self.dir_fd >= 0:
            os.close(self.dir_fd)
            self.dir_fd = -1


def file_target(jail: Jail, path: str, *, may_exist: bool) -> Target:
    """The `Target` of a file write. A name already taken is ``conflict`` unless `may_exist`;
    a folder or a special file there is ``validation_error``. A symbolic link at the end is
    followed within the scope to the file it names (outside: ``path_outside_scope``; pointing
    at nothing: ``validation_error``, so a dangling link never becomes a way to create a file).
    A file with several hard links that is not the scope user's is ``forbidden``
    (`Jail.refuse_foreign_link`): replacing it would hand its owner and mode to what is written."""
    rel = normalize(path)
    dir_fd, name = jail.open_parent(path)
    target = Target(dir_fd, name, rel, None)
    try:
        st = lstat_at(dir_fd, name)
        if st is not None and not may_exist:
            raise RpcError("conflict", "the name is already taken", {"path": rel})
        if st is not None and stat.S_ISLNK(st.st_mode):
            target.close()
            try:
                target.dir_fd, target.name, target.rel = jail.resolve_entry(path)
            except RpcError as exc:
                if exc.code == "not_found":
                    raise RpcError(
                        "validation_error", "the path is a symbolic link to nothing", {"path": rel}
                    ) from None
                raise
            st = lstat_at(target.dir_fd, target.name)
        if st is not None and stat.S_ISDIR(st.st_mode):
            raise RpcError("validation_error", "the path is a folder", {"path": rel})
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise RpcError("validation_error", "not a regular file", {"path": rel})
        if st is not None:  # replaced with its owner and mode, its etag compared: it must be ours
            jail.refuse_foreign_link(st, target.rel)
        target.existing = st
        return target
    except BaseException:
        target.close()
        raise


def _finish_file(fd: int, target: Target, owner: tuple[int, int] | None) -> os.stat_result:
    """Owner and mode (the replaced file's, or the new-file defaults), then fsync."""
    if target.existing is not None:
        keep_owner(fd, target.existing)  # chown first: it would clear setuid bits set before it
        os.fchmod(fd, stat.S_IMODE(target.existing.st_mode))
    else:
        chown_fd(fd, owner)
        os.fchmod(fd, NEW_FILE_MODE)
    os.fsync(fd)
    return os.fstat(fd)


def _place(temp: str, target: Target, *, replace: bool) -> None:
    if replace:
        os.rename(temp, target.name, src_dir_fd=target.dir_fd, dst_dir_fd=target.dir_fd)
        return
    try:
        rename_noreplace(target.dir_fd, temp, target.dir_fd, target.name)
    except FileExistsError:
        raise RpcError("conflict", "the name is already taken", {"path": target.rel}) from None


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def write_text(
    jail: Jail, path: str, content: str, *, if_match: str | None = None, create_only: bool = False
) -> dict[str, Any]:
    """``fs.write``: replace (or create) a text file atomically; ``{entry, etag}``."""
    try:
        data = content.encode("utf-8")
    except UnicodeEncodeError:
        raise RpcError("validation_error", "the content is not valid Unicode text") from None
    if len(data) > WRITE_LIMIT:
        raise RpcError("too_large", "the content is too large", {"limit": WRITE_LIMIT, "size": len(data)})
    target = file_target(jail, path, may_exist=not create_only)
    try:
        with _save_lock(target):
            return _save(target, data, jail.owner, if_match=if_match, replace=not create_only)
    finally:
        target.close()


def _save_lock(target: Target) -> threading.Lock:
    folder = os.fstat(target.dir_fd)
    return _SAVE_LOCKS[hash((folder.st_dev, folder.st_ino, target.name)) % len(_SAVE_LOCKS)]


def _save(
    target: Target, data: bytes, owner: tuple[int, int] | None, *, if_match: str | None, replace: bool
) -> dict[str, Any]:
    if if_match is not None:
        current = _etag_at(target) if target.existing is not None else None
        if current != if_match:
            raise RpcError("conflict", "the file changed since it was read", {"etag": current})
    fd, temp = create_temp(target.dir_fd, target.name)
    placed = False
    try:
        _write_all(fd, data)
        st = _finish_file(fd, target, owner)
        _place(temp, target, replace=replace)
        placed = True
    finally:
        os.close(fd)
        if not placed:
            unlink_quietly(target.dir_fd, temp)
        release(temp)
    fsync_dir(target.dir_fd)
    return {"entry": entry(target.name, target.rel, st, None), "etag": content_etag(data)}


def _etag_at(target: Target) -> str | None:
    """The etag of the file there now (None when it is too large to have been read)."""
    fd = os.open(target.name, O_READ_FILE, dir_fd=target.dir_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > READ_LIMIT:
            return None
        digest = hashlib.sha256()
        size = 0
        while chunk := os.read(fd, 1024 * 1024):
            digest.update(chunk)
            size += len(chunk)
            if size > READ_LIMIT:
                return None
        return digest.hexdigest()[:32]
    finally:
        os.close(fd)


# --- folders ---------------------------------------------------------------------------------


def make_dir_at(dir_fd: int, name: str, owner: tuple[int, int] | None, mode: int = NEW_DIR_MODE) -> os.stat_result:
    """mkdir `name` in `dir_fd` (FileExistsError when taken, even by a dangling link), owned and
    moded through its own descriptor."""
    os.mkdir(name, 0o700, dir_fd=dir_fd)
    fd = open_dir_at(dir_fd, name)
    try:
        chown_fd(fd, owner)
        os.fchmod(fd, mode)
        return os.fstat(fd)
    finally:
        os.close(fd)


def ensure_dirs(jail: Jail, parts: tuple[str, ...]) -> int:
    """An O_PATH descriptor of the folder `parts`, creating the missing folders on the way.

    Each existing step is resolved by the jail (an in-root link is followed; one leading out is
    ``path_outside_scope``); a missing one is made with mkdirat, which never follows a link, so
    a dangling link on the way is ``not_found`` and nothing is created through it.
    """
    fd = jail.open("", _O_PATH_DIR, follow_last=True)
    for i in range(len(parts)):
        prefix = "/".join(parts[: i + 1])
        os.close(fd)
        try:
            fd = jail.open(prefix, _O_PATH_DIR, follow_last=True)
            continue
        except RpcError as exc:
            if exc.code != "not_found":
                raise
        dir_fd, name = jail.open_parent(prefix)
        try:
            make_dir_at(dir_fd, name, jail.owner)
        except FileExistsError:
            pass  # made meanwhile, or a dangling link: the open below tells
        finally:
            os.close(dir_fd)
        fd = jail.open(prefix, _O_PATH_DIR, follow_last=True)
    return fd


def make_dir(jail: Jail, path: str, *, parents: bool = False) -> dict[str, Any]:
    """``fs.mkdir``: ``{entry}``; ``conflict`` when the name is taken (also with `parents`)."""
    parts = split_path(path)
    if not parts:
        raise RpcError("conflict", "the scope root already exists")
    rel = "/".join(parts)
    if parents:
        dir_fd, name = ensure_dirs(jail, parts[:-1]), parts[-1]
    else:
        dir_fd, name = jail.open_parent(path)
    try:
        try:
            st = make_dir_at(dir_fd, name, jail.owner)
        except FileExistsError:
            raise RpcError("conflict", "the name is already taken", {"path": rel}) from None
        fsync_dir(dir_fd)
        return {"entry": entry(name, rel, st, None)}
    finally:
        os.close(dir_fd)


# --- uploads and downloads -------------------------------------------------------------------


class Upload:
    """The file side of ``fs.upload``: a temporary file beside the destination, renamed into place
    by `commit` once every byte arrived; `abort` removes it. Create it before receiving anything:
    a taken name is ``conflict`` right away."""

    def __init__(self, jail: Jail, path: str, *, overwrite: bool) -> None:
        self.owner = jail.owner
        self.overwrite = overwrite
        self.target = file_target(jail, path, may_exist=overwrite)
        try:
            self.fd, self.temp = create_temp(self.target.dir_fd, self.target.name)
        except BaseException:
            self.target.close()
            raise
        self.received = 0
        self.done = False

    def write(self, data: bytes | memoryview) -> None:
        _write_all(self.fd, data)
        self.received += len(data)

    def commit(self) -> dict[str, Any]:
        try:
            st = _finish_file(self.fd, self.target, self.owner)
            _place(self.temp, self.target, replace=self.overwrite)
            self.done = True
            fsync_dir(self.target.dir_fd)
            return {"entry": entry(self.target.name, self.target.rel, st, None)}
        finally:
            self.close()

    def close(self) -> None:
        """Release everything; the temporary file goes unless it was renamed into place."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if not self.done and self.target.dir_fd >= 0:
            unlink_quietly(self.target.dir_fd, self.temp)
        release(self.temp)
        self.target.close()
