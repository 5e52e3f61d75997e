"""The agent's write operations (fs.write ... fs.upload) on real files; streams over a real link."""

from __future__ import annotations

import contextlib
import os
import pwd
import random
import shutil
import socket
import stat
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest

from agent.files import archives, read, transfer
from agent.files import tree as tree_ops
from agent.files import write as write_ops
from agent.files.fdops import CancelToken, Progress
from agent.files.handlers import FileHandlers
from agent.files.jail import Jail
from agent.files.read import READ_LIMIT, content_etag
from contract.link.protocol import CLOSE_INTERNAL_ERROR, RpcError
from contract.models import TRASH_FOLDER, Entry, TrashItem
from tests.helpers import eventually
from tests.helpers.agent_files import (
    SERVER_ID,
    SITE,
    Home,
    call,
    error,
    lexists,
    linked,
    make_home,
    outside_state,
    temp_leftovers,
)


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return make_home(tmp_path)


@pytest.fixture(params=[None, False], ids=["auto", "walk"])
def fs(request: pytest.FixtureRequest, home: Home) -> FileHandlers:
    return home.handlers(request.param)


@pytest.fixture
def fsa(home: Home) -> FileHandlers:
    """One resolver only, for the tests where the jail is not the point."""
    return home.handlers()


# --- fs.write --------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_write_create_edit_and_etags(fs: FileHandlers, home: Home) -> None:
    created = await call(fs.fs_write, **SITE, path="public/new.txt", content="héllo\n")
    Entry.model_validate(created["entry"])
    assert created["entry"]["path"] == "public/new.txt" and created["entry"]["type"] == "file"
    assert created["etag"] == content_etag("héllo\n".encode())
    path = home.site / "public" / "new.txt"
    assert path.read_text() == "héllo\n" and stat.S_IMODE(path.stat().st_mode) == 0o644
    os.chmod(path, 0o600)
    inode = path.stat().st_ino
    read = await call(fs.fs_read, **SITE, path="public/new.txt")
    edited = await call(fs.fs_write, **SITE, path="public/new.txt", content="v2", if_match=read["etag"])
    assert path.read_text() == "v2" and edited["etag"] == content_etag(b"v2")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # an edit keeps the mode
    assert path.stat().st_ino != inode  # replaced by rename, not written in place
    stale = await error(fs.fs_write, **SITE, path="public/new.txt", content="v3", if_match=read["etag"])
    assert stale.code == "conflict" and stale.details == {"etag": content_etag(b"v2")}
    assert path.read_text() == "v2"
    gone = await error(fs.fs_write, **SITE, path="public/gone.txt", content="x", if_match=read["etag"])
    assert gone.code == "conflict" and not (home.site / "public" / "gone.txt").exists()
    assert (await error(fs.fs_write, **SITE, path="public/new.txt", content="x", create_only=True)).code == "conflict"
    await call(fs.fs_write, **SITE, path="fresh.txt", content="", create_only=True)
    assert (home.site / "fresh.txt").read_bytes() == b""
    assert temp_leftovers(home.site / "public") == [] and temp_leftovers(home.site) == []


@pytest.mark.anyio
async def test_write_refusals(fsa: FileHandlers, home: Home) -> None:
    fs = fsa
    big = "a" * (READ_LIMIT + 1)
    too_large = await error(fs.fs_write, **SITE, path="big.txt", content=big)
    assert too_large.code == "too_large" and too_large.details["limit"] == READ_LIMIT
    assert (await error(fs.fs_write, **SITE, path="public", content="x")).code == "validation_error"
    assert (await error(fs.fs_write, **SITE, path="missing/x.txt", content="x")).code == "not_found"
    assert (await error(fs.fs_write, **SITE, path="notes.txt/x", content="x")).code == "not_found"
    assert (await error(fs.fs_write, **SITE, path="", content="x")).code == "validation_error"
    assert (await error(fs.fs_write, **SITE, path="x.txt", content=3)).code == "validation_error"
    assert (await error(fs.fs_write, **SITE, path="x.txt", content="\ud800")).code == "validation_error"
    os.mkfifo(home.site / "fifo")
    assert (await error(fs.fs_write, **SITE, path="fifo", content="x")).code == "validation_error"
    assert stat.S_ISFIFO(os.lstat(home.site / "fifo").st_mode)
    assert not (home.site / "big.txt").exists() and temp_leftovers(home.site) == []


@pytest.mark.anyio
async def test_write_through_an_in_root_link_edits_its_target(fsa: FileHandlers, home: Home) -> None:
    result = await call(fsa.fs_write, **SITE, path="in_file_link", content="<h1>new</h1>\n")
    assert result["entry"]["path"] == "public/index.html"
    assert (home.site / "in_file_link").is_symlink()
    assert (home.site / "public" / "index.html").read_text() == "<h1>new</h1>\n"
    # A dangling link inside is not a way to create a file.
    assert (await error(fsa.fs_write, **SITE, path="dangling_in", content="x")).code == "validation_error"
    assert not (home.site / "nothere").exists()


# --- fs.mkdir --------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_mkdir(fs: FileHandlers, home: Home) -> None:
    made = await call(fs.fs_mkdir, **SITE, path="docs")
    Entry.model_validate(made["entry"])
    assert made["entry"]["type"] == "dir" and (home.site / "docs").is_dir()
    assert stat.S_IMODE((home.site / "docs").stat().st_mode) == 0o755
    assert (await error(fs.fs_mkdir, **SITE, path="docs")).code == "conflict"
    assert (await error(fs.fs_mkdir, **SITE, path="notes.txt")).code == "conflict"
    assert (await error(fs.fs_mkdir, **SITE, path="x/y/z")).code == "not_found"
    deep = await call(fs.fs_mkdir, **SITE, path="x/y/z", parents=True)
    assert deep["entry"]["path"] == "x/y/z" and (home.site / "x" / "y" / "z").is_dir()
    assert (await error(fs.fs_mkdir, **SITE, path="x/y/z", parents=True)).code == "conflict"
    assert (await call(fs.fs_mkdir, **SITE, path="in_link/via", parents=True))["entry"]["path"] == "in_link/via"
    assert (home.site / "public" / "via").is_dir()
    assert (await error(fs.fs_mkdir, **SITE, path="")).code == "conflict"
    assert (await error(fs.fs_mkdir, **SITE, path="dangling_in")).code == "conflict"
    assert (await error(fs.fs_mkdir, **SITE, path="dangling_in/x", parents=True)).code == "not_found"


# --- fs.move / fs.copy -----------------------------------------------------------------------


@pytest.mark.anyio
async def test_move_rename_into_folder_and_conflicts(fsa: FileHandlers, home: Home) -> None:
    fs, site = fsa, home.site
    assert await call(fs.fs_move, **SITE, paths=["notes.txt"], destination="renamed.txt") == {"moved": ["renamed.txt"]}
    assert (site / "renamed.txt").read_text() == "héllo wörld\n" and not (site / "notes.txt").exists()
    (site / "one.txt").write_text("1")
    (site / "two.txt").write_text("2")
    moved = await call(fs.fs_move, **SITE, paths=["one.txt", "two.txt"], destination="public")
    assert moved == {"moved": ["public/one.txt", "public/two.txt"]}
    # A taken name: nothing of the batch is done.
    (site / "three.txt").write_text("3")
    (site / "one.txt").write_text("new one")
    taken = await error(fs.fs_move, **SITE, paths=["three.txt", "one.txt"], destination="public")
    assert taken.code == "conflict" and taken.details == {"path": "public/one.txt"}
    assert (site / "three.txt").exists() and (site / "one.txt").exists()
    await call(fs.fs_move, **SITE, paths=["three.txt", "one.txt"], destination="public", overwrite=True)
    assert (site / "public" / "one.txt").read_text() == "new one"
    assert (await error(fs.fs_move, **SITE, paths=["renamed.txt", "a"], destination="nowhere")).code == "not_found"
    assert (await error(fs.fs_move, **SITE, paths=["missing"], destination="public")).code == "not_found"
    assert (await error(fs.fs_move, **SITE, paths=["renamed.txt"], destination="nowhere/x")).code == "not_found"
    assert (await error(fs.fs_move, **SITE, paths=[""], destination="public")).code == "validation_error"
    assert (await error(fs.fs_move, **SITE, paths=[], destination="public")).code == "validation_error"
    same = await error(fs.fs_move, **SITE, paths=["public/one.txt"], destination="public", overwrite=True)
    assert same.code == "validation_error" and (site / "public" / "one.txt").exists()
    assert temp_leftovers(site) == [] and temp_leftovers(site / "public") == []


@pytest.mark.anyio
async def test_move_and_copy_a_folder_into_itself_is_refused(fs: FileHandlers, home: Home) -> None:
    for handler in (fs.fs_move, fs.fs_copy):
        for destination in ("a", "a/b", "a/b/new-name", "in_link/css"):
            source = "public" if destination.startswith("in_link") else "a"
            refused = await error(handler, **SITE, paths=[source], destination=destination)
            assert refused.code == "validation_error", (handler, destination)
    assert (home.site / "a" / "b" / "deep.txt").exists() and not (home.site / "a" / "b" / "a").exists()


@pytest.mark.anyio
async def test_move_folder_over_folder_with_overwrite(fsa: FileHandlers, home: Home) -> None:
    site = home.site
    (site / "dst" / "a").mkdir(parents=True)
    (site / "dst" / "a" / "old.txt").write_text("old")
    assert (await error(fsa.fs_move, **SITE, paths=["a"], destination="dst")).code == "conflict"
    await call(fsa.fs_move, **SITE, paths=["a"], destination="dst", overwrite=True)
    assert (site / "dst" / "a" / "b" / "deep.txt").exists() and not (site / "dst" / "a" / "old.txt").exists()
    assert temp_leftovers(site / "dst") == []


@pytest.mark.anyio
async def test_copy_is_recursive_keeps_links_and_modes_and_skips_specials(fsa: FileHandlers, home: Home) -> None:
    site = home.site
    os.chmod(site / "a" / "b" / "deep.txt", 0o640)
    os.chmod(site / "a" / "b", 0o750)
    os.symlink("b/deep.txt", site / "a" / "link")
    os.symlink("/etc/passwd", site / "a" / "abs-link")
    os.mkfifo(site / "a" / "fifo")
    (site / "a" / "setuid").write_text("x")
    os.chmod(site / "a" / "setuid", 0o4755)
    result = await call(fsa.fs_copy, **SITE, paths=["a"], destination="public")
    assert result == {"copied": ["public/a"], "skipped": ["a/fifo"]}
    copy = site / "public" / "a"
    assert (copy / "b" / "deep.txt").read_text() == "deep\n"
    assert stat.S_IMODE((copy / "b" / "deep.txt").stat().st_mode) == 0o640
    assert stat.S_IMODE((copy / "b").stat().st_mode) == 0o750
    assert os.readlink(copy / "link") == "b/deep.txt" and os.readlink(copy / "abs-link") == "/etc/passwd"
    assert os.readlink(copy / "out_mid") == "../../../outside"  # the link itself, not what it points to
    assert not (copy / "fifo").exists()
    assert stat.S_IMODE((copy / "setuid").stat().st_mode) == 0o755  # setuid is not copied
    assert (copy / "b" / "deep.txt").stat().st_mtime == (site / "a" / "b" / "deep.txt").stat().st_mtime
    # Copy of a file beside itself under a new name; taken names; overwrite.
    assert await call(fsa.fs_copy, **SITE, paths=["notes.txt"], destination="notes-2.txt") == {
        "copied": ["notes-2.txt"],
        "skipped": [],
    }
    assert (await error(fsa.fs_copy, **SITE, paths=["notes.txt"], destination="notes-2.txt")).code == "conflict"
    (site / "notes.txt").write_text("changed")
    await call(fsa.fs_copy, **SITE, paths=["notes.txt"], destination="notes-2.txt", overwrite=True)
    assert (site / "notes-2.txt").read_text() == "changed"
    same = await error(fsa.fs_copy, **SITE, paths=["notes.txt"], destination="", overwrite=True)
    assert same.code == "validation_error"
    assert temp_leftovers(site) == [] and temp_leftovers(site / "public") == []


@pytest.mark.anyio
async def test_cross_site_move_and_copy(fsa: FileHandlers, home: Home) -> None:
    to_other = {"scope": "site", "domain": "other.org"}
    copied = await call(fsa.fs_copy, **SITE, paths=["public"], destination="", to=to_other)
    assert copied["copied"] == ["public"] and (home.other / "public" / "index.html").exists()
    moved = await call(fsa.fs_move, **SITE, paths=["notes.txt"], destination="from-example.txt", to=to_other)
    assert moved == {"moved": ["from-example.txt"]}
    assert (home.other / "from-example.txt").read_text() == "héllo wörld\n" and not (home.site / "notes.txt").exists()
    # Into the root scope, and from a site to a missing one.
    await call(fsa.fs_copy, **SITE, paths=["a"], destination="other-site", to={"scope": "root"})
    assert (home.other / "a" / "b" / "deep.txt").exists()
    missing = await error(fsa.fs_copy, **SITE, paths=["a"], destination="", to={"domain": "nope.example"})
    assert missing.code == "not_found"
    outside = await error(fsa.fs_copy, **SITE, paths=["a"], destination="../outside", to=to_other)
    assert outside.code == "path_outside_scope"
    other_server = await error(fsa.fs_copy, **SITE, paths=["a"], destination="", to={"server_id": "srv-2"})
    assert other_server.code == "validation_error"


# --- fs.delete and the trash -----------------------------------------------------------------


@pytest.mark.anyio
async def test_delete_to_trash_restore_and_empty(fs: FileHandlers, home: Home) -> None:
    site = home.site
    trashed = (await call(fs.fs_delete, **SITE, paths=["notes.txt", "a"]))["trashed"]
    for item in trashed:
        TrashItem.model_validate(item)
    by_path = {item["original_path"]: item for item in trashed}
    assert set(by_path) == {"notes.txt", "a"}
    assert by_path["a"]["type"] == "dir" and by_path["a"]["size"] == len("deep\n")
    assert by_path["notes.txt"]["size"] == len("héllo wörld\n".encode()) and by_path["notes.txt"]["name"] == "notes.txt"
    assert not (site / "notes.txt").exists() and not (site / "a").exists()
    trash = site / TRASH_FOLDER
    assert stat.S_IMODE(trash.stat().st_mode) == 0o700
    for item in trashed:
        assert (trash / item["id"]).exists()
        assert orjson.loads((trash / f"{item['id']}.json").read_bytes())["original_path"] == item["original_path"]
    # The same name trashed twice: two items, two ids.
    (site / "notes.txt").write_text("second")
    again = (await call(fs.fs_delete, **SITE, paths=["notes.txt"]))["trashed"][0]
    assert again["id"] not in {i["id"] for i in trashed}
    listing = await call(fs.fs_trash_list, **SITE)
    assert listing["purged"] == 0 and len(listing["items"]) == 3
    for item in listing["items"]:
        TrashItem.model_validate(item)
    # Restore: a taken path is refused unless overwrite; missing folders are made again.
    (site / "notes.txt").write_text("third")
    taken = await error(fs.fs_trash_restore, **SITE, ids=[again["id"]])
    assert taken.code == "conflict"
    assert await call(fs.fs_trash_restore, **SITE, ids=[again["id"]], overwrite=True) == {"restored": ["notes.txt"]}
    assert (site / "notes.txt").read_text() == "second"
    (site / "x").mkdir()
    (site / "x" / "y.txt").write_text("y")
    y = (await call(fs.fs_delete, **SITE, paths=["x/y.txt"]))["trashed"][0]
    os.rmdir(site / "x")
    assert await call(fs.fs_trash_restore, **SITE, ids=[y["id"]]) == {"restored": ["x/y.txt"]}
    assert (site / "x" / "y.txt").read_text() == "y"
    assert await call(fs.fs_trash_restore, **SITE, ids=[by_path["a"]["id"]]) == {"restored": ["a"]}
    assert (site / "a" / "b" / "deep.txt").read_text() == "deep\n"
    assert (await error(fs.fs_trash_restore, **SITE, ids=[by_path["a"]["id"]])).code == "not_found"
    assert (await error(fs.fs_trash_restore, **SITE, ids=["../../etc"])).code == "not_found"
    assert (await error(fs.fs_trash_restore, **SITE, ids=[])).code == "validation_error"
    assert await call(fs.fs_trash_empty, **SITE) == {"removed": 1}
    assert os.listdir(trash) == [] and (await call(fs.fs_trash_list, **SITE))["items"] == []
    assert await call(fs.fs_trash_empty, scope="site", domain="other.org") == {"removed": 0}


@pytest.mark.anyio
async def test_trash_purges_items_older_than_30_days(fsa: FileHandlers, home: Home) -> None:
    site = home.site
    (site / "old").mkdir()
    (site / "old" / "f.txt").write_text("f")
    old = (await call(fsa.fs_delete, **SITE, paths=["old"]))["trashed"][0]
    recent = (await call(fsa.fs_delete, **SITE, paths=["notes.txt"]))["trashed"][0]
    sidecar = site / TRASH_FOLDER / f"{old['id']}.json"
    record = orjson.loads(sidecar.read_bytes())
    record["deleted_at"] = (datetime.now(UTC) - timedelta(days=31)).strftime("%Y-%m-%dT%H:%M:%SZ")
    sidecar.write_bytes(orjson.dumps(record))
    edge = site / TRASH_FOLDER / f"{recent['id']}.json"
    record = orjson.loads(edge.read_bytes())
    record["deleted_at"] = (datetime.now(UTC) - timedelta(days=29, hours=23)).strftime("%Y-%m-%dT%H:%M:%SZ")
    edge.write_bytes(orjson.dumps(record))
    listing = await call(fsa.fs_trash_list, **SITE)
    assert listing["purged"] == 1 and [i["id"] for i in listing["items"]] == [recent["id"]]
    assert sorted(os.listdir(site / TRASH_FOLDER)) == sorted([recent["id"], f"{recent['id']}.json"])
    # A broken sidecar is skipped, never fatal.
    (site / TRASH_FOLDER / f"{recent['id']}.json").write_text("{not json")
    assert await call(fsa.fs_trash_list, **SITE) == {"items": [], "purged": 0}


@pytest.mark.anyio
async def test_delete_refusals_and_permanent(fs: FileHandlers, home: Home) -> None:
    site = home.site
    await call(fs.fs_delete, **SITE, paths=["notes.txt"])
    for path in ("", "/", TRASH_FOLDER, f"{TRASH_FOLDER}/x", "./.Trash//"):
        assert (await error(fs.fs_delete, **SITE, paths=[path])).code == "validation_error", path
    os.symlink(TRASH_FOLDER, site / "trash-link")
    item = os.listdir(site / TRASH_FOLDER)[0].removesuffix(".json")
    assert (await error(fs.fs_delete, **SITE, paths=[f"trash-link/{item}"])).code == "validation_error"
    assert (await error(fs.fs_delete, **SITE, paths=["missing", "a"])).code == "not_found"
    assert (site / "a").exists()  # nothing of the batch is done
    deleted = await call(fs.fs_delete, **SITE, paths=["a/b/deep.txt", "a", "a/b"], permanent=True)
    assert deleted == {"deleted": ["a/b/deep.txt", "a", "a/b"]}
    assert not (site / "a").exists()
    # A link is deleted, never what it points to.
    await call(fs.fs_delete, **SITE, paths=["out_rel", "out_file", "in_link"], permanent=True)
    assert (home.outside / "secret.txt").exists() and (site / "public" / "index.html").exists()
    assert not lexists(site / "out_rel")


# --- fs.chmod, fs.dirsize, fs.search ---------------------------------------------------------


@pytest.mark.anyio
async def test_chmod(fs: FileHandlers, home: Home) -> None:
    site = home.site
    before = outside_state(home)
    assert await call(fs.fs_chmod, **SITE, paths=["notes.txt"], mode=0o600) == {"changed": 1}
    assert stat.S_IMODE((site / "notes.txt").stat().st_mode) == 0o600
    assert await call(fs.fs_chmod, **SITE, paths=["notes.txt"], mode="0640") == {"changed": 1}
    assert stat.S_IMODE((site / "notes.txt").stat().st_mode) == 0o640
    result = await call(fs.fs_chmod, **SITE, paths=["a"], mode=0o700, recursive=True, only="dirs")
    assert result == {"changed": 2}
    assert stat.S_IMODE((site / "a" / "b").stat().st_mode) == 0o700
    assert stat.S_IMODE((site / "a" / "b" / "deep.txt").stat().st_mode) == 0o644
    assert await call(fs.fs_chmod, **SITE, paths=["a"], mode=0o600, recursive=True, only="files") == {"changed": 1}
    assert stat.S_IMODE((site / "a" / "b" / "deep.txt").stat().st_mode) == 0o600
    everything = await call(fs.fs_chmod, **SITE, paths=["a", "public", "notes.txt"], mode=0o755, recursive=True)
    assert everything["changed"] > 5
    for root in ("", ".", "/", "./"):  # the scope root itself, like delete and move
        refused = await error(fs.fs_chmod, **SITE, paths=["notes.txt", root], mode=0o700, recursive=True)
        assert refused.code == "validation_error", root
        assert (await error(fs.fs_chmod, scope="root", paths=[root], mode=0o700)).code == "validation_error"
    for bad in (0o4755, 0o2755, 0o1777, 0o10000, -1, "u+x", "99", None):
        assert (await error(fs.fs_chmod, **SITE, paths=["notes.txt"], mode=bad)).code == "validation_error", bad
    assert (await error(fs.fs_chmod, **SITE, paths=["notes.txt"], mode=0o644, only="links")).code == "validation_error"
    assert (await error(fs.fs_chmod, **SITE, paths=["out_file"], mode=0o777)).code == "path_outside_scope"
    assert (await error(fs.fs_chmod, **SITE, paths=["notes.txt", "missing"], mode=0o777)).code == "not_found"
    assert stat.S_IMODE((site / "notes.txt").stat().st_mode) == 0o755  # nothing of the batch
    assert outside_state(home) == before


@pytest.mark.anyio
async def test_dirsize(fsa: FileHandlers, home: Home) -> None:
    site = home.site
    os.link(site / "a" / "b" / "deep.txt", site / "a" / "hard")
    size = await call(fsa.fs_dirsize, **SITE, path="a")
    assert size == {"path": "a", "bytes": 5, "files": 2, "dirs": 1}
    assert await call(fsa.fs_dirsize, **SITE, path="notes.txt") == {
        "path": "notes.txt",
        "bytes": len("héllo wörld\n".encode()),
        "files": 1,
        "dirs": 0,
    }
    whole = await call(fsa.fs_dirsize, **SITE, path="")
    assert whole["dirs"] == 4 and whole["files"] == 5  # links (to outside too) are not followed
    assert (await error(fsa.fs_dirsize, **SITE, path="out_rel")).code == "path_outside_scope"


@pytest.mark.anyio
async def test_content_search_streams_a_big_log_and_numbers_its_lines(fsa: FileHandlers, home: Home) -> None:
    """A 24 MB log is searched block by block: matches in its first and last line and on a line
    across a block boundary, each with its line number; a binary of the same size is skipped."""
    line = b"%08d ok\n"  # 12 bytes
    count = 2 * 1024 * 1024
    lines = [line % n for n in range(count)]
    across = tree_ops.SEARCH_BLOCK // 12  # the line holding the first block's last byte
    lines[0], lines[across], lines[-1] = b"ERROR first\n", b"ERRORacross\n", b"ERROR last\n"
    (home.site / "big.log").write_bytes(b"".join(lines))
    (home.site / "big.bin").write_bytes(b"\0" + b"ERROR\n" * (4 * 1024 * 1024))
    found = await call(fsa.fs_search, **SITE, path="", query="error", content=True)
    assert [(m["entry"]["path"], m["line"], m["text"]) for m in found["matches"]] == [
        ("big.log", 1, "ERROR first"),
        ("big.log", across + 1, "ERRORacross"),
        ("big.log", count, "ERROR last"),
    ]


@pytest.mark.anyio
async def test_search(fsa: FileHandlers, home: Home) -> None:
    site = home.site
    (site / "image.bin").write_bytes(b"\x00hello binary")
    (site / "big.txt").write_bytes(b"hello " * (READ_LIMIT // 6 + 10))
    names = await call(fsa.fs_search, **SITE, path="", query="HTML")
    assert [m["entry"]["path"] for m in names["matches"]] == ["public/index.html"] and not names["truncated"]
    Entry.model_validate(names["matches"][0]["entry"])
    links = await call(fsa.fs_search, **SITE, path="", query="out_")
    found = {m["entry"]["path"]: m["entry"] for m in links["matches"]}
    assert found["out_rel"]["type"] == "symlink" and "a/out_mid" in found
    assert all(not p.startswith("outside") for p in found)
    content = await call(fsa.fs_search, **SITE, path="", query="HELLO", content=True)
    # A file over the editor's limit is searched too; its one 10 MiB line is found once.
    assert sorted((m["entry"]["path"], m["line"], m["text"]) for m in content["matches"]) == [
        ("big.txt", 1, ("hello " * 100)[:500]),
        ("public/index.html", 1, "<h1>hello</h1>"),
    ]
    (site / "many.txt").write_text("x\n" * 50)
    limited = await call(fsa.fs_search, **SITE, path="", query="x", content=True, limit=10)
    assert len(limited["matches"]) == 10 and limited["truncated"]
    await call(fsa.fs_delete, **SITE, paths=["notes.txt"])
    assert (await call(fsa.fs_search, **SITE, path="", query="notes"))["matches"] == []  # not in the trash
    assert (await error(fsa.fs_search, **SITE, path="", query="")).code == "validation_error"
    assert (await error(fsa.fs_search, **SITE, path="notes-none", query="x")).code == "not_found"
    assert (await error(fsa.fs_search, **SITE, path="public/index.html", query="x")).code == "validation_error"
    assert (await error(fsa.fs_search, **SITE, path="out_rel", query="secret")).code == "path_outside_scope"


# --- ownership ---------------------------------------------------------------------------------

SITE_USER = "fdfiles-test"


@pytest.fixture
def site_user() -> Iterator[pwd.struct_passwd]:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    subprocess.run(["userdel", SITE_USER], capture_output=True)
    done = subprocess.run(["useradd", "--system", "--no-create-home", SITE_USER], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"useradd failed: {done.stderr}")
    try:
        yield pwd.getpwnam(SITE_USER)
    finally:
        subprocess.run(["userdel", SITE_USER], capture_output=True)


@pytest.mark.anyio
async def test_new_entries_belong_to_the_site_user(fsa: FileHandlers, home: Home, site_user: pwd.struct_passwd) -> None:
    site, uid, gid = home.site, site_user.pw_uid, site_user.pw_gid
    os.chown(site, uid, gid)
    (site / "root-owned.txt").write_text("root's")
    os.chmod(site / "root-owned.txt", 0o600)
    fs = fsa

    def owned(path: Path) -> bool:
        st = os.lstat(path)
        return (st.st_uid, st.st_gid) == (uid, gid)

    await call(fs.fs_write, **SITE, path="new.txt", content="x")
    await call(fs.fs_mkdir, **SITE, path="d1/d2", parents=True)
    await call(fs.fs_copy, **SITE, paths=["a", "in_link"], destination="d1")
    await call(fs.fs_compress, **SITE, paths=["public"], format="tar.gz", destination="p.tar.gz")
    await call(fs.fs_extract, **SITE, path="p.tar.gz", destination="unpacked")
    await call(fs.fs_delete, **SITE, paths=["new.txt"])
    for path in ("d1", "d1/d2", "d1/a", "d1/a/b", "d1/a/b/deep.txt", "d1/in_link", "p.tar.gz", "unpacked"):
        assert owned(site / path), path
    assert owned(site / "unpacked" / "public" / "css" / "site.css") and owned(site / TRASH_FOLDER)
    assert all(owned(site / TRASH_FOLDER / name) for name in os.listdir(site / TRASH_FOLDER))
    # An edit keeps the owner and the mode of the file it replaces.
    await call(fs.fs_write, **SITE, path="root-owned.txt", content="edited")
    st = os.stat(site / "root-owned.txt")
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o600)
    # A move from the root scope into the site hands the tree to the site user.
    (home.home / "loose").mkdir()
    (home.home / "loose" / "f.txt").write_text("f")
    await call(fs.fs_move, scope="root", paths=["loose"], destination="", to=SITE)
    assert owned(site / "loose") and owned(site / "loose" / "f.txt")


@pytest.mark.anyio
async def test_hard_links_to_another_users_file_are_neither_read_nor_changed(
    fsa: FileHandlers, home: Home, site_user: pwd.struct_passwd
) -> None:
    """A site user hard-links a file outside the scope into the site (root's, here: where hard
    links are not protected, it could be /etc/shadow); the agent, running as root, must not read
    it or change its mode. The user's own hard links work as any file does."""
    site, fs = home.site, fsa
    for path in [site, *site.rglob("*")]:
        os.lchown(path, site_user.pw_uid, site_user.pw_gid)
    (site / "sub").mkdir()
    (site / "sub" / "plain.txt").write_text("plain")
    os.lchown(site / "sub" / "plain.txt", site_user.pw_uid, site_user.pw_gid)
    os.link(home.outside / "secret.txt", site / "sub" / "hard-out")  # root's, 0600
    os.link(site / "notes.txt", site / "sub" / "hard-own")  # the site user's own
    before = outside_state(home)
    for scope, prefix in ((SITE, ""), ({"scope": "root"}, "example-com/")):
        out = f"{prefix}sub/hard-out"
        assert (await error(fs.fs_chmod, **scope, paths=[out], mode=0o666)).code == "forbidden"
        assert (await error(fs.fs_chmod, **scope, paths=[f"{prefix}notes.txt", out], mode=0o600)).code == "forbidden"
        assert (await error(fs.fs_read, **scope, path=out)).code == "forbidden"
        assert (await error(fs.fs_read, **scope, path=out, offset=0, length=10)).code == "forbidden"
        with fs.open_scope(scope) as jail, pytest.raises(RpcError) as refused:
            read.open_regular(jail, out)  # what fs.download and the viewer's ranged read open
        assert (refused.value.code, refused.value.details) == ("forbidden", {"path": out})
        changed = await call(fs.fs_chmod, **scope, paths=[f"{prefix}sub"], mode=0o640, recursive=True, only="files")
        assert changed == {"changed": 2}  # plain.txt and hard-own; hard-out left alone
        assert await call(fs.fs_chmod, **scope, paths=[f"{prefix}sub/hard-own"], mode=0o644) == {"changed": 1}
        assert (await call(fs.fs_read, **scope, path=f"{prefix}sub/hard-own"))["content"] == "héllo wörld\n"
    assert stat.S_IMODE((home.outside / "secret.txt").stat().st_mode) == 0o600
    assert stat.S_IMODE((site / "sub" / "plain.txt").stat().st_mode) == 0o640
    assert outside_state(home) == before


@pytest.mark.anyio
async def test_copy_compress_and_content_search_leave_foreign_hard_links_out(
    fsa: FileHandlers, home: Home, site_user: pwd.struct_passwd
) -> None:
    """The same hard link to root's file: copying or compressing it by name is refused; inside a
    folder it is left out and reported as skipped; a content search does not read it."""
    site, fs = home.site, fsa
    for path in [site, *site.rglob("*")]:
        os.lchown(path, site_user.pw_uid, site_user.pw_gid)
    (site / "tree").mkdir()
    (site / "tree" / "plain.txt").write_text("needle in a plain file")
    os.lchown(site / "tree" / "plain.txt", site_user.pw_uid, site_user.pw_gid)
    (home.outside / "secret.txt").write_text("needle of root")
    os.link(home.outside / "secret.txt", site / "tree" / "hard-out")
    (site / "dest").mkdir()
    before = outside_state(home)
    for scope, prefix in ((SITE, ""), ({"scope": "root"}, "example-com/")):
        out, tree = f"{prefix}tree/hard-out", f"{prefix}tree"
        for refused in (
            await error(fs.fs_copy, **scope, paths=[out], destination=f"{prefix}copied"),
            await error(fs.fs_copy, **scope, paths=[f"{prefix}notes.txt", out], destination=f"{prefix}dest"),
        ):
            assert (refused.code, refused.details) == ("forbidden", {"path": out})
        assert not (site / "copied").exists() and os.listdir(site / "dest") == []
        with fs.open_scope(scope) as jail:
            with pytest.raises(RpcError) as named:
                archives.compress(jail, [out], "zip", f"{prefix}one.zip", token=CancelToken(), progress=Progress())
            assert (named.value.code, named.value.details) == ("forbidden", {"path": out})
            assert not (site / "one.zip").exists()
            made = archives.compress(jail, [tree], "zip", f"{prefix}tree.zip", token=CancelToken(), progress=Progress())
            assert made["skipped"] == ["tree/hard-out"]
            with zipfile.ZipFile(site / "tree.zip") as archive:
                assert sorted(archive.namelist()) == ["tree/", "tree/plain.txt"]
            (site / "tree.zip").unlink()
            copied = transfer.copy(jail, jail, [tree], f"{prefix}tree-copy", overwrite=False, token=CancelToken())
            assert copied["skipped"] == [out]
            assert sorted(os.listdir(site / "tree-copy")) == ["plain.txt"]
            shutil.rmtree(site / "tree-copy")
            found = tree_ops.search(jail, tree, "needle", content=True, limit=10, token=CancelToken())
            assert [match["entry"]["name"] for match in found["matches"]] == ["plain.txt"]
    assert outside_state(home) == before


@pytest.mark.anyio
async def test_writes_uploads_and_moves_never_reach_a_foreign_hard_link(
    fsa: FileHandlers, home: Home, site_user: pwd.struct_passwd
) -> None:
    """The same hard link to root's file: a save or an upload over it would hand root's owner and
    mode (and, through if_match, the etag of root's content) to what is written, so each is
    refused; a move into the site keeps it root's instead of giving it to the site's user."""
    site, fs = home.site, fsa
    for path in [site, *site.rglob("*")]:
        os.lchown(path, site_user.pw_uid, site_user.pw_gid)
    os.link(home.outside / "secret.txt", site / "hard-out")
    (home.home / "loose").mkdir()
    (home.home / "loose" / "plain.txt").write_text("plain")
    os.link(home.outside / "secret.txt", home.home / "loose" / "hard-out")
    os.link(home.outside / "secret.txt", home.home / "hard-alone")
    before = outside_state(home)
    etag = content_etag((home.outside / "secret.txt").read_bytes())
    for scope, prefix in ((SITE, ""), ({"scope": "root"}, "example-com/")):
        out = f"{prefix}hard-out"
        for refused in (
            await error(fs.fs_write, **scope, path=out, content="mine now"),
            await error(fs.fs_write, **scope, path=out, content="mine now", if_match=etag),
            await error(fs.fs_upload_check, **scope, path=out, overwrite=True),
        ):
            assert (refused.code, refused.details) == ("forbidden", {"path": out})
        with fs.open_scope(scope) as jail, pytest.raises(RpcError) as upload:
            write_ops.Upload(jail, out, overwrite=True)  # fs.upload and the ingress open this
        assert (upload.value.code, upload.value.details) == ("forbidden", {"path": out})
    assert os.stat(site / "hard-out").st_ino == os.stat(home.outside / "secret.txt").st_ino
    assert temp_leftovers(site) == []
    # A move into the site gives the tree to its user: never the foreign link in it.
    refused = await error(fs.fs_move, scope="root", paths=["loose", "hard-alone"], destination="", to=SITE)
    assert (refused.code, refused.details) == ("forbidden", {"path": "hard-alone"})
    assert (home.home / "loose").exists() and not (site / "loose").exists()  # nothing of the batch
    await call(fs.fs_move, scope="root", paths=["loose"], destination="", to=SITE)
    assert os.stat(site / "loose" / "plain.txt").st_uid == site_user.pw_uid
    assert os.stat(site / "loose" / "hard-out").st_uid == 0
    after = outside_state(home)
    assert (after["outside"], after["other"]) == (before["outside"], before["other"])


@pytest.mark.anyio
async def test_root_never_vouches_for_a_hard_link(fsa: FileHandlers, home: Home) -> None:
    """In a site folder that root owns, a root-owned file with several links is still refused:
    the owner tells whose a hard link is, and root's files are no site's."""
    site, fs = home.site, fsa
    assert os.stat(site).st_uid == os.geteuid()
    os.link(home.outside / "secret.txt", site / "hard-out")
    (site / "own.txt").write_text("mine")
    if os.geteuid() != 0:
        assert await call(fs.fs_read, **SITE, path="hard-out")  # the agent's own user vouches for it
        return
    for scope, path in ((SITE, "hard-out"), ({"scope": "root"}, "example-com/hard-out")):
        assert (await error(fs.fs_read, **scope, path=path)).code == "forbidden"
        assert (await error(fs.fs_chmod, **scope, paths=[path], mode=0o666)).code == "forbidden"
    assert (await call(fs.fs_read, **SITE, path="own.txt"))["content"] == "mine"  # one link: as ever
    assert stat.S_IMODE((home.outside / "secret.txt").stat().st_mode) == 0o600


# --- fs.download and fs.upload over a real link ------------------------------------------------


@pytest.mark.anyio
async def test_download_streams_the_exact_bytes(fsa: FileHandlers, home: Home) -> None:
    data = random.Random(5).randbytes(3 * 1024 * 1024 + 17)
    (home.site / "blob.bin").write_bytes(data)
    (home.site / "empty.bin").write_bytes(b"")
    os.mkfifo(home.site / "fifo")
    async with linked(fsa) as hub:
        for name, expected in (("blob.bin", data), ("empty.bin", b"")):
            chunks: list[list[Any] | bytes] = []
            async with hub.open_stream(SERVER_ID, "fs.download", {**SITE, "path": name}, window=512 * 1024) as stream:
                async for chunk in stream:
                    chunks.append(chunk)
                assert stream.result == {"size": len(expected)}
            head = chunks[0]
            assert isinstance(head, list) and head[0]["size"] == len(expected) and head[0]["mtime"].endswith("Z")
            body = chunks[1:]
            assert all(isinstance(c, bytes) and len(c) <= 256 * 1024 for c in body)
            assert b"".join(c for c in body if isinstance(c, bytes)) == expected
        for path, code in (
            ("public", "validation_error"),
            ("fifo", "validation_error"),
            ("out_file", "path_outside_scope"),
        ):
            with pytest.raises(Exception) as info:
                async with hub.open_stream(SERVER_ID, "fs.download", {**SITE, "path": path}) as stream:
                    async for _ in stream:
                        pass
            assert getattr(info.value, "code", None) == code, path
        with pytest.raises(Exception) as info:
            await hub.call(SERVER_ID, "fs.download", {**SITE, "path": "blob.bin"})
        assert getattr(info.value, "code", None) == "validation_error"


async def _upload(hub: object, params: dict[str, object], data: bytes, piece: int = 1024 * 1024) -> object:
    async with hub.open_upload(SERVER_ID, "fs.upload", params) as upload:  # type: ignore[attr-defined]
        for offset in range(0, len(data), piece):
            await upload.send(data[offset : offset + piece])
        return await upload.finish()


@pytest.mark.anyio
async def test_uploads(fsa: FileHandlers, home: Home) -> None:
    site = home.site
    big = random.Random(9).randbytes(5 * 1024 * 1024 + 3)
    async with linked(fsa) as hub:
        for name, data in (("zero.bin", b""), ("one.bin", b"!"), ("big.bin", big)):
            result = await _upload(hub, {**SITE, "path": f"public/{name}", "size": len(data)}, data)
            assert isinstance(result, dict)
            Entry.model_validate(result["entry"])
            assert result["entry"]["size"] == len(data) and (site / "public" / name).read_bytes() == data
        await _upload(hub, {**SITE, "path": "nosize.bin"}, b"abc")
        assert (site / "nosize.bin").read_bytes() == b"abc"
        # A taken name is refused before any byte is taken; overwrite keeps the mode.
        os.chmod(site / "public" / "one.bin", 0o640)
        with pytest.raises(Exception) as info:
            await _upload(hub, {**SITE, "path": "public/one.bin"}, big)
        assert getattr(info.value, "code", None) == "conflict"
        await _upload(hub, {**SITE, "path": "public/one.bin", "overwrite": True}, b"replaced")
        assert (site / "public" / "one.bin").read_bytes() == b"replaced"
        assert stat.S_IMODE((site / "public" / "one.bin").stat().st_mode) == 0o640
        # Fewer or more bytes than announced: nothing at the destination.
        for data in (big[:1000], big[:3000]):
            with pytest.raises(Exception) as info:
                await _upload(hub, {**SITE, "path": "short.bin", "size": 2000}, data)
            assert getattr(info.value, "code", None) == "validation_error"
        for path, code in (
            ("out_rel/x.bin", "path_outside_scope"),
            ("dangling_out", "conflict"),
            ("public", "conflict"),
        ):
            with pytest.raises(Exception) as info:
                await _upload(hub, {**SITE, "path": path}, b"x")
            assert getattr(info.value, "code", None) == code, path
        with pytest.raises(Exception) as info:
            await _upload(hub, {**SITE, "path": "dangling_out", "overwrite": True}, b"x")
        assert getattr(info.value, "code", None) == "path_outside_scope"
        # Cut off half way: the caller goes away; the agent removes its temporary file.
        half = random.Random(1).randbytes(6 * 1024 * 1024)
        async with hub.open_upload(SERVER_ID, "fs.upload", {**SITE, "path": "half.bin", "size": len(half)}) as upload:
            await upload.send(half[: len(half) // 2])
            await eventually(lambda: bool(temp_leftovers(site)))
        await eventually(lambda: not temp_leftovers(site))
    assert not (site / "half.bin").exists() and not (site / "short.bin").exists()
    assert temp_leftovers(site) == [] and temp_leftovers(site / "public") == []
    assert not (home.outside / "created-through-link").exists()


@pytest.mark.anyio
async def test_upload_cut_by_a_dropped_link_leaves_nothing(fsa: FileHandlers, home: Home) -> None:
    site = home.site
    async with linked(fsa) as hub:
        async with hub.open_upload(SERVER_ID, "fs.upload", {**SITE, "path": "drop.bin", "size": 10**7}) as upload:
            await upload.send(bytes(3 * 1024 * 1024))
            await eventually(lambda: bool(temp_leftovers(site)))
            session = hub._links[SERVER_ID]  # the agent's link goes down mid-transfer
            session.close(CLOSE_INTERNAL_ERROR)
        await eventually(lambda: not temp_leftovers(site))
    assert not (site / "drop.bin").exists()


@pytest.mark.anyio
async def test_sockets_and_fifos_are_never_opened(fsa: FileHandlers, home: Home) -> None:
    site = home.site
    os.mkfifo(site / "fifo")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(site / "sock"))
        for path in ("fifo", "sock"):
            assert (await error(fsa.fs_write, **SITE, path=path, content="x")).code == "validation_error"
            assert (await error(fsa.fs_read, **SITE, path=path)).code == "validation_error"
        result = await call(fsa.fs_copy, **SITE, paths=["fifo", "sock"], destination="public")
        assert result == {"copied": [], "skipped": ["fifo", "sock"]}
        assert not lexists(site / "public" / "fifo") and temp_leftovers(site / "public") == []


def test_overwriting_copy_while_the_destination_changes_is_ok_or_conflict(home: Home) -> None:
    """A thread keeps turning the destination into a file, a folder, or nothing while copies
    overwrite it: every copy either lands or answers `conflict`; nothing else escapes, and no
    work-in-progress name is left behind."""
    site = home.site
    (site / "src.txt").write_text("the copy\n")
    destination = site / "dst"
    stop = threading.Event()

    def churn() -> None:
        while not stop.is_set():
            for change in (
                lambda: destination.write_text("someone else\n"),
                lambda: destination.mkdir(),
                lambda: (destination / "inner.txt").write_text("x\n"),
            ):
                with contextlib.suppress(OSError):
                    change()
            with contextlib.suppress(OSError):
                if destination.is_dir() and not destination.is_symlink():
                    shutil.rmtree(destination)
                else:
                    destination.unlink()

    outcomes: set[str] = set()
    token = CancelToken()
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # let the churn land between the copy's steps
    churner = threading.Thread(target=churn, daemon=True)
    churner.start()
    try:
        with Jail(str(site)) as jail:
            for _ in range(2500):
                try:
                    transfer.copy(jail, jail, ["src.txt"], "dst", overwrite=True, token=token)
                    outcomes.add("copied")
                except RpcError as exc:
                    assert exc.code == "conflict", exc.message
                    outcomes.add("conflict")
    finally:
        stop.set()
        churner.join(5)
        sys.setswitchinterval(interval)
    assert "copied" in outcomes
    leftovers = [p.name for p in site.rglob("*") if ".fleetdeck-" in p.name and not p.name.endswith(".old")]
    assert leftovers == []
