"""fs.compress and fs.extract: round trips over a real link, cancels, and hostile archives."""

from __future__ import annotations

import io
import os
import stat
import tarfile
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest
import trio

from agent.files import archives, handlers
from agent.files.handlers import FileHandlers
from agent.link.call import Call
from contract.link.protocol import RpcError
from tests.helpers import eventually
from tests.helpers.agent_files import (
    SERVER_ID,
    SITE,
    Home,
    call,
    error,
    linked,
    make_home,
    outside_state,
    temp_leftovers,
)

PROGRESS_KEYS = {"done_files", "total_files", "done_bytes", "total_bytes", "current"}


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return make_home(tmp_path)


@pytest.fixture
def fs(home: Home) -> FileHandlers:
    return home.handlers()


def build_project(root: Path) -> None:
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "empty").mkdir()
    (root / "src" / "main.py").write_text("print('hi')\n")
    (root / "src" / "pkg" / "data.bin").write_bytes(os.urandom(2 * 1024 * 1024))
    (root / "src" / "pkg" / "zeros.bin").write_bytes(bytes(3 * 1024 * 1024))
    (root / "run.sh").write_text("#!/bin/sh\necho run\n")
    (root / "private.txt").write_text("private\n")
    (root / "ünïcode ñame.txt").write_text("ü\n")
    os.chmod(root / "run.sh", 0o755)
    os.chmod(root / "private.txt", 0o600)
    os.chmod(root / "src" / "pkg", 0o750)
    os.symlink("src/main.py", root / "main-link")


def tree_of(root: Path) -> dict[str, tuple[Any, ...]]:
    result: dict[str, tuple[Any, ...]] = {}
    for where, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(where) / name
            rel = str(path.relative_to(root))
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                result[rel] = ("link", os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                result[rel] = ("dir", stat.S_IMODE(st.st_mode))
            else:
                result[rel] = ("file", stat.S_IMODE(st.st_mode), path.read_bytes())
    return result


async def streamed(hub: Any, method: str, params: dict[str, Any]) -> tuple[list[dict[str, Any]], Any]:
    items: list[dict[str, Any]] = []
    async with hub.open_stream(SERVER_ID, method, params, window=256 * 1024) as stream:
        async for chunk in stream:
            assert isinstance(chunk, list)
            items.extend(chunk)
        return items, stream.result


@pytest.mark.anyio
@pytest.mark.parametrize("fmt", ["zip", "tar.gz"])
async def test_compress_then_extract_round_trip(fs: FileHandlers, home: Home, fmt: str) -> None:
    site = home.site
    build_project(site / "project")
    archive = f"project.{fmt}"
    async with linked(fs) as hub:
        items, result = await streamed(
            hub, "fs.compress", {**SITE, "paths": ["project"], "format": fmt, "destination": archive}
        )
        assert result["entry"]["path"] == archive and result["entry"]["size"] == (site / archive).stat().st_size
        assert result["skipped"] == (["project/main-link"] if fmt == "zip" else [])
        assert items and all(set(i) == PROGRESS_KEYS for i in items)
        last = items[-1]
        assert last["done_files"] == last["total_files"] == 6
        assert (
            last["done_bytes"]
            == last["total_bytes"]
            == sum(p.stat().st_size for p in (site / "project").rglob("*") if p.is_file() and not p.is_symlink())
        )
        items, result = await streamed(hub, "fs.extract", {**SITE, "path": archive, "destination": "unpacked"})
        assert result["entry"]["path"] == "unpacked" and result["entry"]["type"] == "dir"
        assert items and items[-1]["done_files"] == items[-1]["total_files"] == result["extracted"]
    original = tree_of(site / "project")
    if fmt == "zip":
        del original["main-link"]
    assert tree_of(site / "unpacked" / "project") == original
    assert stat.S_IMODE((site / "unpacked").stat().st_mode) == 0o755
    # Into an existing folder: folders merge, a taken file is a conflict and nothing moves.
    (site / "again" / "project").mkdir(parents=True)
    (site / "again" / "project" / "run.sh").write_text("mine\n")
    taken = await error(fs.fs_extract, **SITE, path=archive, destination="again")
    assert taken.code == "conflict" and taken.details == {"paths": ["again/project/run.sh"], "total": 1}
    assert os.listdir(site / "again" / "project") == ["run.sh"] and temp_leftovers(site / "again") == []
    os.unlink(site / "again" / "project" / "run.sh")
    done = await call(fs.fs_extract, **SITE, path=archive, destination="again")
    assert done["entry"]["path"] == "again" and (site / "again" / "project" / "run.sh").exists()
    assert os.listdir(site / "again") == ["project"]


@pytest.mark.anyio
async def test_compress_choices_and_refusals(fs: FileHandlers, home: Home) -> None:
    site = home.site
    both = await call(fs.fs_compress, **SITE, paths=["public", "notes.txt"], format="tar.gz", destination="both.tgz")
    assert both["entry"]["name"] == "both.tgz"
    with tarfile.open(site / "both.tgz") as tar:
        assert sorted(tar.getnames()) == [
            "notes.txt",
            "public",
            "public/css",
            "public/css/site.css",
            "public/index.html",
        ]
    whole = await call(fs.fs_compress, **SITE, paths=[""], format="zip", destination="public/whole.zip")
    with zipfile.ZipFile(site / "public" / "whole.zip") as zf:
        names = zf.namelist()
    assert "notes.txt" in names and "a/b/deep.txt" in names
    assert not any("whole.zip" in n or n.startswith(".Trash") or "outside" in n for n in names)
    assert "out_rel" in whole["skipped"]  # links are not zipped
    assert (await error(fs.fs_compress, **SITE, paths=["a"], format="zip", destination="both.tgz")).code == "conflict"
    assert (
        await error(fs.fs_compress, **SITE, paths=["a"], format="rar", destination="x.rar")
    ).code == "validation_error"
    assert (await error(fs.fs_compress, **SITE, paths=["nope"], format="zip", destination="x.zip")).code == "not_found"
    dup = await error(fs.fs_compress, **SITE, paths=["public/css", "in_link/css"], format="zip", destination="y.zip")
    assert dup.code == "validation_error"
    outside = await error(fs.fs_compress, **SITE, paths=["a/out_mid/sub"], format="zip", destination="y.zip")
    assert outside.code == "path_outside_scope"
    assert temp_leftovers(site) == [] and not (site / "x.zip").exists()


@pytest.mark.anyio
async def test_cancel_mid_compress_leaves_no_archive(
    fs: FileHandlers, home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = home.site
    (site / "big").mkdir()
    for i in range(4):
        (site / "big" / f"part{i}.bin").write_bytes(os.urandom(4 * 1024 * 1024))
    monkeypatch.setattr(archives, "CHUNK", 64 * 1024)
    read = archives._Reader.read

    def slow_read(self: archives._Reader, n: int = -1) -> bytes:
        time.sleep(0.002)
        return read(self, n)

    monkeypatch.setattr(archives._Reader, "read", slow_read)
    for fmt in ("zip", "tar.gz"):
        params = {**SITE, "paths": ["big"], "format": fmt, "destination": f"big.{fmt}"}
        async with linked(fs) as hub:
            async with hub.open_stream(SERVER_ID, "fs.compress", params, window=64 * 1024) as stream:
                async for chunk in stream:
                    assert isinstance(chunk, list)
                    if chunk[-1]["done_bytes"] > 0:
                        break  # leaving the stream cancels the call
            await eventually(lambda: not temp_leftovers(site))
        assert not (site / f"big.{fmt}").exists() and temp_leftovers(site) == []


@pytest.mark.anyio
@pytest.mark.parametrize("interval", [handlers.PROGRESS_INTERVAL_S, 3600.0])
async def test_progress_is_throttled(
    fs: FileHandlers, home: Home, monkeypatch: pytest.MonkeyPatch, interval: float
) -> None:
    """Progress flows while the work runs, never more often than the interval: with an interval
    longer than the work, only the final item arrives."""
    site = home.site
    (site / "many").mkdir()
    for i in range(300):
        (site / "many" / f"f{i}.txt").write_text("x" * 1000)
    read = archives._Reader.read

    def slow_read(self: archives._Reader, n: int = -1) -> bytes:
        time.sleep(0.001)
        return read(self, n)

    monkeypatch.setattr(archives._Reader, "read", slow_read)
    monkeypatch.setattr(handlers, "PROGRESS_INTERVAL_S", interval)
    async with linked(fs) as hub:
        items, result = await streamed(
            hub, "fs.compress", {**SITE, "paths": ["many"], "format": "zip", "destination": "m.zip"}
        )
    assert result["entry"]["name"] == "m.zip"
    assert len(items) >= 2 if interval < 1 else len(items) == 1
    assert items[-1]["done_files"] == 300
    assert [i["done_files"] for i in items] == sorted(i["done_files"] for i in items)


@pytest.mark.anyio
async def test_cancel_mid_extract_leaves_nothing(fs: FileHandlers, home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    site = home.site
    make_tar(
        site / "big.tar",
        [(info(f"big/part{i}.bin", size=2 * 1024 * 1024), os.urandom(2 * 1024 * 1024)) for i in range(4)],
    )
    monkeypatch.setattr(archives, "CHUNK", 64 * 1024)
    account = archives._Extractor._account

    def slow_account(self: Any, n: int) -> None:
        time.sleep(0.005)
        account(self, n)

    monkeypatch.setattr(archives._Extractor, "_account", slow_account)
    for destination in ("fresh", "public"):
        before = sorted(os.listdir(site / "public"))
        with trio.move_on_after(0.3) as scope:
            await fs.fs_extract(Call(1, "fs.extract", {**SITE, "path": "big.tar", "destination": destination}))
        assert scope.cancelled_caught
        assert not (site / "fresh").exists() and sorted(os.listdir(site / "public")) == before
        assert temp_leftovers(site) == [] and temp_leftovers(site / "public") == []


# --- hostile archives ------------------------------------------------------------------------


def info(
    name: str, kind: bytes = tarfile.REGTYPE, *, size: int = 0, linkname: str = "", mode: int = 0o644
) -> tarfile.TarInfo:
    member = tarfile.TarInfo(name)
    member.type, member.size, member.linkname, member.mode = kind, size, linkname, mode
    return member


def make_tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]], *, gz: bool = False) -> None:
    with tarfile.open(path, "w:gz" if gz else "w") as tar:
        for member, data in members:
            tar.addfile(member, io.BytesIO(data) if data is not None else None)


def make_zip(path: Path, members: list[tuple[str, bytes, int]]) -> None:
    """(name, data, unix mode with type bits; 0: made on MS-DOS, no unix mode at all)"""
    with zipfile.ZipFile(path, "w") as zf:
        for name, data, mode in members:
            member = zipfile.ZipInfo(name)
            member.create_system = 3 if mode else 0
            member.external_attr = mode << 16
            zf.writestr(member, data)


OK = (info("ok.txt", size=2), b"ok")

HOSTILE_TARS: dict[str, list[tuple[tarfile.TarInfo, bytes | None]]] = {
    "dotdot": [OK, (info("../escaped.txt", size=1), b"x")],
    "dotdot-deep": [OK, (info("a/../../escaped.txt", size=1), b"x")],
    "dotdot-dir": [(info("..", tarfile.DIRTYPE), None)],
    "absolute": [OK, (info("/tmp/escaped.txt", size=1), b"x")],
    "absolute-dotdot": [(info("/../escaped.txt", size=1), b"x")],
    "link-absolute": [(info("l", tarfile.SYMTYPE, linkname="/etc"), None)],
    "link-up": [(info("l", tarfile.SYMTYPE, linkname="../../outside"), None)],
    "link-up-deep": [(info("a/b/l", tarfile.SYMTYPE, linkname="../../../x"), None)],
    "link-then-write": [(info("l", tarfile.SYMTYPE, linkname="/tmp"), None), (info("l/escaped.txt", size=1), b"x")],
    "link-chain": [  # each link stays inside by name; together they lead out
        (info("e", tarfile.SYMTYPE, linkname="."), None),
        (info("d", tarfile.SYMTYPE, linkname="e/.."), None),
    ],
    "link-chain-write": [
        (info("sub", tarfile.DIRTYPE), None),
        (info("sub/e", tarfile.SYMTYPE, linkname=".."), None),
        (info("sub/e/e2", tarfile.SYMTYPE, linkname=".."), None),
        (info("sub/e/e2/escaped.txt", size=1), b"x"),
    ],
    "hardlink-outside": [(info("h", tarfile.LNKTYPE, linkname="../outside/secret.txt"), None)],
    "hardlink-absolute": [(info("h", tarfile.LNKTYPE, linkname="/etc/passwd"), None)],
    "hardlink-not-in-archive": [(info("h", tarfile.LNKTYPE, linkname="notes.txt"), None)],
    "hardlink-through-link": [
        (info("l", tarfile.SYMTYPE, linkname="."), None),
        (info("h", tarfile.LNKTYPE, linkname="l/../outside/secret.txt"), None),
    ],
    "device": [(info("dev", tarfile.CHRTYPE), None)],
    "block": [(info("blk", tarfile.BLKTYPE), None)],
    "fifo": [OK, (info("fifo", tarfile.FIFOTYPE), None)],
    "file-over-dir": [(info("d", tarfile.DIRTYPE), None), (info("d", size=1), b"x")],
}

HOSTILE_ZIPS: dict[str, list[tuple[str, bytes, int]]] = {
    "dotdot": [("ok.txt", b"ok", 0), ("../escaped.txt", b"x", 0)],
    "absolute": [("/tmp/escaped.txt", b"x", 0)],
    "backslash-dotdot": [("..\\..\\escaped.txt", b"x", 0)],
    "backslash-absolute": [("\\tmp\\escaped.txt", b"x", 0)],
    "drive": [("C:\\escaped.txt", b"x", 0)],
    "symlink": [("l", b"/etc", stat.S_IFLNK | 0o777)],
    "symlink-relative": [("l", b"sub", stat.S_IFLNK | 0o777)],
    "fifo": [("f", b"", stat.S_IFIFO | 0o644)],
    "device": [("d", b"", stat.S_IFCHR | 0o644)],
    "dir-dotdot": [("a/../../", b"", stat.S_IFDIR | 0o755)],
}


def _assert_nothing_extracted(home: Home, before: dict[str, Any], listing: list[str]) -> None:
    assert outside_state(home) == before
    assert sorted(os.listdir(home.site)) == listing
    assert not (home.base / "escaped.txt").exists() and not Path("/tmp/escaped.txt").exists()


@pytest.mark.anyio
@pytest.mark.parametrize("case", sorted(HOSTILE_TARS))
@pytest.mark.parametrize("gz", [False, True], ids=["tar", "tgz"])
async def test_hostile_tar_members_are_refused(fs: FileHandlers, home: Home, case: str, gz: bool) -> None:
    name = "evil.tgz" if gz else "evil.tar"
    make_tar(home.site / name, HOSTILE_TARS[case], gz=gz)
    before, listing = outside_state(home), sorted(os.listdir(home.site))
    for destination in ("", "new-folder", "public"):
        refused = await error(fs.fs_extract, **SITE, path=name, destination=destination)
        assert refused.code == "validation_error", (case, destination, refused)
        _assert_nothing_extracted(home, before, listing)
        assert sorted(os.listdir(home.site / "public")) == ["css", "index.html"]


@pytest.mark.anyio
@pytest.mark.parametrize("case", sorted(HOSTILE_ZIPS))
async def test_hostile_zip_members_are_refused(fs: FileHandlers, home: Home, case: str) -> None:
    make_zip(home.site / "evil.zip", HOSTILE_ZIPS[case])
    before, listing = outside_state(home), sorted(os.listdir(home.site))
    for destination in ("", "new-folder"):
        refused = await error(fs.fs_extract, **SITE, path="evil.zip", destination=destination)
        assert refused.code == "validation_error", (case, refused)
        _assert_nothing_extracted(home, before, listing)


@pytest.mark.anyio
async def test_extracted_modes_are_tamed(fs: FileHandlers, home: Home) -> None:
    make_tar(
        home.site / "modes.tar",
        [
            (info("d", tarfile.DIRTYPE, mode=0o7777), None),
            (info("d/suid", size=1, mode=0o6777), b"x"),
            (info("d/none", size=1, mode=0o000), b"x"),
            (info("d/link", tarfile.SYMTYPE, linkname="suid"), None),
            (info("d/hard", tarfile.LNKTYPE, linkname="d/suid"), None),
            (info("./", tarfile.DIRTYPE), None),
        ],
    )
    result = await call(fs.fs_extract, **SITE, path="modes.tar", destination="out")
    assert result["extracted"] == 5
    out = home.site / "out" / "d"
    assert stat.S_IMODE(out.stat().st_mode) == 0o755
    assert stat.S_IMODE((out / "suid").stat().st_mode) == 0o755
    assert stat.S_IMODE((out / "none").stat().st_mode) == 0o600
    assert os.readlink(out / "link") == "suid"
    assert (out / "hard").stat().st_ino == (out / "suid").stat().st_ino
    make_zip(home.site / "modes.zip", [("s", b"x", stat.S_IFREG | 0o4777), ("plain", b"y", 0), ("dir/", b"", 0)])
    await call(fs.fs_extract, **SITE, path="modes.zip", destination="zout")
    assert stat.S_IMODE((home.site / "zout" / "s").stat().st_mode) == 0o755
    assert stat.S_IMODE((home.site / "zout" / "plain").stat().st_mode) == 0o644
    assert (home.site / "zout" / "dir").is_dir()


@pytest.mark.anyio
async def test_bombs_and_limits(fs: FileHandlers, home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    site = home.site
    with zipfile.ZipFile(site / "bomb.zip", "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("zeros.bin", bytes(16 * 1024 * 1024))
    make_tar(site / "bomb.tgz", [(info("zeros.bin", size=16 * 1024 * 1024), bytes(16 * 1024 * 1024))], gz=True)
    make_tar(site / "many.tar", [(info(f"f{i}", size=0), b"") for i in range(30)])
    listing = sorted(os.listdir(site))
    monkeypatch.setattr(archives, "RATIO_FLOOR", 1024 * 1024)
    for name in ("bomb.zip", "bomb.tgz"):
        bomb = await error(fs.fs_extract, **SITE, path=name, destination="out")
        assert bomb.code == "too_large" and "bomb" in bomb.message
    monkeypatch.setattr(archives, "RATIO_FLOOR", 128 * 1024 * 1024)
    monkeypatch.setattr(archives, "MAX_EXTRACT_BYTES", 8 * 1024 * 1024)
    for name in ("bomb.zip", "bomb.tgz"):
        assert (await error(fs.fs_extract, **SITE, path=name, destination="out")).code == "too_large"
    monkeypatch.setattr(archives, "MAX_EXTRACT_ENTRIES", 20)
    assert (await error(fs.fs_extract, **SITE, path="many.tar", destination="out")).code == "too_large"
    assert sorted(os.listdir(site)) == listing


@pytest.mark.anyio
async def test_a_zip_lying_about_sizes_is_stopped_while_writing(
    fs: FileHandlers, home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Declared sizes pass the checks; the bytes actually written are counted too."""
    site = home.site
    with zipfile.ZipFile(site / "liar.zip", "w", zipfile.ZIP_DEFLATED) as zf:
        for i in range(4):
            zf.writestr(f"z{i}.bin", bytes(4 * 1024 * 1024))
    listing = sorted(os.listdir(site))
    declared = archives._Extractor._plan

    def lying_plan(self: Any, count: int, total: int) -> None:
        declared(self, count, 1)  # as if the central directory said 1 byte

    monkeypatch.setattr(archives._Extractor, "_plan", lying_plan)
    monkeypatch.setattr(archives, "MAX_EXTRACT_BYTES", 10 * 1024 * 1024)
    assert (await error(fs.fs_extract, **SITE, path="liar.zip", destination="out")).code == "too_large"
    assert sorted(os.listdir(site)) == listing


@pytest.mark.anyio
async def test_extract_refusals(fs: FileHandlers, home: Home) -> None:
    site = home.site
    (site / "junk.zip").write_bytes(b"PK\x03\x04 not really")
    (site / "junk.tgz").write_bytes(b"\x1f\x8b not really")
    (site / "x.rar").write_bytes(b"Rar!")
    make_zip(site / "ok.zip", [("ok.txt", b"ok", 0)])
    for name in ("junk.zip", "junk.tgz", "x.rar"):
        assert (await error(fs.fs_extract, **SITE, path=name, destination="out")).code == "validation_error", name
    assert (await error(fs.fs_extract, **SITE, path="missing.zip", destination="out")).code == "not_found"
    assert (await error(fs.fs_extract, **SITE, path="ok.zip", destination="notes.txt")).code == "validation_error"
    assert (await error(fs.fs_extract, **SITE, path="ok.zip", destination="nowhere/out")).code == "not_found"
    assert (await error(fs.fs_extract, **SITE, path="ok.zip", destination="dangling_in")).code == "validation_error"
    assert (await error(fs.fs_extract, **SITE, path="ok.zip", destination="dangling_out")).code == "path_outside_scope"
    os.mkfifo(site / "fifo.zip")
    assert (await error(fs.fs_extract, **SITE, path="fifo.zip", destination="out")).code == "validation_error"
    assert not (site / "out").exists() and temp_leftovers(site) == []
    assert not (home.outside / "created-through-link").exists()
    # An extraction through an in-root link lands where the link points.
    await call(fs.fs_extract, **SITE, path="ok.zip", destination="in_link")
    assert (site / "public" / "ok.txt").read_text() == "ok"


def test_member_names() -> None:
    assert archives.member_parts("./a//b/./c", backslashes=False) == ("a", "b", "c")
    assert archives.member_parts("a\\b", backslashes=False) == ("a\\b",)
    assert archives.member_parts("a\\b", backslashes=True) == ("a", "b")
    for name in ("../x", "a/../../x", "/x", "C:/x", "c:x", "x\x00", "..\\x"):
        with pytest.raises(RpcError):
            archives.member_parts(name, backslashes=True)
    with pytest.raises(RpcError):
        archives.check_link_target("a/l", ("a", "l"), "../../x")
    archives.check_link_target("a/l", ("a", "l"), "../x")
    assert archives.archive_kind("X.TAR.GZ") == "tar" and archives.archive_kind("a.Zip") == "zip"


@pytest.mark.anyio
async def test_extract_and_compress_in_the_root_scope(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    fs = home.handlers()
    result = await call(
        fs.fs_compress, scope="root", paths=["example-com/public"], format="tar.gz", destination="p.tgz"
    )
    assert result["entry"]["path"] == "p.tgz" and (home.home / "p.tgz").exists()
    await call(fs.fs_extract, scope="root", path="p.tgz", destination="other-site")
    assert (home.other / "public" / "css" / "site.css").read_text() == "body {}\n"


# --- single-root archives and conflicts ------------------------------------------------------


def make_wp_content(site: Path) -> None:
    """A single-root zip (`wp-content/…`, without a folder member, as many zips are) and the same
    tree half present in the site already, with a file of the same name and a folder/file clash."""
    make_zip(
        site / "wp-content.zip",
        [
            ("wp-content/index.php", b"<?php // new", 0),
            ("wp-content/themes/style.css", b"new {}", 0),
            ("wp-content/themes/new.css", b"added {}", 0),
            ("wp-content/uploads/", b"", stat.S_IFDIR | 0o755),
        ],
    )
    (site / "wp-content" / "themes").mkdir(parents=True)
    (site / "wp-content" / "index.php").write_text("<?php // mine")
    (site / "wp-content" / "themes" / "style.css").write_text("mine {}")
    (site / "wp-content" / "themes" / "other.css").write_text("untouched")


@pytest.mark.anyio
async def test_extract_check_names_the_roots_and_the_taken_paths(fs: FileHandlers, home: Home) -> None:
    site = home.site
    make_wp_content(site)
    make_zip(site / "two.zip", [("a.txt", b"a", 0), ("b/c.txt", b"c", 0)])
    before = tree_of(site)
    check = await call(fs.fs_extract_check, **SITE, path="wp-content.zip", destination="")
    assert check["roots"] == ["wp-content"] and check["entries"] == 4 and check["bytes"] == 12 + 6 + 8
    assert check["conflicts"] == ["wp-content/index.php", "wp-content/themes/style.css"]
    assert check["conflicts_total"] == 2 and check["clashes"] == []
    assert (await call(fs.fs_extract_check, **SITE, path="two.zip", destination=""))["roots"] == ["a.txt", "b"]
    # A missing destination has no conflicts; a file where the archive has a folder is a clash.
    fresh = await call(fs.fs_extract_check, **SITE, path="wp-content.zip", destination="new-folder")
    assert fresh["conflicts"] == [] and fresh["conflicts_total"] == 0
    (site / "public" / "wp-content").write_text("a file")
    clash = await call(fs.fs_extract_check, **SITE, path="wp-content.zip", destination="public")
    assert clash["conflicts"] == clash["clashes"] == ["public/wp-content"]
    (site / "public" / "wp-content").unlink()
    assert tree_of(site) == before  # the check writes nothing


@pytest.mark.anyio
async def test_extract_into_the_current_folder_refuses_skips_or_overwrites(fs: FileHandlers, home: Home) -> None:
    site = home.site
    make_wp_content(site)
    before = tree_of(site)
    refused = await error(fs.fs_extract, **SITE, path="wp-content.zip", destination="")
    assert refused.code == "conflict" and refused.details == {
        "paths": ["wp-content/index.php", "wp-content/themes/style.css"],
        "total": 2,
    }
    assert tree_of(site) == before and temp_leftovers(site) == []
    kept = await call(fs.fs_extract, **SITE, path="wp-content.zip", destination="", on_conflict="skip")
    assert kept["kept"] == 2 and kept["replaced"] == 0 and kept["entry"]["path"] == ""
    wp = site / "wp-content"
    assert (wp / "index.php").read_text() == "<?php // mine" and (wp / "themes" / "style.css").read_text() == "mine {}"
    assert (wp / "themes" / "new.css").read_text() == "added {}" and (wp / "uploads").is_dir()
    assert (wp / "themes" / "other.css").read_text() == "untouched"
    assert not (site / "wp-content" / "wp-content").exists() and temp_leftovers(site) == []
    mine = os.stat(wp / "index.php").st_ino
    replaced = await call(fs.fs_extract, **SITE, path="wp-content.zip", destination="", on_conflict="overwrite")
    assert replaced["replaced"] == 3 and replaced["kept"] == 0  # new.css is taken too by now
    assert (wp / "index.php").read_text() == "<?php // new" and (wp / "themes" / "style.css").read_text() == "new {}"
    assert os.stat(wp / "index.php").st_ino != mine  # a new file renamed over the old one
    assert (wp / "themes" / "other.css").read_text() == "untouched" and temp_leftovers(site) == []
    assert (await error(fs.fs_extract, **SITE, path="wp-content.zip", destination="", on_conflict="x")).code == (
        "validation_error"
    )


@pytest.mark.anyio
async def test_overwrite_never_replaces_a_folder_with_a_file(fs: FileHandlers, home: Home) -> None:
    site = home.site
    make_zip(site / "flat.zip", [("public", b"a file named like the folder", 0), ("extra.txt", b"x", 0)])
    before = tree_of(site)
    clash = await error(fs.fs_extract, **SITE, path="flat.zip", destination="", on_conflict="overwrite")
    assert clash.code == "conflict" and clash.details == {"paths": ["public"], "total": 1}
    assert tree_of(site) == before and temp_leftovers(site) == []
    await call(fs.fs_extract, **SITE, path="flat.zip", destination="", on_conflict="skip")
    assert (site / "public" / "index.html").exists() and (site / "extra.txt").read_text() == "x"


@pytest.mark.anyio
@pytest.mark.parametrize("case", ["dotdot", "absolute", "link-up", "link-then-write"])
async def test_extract_check_refuses_unsafe_archives_too(fs: FileHandlers, home: Home, case: str) -> None:
    make_tar(home.site / "evil.tar", HOSTILE_TARS[case])
    before, listing = outside_state(home), sorted(os.listdir(home.site))
    refused = await error(fs.fs_extract_check, **SITE, path="evil.tar", destination="")
    assert refused.code == "validation_error", refused
    for on_conflict in ("skip", "overwrite"):
        refused = await error(fs.fs_extract, **SITE, path="evil.tar", destination="", on_conflict=on_conflict)
        assert refused.code == "validation_error", refused
        _assert_nothing_extracted(home, before, listing)
