"""``fs.move`` and ``fs.copy``: within a scope, or to another scope of the same server.

The whole batch is checked before anything is done: every source exists, no name is taken
(unless `overwrite`), no folder goes into itself. A copy is built under a temporary name in the
destination folder and renamed into place when complete, so a failed or cancelled copy leaves
nothing half made at the destination.

A copy never follows a link: links are copied as links, FIFOs, sockets and devices are skipped
(and reported in ``skipped``), permission bits and times are kept (setuid and setgid are not).
New entries belong to the destination scope's owner when there is one (a site, as root), else,
as root, to the owner of what they copy.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agent.files.entries import join
from agent.files.fdops import (
    MAX_DEPTH,
    O_NEW_FILE,
    O_READ_FILE,
    SWAPPED,
    CancelToken,
    Identity,
    chown_path_fd,
    copy_data,
    fsync_dir,
    identity,
    is_within,
    journaled_temp,
    listdir,
    lstat_at,
    never,
    open_dir_at,
    open_dir_if_still,
    put,
    release,
    remove_entry,
    walk,
)
from agent.files.jail import Jail, is_foreign_to, normalize
from contract.link.protocol import RpcError

_O_PATH_DIR = os.O_PATH | os.O_DIRECTORY
_KEPT_BITS = 0o1777  # permission bits and sticky; never setuid or setgid on a copy


@dataclass
class Step:
    src_dir: int
    src_name: str
    src_rel: str
    src_st: os.stat_result
    dst_dir: int
    dst_name: str
    dst_rel: str
    existing: os.stat_result | None


@dataclass
class Plan:
    steps: list[Step] = field(default_factory=list)
    fds: list[int] = field(default_factory=list)

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds.clear()


def plan(src: Jail, dst: Jail, paths: list[str], destination: str, *, overwrite: bool) -> Plan:
    """Resolve and check the batch (nothing is changed yet)."""
    result = Plan()
    try:
        _plan(result, src, dst, paths, destination, overwrite)
    except BaseException:
        result.close()
        raise
    return result


def _plan(result: Plan, src: Jail, dst: Jail, paths: list[str], destination: str, overwrite: bool) -> None:
    dest_rel = normalize(destination)
    into: int | None
    try:
        into = dst.open(destination, _O_PATH_DIR, follow_last=True)
        result.fds.append(into)
    except RpcError as exc:
        if exc.code != "not_found":
            raise
        into = None
    if into is None and len(paths) != 1:
        raise RpcError("not_found", "the destination folder does not exist", {"path": dest_rel})
    taken: set[tuple[Identity, str]] = set()
    for path in paths:
        src_dir, src_name = src.open_parent(path)
        result.fds.append(src_dir)
        src_rel = normalize(path)
        src_st = lstat_at(src_dir, src_name)
        if src_st is None:
            raise RpcError("not_found", "no such file or directory", {"path": src_rel})
        if into is not None:
            dst_dir, dst_name, dst_rel = into, src_name, join(dest_rel, src_name)
        else:
            dst_dir, dst_name = dst.open_parent(destination)
            result.fds.append(dst_dir)
            dst_rel = dest_rel
        key = (identity(os.fstat(dst_dir)), dst_name)
        if key in taken:
            raise RpcError("conflict", "two items of the batch have the same name", {"path": dst_rel})
        taken.add(key)
        existing = lstat_at(dst_dir, dst_name)
        if existing is not None and identity(existing) == identity(src_st):
            raise RpcError("validation_error", "the source and the destination are the same", {"path": src_rel})
        if existing is not None and not overwrite:
            raise RpcError("conflict", "the name is already taken", {"path": dst_rel})
        if stat.S_ISDIR(src_st.st_mode) and is_within(dst_dir, identity(src_st), None):
            raise RpcError("validation_error", "a folder cannot go into itself", {"path": src_rel})
        result.steps.append(Step(src_dir, src_name, src_rel, src_st, dst_dir, dst_name, dst_rel, existing))


def _owner_policy(src: Jail, dst: Jail) -> tuple[tuple[int, int] | None, bool]:
    """(owner for new entries, whether to keep each source's owner instead)."""
    if dst.owner is not None:
        return dst.owner, False
    return None, os.geteuid() == 0


def move(
    src: Jail, dst: Jail, paths: list[str], destination: str, *, overwrite: bool, token: CancelToken
) -> dict[str, Any]:
    work = plan(src, dst, paths, destination, overwrite=overwrite)
    moved: list[str] = []
    try:
        owner, _ = _owner_policy(src, dst)
        rechown = owner is not None and owner != src.owner
        if rechown:  # a named foreign hard link would be given away: the whole batch is refused
            for step in work.steps:
                src.refuse_foreign_link(step.src_st, step.src_rel)
        for step in work.steps:
            token.check()
            source_uid = src.scope_uid(step.src_rel)  # before the move: the source may be its site folder
            try:
                put(step.src_dir, step.src_name, step.dst_dir, step.dst_name, overwrite=overwrite)
            except OSError as exc:
                if exc.errno != errno.EXDEV:
                    raise
                _move_across(step, src, dst, overwrite, token)
            else:
                if rechown:
                    chown_tree(step.dst_dir, step.dst_name, owner, token, source_uid=source_uid)
            fsync_dir(step.dst_dir)
            moved.append(step.dst_rel)
    finally:
        work.close()
    return {"moved": moved}


def _move_across(step: Step, src: Jail, dst: Jail, overwrite: bool, token: CancelToken) -> None:
    """Another file system: copy, put in place, then remove the source."""
    copier = Copier(token, *_owner_policy(src, dst), source=src)
    temp = journaled_temp(step.dst_dir, step.dst_name)
    try:
        copier.copy(step.src_dir, step.src_name, step.dst_dir, temp, step.src_rel, top=True)
        put(step.dst_dir, temp, step.dst_dir, step.dst_name, overwrite=overwrite)
    except BaseException:
        remove_entry(step.dst_dir, temp, never())
        raise
    finally:
        release(temp)
    remove_entry(step.src_dir, step.src_name, never())


def copy(
    src: Jail, dst: Jail, paths: list[str], destination: str, *, overwrite: bool, token: CancelToken
) -> dict[str, Any]:
    work = plan(src, dst, paths, destination, overwrite=overwrite)
    copier = Copier(token, *_owner_policy(src, dst), source=src)
    copied: list[str] = []
    try:
        for step in work.steps:  # a named foreign hard link refuses the whole batch, before any copy
            src.refuse_foreign_link(step.src_st, step.src_rel)
        for step in work.steps:
            temp = journaled_temp(step.dst_dir, step.dst_name)
            try:
                copier.copy(step.src_dir, step.src_name, step.dst_dir, temp, step.src_rel, top=True)
                if lstat_at(step.dst_dir, temp) is None:
                    continue  # a FIFO, socket or device: skipped (and reported)
                put(step.dst_dir, temp, step.dst_dir, step.dst_name, overwrite=overwrite)
            except BaseException:
                remove_entry(step.dst_dir, temp, never())
                raise
            finally:
                release(temp)
            fsync_dir(step.dst_dir)
            copied.append(step.dst_rel)
    finally:
        work.close()
    return {"copied": copied, "skipped": copier.skipped}


class Copier:
    """A recursive copy through descriptors (see the module docstring)."""

    def __init__(
        self,
        token: CancelToken,
        owner: tuple[int, int] | None,
        keep_owner: bool,
        *,
        source: Jail,
        owner_of: Callable[[os.stat_result], tuple[int, int]] | None = None,
    ) -> None:
        self.token = token
        self.owner = owner
        self.keep_owner = keep_owner
        self.source = source  # whose foreign hard links are never copied (see `Jail.refuse_foreign_link`)
        self.owner_of = owner_of  # the owner of each copy from its source's lstat (a clone's mapping), first
        self.skipped: list[str] = []

    def _owner(self, st: os.stat_result) -> tuple[int, int] | None:
        """The (uid, gid) a copy of `st` is given, or None to leave it the agent's."""
        if self.owner_of is not None:
            return self.owner_of(st)
        if self.owner is not None:
            return self.owner
        return (st.st_uid, st.st_gid) if self.keep_owner else None

    def _chown(self, fd: int, st: os.stat_result) -> None:
        owner = self._owner(st)
        if owner is not None:
            os.fchown(fd, *owner)

    def copy(
        self, src_dir: int, src_name: str, dst_dir: int, dst_name: str, rel: str, *, top: bool = False, depth: int = 0
    ) -> None:
        for _ in range(8):  # an entry that changes type while it is copied is looked at again
            self.token.check()
            st = lstat_at(src_dir, src_name)
            if st is None:
                if top:
                    raise RpcError("not_found", "no such file or directory", {"path": rel})
                return  # removed since its folder was read
            try:
                if stat.S_ISREG(st.st_mode):
                    self._file(src_dir, src_name, dst_dir, dst_name, rel, top=top)
                elif stat.S_ISDIR(st.st_mode):
                    self._dir(src_dir, src_name, dst_dir, dst_name, rel, depth)
                elif stat.S_ISLNK(st.st_mode):
                    try:
                        target = os.readlink(src_name, dir_fd=src_dir)
                    except OSError as exc:
                        if exc.errno in (errno.ENOENT, errno.EINVAL):
                            raise _Swapped() from None
                        raise
                    os.symlink(target, dst_name, dir_fd=dst_dir)
                    owner = self._owner(st)
                    if owner is not None:
                        os.chown(dst_name, *owner, dir_fd=dst_dir, follow_symlinks=False)
                else:
                    self.skipped.append(rel)
                return
            except _Swapped:
                continue
        raise RpcError("conflict", "the item kept changing while it was copied", {"path": rel})

    def _file(self, src_dir: int, src_name: str, dst_dir: int, dst_name: str, rel: str, *, top: bool) -> None:
        """Copy one file; a foreign hard link is refused when named, left out (skipped) in a tree."""
        try:
            sfd = os.open(src_name, O_READ_FILE, dir_fd=src_dir)
        except OSError as exc:
            if exc.errno in (*SWAPPED, errno.ENXIO, errno.ENODEV):
                raise _Swapped() from None
            raise
        try:
            st = os.fstat(sfd)
            if not stat.S_ISREG(st.st_mode):
                raise _Swapped()
            if top:
                self.source.refuse_foreign_link(st, rel)
            elif self.source.is_foreign_link(st, rel):
                self.skipped.append(rel)
                return
            dfd = os.open(dst_name, O_NEW_FILE, 0o600, dir_fd=dst_dir)
            try:
                copy_data(sfd, dfd, self.token)
                self._keep_metadata(dfd, st)
            finally:
                os.close(dfd)
        finally:
            os.close(sfd)

    def _keep_metadata(self, fd: int, st: os.stat_result) -> None:
        """The source's owner (when the copy keeps it), permission bits and times, on the copy."""
        self._chown(fd, st)
        os.fchmod(fd, stat.S_IMODE(st.st_mode) & _KEPT_BITS)
        os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))

    def _dir(self, src_dir: int, src_name: str, dst_dir: int, dst_name: str, rel: str, depth: int) -> None:
        if depth >= MAX_DEPTH:
            raise RpcError("validation_error", "the folder is nested too deeply", {"path": rel})
        sfd = open_dir_if_still(src_dir, src_name)
        if sfd is None:
            raise _Swapped()
        try:
            st = os.fstat(sfd)
            os.mkdir(dst_name, 0o700, dir_fd=dst_dir)
            dfd = open_dir_at(dst_dir, dst_name)
            try:
                for child in listdir(sfd):
                    self.copy(sfd, child, dfd, child, join(rel, child), depth=depth + 1)
                self._keep_metadata(dfd, st)
            finally:
                os.close(dfd)
        finally:
            os.close(sfd)


class _Swapped(Exception):
    """The entry is no longer what its lstat said (a folder swapped for a link, ...)."""


def chown_tree(
    dir_fd: int, name: str, owner: tuple[int, int] | None, token: CancelToken, *, source_uid: int | None = None
) -> None:
    """Give `name` and everything beneath it to `owner` (links themselves, never followed). With
    `source_uid` (the user of the scope the tree comes from), a file with several hard links that
    is not that user's keeps its owner (`is_foreign_to`): it may be a file outside the scope."""
    if owner is None:
        return
    os.chown(name, *owner, dir_fd=dir_fd, follow_symlinks=False)
    fd = open_dir_if_still(dir_fd, name)
    if fd is None:
        return
    try:
        os.fchown(fd, *owner)
        for item in walk(fd, "", token):
            if item.post:
                continue
            if item.fd is not None:
                os.fchown(item.fd, *owner)
                continue
            try:
                entry_fd = os.open(item.name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=item.dir_fd)
            except FileNotFoundError:
                continue  # gone meanwhile
            try:  # checked and changed through one descriptor: a name swapped meanwhile changes nothing
                if source_uid is None or not is_foreign_to(os.fstat(entry_fd), source_uid):
                    chown_path_fd(entry_fd, owner)
            finally:
                os.close(entry_fd)
    finally:
        os.close(fd)
