"""Shared helpers of the ``test_agent_files_*`` suites: a hostile home, snapshots, a real link."""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
import trio

from agent.files.handlers import FileHandlers
from agent.link.call import Call
from agent.link.client import AgentLink
from agent.sites import SiteRegistry
from contract.link.protocol import RpcError
from control_plane.hub import AgentHub
from tests.helpers.link import FAST, NEVER, SERVER_ID, TOKEN, make_control_plane, serving

SITE = {"scope": "site", "domain": "example.com"}


@dataclass
class Home:
    base: Path  # holds home/, outside/ and state/
    home: Path
    site: Path  # home/example-com: the site scope's root
    other: Path  # home/other-site: another site
    outside: Path  # base/outside: never to be touched
    state: Path

    def handlers(self, use_openat2: bool | None = None) -> FileHandlers:
        return FileHandlers(str(self.home), SiteRegistry(str(self.state)), use_openat2=use_openat2)


def make_home(base: Path) -> Home:
    """A site full of links: in-root, out of the root (relative and absolute), dangling in and out."""
    home, outside, state = base / "home", base / "outside", base / "state"
    site, other = home / "example-com", home / "other-site"
    (site / "public" / "css").mkdir(parents=True)
    (site / "public" / "index.html").write_text("<h1>hello</h1>\n")
    (site / "public" / "css" / "site.css").write_text("body {}\n")
    (site / "notes.txt").write_text("héllo wörld\n")
    (site / "a" / "b").mkdir(parents=True)
    (site / "a" / "b" / "deep.txt").write_text("deep\n")
    other.mkdir()
    (other / "secret.txt").write_text("other site's secret\n")
    (outside / "sub").mkdir(parents=True)
    (outside / "secret.txt").write_text("outside secret\n")
    (outside / "sub" / "inner.txt").write_text("outside inner\n")
    os.chmod(outside / "secret.txt", 0o600)
    links = {
        "out_rel": "../../outside",
        "out_abs": str(outside),
        "out_file": "../../outside/secret.txt",
        "dangling_out": "../../outside/created-through-link",
        "dangling_abs": str(outside / "created-through-abs-link"),
        "dangling_in": "nothere",
        "in_link": "public",
        "in_file_link": "public/index.html",
        "to_other": "../other-site",
        "a/out_mid": "../../../outside",
    }
    for name, target in links.items():
        os.symlink(target, site / name)
    state.mkdir()
    sites = {"sites": [{"domain": "example.com", "slug": "example-com"}, {"domain": "other.org", "slug": "other-site"}]}
    (state / "sites.json").write_bytes(orjson.dumps(sites))
    return Home(base, home, site, other, outside, state)


def snapshot(root: Path) -> dict[str, tuple[Any, ...]]:
    """Everything observable about a tree, links not followed: to assert it did not change."""
    result: dict[str, tuple[Any, ...]] = {}
    st = os.lstat(root)
    result["."] = (st.st_mode, st.st_uid, st.st_gid, st.st_ino)
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(folder, name)
            st = os.lstat(path)
            rel = os.path.relpath(path, root)
            if stat.S_ISLNK(st.st_mode):
                result[rel] = ("link", os.readlink(path), st.st_uid)
            elif stat.S_ISREG(st.st_mode):
                digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
                result[rel] = ("file", st.st_mode, st.st_uid, st.st_gid, st.st_size, st.st_mtime_ns, st.st_ino, digest)
            else:
                result[rel] = ("other", st.st_mode, st.st_uid, st.st_gid, st.st_ino)
    return result


def outside_state(home: Home) -> dict[str, Any]:
    """The outside folder, the other site, and the names beside the home."""
    return {
        "outside": snapshot(home.outside),
        "other": snapshot(home.other),
        "base": sorted(os.listdir(home.base)),
        "home": sorted(n for n in os.listdir(home.home)),
    }


Handler = Callable[[Call], Awaitable[Any]]


async def call(handler: Handler, **params: Any) -> Any:
    result = await handler(Call(1, "fs.test", params))
    orjson.dumps(result)  # what the link will send must be JSON
    return result


async def error(handler: Handler, **params: Any) -> RpcError:
    with pytest.raises(RpcError) as info:
        await call(handler, **params)
    return info.value


def lexists(path: Path) -> bool:
    """Whether the name exists (a dangling link counts)."""
    return os.path.lexists(path)


def temp_leftovers(folder: Path) -> list[str]:
    """Work-in-progress names the workspace might leave behind."""
    return [n for n in os.listdir(folder) if ".fleetdeck-" in n]


@asynccontextmanager
async def linked(handlers: FileHandlers) -> AsyncIterator[AgentHub]:
    """The hub served over real sockets with an agent link serving `handlers`."""
    cp = make_control_plane()
    async with serving(cp.hub) as url, trio.open_nursery() as nursery:
        link = AgentLink(url, TOKEN, handlers.handlers(), version="9.9", backoff=FAST, auth_backoff=NEVER)
        nursery.start_soon(link.run)
        await cp.wait_presence(online=True)
        yield cp.hub
        nursery.cancel_scope.cancel()


__all__ = [
    "SERVER_ID",
    "SITE",
    "Home",
    "call",
    "error",
    "lexists",
    "linked",
    "make_home",
    "outside_state",
    "snapshot",
    "temp_leftovers",
]
