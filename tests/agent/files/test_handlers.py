"""The agent's fs.* handlers, called directly on a temporary home."""

from __future__ import annotations

import hashlib
import os
import socket
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from agent.files.handlers import FileHandlers
from agent.files.read import READ_LIMIT, content_etag
from agent.link.call import Call
from agent.sites import SiteRegistry
from contract.link.protocol import RpcError
from contract.models import Entry, FileContent, Listing


@pytest.fixture
def anyio_backend() -> str:
    return "trio"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    site = home / "example-com"
    (site / "public" / "css").mkdir(parents=True)
    (site / "public" / "index.html").write_text("<h1>hello</h1>\n")
    (site / "public" / "css" / "site.css").write_text("body {}\n")
    (site / "notes.txt").write_text("héllo wörld\n")
    (site / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00")
    (site / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    os.symlink("public/index.html", site / "index-link")
    os.symlink("/etc/passwd", site / "passwd-link")
    os.mkfifo(site / "pipe")
    (home / "other-site").mkdir()
    (home / "other-site" / "secret.txt").write_text("not for example.com")
    return home


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    state = tmp_path / "state"
    state.mkdir()
    sites = {"sites": [{"domain": "example.com", "slug": "example-com"}, {"domain": "other.org", "slug": "other-site"}]}
    (state / "sites.json").write_bytes(orjson.dumps(sites))
    return state


@pytest.fixture(params=[None, False], ids=["auto", "walk"])
def fs(request: pytest.FixtureRequest, home: Path, state_dir: Path) -> FileHandlers:
    return FileHandlers(str(home), SiteRegistry(str(state_dir)), use_openat2=request.param)


async def call(handler: Callable[[Call], Awaitable[Any]], **params: Any) -> Any:
    result = await handler(Call(1, "fs.test", params))
    orjson.dumps(result)  # what the link will send must be JSON
    return result


async def error(handler: Callable[[Call], Awaitable[Any]], **params: Any) -> RpcError:
    with pytest.raises(RpcError) as info:
        await call(handler, **params)
    return info.value


SITE = {"scope": "site", "domain": "example.com"}


@pytest.mark.anyio
async def test_scopes(fs: FileHandlers) -> None:
    result = await call(fs.fs_scopes)
    assert result == {
        "sites": [{"domain": "example.com", "slug": "example-com"}, {"domain": "other.org", "slug": "other-site"}],
        "logs": [],  # the sites with a log folder: none without their folder (`tests/agent/files/test_logs.py`)
    }


@pytest.mark.anyio
async def test_list_root_of_a_site(fs: FileHandlers, home: Path) -> None:
    listing = await call(fs.fs_list, **SITE, path="")
    Listing.model_validate(listing)
    names = [e["name"] for e in listing["entries"]]
    assert names == sorted(names)
    assert set(names) == {"public", "notes.txt", "image.png", "latin1.txt", "index-link", "passwd-link", "pipe"}
    assert listing["total"] == 7 and listing["next_cursor"] is None and listing["path"] == ""
    by_name = {e["name"]: e for e in listing["entries"]}
    for e in listing["entries"]:
        Entry.model_validate(e)
    assert by_name["public"]["type"] == "dir" and by_name["public"]["path"] == "public"
    notes = by_name["notes.txt"]
    st = os.lstat(home / "example-com" / "notes.txt")
    assert notes["type"] == "file" and notes["size"] == st.st_size and notes["mode"] == st.st_mode
    assert notes["permissions"] == stat.filemode(st.st_mode)[1:] and len(notes["permissions"]) == 9
    assert notes["mtime"].endswith("Z") and notes["link_target"] is None
    assert notes["owner"] and notes["group"]
    link = by_name["passwd-link"]
    assert (link["type"], link["link_target"]) == ("symlink", "/etc/passwd")
    assert by_name["pipe"]["type"] == "other"


@pytest.mark.anyio
async def test_list_subfolder_paths_are_scope_relative(fs: FileHandlers) -> None:
    listing = await call(fs.fs_list, **SITE, path="public//css/")
    assert listing["path"] == "public/css"
    assert [(e["name"], e["path"]) for e in listing["entries"]] == [("site.css", "public/css/site.css")]


@pytest.mark.anyio
async def test_list_root_scope_and_errors(fs: FileHandlers) -> None:
    listing = await call(fs.fs_list, scope="root", path="")
    assert {e["name"] for e in listing["entries"]} == {"example-com", "other-site"}
    assert (await error(fs.fs_list, **SITE, path="notes.txt")).code == "validation_error"
    assert (await error(fs.fs_list, **SITE, path="nope")).code == "not_found"
    assert (await error(fs.fs_list, **SITE, path="../other-site")).code == "path_outside_scope"
    assert (await error(fs.fs_list, **SITE, path="passwd-link")).code == "path_outside_scope"
    assert (await error(fs.fs_list, scope="site", domain="nope.example", path="")).code == "not_found"
    assert (await error(fs.fs_list, scope="site", path="")).code == "validation_error"
    assert (await error(fs.fs_list, scope="galaxy", path="")).code == "validation_error"
    assert (await error(fs.fs_list, **SITE, path="", limit=50_001)).code == "validation_error"
    assert (await error(fs.fs_list, **SITE, path="", limit=0)).code == "validation_error"
    assert (await error(fs.fs_list, **SITE, path="", cursor="%%%")).code == "validation_error"


PAGED_NAMES = [f"f{i:05d}-{'x' * (i % 7)}" for i in range(20_000)]


@pytest.fixture(scope="module")
def big_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home with one folder of 20,000 files, made once: creating them is the slow part."""
    home = tmp_path_factory.mktemp("big-home")
    (home / "big").mkdir()
    for name in PAGED_NAMES:
        os.close(os.open(home / "big" / name, os.O_CREAT | os.O_WRONLY, 0o644))
    return home


@pytest.mark.anyio
@pytest.mark.parametrize("use_openat2", [None, False], ids=["auto", "walk"])
async def test_paging_returns_every_name_exactly_once(big_home: Path, use_openat2: bool | None) -> None:
    fs = FileHandlers(str(big_home), SiteRegistry(str(big_home / "no-state")), use_openat2=use_openat2)
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = await call(fs.fs_list, scope="root", path="big", cursor=cursor, limit=3000)
        assert page["total"] == 20_000
        seen.extend(e["name"] for e in page["entries"])
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert pages == 7
    assert seen == sorted(PAGED_NAMES)


@pytest.mark.anyio
async def test_stat(fs: FileHandlers, home: Path) -> None:
    entry = await call(fs.fs_stat, **SITE, path="public/index.html")
    Entry.model_validate(entry)
    assert (entry["name"], entry["path"], entry["type"]) == ("index.html", "public/index.html", "file")
    link = await call(fs.fs_stat, **SITE, path="index-link")
    assert (link["type"], link["link_target"]) == ("symlink", "public/index.html")
    outside = await call(fs.fs_stat, **SITE, path="passwd-link")  # the link itself is in the scope
    assert outside["type"] == "symlink"
    root = await call(fs.fs_stat, **SITE, path="/")
    assert (root["name"], root["path"], root["type"]) == ("", "", "dir")
    assert (await error(fs.fs_stat, **SITE, path="missing")).code == "not_found"


@pytest.mark.anyio
async def test_read(fs: FileHandlers, home: Path) -> None:
    content = await call(fs.fs_read, **SITE, path="notes.txt")
    FileContent.model_validate(content)
    data = (home / "example-com" / "notes.txt").read_bytes()
    assert content["content"] == "héllo wörld\n" and content["encoding"] == "utf-8"
    assert content["size"] == len(data) and content["path"] == "notes.txt"
    assert content["etag"] == content_etag(data) == hashlib.sha256(data).hexdigest()[:32]
    via_link = await call(fs.fs_read, **SITE, path="index-link")
    assert via_link["content"] == "<h1>hello</h1>\n"


@pytest.mark.anyio
async def test_etag_changes_with_same_size_and_mtime(fs: FileHandlers, home: Path) -> None:
    path = home / "example-com" / "notes.txt"
    before = await call(fs.fs_read, **SITE, path="notes.txt")
    st = os.stat(path)
    path.write_text("HÉLLO WÖRLD\n")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = await call(fs.fs_read, **SITE, path="notes.txt")
    assert after["size"] == before["size"] and after["mtime"] == before["mtime"]
    assert after["etag"] != before["etag"]


@pytest.mark.anyio
async def test_read_refusals(fs: FileHandlers, home: Path) -> None:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(home / "example-com" / "sock"))
        assert (await error(fs.fs_read, **SITE, path="sock")).code == "validation_error"
    assert (await error(fs.fs_read, **SITE, path="pipe")).code == "validation_error"
    assert (await error(fs.fs_read, **SITE, path="public")).code == "validation_error"
    assert (await error(fs.fs_read, **SITE, path="image.png")).code == "binary_file"
    assert (await error(fs.fs_read, **SITE, path="latin1.txt")).code == "binary_file"
    assert (await error(fs.fs_read, **SITE, path="passwd-link")).code == "path_outside_scope"
    assert (await error(fs.fs_read, **SITE, path="../other-site/secret.txt")).code == "path_outside_scope"
    assert (await error(fs.fs_read, **SITE, path="/etc/passwd")).code == "path_outside_scope"


@pytest.mark.anyio
async def test_read_limit(fs: FileHandlers, home: Path) -> None:
    site = home / "example-com"
    (site / "exact.txt").write_bytes(b"a" * READ_LIMIT)
    (site / "over.txt").write_bytes(b"a" * (READ_LIMIT + 1))
    assert (await call(fs.fs_read, **SITE, path="exact.txt"))["size"] == READ_LIMIT
    too_large = await error(fs.fs_read, **SITE, path="over.txt")
    assert too_large.code == "too_large"
    assert too_large.details == {"limit": READ_LIMIT, "size": READ_LIMIT + 1}


@pytest.mark.anyio
async def test_a_site_folder_symlinked_out_of_home_is_refused(fs: FileHandlers, home: Path, state_dir: Path) -> None:
    os.symlink("/etc", home / "evil-site")
    sites = {"sites": [{"domain": "evil.com", "slug": "evil-site"}, {"domain": "Bad_Domain", "slug": "x"}]}
    (state_dir / "sites.json").write_bytes(orjson.dumps(sites))
    os.utime(state_dir / "sites.json", ns=(1, 1))  # a changed mtime is what triggers a reload
    assert (await error(fs.fs_list, scope="site", domain="evil.com", path="")).code == "path_outside_scope"
    assert (await error(fs.fs_list, **SITE, path="")).code == "not_found"  # no longer listed
    assert (await call(fs.fs_scopes))["sites"] == [{"domain": "evil.com", "slug": "evil-site"}]


def test_site_registry_validation(tmp_path: Path) -> None:
    registry = SiteRegistry(str(tmp_path))
    assert registry.sites() == []
    document = {
        "sites": [
            {"domain": "ok.example.com", "slug": "ok"},
            {"domain": "UPPER.example.com", "slug": "upper"},
            {"domain": "x.com", "slug": "../etc"},
            {"domain": "y.com", "slug": "-leading-dash"},
            {"domain": "ok.example.com", "slug": "dupe"},
            "not an object",
        ]
    }
    (tmp_path / "sites.json").write_bytes(orjson.dumps(document))
    assert [(s.domain, s.slug) for s in registry.sites()] == [("ok.example.com", "ok")]
    assert registry.lookup("OK.example.com").slug == "ok"
    (tmp_path / "sites.json").write_text("{broken")
    os.utime(tmp_path / "sites.json", ns=(5, 5))
    assert [s.slug for s in registry.sites()] == ["ok"]  # the last good list stays
