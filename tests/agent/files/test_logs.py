"""The agent's logs scope (a site's web server and PHP logs, in root's folder outside the site),
its ``fs.*`` handlers called directly: reads resolve beneath the log folder through the jail (with
openat2 and with the walk), every write is refused by the agent itself, whatever the control plane
let through, and a copy out into the site works."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from agent.files.handlers import FileHandlers
from agent.link.call import Call
from agent.sites import SiteRegistry
from contract.link.protocol import RpcError
from contract.models import LOGS_READ_ONLY
from tests.helpers.agent_files import Home, call, error, make_home, snapshot

LOGS = {"scope": "logs", "domain": "example.com"}
ACCESS = "".join(f"127.0.0.1 GET /page/{n} 200\n" for n in range(100))


@pytest.fixture
def anyio_backend() -> str:
    return "trio"


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return make_home(tmp_path)


@pytest.fixture
def site_logs(home: Home) -> Path:
    """The sites' log folder, holding example.com's (other.org has none), beside a secret."""
    top = home.base / "site-logs"
    (top / "example-com").mkdir(parents=True)
    (top / "example-com" / "access.log").write_text(ACCESS)
    (top / "example-com" / "error.log").write_text("")
    os.symlink(home.outside / "secret.txt", top / "example-com" / "out-abs.log")
    os.symlink("../../outside/secret.txt", top / "example-com" / "out-rel.log")
    os.symlink("../../outside", top / "example-com" / "out-dir")
    return top


@pytest.fixture(params=[None, False], ids=["auto", "walk"])
def fs(request: pytest.FixtureRequest, home: Home, site_logs: Path) -> FileHandlers:
    registry = SiteRegistry(str(home.state))
    return FileHandlers(str(home.home), registry, use_openat2=request.param, site_logs=lambda: str(site_logs))


Handler = Callable[[Call], Awaitable[Any]]


@pytest.mark.anyio
async def test_scopes_name_the_sites_with_a_log_folder(fs: FileHandlers, home: Home, site_logs: Path) -> None:
    os.symlink("example-com", site_logs / "other-site")  # a link is no log folder of other.org
    assert (await call(fs.fs_scopes))["logs"] == ["example.com"]
    without = FileHandlers(str(home.home), SiteRegistry(str(home.state)))
    assert (await call(without.fs_scopes))["logs"] == []
    missing = await error(without.fs_list, **LOGS, path="")
    assert (missing.code, missing.message) == ("not_found", "site example.com has no log folder")


@pytest.mark.anyio
async def test_reads_resolve_beneath_the_log_folder(fs: FileHandlers) -> None:
    listed = await call(fs.fs_list, **LOGS, path="")
    assert {e["name"] for e in listed["entries"]} == {
        "access.log",
        "error.log",
        "out-abs.log",
        "out-rel.log",
        "out-dir",
    }
    assert (await call(fs.fs_read, **LOGS, path="access.log"))["content"] == ACCESS
    window = await call(fs.fs_read, **LOGS, path="access.log", offset=len(ACCESS) - 26, length=100)
    assert window["eof"] and window["length"] == 26
    assert (await call(fs.fs_stat, **LOGS, path="out-abs.log"))["type"] == "symlink"
    found = await call(fs.fs_search, **LOGS, path="", query="/page/42 ", content=True)
    assert [(m["entry"]["name"], m["line"]) for m in found["matches"]] == [("access.log", 43)]
    assert (await call(fs.fs_find, **LOGS, path="access.log", query="/page/42 "))["line"] == 43  # the viewer's /
    assert (await error(fs.fs_find, **LOGS, path="out-abs.log", query="secret")).code == "path_outside_scope"
    assert (await call(fs.fs_dirsize, **LOGS, path=""))["files"] == 2
    for name in ("out-abs.log", "out-rel.log", "out-dir/secret.txt"):
        assert (await error(fs.fs_read, **LOGS, path=name)).code == "path_outside_scope"
    assert (await error(fs.fs_list, **LOGS, path="out-dir")).code == "path_outside_scope"
    assert (await call(fs.fs_search, **LOGS, path="", query="outside secret", content=True))["matches"] == []
    assert (await error(fs.fs_read, **LOGS, path="../example-com/access.log")).code == "path_outside_scope"


# Every write handler, with what it needs to reach its scope.
WRITES: list[tuple[str, dict[str, Any]]] = [
    ("fs_write", {"path": "access.log", "content": "x"}),
    ("fs_mkdir", {"path": "folder"}),
    ("fs_move", {"paths": ["access.log"], "destination": "moved.log"}),
    (
        "fs_move",
        {"paths": ["access.log"], "destination": "moved.log", "to": {"scope": "site", "domain": "example.com"}},
    ),
    ("fs_copy", {"paths": ["access.log"], "destination": "copy.log"}),
    ("fs_delete", {"paths": ["access.log"]}),
    ("fs_delete", {"paths": ["access.log"], "permanent": True}),
    ("fs_trash_list", {}),
    ("fs_trash_restore", {"ids": ["x"]}),
    ("fs_trash_empty", {}),
    ("fs_chmod", {"paths": ["access.log"], "mode": 0o666}),
    ("fs_compress", {"paths": ["access.log"], "format": "zip", "destination": "a.zip"}),
    ("fs_extract", {"path": "a.tar.gz", "destination": "out"}),
    ("fs_upload_check", {"path": "up.log"}),
]


@pytest.mark.anyio
@pytest.mark.parametrize(("method", "params"), WRITES, ids=[f"{m}-{i}" for i, (m, _p) in enumerate(WRITES)])
async def test_the_agent_refuses_every_write_to_the_logs(
    fs: FileHandlers, site_logs: Path, method: str, params: dict[str, Any]
) -> None:
    before = snapshot(site_logs)
    refused = await error(getattr(fs, method), **LOGS, **params)
    assert (refused.code, refused.message) == ("forbidden", LOGS_READ_ONLY)
    assert snapshot(site_logs) == before
    with pytest.raises(RpcError) as opened:  # the one door: a scope is opened for writing unless told
        fs.open_scope(LOGS)
    assert opened.value.code == "forbidden"


@pytest.mark.anyio
async def test_a_copy_goes_out_into_the_site_never_in(fs: FileHandlers, home: Home, site_logs: Path) -> None:
    before = snapshot(site_logs)
    to_site = {"scope": "site", "domain": "example.com"}
    copied = await call(fs.fs_copy, **LOGS, paths=["access.log"], destination="saved.log", to=to_site)
    assert copied["copied"] == ["saved.log"] and (home.site / "saved.log").read_text() == ACCESS
    into = await error(fs.fs_copy, **to_site, paths=["notes.txt"], destination="notes.txt", to=LOGS)
    assert (into.code, into.message) == ("forbidden", LOGS_READ_ONLY)
    assert snapshot(site_logs) == before
