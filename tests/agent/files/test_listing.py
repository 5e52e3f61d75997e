"""Fast listings: the agent's name snapshots and entry builder, and the page passed on as bytes
by the control plane (with the real stack, and with an agent that answers the old way)."""

from __future__ import annotations

import os
import stat
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as hs

from agent.files import read
from agent.files.entries import entries, entry
from agent.files.handlers import FileHandlers
from agent.link.call import Call
from agent.link.client import AgentLink, Backoff
from agent.sites import SiteRegistry
from api_client import Client
from contract.link import fastmask
from contract.models import Entry, Listing, Scope
from tests.conftest import Stack

pytestmark = pytest.mark.stack_variants("sqlite", "postgresql")

SITE = Scope(scope="site", domain="example.com")
OLD = time.time() - 3600  # a folder mtime well past the snapshots' racy window


@pytest.fixture(autouse=True)
def empty_snapshots() -> Iterator[None]:
    read.SNAPSHOTS.clear()
    yield
    read.SNAPSHOTS.clear()


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    (home / "big").mkdir(parents=True)
    for i in range(1000):
        os.close(os.open(home / "big" / f"n{i:04d}", os.O_CREAT | os.O_WRONLY, 0o644))
    os.utime(home / "big", (OLD, OLD))
    return home


@pytest.fixture
def scandirs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the folder reads of `read` (each call appends the fd it read)."""
    calls: list[int] = []
    real = os.scandir

    def counting(fd: Any) -> Any:
        calls.append(fd)
        return real(fd)

    monkeypatch.setattr(read.os, "scandir", counting)
    return calls


async def page(fs: FileHandlers, cursor: str | None, limit: int = 300) -> dict[str, Any]:
    result: dict[str, Any] = await fs.fs_list(
        Call(1, "fs.list", {"scope": "root", "path": "big", "cursor": cursor, "limit": limit})
    )
    return result


@pytest.mark.anyio
async def test_later_pages_reuse_the_names_until_the_folder_changes(home: Path, scandirs: list[int]) -> None:
    fs = FileHandlers(str(home), SiteRegistry(str(home / "no-state")))
    first = await page(fs, None)
    second = await page(fs, first["next_cursor"])
    assert len(scandirs) == 1  # the second page came from the snapshot
    assert [e["name"] for e in first["entries"] + second["entries"]] == [f"n{i:04d}" for i in range(600)]
    assert second["total"] == 1000

    # A name added after the first page changes the folder's mtime: the next page reads again.
    (home / "big" / "n0999a").write_bytes(b"new")
    os.unlink(home / "big" / "n0700")
    third = await page(fs, second["next_cursor"], limit=1000)
    assert len(scandirs) == 2
    names = [e["name"] for e in third["entries"]]
    assert names[-2:] == ["n0999", "n0999a"] and "n0700" not in names and names[0] == "n0600"
    assert third["total"] == 1000 and third["next_cursor"] is None

    # A first page never trusts a snapshot.
    os.utime(home / "big", (OLD, OLD))
    await page(fs, None)
    await page(fs, None)
    assert len(scandirs) == 4


@pytest.mark.anyio
async def test_a_folder_changed_just_now_is_not_kept(home: Path, scandirs: list[int]) -> None:
    fs = FileHandlers(str(home), SiteRegistry(str(home / "no-state")))
    (home / "big" / "fresh").write_bytes(b"")  # mtime: now, within the racy window
    first = await page(fs, None)
    await page(fs, first["next_cursor"])
    assert len(scandirs) == 2


def test_snapshots_are_bounded() -> None:
    snapshots = read.Snapshots()
    snapshots.MAX_NAMES, snapshots.MAX_FOLDERS = 10, 2
    old = time.time_ns() - 10 * read.Snapshots.RACY_NS

    def st(ino: int) -> os.stat_result:
        return os.stat_result((stat.S_IFDIR, ino, 1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, old, old, old))

    snapshots.put(st(1), time.time_ns(), ["a"] * 4)
    snapshots.put(st(2), time.time_ns(), ["b"] * 4)
    snapshots.put(st(3), time.time_ns(), ["c"] * 4)  # two folders at most: 1 goes
    assert snapshots.get(st(1)) is None and snapshots.get(st(2)) and snapshots.get(st(3))
    snapshots.put(st(4), time.time_ns(), ["d"] * 11)  # over the name bound: not kept at all
    assert snapshots.get(st(4)) is None and snapshots.get(st(3))
    snapshots.put(st(5), time.time_ns(), ["e"] * 8)  # 4 + 8 > 10 names: the oldest go
    assert snapshots.get(st(2)) is None and snapshots.get(st(3)) is None and snapshots.get(st(5))
    snapshots.TTL_S = 0.0
    assert snapshots.get(st(5)) is None


def test_entries_match_entry_for_every_kind(tmp_path: Path) -> None:
    folder = tmp_path / "caf\udce9"  # not UTF-8 (surrogate-escaped), as os.listdir gives it
    folder.mkdir()
    (folder / "plain.txt").write_text("hello")
    (folder / "sub").mkdir(mode=0o750)
    os.symlink("plain.txt", folder / "link")
    os.symlink("/nowhere/\udcff", folder / "dangling")
    os.mkfifo(folder / "pipe")
    (folder / "na\udcefme").write_bytes(b"")
    os.utime(folder / "plain.txt", (0, -1.5))  # before the epoch, between two seconds
    (folder / "late").write_bytes(b"")
    os.utime(folder / "late", ns=(0, 1_700_000_000_999_999_999))
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        names = [*sorted(os.listdir(fd)), "gone"]
        built = entries(fd, "site/caf\udce9", names)
        expected = []
        for name in names[:-1]:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            target = os.readlink(name, dir_fd=fd) if stat.S_ISLNK(st.st_mode) else None
            expected.append(entry(name, f"site/caf\udce9/{name}", st, target))
    finally:
        os.close(fd)
    assert built == expected
    for item in built:
        Entry.model_validate(item)
    orjson.dumps(built)  # every string is UTF-8
    by_name = {e["name"]: e for e in built}
    assert by_name["plain.txt"]["mtime"] == "1969-12-31T23:59:58Z"
    assert by_name["late"]["mtime"] == "2023-11-14T22:13:20Z"
    assert by_name["na\ufffdme"]["path"] == "site/caf\ufffd/na\ufffdme"
    assert by_name["dangling"]["link_target"] == "/nowhere/\ufffd"


# --- through the control plane ---------------------------------------------------------------


def test_listing_is_the_agents_page_with_its_length(stack: Stack) -> None:
    folder = stack.data_dir / "home" / "example-com" / f"l-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    for i in range(2500):
        (folder / f"f{i:05d}.txt").write_bytes(b"x" * (i % 50))
    with stack.http() as http:
        base = f"/v1/servers/{stack.server_id}/fs"
        answer = http.get(f"{base}/list", params={**site(), "path": folder.name, "limit": 2000})
        assert answer.status_code == 200 and answer.headers["content-type"] == "application/json"
        assert int(answer.headers["content-length"]) == len(answer.content)
        body = answer.json()
        assert list(body) == ["path", "entries", "next_cursor", "total"]
        Listing.model_validate(body)
        assert body["path"] == folder.name and body["total"] == 2500 and len(body["entries"]) == 2000
        first = body["entries"][7]
        assert Entry.model_validate(first).size == 7 and first["path"] == f"{folder.name}/f00007.txt"
        rest = http.get(f"{base}/list", params={**site(), "path": folder.name, "cursor": body["next_cursor"]})
        assert [e["name"] for e in rest.json()["entries"]] == [f"f{i:05d}.txt" for i in range(2000, 2500)]
        assert rest.json()["next_cursor"] is None

        # Errors from the agent are still the contract's, before any byte of a page.
        missing = http.get(f"{base}/list", params={**site(), "path": "no/such/folder"})
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
        a_file = http.get(f"{base}/list", params={**site(), "path": f"{folder.name}/f00001.txt"})
        assert a_file.status_code == 422 and a_file.json()["error"]["code"] == "validation_error"
        escape = http.get(f"{base}/list", params={**site(), "path": "../shop-example-org"})
        assert escape.status_code == 422 and escape.json()["error"]["code"] == "path_outside_scope"
        gone = http.get(f"{base}/download", params={**site(), "path": "no-such-file.bin"})
        assert gone.status_code == 404 and gone.json()["error"]["code"] == "not_found"
        directory = http.get(f"{base}/download", params={**site(), "path": folder.name})
        assert directory.status_code == 422 and directory.json()["error"]["code"] == "validation_error"


def site() -> dict[str, str]:
    return {"scope": "site", "domain": "example.com"}


@pytest.mark.anyio
async def test_an_agent_answering_with_the_page_itself_still_works(stack: Stack) -> None:
    """An agent that does not know `encoded` (an older one) answers fs.list with the page as its
    result, even when called as a stream: the control plane encodes it."""
    headers = {"Authorization": f"Bearer {stack.token}"}
    created = httpx.post(  # noqa: ASYNC210 - once, before the agent runs
        f"{stack.base_url}/v1/servers",
        json={"name": f"old-agent-{uuid.uuid4().hex[:6]}", "kind": "full"},
        headers=headers,
    )
    created.raise_for_status()
    server_id, token = created.json()["server"]["id"], created.json()["agent_token"]
    seen: list[dict[str, Any]] = []

    async def fs_list(call: Call) -> dict[str, Any]:
        seen.append(call.params)
        entry_ = {"name": "a", "path": "a", "type": "file", "size": 1, "mode": 33188, "permissions": "rw-r--r--"}
        entry_ |= {"owner": "root", "group": "root", "mtime": "2026-01-01T00:00:00Z", "link_target": None}
        return {"path": "", "entries": [entry_], "next_cursor": None, "total": 1}

    fast = Backoff(base=0.05, cap=0.2)
    link = AgentLink(stack.base_url, token, {"fs.list": fs_list}, version="0.0.1", backoff=fast, auth_backoff=fast)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(link.run)
        async with Client(stack.base_url, token=stack.token) as client:
            with trio.fail_after(20):
                while not (await client.servers.get(server_id)).agent.online:  # noqa: ASYNC110
                    await trio.sleep(0.05)
            listing = await client.files.list(server_id, SITE, "")
        nursery.cancel_scope.cancel()  # the link ends before its server goes, which would cut it (4401)
    httpx.delete(f"{stack.base_url}/v1/servers/{server_id}", headers=headers).raise_for_status()  # noqa: ASYNC210
    assert [e["name"] for e in listing.entries] == ["a"] and listing.total == 1
    assert seen and seen[0]["encoded"] is True


# --- the C WebSocket masker ------------------------------------------------------------------


@given(key=hs.binary(min_size=4, max_size=4), parts=hs.lists(hs.binary(max_size=70), max_size=6))
def test_c_masker_is_wsprotos_masker(key: bytes, parts: list[bytes]) -> None:
    assert fastmask.install()
    reference, masker = fastmask.WSPROTO_MASKER(key), fastmask.CMasker(key)
    for part in parts:  # one payload in parts: the key must carry on where the last part ended
        assert masker.process(bytearray(part)) == bytes(reference.process(bytearray(part)))


def test_wsproto_uses_the_c_masker_both_ways() -> None:
    from wsproto import ConnectionType, WSConnection
    from wsproto.events import AcceptConnection, BytesMessage, Request

    assert fastmask.install()
    client, server = WSConnection(ConnectionType.CLIENT), WSConnection(ConnectionType.SERVER)
    server.receive_data(client.send(Request(host="x", target="/")))
    next(server.events())
    client.receive_data(server.send(AcceptConnection()))
    next(client.events())
    payload = os.urandom(300_001)
    frame = client.send(BytesMessage(data=payload))
    assert payload[:1000] not in frame  # masked on the wire
    server.receive_data(frame)
    received = b"".join(bytes(e.data) for e in server.events() if isinstance(e, BytesMessage))
    assert received == payload
    client.receive_data(server.send(BytesMessage(data=payload)))  # and back, unmasked
    assert b"".join(bytes(e.data) for e in client.events() if isinstance(e, BytesMessage)) == payload


@given(
    payload=hs.binary(max_size=70_000),
    opcode=hs.sampled_from(["BINARY", "TEXT", "CONTINUATION"]),
    fin=hs.booleans(),
    client=hs.booleans(),
)
def test_the_lean_frame_is_wsprotos_frame(payload: bytes, opcode: str, fin: bool, client: bool) -> None:
    from wsproto.frame_protocol import FrameProtocol, Opcode

    assert fastmask.install()
    assert FrameProtocol._serialize_frame is fastmask.lean_frame  # type: ignore[comparison-overlap]
    protocol = FrameProtocol(client=client, extensions=[])
    theirs = bytes(fastmask.WSPROTO_SERIALIZE(protocol, Opcode[opcode], payload, fin))
    ours = fastmask.lean_frame(protocol, Opcode[opcode], payload, fin)
    assert len(ours) == len(theirs)
    if not client:
        assert ours == theirs
        return
    at = len(theirs) - len(payload) - 4  # header, then the frame's own random key, then the payload
    assert ours[:at] == theirs[:at]
    assert fastmask.CMasker(ours[at : at + 4]).process(bytearray(ours[at + 4 :])) == payload
