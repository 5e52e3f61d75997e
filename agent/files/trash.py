"""``fs.delete`` and the trash: ``fs.trash.list``, ``fs.trash.restore``, ``fs.trash.empty``.

The trash of a scope is the folder ``.Trash`` at its root (mode 0700, the scope owner's). A
trashed item is renamed to ``.Trash/<id>``, with its record in the sidecar ``.Trash/<id>.json``:
``{id, name, original_path, deleted_at, size, type}``. The sidecar is created first, exclusively,
and the item is renamed without replacing: an id already used (by either) gets a new one, never
an overwrite. The id is 16 hex digits; nothing else in ``.Trash`` is taken for an item.

A sidecar is data, not trusted: its original path goes through the jail again on restore (an
edited ``../../etc/x`` or ``/etc/x`` is ``path_outside_scope``), its id is the file name's.
Opening the trash (``fs.trash.list``) purges items deleted more than 30 days ago.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import stat
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from agent.files.entries import entry_type, rfc3339, wire_name
from agent.files.fdops import (
    O_NEW_FILE,
    O_READ_FILE,
    CancelToken,
    ancestors,
    chown_fd,
    fsync_dir,
    identity,
    is_within,
    listdir,
    lstat_at,
    open_dir_at,
    put,
    remove_entry,
    rename_noreplace,
    tree_size,
    unlink_quietly,
)
from agent.files.jail import Jail, normalize, split_path
from agent.files.write import ensure_dirs, make_dir_at
from contract.link.protocol import RpcError
from contract.models import TRASH_FOLDER

RETENTION = timedelta(days=30)
SIDECAR = ".json"
MAX_SIDECAR = 64 * 1024
ITEM_ID = re.compile(r"^[0-9a-f]{16}$")
TYPES = ("file", "dir", "symlink", "other")


def open_trash(jail: Jail, *, create: bool) -> int | None:
    """A readable descriptor of the scope's trash folder (None when there is none and not `create`)."""
    root = jail.fileno()
    for _ in range(2):
        try:
            return open_dir_at(root, TRASH_FOLDER)
        except FileNotFoundError:
            if not create:
                return None
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise RpcError("validation_error", f"the scope's {TRASH_FOLDER} is not a folder") from None
            raise
        try:
            make_dir_at(root, TRASH_FOLDER, jail.owner, mode=0o700)
        except FileExistsError:
            pass
    raise RpcError("conflict", f"the scope's {TRASH_FOLDER} kept changing")


@dataclass
class _Target:
    dir_fd: int
    name: str
    rel: str
    st: os.stat_result


def delete(jail: Jail, paths: list[str], *, permanent: bool, token: CancelToken) -> dict[str, Any]:
    """``fs.delete``: ``{trashed: [TrashItem]}``, or ``{deleted: [path]}`` when `permanent`."""
    rels = list(dict.fromkeys(normalize(p) for p in paths))
    root = jail.identity()
    trash_st = lstat_at(jail.fileno(), TRASH_FOLDER)
    trash_id = identity(trash_st) if trash_st is not None and stat.S_ISDIR(trash_st.st_mode) else None
    targets: list[_Target] = []
    try:
        for rel in rels:
            parts = split_path(rel)
            if not parts:
                raise RpcError("validation_error", "the scope root cannot be deleted")
            if parts[0] == TRASH_FOLDER:
                raise RpcError("validation_error", "items in the trash go with trash.empty", {"path": rel})
            dir_fd, name = jail.open_parent(rel)
            target = _Target(dir_fd, name, rel, os.stat_result((0,) * 10))
            targets.append(target)
            st = lstat_at(dir_fd, name)
            if st is None:
                raise RpcError("not_found", "no such file or directory", {"path": rel})
            target.st = st
            if trash_id is not None and (identity(st) == trash_id or is_within(dir_fd, trash_id, root)):
                raise RpcError("validation_error", "items in the trash go with trash.empty", {"path": rel})
        # An item inside another item of the batch goes with it.
        folders = {identity(t.st) for t in targets if stat.S_ISDIR(t.st.st_mode)}
        top = [t for t in targets if not folders or not any(a in folders for a in ancestors(t.dir_fd, root))]
        if permanent:
            for target in top:
                remove_entry(target.dir_fd, target.name, token)
                fsync_dir(target.dir_fd)
            return {"deleted": rels}
        trash_fd = open_trash(jail, create=True)
        assert trash_fd is not None
        try:
            return {"trashed": [_trash_one(trash_fd, t, jail.owner, token) for t in top]}
        finally:
            os.close(trash_fd)
    finally:
        for target in targets:
            os.close(target.dir_fd)


def _trash_one(trash_fd: int, target: _Target, owner: tuple[int, int] | None, token: CancelToken) -> dict[str, Any]:
    st = target.st
    size = tree_size(target.dir_fd, target.name, st, token)[0] if stat.S_ISDIR(st.st_mode) else st.st_size
    record = {
        "name": wire_name(target.name),
        "original_path": wire_name(target.rel),
        "deleted_at": rfc3339(time.time()),
        "size": size,
        "type": entry_type(st.st_mode),
    }
    for _ in range(16):
        item_id = secrets.token_hex(8)
        try:
            sidecar = os.open(item_id + SIDECAR, O_NEW_FILE, 0o600, dir_fd=trash_fd)
        except FileExistsError:
            continue
        moved = False
        try:
            try:
                data = orjson.dumps({"id": item_id, **record}, option=orjson.OPT_INDENT_2)
                os.write(sidecar, data)
                chown_fd(sidecar, owner)
                os.fsync(sidecar)
            finally:
                os.close(sidecar)
            try:
                rename_noreplace(target.dir_fd, target.name, trash_fd, item_id)
                moved = True
            except FileExistsError:
                continue  # an item without its sidecar holds this id: take another
            except OSError as exc:
                if exc.errno == errno.EXDEV:
                    raise RpcError(
                        "validation_error",
                        "the item is on another file system than the trash: delete it permanently",
                        {"path": target.rel},
                    ) from None
                raise
        finally:
            if not moved:
                unlink_quietly(trash_fd, item_id + SIDECAR)
        fsync_dir(trash_fd)
        fsync_dir(target.dir_fd)
        return {"id": item_id, **record}
    raise RpcError("conflict", "could not pick a trash id")


def _read_sidecar(trash_fd: int, item_id: str) -> dict[str, Any] | None:
    try:
        fd = os.open(item_id + SIDECAR, O_READ_FILE, dir_fd=trash_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_SIDECAR:
            return None
        data = os.read(fd, MAX_SIDECAR + 1)
    finally:
        os.close(fd)
    try:
        record = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(record, dict):
        return None
    record["_mtime"] = st.st_mtime
    return record


def _deleted_at(record: dict[str, Any]) -> datetime | None:
    value = record.get("deleted_at")
    if not isinstance(value, str):
        return None
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def _item(item_id: str, record: dict[str, Any], st: os.stat_result) -> dict[str, Any]:
    original = record.get("original_path")
    original = original if isinstance(original, str) else ""
    deleted = _deleted_at(record)
    size = record.get("size")
    kind = record.get("type")
    return {
        "id": item_id,
        "name": original.rstrip("/").rsplit("/", 1)[-1] or str(record.get("name") or item_id),
        "original_path": original,
        "deleted_at": rfc3339(deleted.timestamp() if deleted is not None else record["_mtime"]),
        "size": size if type(size) is int and size >= 0 else st.st_size,
        "type": kind if kind in TYPES else entry_type(st.st_mode),
    }


def trash_list(jail: Jail, *, token: CancelToken, now: datetime | None = None) -> dict[str, Any]:
    """``fs.trash.list``: ``{items, purged}``; items past the retention are removed first."""
    trash_fd = open_trash(jail, create=False)
    if trash_fd is None:
        return {"items": [], "purged": 0}
    now = now or datetime.now(UTC)
    items: list[dict[str, Any]] = []
    purged = 0
    try:
        for name in listdir(trash_fd):
            item_id = name[: -len(SIDECAR)]
            if not name.endswith(SIDECAR) or not ITEM_ID.match(item_id):
                continue
            token.check()
            record = _read_sidecar(trash_fd, item_id)
            st = lstat_at(trash_fd, item_id)
            if record is None or st is None:
                continue
            deleted = _deleted_at(record)
            if deleted is not None and now - deleted > RETENTION:
                remove_entry(trash_fd, item_id, token)
                unlink_quietly(trash_fd, name)
                purged += 1
                continue
            items.append(_item(item_id, record, st))
        if purged:
            fsync_dir(trash_fd)
    finally:
        os.close(trash_fd)
    items.sort(key=lambda i: (i["deleted_at"], i["id"]), reverse=True)
    return {"items": items, "purged": purged}


def restore(jail: Jail, ids: list[str], *, overwrite: bool, token: CancelToken) -> dict[str, Any]:
    """``fs.trash.restore``: put items back where they were (missing folders are made again)."""
    trash_fd = open_trash(jail, create=False)
    if trash_fd is None:
        raise RpcError("not_found", "the trash is empty")
    try:
        todo: list[tuple[str, tuple[str, ...]]] = []
        seen: set[str] = set()
        for item_id in ids:
            if not isinstance(item_id, str) or not ITEM_ID.match(item_id):
                raise RpcError("not_found", "no such item in the trash", {"id": str(item_id)})
            record = _read_sidecar(trash_fd, item_id)
            if record is None or lstat_at(trash_fd, item_id) is None:
                raise RpcError("not_found", "no such item in the trash", {"id": item_id})
            original = record.get("original_path")
            if not isinstance(original, str):
                raise RpcError("validation_error", "the item's record has no original path", {"id": item_id})
            parts = split_path(original)  # "../x" and "/x" are path_outside_scope here
            if not parts or parts[0] == TRASH_FOLDER:
                raise RpcError("validation_error", "the item's original path is not restorable", {"id": item_id})
            rel = "/".join(parts)
            if rel in seen:
                raise RpcError("conflict", "two items go back to the same path", {"path": rel})
            seen.add(rel)
            _check_free(jail, rel, overwrite)
            todo.append((item_id, parts))
        restored = []
        for item_id, parts in todo:
            token.check()
            dir_fd = ensure_dirs(jail, parts[:-1])
            try:
                try:
                    put(trash_fd, item_id, dir_fd, parts[-1], overwrite=overwrite)
                except OSError as exc:
                    if exc.errno == errno.EXDEV:
                        raise RpcError("validation_error", "the original folder is on another file system") from None
                    raise
                fsync_dir(dir_fd)
            finally:
                os.close(dir_fd)
            unlink_quietly(trash_fd, item_id + SIDECAR)
            restored.append("/".join(parts))
        fsync_dir(trash_fd)
        return {"restored": restored}
    finally:
        os.close(trash_fd)


def _check_free(jail: Jail, rel: str, overwrite: bool) -> None:
    try:
        dir_fd, name = jail.open_parent(rel)
    except RpcError as exc:
        if exc.code == "not_found":
            return  # its folder is gone: made again on restore
        raise
    try:
        if lstat_at(dir_fd, name) is not None and not overwrite:
            raise RpcError("conflict", "the original path is taken", {"path": rel})
    finally:
        os.close(dir_fd)


def empty(jail: Jail, *, token: CancelToken) -> dict[str, Any]:
    """``fs.trash.empty``: ``{removed}`` (the number of items; their sidecars go too)."""
    trash_fd = open_trash(jail, create=False)
    if trash_fd is None:
        return {"removed": 0}
    removed = 0
    try:
        for name in listdir(trash_fd):
            if not name.endswith(SIDECAR):
                removed += 1
            remove_entry(trash_fd, name, token)
        fsync_dir(trash_fd)
    finally:
        os.close(trash_fd)
    return {"removed": removed}
