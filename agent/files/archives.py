"""``fs.compress`` and ``fs.extract``: zip and tar.gz, built and unpacked through descriptors.

Compress walks the sources without following a link (a tar.gz stores a link as a link; a zip
has no portable link, so links are skipped and reported, as are FIFOs, sockets and devices),
writes the archive to a temporary file beside the destination and renames it into place at
the end: a failure or a cancel leaves no archive.

Extract applies the rules of tarfile's ``data`` filter to both formats, and refuses the whole
archive (``validation_error``, nothing left behind) on the first member that breaks one:

* no absolute name (``/x``, ``C:x``), no ``..`` component (a zip's ``\\`` counts as ``/``);
* no device, FIFO or socket; no zip symlink (refused, not written as a file); a tar symlink only
  with a relative target that stays inside the extraction (checked on the name, and again on the
  file system once everything is written); a tar hard link only to a regular file extracted
  before it;
* modes lose setuid, setgid, sticky and group/other write; files are at least owner-rw,
  folders owner-rwx; owners come from the scope, never from the archive;
* at most `MAX_EXTRACT_ENTRIES` members and `MAX_EXTRACT_BYTES` bytes, and no more than
  `MAX_RATIO` times the archive's size once past `RATIO_FLOOR` (declared sizes are checked
  before anything is written, actual bytes while writing).

Everything is written through a jail rooted at a temporary folder made inside the destination
(``O_EXCL | O_NOFOLLOW`` for files, mkdirat for folders), then moved into place; a failure or a
cancel removes the temporary folder.

Into an existing folder, the archive's folders merge with the folders already there; a member
whose path is taken is a conflict. ``fs.extract.check`` lists them without writing anything, so
the user can choose before the extraction what ``on_conflict`` does with them: ``refuse`` (the
default: ``conflict``, nothing moved), ``skip`` (the existing items stay, the rest is extracted)
or ``overwrite`` (each taken file is replaced by a rename, atomically; a folder never replaces a
file nor the other way round: those are refused before anything moves).
"""

from __future__ import annotations

import functools
import gzip
import os
import posixpath
import re
import stat
import tarfile
import time
import zipfile
import zlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any

from agent.files.entries import entry, group_name, join, user_name
from agent.files.fdops import (
    O_NEW_FILE,
    O_READ_FILE,
    CancelToken,
    Identity,
    Item,
    Progress,
    chown_fd,
    create_temp,
    fsync_dir,
    identity,
    listdir,
    lstat_at,
    mkdir_temp,
    never,
    open_dir_at,
    open_dir_if_still,
    release,
    remove_entry,
    rename_noreplace,
    reopen_dir,
    unlink_quietly,
    walk,
)
from agent.files.jail import Jail, normalize, split_path
from agent.files.read import open_regular
from agent.files.write import ensure_dirs
from contract.link.params import ARCHIVE_FORMATS as FORMATS
from contract.link.params import ON_CONFLICT
from contract.link.protocol import RpcError
from contract.models import TRASH_FOLDER

MAX_EXTRACT_BYTES = 10 * 1024**3
MAX_EXTRACT_ENTRIES = 100_000
MAX_RATIO = 250
RATIO_FLOOR = 128 * 1024**2
CHUNK = 1024 * 1024
_O_PATH_DIR = os.O_PATH | os.O_DIRECTORY
_DRIVE = re.compile(r"^[A-Za-z]:")
MAX_LISTED_CONFLICTS = 500  # the paths an answer names; its total counts them all


def archive_kind(path: str) -> str:
    """``"zip"`` or ``"tar"`` from the archive's name; anything else is ``validation_error``."""
    lower = path.lower()
    if lower.endswith(".zip"):
        return "zip"
    if lower.endswith((".tar.gz", ".tgz", ".tar")):
        return "tar"
    raise RpcError("validation_error", "only .zip, .tar.gz, .tgz and .tar archives can be extracted")


# --- compress --------------------------------------------------------------------------------


@dataclass
class _Source:
    item: Item  # the entry itself (fd set for a folder once opened)
    root: bool = False  # the scope root: its contents go in at the top of the archive
    base: str = ""  # the folder holding it, relative to the scope: an item's scope path is base/item.path


def compress(
    jail: Jail, paths: list[str], fmt: str, destination: str, *, token: CancelToken, progress: Progress
) -> dict[str, Any]:
    """``fs.compress``: ``{entry, skipped}``."""
    if fmt not in FORMATS:
        raise RpcError("validation_error", "format must be 'zip' or 'tar.gz'")
    dst_rel = normalize(destination)
    dst_dir, dst_name = jail.open_parent(destination)
    fds = [dst_dir]
    try:
        if lstat_at(dst_dir, dst_name) is not None:
            raise RpcError("conflict", "the name is already taken", {"path": dst_rel})
        sources = _sources(jail, paths, fds)
        tmp_fd, tmp_name = create_temp(dst_dir, dst_name)
        placed = False
        try:
            exclude = frozenset({identity(os.fstat(tmp_fd))} | _trash_of(jail, sources))
            files = nbytes = 0
            for _, item in _members(sources, token, exclude):
                if stat.S_ISREG(item.st.st_mode):
                    files += 1
                    nbytes += item.st.st_size
            progress.update(total_files=files, total_bytes=nbytes)
            with open(tmp_fd, "wb", closefd=False) as out:
                skipped = _write_archive(out, fmt, jail, sources, token, progress, exclude)
                out.flush()
            chown_fd(tmp_fd, jail.owner)
            os.fchmod(tmp_fd, 0o644)
            os.fsync(tmp_fd)
            st = os.fstat(tmp_fd)
            try:
                rename_noreplace(dst_dir, tmp_name, dst_dir, dst_name)
            except FileExistsError:
                raise RpcError("conflict", "the name is already taken", {"path": dst_rel}) from None
            placed = True
        finally:
            os.close(tmp_fd)
            if not placed:
                unlink_quietly(dst_dir, tmp_name)
            release(tmp_name)
        fsync_dir(dst_dir)
        return {"entry": entry(dst_name, dst_rel, st, None), "skipped": skipped}
    finally:
        for fd in fds:
            os.close(fd)


def _sources(jail: Jail, paths: list[str], fds: list[int]) -> list[_Source]:
    sources: list[_Source] = []
    names: set[str] = set()
    for path in paths:
        parts = split_path(path)
        if not parts:
            fd = reopen_dir(jail.fileno())
            fds.append(fd)
            sources.append(_Source(Item(fd, "", "", os.fstat(fd), fd), root=True))
            continue
        dir_fd, name = jail.open_parent(path)
        fds.append(dir_fd)
        st = lstat_at(dir_fd, name)
        if st is None:
            raise RpcError("not_found", "no such file or directory", {"path": "/".join(parts)})
        if name in names:
            raise RpcError("validation_error", "two items of the archive have the same name", {"name": name})
        names.add(name)
        jail.refuse_foreign_link(st, path)
        sources.append(_Source(Item(dir_fd, name, name, st), base="/".join(parts[:-1])))
    return sources


def _trash_of(jail: Jail, sources: list[_Source]) -> set[Identity]:
    if not any(s.root for s in sources):
        return set()
    trash = lstat_at(jail.fileno(), TRASH_FOLDER)
    return {identity(trash)} if trash is not None and stat.S_ISDIR(trash.st_mode) else set()


def _members(sources: list[_Source], token: CancelToken, exclude: frozenset[Identity]) -> Iterator[tuple[str, Item]]:
    """Every entry to archive, folders before their contents, paths being archive names; each
    with its path relative to the scope."""
    for source in sources:
        item = source.item
        if source.root:
            yield from ((i.path, i) for i in walk(item.dir_fd, "", token, exclude=exclude) if not i.post)
            continue
        if not stat.S_ISDIR(item.st.st_mode):
            yield join(source.base, item.path), item
            continue
        try:
            fd = open_dir_at(item.dir_fd, item.name)
        except OSError:
            continue  # no longer a folder
        try:
            yield join(source.base, item.path), Item(item.dir_fd, item.name, item.path, os.fstat(fd), fd)
            members = walk(fd, item.path, token, exclude=exclude)
            yield from ((join(source.base, i.path), i) for i in members if not i.post)
        finally:
            os.close(fd)


class _Reader:
    """A file's bytes for the archive writer: checks the cancel token, counts progress."""

    def __init__(self, fd: int, size: int, token: CancelToken, progress: Progress) -> None:
        self.fd, self.left, self.token, self.progress = fd, size, token, progress

    def read(self, n: int = -1) -> bytes:
        self.token.check()
        if self.left <= 0:
            return b""
        data = os.read(self.fd, self.left if n < 0 else min(n, self.left, CHUNK))
        self.left -= len(data)
        self.progress.add(nbytes=len(data))
        return data


def _zip_time(mtime: float) -> tuple[int, int, int, int, int, int]:
    t = time.localtime(mtime)[:6]
    if t[0] < 1980:
        return (1980, 1, 1, 0, 0, 0)
    if t[0] > 2107:
        return (2107, 12, 31, 23, 59, 58)
    return (t[0], t[1], t[2], t[3], t[4], t[5])


def _write_archive(
    out: IO[bytes],
    fmt: str,
    jail: Jail,
    sources: list[_Source],
    token: CancelToken,
    progress: Progress,
    exclude: frozenset[Identity],
    *,
    contained_links: bool = False,
) -> list[str]:
    """Write the archive; ``fmt`` ``"tar"`` is an uncompressed stream (to a pipe). With
    `contained_links`, links that extraction would refuse (absolute, or leading out of the
    archive) are skipped and reported instead of stored. So are files with several hard links
    that are not the scope user's (see `Jail.refuse_foreign_link`)."""
    skipped: list[str] = []
    archive: zipfile.ZipFile | tarfile.TarFile
    if fmt == "zip":
        archive = zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, allowZip64=True)
    elif fmt == "tar":
        archive = tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT)  # noqa: SIM115
    else:
        archive = tarfile.open(fileobj=out, mode="w:gz", compresslevel=6, format=tarfile.PAX_FORMAT)  # noqa: SIM115
    try:
        for scope_path, item in _members(sources, token, exclude):
            mode = item.st.st_mode
            if stat.S_ISDIR(mode):
                _add_dir(archive, item)
            elif stat.S_ISREG(mode):
                progress.add(current=item.path)
                trusted = functools.partial(_trusted, jail, scope_path)
                if not _add_file(archive, item, token, progress, trusted):
                    skipped.append(item.path)
                progress.add(files=1)
            elif stat.S_ISLNK(mode) and isinstance(archive, tarfile.TarFile):
                info = _tar_info(item.path, item.st, tarfile.SYMTYPE)
                try:
                    info.linkname = os.readlink(item.name, dir_fd=item.dir_fd)
                except OSError:
                    continue  # no longer a link
                if contained_links:
                    try:
                        check_link_target(item.path, tuple(item.path.split("/")), info.linkname)
                    except RpcError:
                        skipped.append(item.path)
                        continue
                archive.addfile(info)
            else:
                skipped.append(item.path)
    finally:
        archive.close()
    return skipped


def _tar_info(name: str, st: os.stat_result, kind: bytes) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = stat.S_IMODE(st.st_mode)
    info.mtime = int(st.st_mtime)
    info.uid, info.gid = st.st_uid, st.st_gid
    info.uname, info.gname = user_name(st.st_uid), group_name(st.st_gid)
    return info


def _add_dir(archive: zipfile.ZipFile | tarfile.TarFile, item: Item) -> None:
    if isinstance(archive, tarfile.TarFile):
        archive.addfile(_tar_info(item.path, item.st, tarfile.DIRTYPE))
        return
    info = zipfile.ZipInfo(item.path + "/", _zip_time(item.st.st_mtime))
    info.external_attr = ((stat.S_IFDIR | stat.S_IMODE(item.st.st_mode)) << 16) | 0x10
    archive.writestr(info, b"")


def _trusted(jail: Jail, scope_path: str, st: os.stat_result) -> bool:
    return not jail.is_foreign_link(st, scope_path)


def _add_file(
    archive: zipfile.ZipFile | tarfile.TarFile,
    item: Item,
    token: CancelToken,
    progress: Progress,
    trusted: Callable[[os.stat_result], bool],
) -> bool:
    """Add one file; False when it was left out (gone, no longer a file, a foreign hard link)."""
    try:
        fd = os.open(item.name, O_READ_FILE, dir_fd=item.dir_fd)
    except OSError:
        return False  # gone, or swapped for a link or a FIFO
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or not trusted(st):
            return False
        reader = _Reader(fd, st.st_size, token, progress)
        if isinstance(archive, tarfile.TarFile):
            header = _tar_info(item.path, st, tarfile.REGTYPE)
            header.size = st.st_size
            try:
                archive.addfile(header, reader)
            except OSError as exc:
                if "unexpected end of data" in str(exc):
                    raise RpcError("conflict", "a file shrank while it was archived", {"path": item.path}) from None
                raise
            return True
        info = zipfile.ZipInfo(item.path, _zip_time(st.st_mtime))
        info.external_attr = (stat.S_IFREG | stat.S_IMODE(st.st_mode)) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        info.file_size = st.st_size  # lets zipfile pick zip64 for a big file
        with archive.open(info, "w") as dest:
            while data := reader.read(CHUNK):
                dest.write(data)
        return True
    finally:
        os.close(fd)


# --- extract ---------------------------------------------------------------------------------


def refuse(member: str, reason: str) -> RpcError:
    return RpcError(
        "validation_error", f"unsafe archive member {member!r}: {reason}", {"member": member, "reason": reason}
    )


def member_parts(name: str, *, backslashes: bool) -> tuple[str, ...]:
    """The components of an archive member's name, or `refuse` (see the module docstring)."""
    raw = name.replace("\\", "/") if backslashes else name
    if "\x00" in raw:
        raise refuse(name, "NUL in the name")
    if raw.startswith("/") or _DRIVE.match(raw):
        raise refuse(name, "absolute name")
    parts = tuple(p for p in raw.split("/") if p not in ("", "."))
    if ".." in parts:
        raise refuse(name, "'..' in the name")
    if any(len(os.fsencode(p)) > 255 for p in parts) or len(os.fsencode(raw)) > 4000:
        raise refuse(name, "name too long")
    return parts


def check_link_target(name: str, parts: tuple[str, ...], target: str) -> None:
    if not target or "\x00" in target:
        raise refuse(name, "empty link target")
    if target.startswith("/"):
        raise refuse(name, "link to an absolute path")
    resolved = posixpath.normpath(posixpath.join("/".join(parts[:-1]), target))
    if resolved == ".." or resolved.startswith(("../", "/")):
        raise refuse(name, "link leads out of the extraction folder")


def _file_mode(mode: int | None) -> int:
    return ((0o644 if mode is None else mode) & 0o755) | 0o600


def _dir_mode(mode: int | None) -> int:
    return ((0o755 if mode is None else mode) & 0o755) | 0o700


def _open_destination(jail: Jail, destination: str, fds: list[int]) -> tuple[int, str | None]:
    """The destination folder's descriptor and None when it exists; else its parent's and the
    name to give the new folder (``validation_error`` when the name is taken by something else)."""
    try:
        into = jail.open(destination, _O_PATH_DIR, follow_last=True)
        fds.append(into)
        return into, None
    except RpcError as exc:
        if exc.code != "not_found":
            raise
    base, final = jail.open_parent(destination)
    fds.append(base)
    if lstat_at(base, final) is not None:
        raise RpcError("validation_error", "the destination is not a folder", {"path": normalize(destination)})
    return base, final


def extract_check(jail: Jail, path: str, destination: str, *, token: CancelToken) -> dict[str, Any]:
    """``fs.extract.check``: what extracting `path` into `destination` would meet, writing nothing:
    ``{entries, bytes, roots, conflicts, conflicts_total, clashes}``.

    Every member's name, type and size is checked as ``fs.extract`` checks it, so an unsafe
    archive is refused here already (links that lead out only together are caught by the
    extraction, which writes them). `roots` are the archive's top-level names (one: a single-root
    archive, which goes into the current folder); `conflicts` the paths (in the scope) the
    archive would write that exist already, `clashes` those of them where a folder meets
    something else (``overwrite`` cannot settle those)."""
    kind = archive_kind(path)
    dest_rel = normalize(destination)
    archive_fd, archive_st = open_regular(jail, path)
    fds = [archive_fd]
    try:
        extractor = _Extractor(jail, token, Progress(), archive_st.st_size)
        try:
            members = extractor.zip_members(archive_fd) if kind == "zip" else extractor.tar_members(archive_fd)
        except (zipfile.BadZipFile, tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
            raise RpcError("validation_error", f"not a valid archive: {exc}") from None
        into, final = _open_destination(jail, destination, fds)
        taken, clashes = ([], []) if final is not None else find_conflicts(into, members, token)
        return {
            "entries": extractor.planned_entries,
            "bytes": extractor.planned_bytes,
            "roots": sorted({parts[0] for parts in members}),
            "conflicts": [join(dest_rel, p) for p in taken[:MAX_LISTED_CONFLICTS]],
            "conflicts_total": len(taken),
            "clashes": [join(dest_rel, p) for p in clashes[:MAX_LISTED_CONFLICTS]],
        }
    finally:
        for fd in fds:
            os.close(fd)


def find_conflicts(
    into: int, members: Mapping[tuple[str, ...], bool], token: CancelToken
) -> tuple[list[str], list[str]]:
    """The members (path parts: is a folder) whose path is taken in the folder `into`, and those
    of them where a folder meets a non-folder. A folder meeting a folder merges: no conflict.
    Beneath a taken non-folder nothing more is looked at (the taken one is listed). The folders
    a member implies count as folders. Paths come out sorted, relative to `into`."""
    complete = dict(members)
    for parts in members:
        for i in range(1, len(parts)):
            complete[parts[:i]] = True
    taken: list[str] = []
    clashes: list[str] = []
    open_dirs: list[tuple[tuple[str, ...], int | None]] = [((), into)]  # the folders above the member
    try:
        for parts in sorted(complete):
            token.check()
            while open_dirs[-1][0] != parts[:-1]:
                _close_dir(open_dirs.pop()[1], into)
            parent = open_dirs[-1][1]
            is_dir = complete[parts]
            here: int | None = None
            existing = lstat_at(parent, parts[-1]) if parent is not None else None  # None: a new folder above
            if parent is not None and existing is not None:
                if is_dir and stat.S_ISDIR(existing.st_mode):
                    here = open_dir_if_still(parent, parts[-1])
                else:
                    taken.append("/".join(parts))
                    if is_dir or stat.S_ISDIR(existing.st_mode):
                        clashes.append("/".join(parts))
            if is_dir:
                open_dirs.append((parts, here))
    finally:
        for _, fd in open_dirs:
            _close_dir(fd, into)
    return taken, clashes


def _close_dir(fd: int | None, into: int) -> None:
    if fd is not None and fd != into:
        os.close(fd)


def extract(
    jail: Jail,
    path: str,
    destination: str,
    *,
    token: CancelToken,
    progress: Progress,
    on_conflict: str = "refuse",
) -> dict[str, Any]:
    """``fs.extract``: ``{extracted, entry, kept, replaced}`` (the entry of the destination
    folder; `kept` and `replaced` count the conflicts that `on_conflict` settled).

    An existing destination folder receives the archive's entries, its folders merged with
    those there; what a taken path gets is `on_conflict`'s choice (see the module docstring),
    decided for every conflict before anything is moved. A missing destination is created.
    """
    if on_conflict not in ON_CONFLICT:
        raise RpcError("validation_error", "on_conflict must be 'refuse', 'skip' or 'overwrite'")
    kind = archive_kind(path)
    dest_rel = normalize(destination)
    archive_fd, archive_st = open_regular(jail, path)
    fds = [archive_fd]
    try:
        base, final = _open_destination(jail, destination, fds)
        into = base if final is None else None
        temp = mkdir_temp(base, final or "extract")
        done = False
        settled = 0
        try:
            temp_fd = open_dir_at(base, temp)
            try:
                chown_fd(temp_fd, jail.owner)
            finally:
                os.close(temp_fd)
            with Jail.at(base, temp, os.path.join(jail.root, dest_rel, temp), use_openat2=jail.uses_openat2) as inner:
                inner.owner = jail.owner
                extractor = _Extractor(inner, token, progress, archive_st.st_size)
                try:
                    if kind == "zip":
                        extractor.zip(archive_fd)
                    else:
                        extractor.tar(archive_fd)
                except (zipfile.BadZipFile, tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
                    raise RpcError("validation_error", f"not a valid archive: {exc}") from None
                extractor.check_links()
                if into is not None:
                    settled = _merge(inner.fileno(), into, dest_rel, extractor.written_members(), on_conflict, token)
            if into is not None:
                remove_entry(base, temp, never())  # what `skip` left behind
                st = os.fstat(into)
                name = dest_rel.rsplit("/", 1)[-1]
            else:
                assert final is not None
                temp_fd = open_dir_at(base, temp)
                try:
                    os.fchmod(temp_fd, 0o755)
                finally:
                    os.close(temp_fd)
                try:
                    rename_noreplace(base, temp, base, final)
                except FileExistsError:
                    raise RpcError("conflict", "the name is already taken", {"path": dest_rel}) from None
                st = os.stat(final, dir_fd=base, follow_symlinks=False)
                name = final
            done = True
        finally:
            if not done:
                remove_entry(base, temp, never())
            release(temp)
        fsync_dir(base)
        return {
            "extracted": extractor.count,
            "entry": entry(name, dest_rel, st, None),
            "kept": settled if on_conflict == "skip" else 0,
            "replaced": settled if on_conflict == "overwrite" else 0,
        }
    finally:
        for fd in fds:
            os.close(fd)


def _merge(
    temp_fd: int,
    into: int,
    dest_rel: str,
    members: Mapping[tuple[str, ...], bool],
    on_conflict: str,
    token: CancelToken,
) -> int:
    """Move the extracted tree into the existing folder; returns the number of conflicts settled.
    Every conflict is found first: `refuse` (and `overwrite` meeting a folder/file clash) fails
    before anything has moved."""
    taken, clashes = find_conflicts(into, members, token)
    if taken and on_conflict == "refuse":
        raise _conflict("the destination already holds items of the archive", dest_rel, taken)
    if clashes and on_conflict == "overwrite":
        raise _conflict("overwrite does not replace a folder with a file or a file with a folder", dest_rel, clashes)
    _move_into(temp_fd, into, dest_rel, "", on_conflict, token)
    fsync_dir(into)
    return len(taken)


def _conflict(message: str, dest_rel: str, paths: list[str]) -> RpcError:
    listed = [join(dest_rel, p) for p in paths[:50]]
    return RpcError("conflict", message, {"paths": listed, "total": len(paths)})


def _move_into(src: int, dst: int, dest_rel: str, rel: str, on_conflict: str, token: CancelToken) -> None:
    """Move each entry of `src` into `dst`: a free name takes it, a folder meeting a folder
    merges, a taken name is settled as `on_conflict` says (what `skip` leaves stays in `src`).
    A rename never replaces a folder: one that appeared since the check is ``conflict``."""
    for name in listdir(src):
        token.check()
        path = join(rel, name)
        existing = lstat_at(dst, name)
        incoming = lstat_at(src, name)
        if incoming is None:
            continue
        if existing is not None and stat.S_ISDIR(existing.st_mode) and stat.S_ISDIR(incoming.st_mode):
            src_sub = open_dir_at(src, name)
            try:
                dst_sub = open_dir_at(dst, name)
                try:
                    _move_into(src_sub, dst_sub, dest_rel, path, on_conflict, token)
                finally:
                    os.close(dst_sub)
            finally:
                os.close(src_sub)
            continue
        try:
            if existing is None:
                rename_noreplace(src, name, dst, name)
            elif on_conflict == "overwrite":
                os.rename(name, name, src_dir_fd=src, dst_dir_fd=dst)  # a file or link, atomically; never a folder
            elif on_conflict == "refuse":
                raise FileExistsError(name)  # taken since the conflicts were looked for
        except (FileExistsError, IsADirectoryError, NotADirectoryError):
            raise RpcError("conflict", "the destination changed meanwhile", {"path": join(dest_rel, path)}) from None


class _Extractor:
    def __init__(self, jail: Jail, token: CancelToken, progress: Progress, archive_size: int) -> None:
        self.jail = jail
        self.token = token
        self.progress = progress
        self.archive_size = max(archive_size, 1)
        self.count = 0
        self.written = 0
        self.files: set[str] = set()
        self.dirs: set[str] = {""}
        self.links: list[str] = []
        self.planned_entries = self.planned_bytes = 0

    def written_members(self) -> dict[tuple[str, ...], bool]:
        """What was written, as `zip_members` (links and hard links count as files)."""
        written = {tuple(path.split("/")): False for path in (*self.files, *self.links)}
        written.update({tuple(path.split("/")): True for path in self.dirs if path})
        return written

    # --- limits --------------------------------------------------------------------------

    def _too_much(self, total: int, what: str) -> None:
        if total > MAX_EXTRACT_BYTES:
            raise RpcError(
                "too_large", f"the archive {what} more than the limit", {"limit": MAX_EXTRACT_BYTES, "size": total}
            )
        if total > RATIO_FLOOR and total > MAX_RATIO * self.archive_size:
            raise RpcError(
                "too_large",
                f"the archive {what} too much for its size (a compression bomb?)",
                {"limit": MAX_RATIO * self.archive_size, "size": total},
            )

    def _plan(self, count: int, total: int) -> None:
        if count > MAX_EXTRACT_ENTRIES:
            raise RpcError(
                "too_large", "the archive has too many entries", {"limit": MAX_EXTRACT_ENTRIES, "size": count}
            )
        self._too_much(total, "declares")
        self.planned_entries, self.planned_bytes = count, total
        self.progress.update(total_files=count, total_bytes=total)

    def _account(self, n: int) -> None:
        self.written += n
        self._too_much(self.written, "expands to")
        self.progress.add(nbytes=n)

    # --- formats -------------------------------------------------------------------------

    def _zip_checked(self, archive: zipfile.ZipFile) -> list[tuple[zipfile.ZipInfo, str, tuple[str, ...]]]:
        """Every member checked, and the totals against the limits: before anything is written."""
        checked = [(info, *self._zip_member(info)) for info in archive.infolist()]
        self._plan(len(checked), sum(i.file_size for i, kind, _ in checked if kind == "file"))
        return checked

    def zip_members(self, archive_fd: int) -> dict[tuple[str, ...], bool]:
        """The zip's checked members, path parts: is a folder (what `find_conflicts` takes)."""
        os.lseek(archive_fd, 0, os.SEEK_SET)
        with open(archive_fd, "rb", closefd=False) as raw, zipfile.ZipFile(raw) as archive:
            return {parts: kind == "dir" for _, kind, parts in self._zip_checked(archive) if parts}

    def zip(self, archive_fd: int) -> None:
        os.lseek(archive_fd, 0, os.SEEK_SET)
        with open(archive_fd, "rb", closefd=False) as raw, zipfile.ZipFile(raw) as archive:
            for info, kind, parts in self._zip_checked(archive):
                self.token.check()
                if not parts:
                    continue
                unix = info.external_attr >> 16 if info.create_system == 3 else 0
                mode = stat.S_IMODE(unix) or None
                with self._member(info.filename):
                    if kind == "dir":
                        self._dir(parts, mode)
                    else:
                        try:
                            mtime = time.mktime((*info.date_time, 0, 0, -1))
                        except (OverflowError, ValueError):
                            mtime = time.time()
                        with archive.open(info) as source:
                            self._file(info.filename, parts, source, mode, mtime, info.file_size)
                self._done(parts)

    def _zip_member(self, info: zipfile.ZipInfo) -> tuple[str, tuple[str, ...]]:
        name = info.filename
        parts = member_parts(name, backslashes=True)
        if info.flag_bits & 0x1:
            raise refuse(name, "encrypted")
        unix = info.external_attr >> 16 if info.create_system == 3 else 0
        kind = stat.S_IFMT(unix)
        if name.replace("\\", "/").endswith("/") or kind == stat.S_IFDIR:
            return "dir", parts
        if kind == stat.S_IFLNK:
            raise refuse(name, "symbolic link (links in zip archives are not extracted)")
        if kind not in (0, stat.S_IFREG):
            raise refuse(name, "device, FIFO or socket")
        if not parts:
            raise refuse(name, "empty name")
        return "file", parts

    def _tar_member(self, info: tarfile.TarInfo) -> tuple[str, tuple[str, ...]]:
        name = info.name
        parts = member_parts(name, backslashes=False)
        if info.isdir():
            return "dir", parts
        if not parts:
            raise refuse(name, "empty name")
        if info.isreg():
            return "file", parts
        if info.issym():
            check_link_target(name, parts, info.linkname)
            return "symlink", parts
        if info.islnk():
            if not member_parts(info.linkname, backslashes=False):
                raise refuse(name, "hard link to nothing")
            return "hardlink", parts
        if info.ischr() or info.isblk() or info.isfifo():
            raise refuse(name, "device or FIFO")
        raise refuse(name, "unsupported member type")

    def _open_tar(self, archive_fd: int, raw: IO[bytes]) -> tarfile.TarFile:
        os.lseek(archive_fd, 0, os.SEEK_SET)
        return tarfile.open(fileobj=raw, mode="r|*")

    def tar_members(self, archive_fd: int) -> dict[tuple[str, ...], bool]:
        """Check every member and the totals, writing nothing; the members as `zip_members`."""
        count = total = 0
        members: dict[tuple[str, ...], bool] = {}
        with open(archive_fd, "rb", closefd=False) as raw, self._open_tar(archive_fd, raw) as archive:
            for info in archive:
                self.token.check()
                kind, parts = self._tar_member(info)
                count += 1
                total += info.size if kind == "file" else 0
                if count > MAX_EXTRACT_ENTRIES:
                    self._plan(count, total)
                self._too_much(total, "declares")
                if parts:
                    members[parts] = kind == "dir"
        self._plan(count, total)
        return members

    def tar(self, archive_fd: int) -> None:
        self.tar_members(archive_fd)  # first pass: check everything before writing anything
        with open(archive_fd, "rb", closefd=False) as raw, self._open_tar(archive_fd, raw) as archive:
            for info in archive:
                self.token.check()
                kind, parts = self._tar_member(info)  # again: the file may have changed since
                if not parts:
                    continue
                with self._member(info.name):
                    if kind == "dir":
                        self._dir(parts, info.mode)
                    elif kind == "file":
                        source = archive.extractfile(info)
                        assert source is not None
                        with source:
                            self._file(info.name, parts, source, info.mode, info.mtime, info.size)
                    elif kind == "symlink":
                        self._symlink(parts, info.linkname)
                    else:
                        self._hardlink(info.name, parts, member_parts(info.linkname, backslashes=False))
                self._done(parts)

    # --- writing -------------------------------------------------------------------------

    @contextmanager
    def _member(self, name: str) -> Iterator[None]:
        """The jail's answers about a member's path are the archive's fault: say which member."""
        try:
            yield
        except RpcError as exc:
            if exc.code == "path_outside_scope":
                raise refuse(name, "its path leads out of the extraction folder (through a link)") from None
            if exc.code == "not_found":
                raise refuse(name, "its folder is a link to nothing or a file") from None
            raise

    def _done(self, parts: tuple[str, ...]) -> None:
        self.count += 1
        self.progress.add(files=1, current="/".join(parts))

    def _parent(self, parts: tuple[str, ...]) -> int:
        """O_PATH descriptor of the member's folder, made if missing (through the jail)."""
        folder = "/".join(parts[:-1])
        if folder in self.dirs:
            return self.jail.open(folder, _O_PATH_DIR, follow_last=True)
        fd = ensure_dirs(self.jail, parts[:-1])
        for i in range(1, len(parts)):
            self.dirs.add("/".join(parts[:i]))
        return fd

    def _clear(self, dir_fd: int, name: str, member: str) -> None:
        """Make room for a non-folder member: a later duplicate replaces an earlier file or link."""
        st = lstat_at(dir_fd, name)
        if st is None:
            return
        if stat.S_ISDIR(st.st_mode):
            raise refuse(member, "replaces a folder")
        os.unlink(name, dir_fd=dir_fd)

    def _file(
        self, member: str, parts: tuple[str, ...], source: IO[bytes], mode: int | None, mtime: float, size: int
    ) -> None:
        dir_fd = self._parent(parts)
        name = parts[-1]
        try:
            self._clear(dir_fd, name, member)
            fd = os.open(name, O_NEW_FILE, 0o600, dir_fd=dir_fd)
            try:
                written = 0
                while True:
                    self.token.check()
                    data = source.read(CHUNK)
                    if not data:
                        break
                    written += len(data)
                    if written > size:
                        raise refuse(member, "more data than declared")
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view) :]
                    self._account(len(data))
                chown_fd(fd, self.jail.owner)
                os.fchmod(fd, _file_mode(mode))
                try:
                    os.utime(fd, (mtime, mtime))
                except (OverflowError, OSError, ValueError):
                    pass  # a time the file system cannot hold
            finally:
                os.close(fd)
        finally:
            os.close(dir_fd)
        self.files.add("/".join(parts))

    def _dir(self, parts: tuple[str, ...], mode: int | None) -> None:
        fd = ensure_dirs(self.jail, parts)
        try:
            readable = reopen_dir(fd)
            try:
                os.fchmod(readable, _dir_mode(mode))
            finally:
                os.close(readable)
        finally:
            os.close(fd)
        for i in range(1, len(parts) + 1):
            self.dirs.add("/".join(parts[:i]))

    def _symlink(self, parts: tuple[str, ...], target: str) -> None:
        dir_fd = self._parent(parts)
        name = parts[-1]
        path = "/".join(parts)
        try:
            self._clear(dir_fd, name, path)
            os.symlink(target, name, dir_fd=dir_fd)
            if self.jail.owner is not None:
                os.chown(name, *self.jail.owner, dir_fd=dir_fd, follow_symlinks=False)
        finally:
            os.close(dir_fd)
        self.files.discard(path)
        self.links.append(path)

    def _hardlink(self, member: str, parts: tuple[str, ...], target: tuple[str, ...]) -> None:
        source = "/".join(target)
        if source not in self.files:
            raise refuse(member, "hard link to a file not extracted before it")
        src_dir, src_name = self.jail.open_parent(source)
        try:
            st = lstat_at(src_dir, src_name)
            if st is None or not stat.S_ISREG(st.st_mode):
                raise refuse(member, "hard link to something that is not a file")
            dir_fd = self._parent(parts)
            try:
                self._clear(dir_fd, parts[-1], member)
                os.link(src_name, parts[-1], src_dir_fd=src_dir, dst_dir_fd=dir_fd, follow_symlinks=False)
            finally:
                os.close(dir_fd)
        finally:
            os.close(src_dir)
        self.files.add("/".join(parts))

    def check_links(self, *, allow_dangling: bool = False) -> None:
        """Once everything is written: no link may resolve outside the extraction folder (a link
        can be made to lead out by the links written after it, which the names alone cannot tell).
        With `allow_dangling`, a link to nothing (yet) is kept: it leads nowhere."""
        for path in self.links:
            self.token.check()
            try:
                os.close(self.jail.open(path, os.O_PATH, follow_last=True))
            except RpcError as exc:
                if exc.code == "path_outside_scope":
                    raise refuse(path, "link leads out of the extraction folder") from None
                if not (allow_dangling and exc.code == "not_found"):
                    raise


# --- streams between servers -----------------------------------------------------------------


def stream_tar(jail: Jail, paths: list[str], out: IO[bytes], *, token: CancelToken) -> list[str]:
    """An uncompressed tar of `paths` (each under its own name) written to `out`, a pipe: the
    sending side of a cross-server copy. Returns what was skipped: FIFOs, sockets, devices, and
    links that `extract_tar` would refuse."""
    if any(not split_path(p) for p in paths):
        raise RpcError("validation_error", "the scope root itself cannot be copied to another server")
    fds: list[int] = []
    try:
        sources = _sources(jail, paths, fds)
        return _write_archive(out, "tar", jail, sources, token, Progress(), frozenset(), contained_links=True)
    finally:
        for fd in fds:
            os.close(fd)


def extract_tar(inner: Jail, archive_fd: int, size: int, *, token: CancelToken) -> int:
    """Unpack the tar in `archive_fd` into `inner` (a jail on a fresh temporary folder) with every
    rule of `extract`; returns the number of members. The receiving side of a cross-server copy."""
    extractor = _Extractor(inner, token, Progress(), size)
    try:
        extractor.tar(archive_fd)
    except (tarfile.TarError, EOFError) as exc:
        raise RpcError("validation_error", f"not a valid archive: {exc}") from None
    extractor.check_links(allow_dangling=True)
    return extractor.count
