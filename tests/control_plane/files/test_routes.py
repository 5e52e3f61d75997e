"""The file workspace through the HTTP API with the real agent: every operation, roles, audit."""

from __future__ import annotations

import os
import select
import socket
import subprocess
import uuid
import zipfile
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import trio

from api_client import Client, TooManyPaths
from contract.errors import Conflict
from contract.models import MAX_ARCHIVE_PATHS, MAX_PATHS, RELAY_UPLOAD_LIMIT, FsDirSize, FsSearchResult, Scope
from tests.conftest import Stack
from tests.helpers import eventually, wait_until

pytestmark = pytest.mark.stack_variants("sqlite", "postgresql", "uvicorn")

SITE = Scope(scope="site", domain="example.com")


def fs(stack: Stack, http: httpx.Client, method: str, route: str, **kwargs: Any) -> httpx.Response:
    return http.request(method, f"/v1/servers/{stack.server_id}/fs/{route}", **kwargs)


def site_body(**fields: Any) -> dict[str, Any]:
    return {"scope": "site", "domain": "example.com", **fields}


@pytest.fixture
def folder(stack: Stack) -> str:
    """A fresh folder in example.com for one test."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    with stack.http() as http:
        assert fs(stack, http, "POST", "mkdir", json=site_body(path=name)).status_code == 200
    return name


def site_root(stack: Stack) -> Path:
    return stack.data_dir / "home" / "example-com"


@pytest.mark.anyio
async def test_write_read_conflict_and_create_only(stack: Stack, folder: str) -> None:
    path = f"{folder}/notes.md"
    async with Client(stack.base_url, token=stack.token) as client:
        created = await client.files.write(stack.server_id, SITE, path, "# one\n", create_only=True)
        with pytest.raises(Conflict):
            await client.files.write(stack.server_id, SITE, path, "again", create_only=True)
        read = await client.files.read(stack.server_id, SITE, path)
        assert read.content == "# one\n" and read.etag == created.etag
        saved = await client.files.write(stack.server_id, SITE, path, "# two\n", if_match=read.etag)
        with pytest.raises(Conflict):  # a stale editor never clobbers a newer save
            await client.files.write(stack.server_id, SITE, path, "# stale\n", if_match=read.etag)
        assert (await client.files.read(stack.server_id, SITE, path)).etag == saved.etag
    assert (site_root(stack) / path).read_text() == "# two\n"


@pytest.mark.anyio
async def test_concurrent_saves_with_one_etag_have_one_winner(stack: Stack, folder: str) -> None:
    """Twenty editors that read the same version all save at once: exactly one wins, the others
    get 409 and the file holds the winner's text."""
    path = f"{folder}/race.txt"
    async with Client(stack.base_url, token=stack.token) as client:
        etag = (await client.files.write(stack.server_id, SITE, path, "start\n")).etag
        winners: list[str] = []
        conflicts = 0

        async def save(text: str) -> None:
            nonlocal conflicts
            try:
                await client.files.write(stack.server_id, SITE, path, text, if_match=etag)
                winners.append(text)
            except Conflict:
                conflicts += 1

        padding = "x" * 256 * 1024  # a write that takes a while widens the window between check and rename
        for round_ in range(10):  # each round's texts are new: identical bytes would keep the etag
            winners.clear()
            conflicts = 0
            async with trio.open_nursery() as nursery:
                for n in range(20):
                    nursery.start_soon(save, f"round {round_}, editor {n}\n{padding}")
            assert len(winners) == 1 and conflicts == 19
            assert (site_root(stack) / path).read_text() == winners[0]
            etag = (await client.files.read(stack.server_id, SITE, path)).etag


def test_edit_keeps_mode(stack: Stack, folder: str) -> None:
    target = site_root(stack) / folder / "run.sh"
    target.write_text("#!/bin/sh\n")
    target.chmod(0o750)
    with stack.http() as http:
        etag = fs(
            stack, http, "GET", "read", params={"scope": "site", "domain": "example.com", "path": f"{folder}/run.sh"}
        ).json()["etag"]
        answer = fs(
            stack,
            http,
            "PUT",
            "write",
            json=site_body(path=f"{folder}/run.sh", content="#!/bin/sh\necho hi\n", if_match=etag),
        )
    assert answer.status_code == 200, answer.text
    assert oct(target.stat().st_mode & 0o777) == oct(0o750)


@pytest.mark.anyio
async def test_move_copy_rename_delete_restore(stack: Stack, folder: str) -> None:
    async with Client(stack.base_url, token=stack.token) as client:
        await client.files.write(stack.server_id, SITE, f"{folder}/a.txt", "A")
        await client.files.mkdir(stack.server_id, SITE, f"{folder}/sub/deep", parents=True)
        assert await client.files.copy(stack.server_id, SITE, [f"{folder}/a.txt"], f"{folder}/sub") == [
            f"{folder}/sub/a.txt"
        ]
        assert await client.files.move(stack.server_id, SITE, [f"{folder}/a.txt"], f"{folder}/b.txt") == [
            f"{folder}/b.txt"
        ]
        with pytest.raises(Conflict):
            await client.files.copy(stack.server_id, SITE, [f"{folder}/b.txt"], f"{folder}/sub/a.txt")
        trashed = await client.files.delete(stack.server_id, SITE, [f"{folder}/b.txt"])
        assert len(trashed) == 1 and not (site_root(stack) / folder / "b.txt").exists()
        items, _ = await client.files.trash(stack.server_id, SITE)
        item = next(i for i in items if i.original_path == f"{folder}/b.txt")
        assert await client.files.restore(stack.server_id, SITE, [item.id]) == [f"{folder}/b.txt"]
        assert (site_root(stack) / folder / "b.txt").read_text() == "A"
        assert await client.files.delete(stack.server_id, SITE, [f"{folder}/b.txt"], permanent=True) == [
            f"{folder}/b.txt"
        ]
        items, _ = await client.files.trash(stack.server_id, SITE)
        assert all(i.original_path != f"{folder}/b.txt" or i.id == item.id for i in items)


def test_chmod_dirsize_search(stack: Stack, folder: str) -> None:
    root = site_root(stack) / folder
    (root / "x").mkdir()
    (root / "x" / "one.php").write_text("<?php echo 'needle';\n")
    (root / "x" / "two.txt").write_text("haystack\n")
    with stack.http() as http:
        changed = fs(
            stack,
            http,
            "POST",
            "chmod",
            json=site_body(paths=[f"{folder}/x"], mode="0750", recursive=True, only="files"),
        )
        assert changed.status_code == 200 and changed.json()["changed"] == 2
        assert oct((root / "x" / "one.php").stat().st_mode & 0o777) == oct(0o750)
        for bad in ("4755", "2755", "1777", 0o4755, "abc"):
            refused = fs(stack, http, "POST", "chmod", json=site_body(paths=[f"{folder}/x"], mode=bad))
            assert refused.status_code == 422, bad
        size = fs(
            stack, http, "GET", "dirsize", params={"scope": "site", "domain": "example.com", "path": folder}
        ).json()
        assert size["files"] == 2 and size["dirs"] >= 1 and size["bytes"] > 0
        found = fs(
            stack,
            http,
            "GET",
            "search",
            params={"scope": "site", "domain": "example.com", "path": folder, "query": "needle", "content": "true"},
        ).json()
        assert [m["entry"]["name"] for m in found["matches"]] == ["one.php"] and found["matches"][0]["line"] == 1
        by_name = fs(
            stack,
            http,
            "GET",
            "search",
            params={"scope": "site", "domain": "example.com", "path": folder, "query": "TWO"},
        ).json()
        assert [m["entry"]["name"] for m in by_name["matches"]] == ["two.txt"]


@pytest.mark.anyio
async def test_tree_answers_are_typed(stack: Stack, folder: str) -> None:
    """The client gives the models of the tree operations, not the agent's dicts."""
    root = site_root(stack) / folder
    (root / "x").mkdir()
    (root / "x" / "one.php").write_text("<?php echo 'needle';\n")
    (root / "x" / "two.txt").write_text("haystack\n")
    async with Client(stack.base_url, token=stack.token) as client:
        size = await client.files.dirsize(stack.server_id, SITE, folder)
        assert size == FsDirSize(path=folder, bytes=len("<?php echo 'needle';\n") + len("haystack\n"), files=2, dirs=1)
        found = await client.files.search(stack.server_id, SITE, folder, "needle", content=True)
        assert isinstance(found, FsSearchResult) and not found.truncated
        [match] = found.matches
        assert (match.entry.path, match.entry.type, match.line, match.text) == (
            f"{folder}/x/one.php",
            "file",
            1,
            "<?php echo 'needle';",
        )
        by_name = await client.files.search(stack.server_id, SITE, folder, "o", limit=1)
        assert len(by_name.matches) == 1 and by_name.truncated and by_name.matches[0].line is None
        assert await client.files.chmod(stack.server_id, SITE, [f"{folder}/x"], "0750", recursive=True) == 3


@pytest.mark.anyio
async def test_compress_and_extract_with_progress(stack: Stack, folder: str) -> None:
    root = site_root(stack) / folder
    (root / "src").mkdir()
    for i in range(20):
        (root / "src" / f"f{i}.txt").write_text(f"file {i}\n" * 100)
    async with Client(stack.base_url, token=stack.token) as client:
        for fmt, name in (("zip", "a.zip"), ("tar.gz", "a.tar.gz")):
            operation = await client.files.compress(
                stack.server_id, SITE, [f"{folder}/src"], f"{folder}/{name}", format=fmt
            )
            events = [e async for e in client.files.operation(stack.server_id, operation)]
            assert events[-1].event == "done", events[-1]
            assert any(e.event == "progress" for e in events)
            extracted = await client.files.extract(stack.server_id, SITE, f"{folder}/{name}", f"{folder}/out-{fmt}")
            events = [e async for e in client.files.operation(stack.server_id, extracted)]
            assert events[-1].event == "done", events[-1]
            assert (root / f"out-{fmt}" / "src" / "f7.txt").read_text() == "file 7\n" * 100
    with stack.http() as http:
        refused = fs(stack, http, "POST", "extract", json=site_body(path=f"{folder}/src/f1.txt", destination=folder))
        assert refused.status_code == 422


@pytest.mark.anyio
async def test_extract_check_then_skip_or_overwrite(stack: Stack, folder: str) -> None:
    """A single-root archive extracted into the folder it sits in: the check names its root and
    the files already there without writing; `on_conflict` decides what they get."""
    root = site_root(stack) / folder
    with zipfile.ZipFile(root / "wp-content.zip", "w") as archive:
        archive.writestr("wp-content/index.php", "new index")
        archive.writestr("wp-content/plugins/a.php", "new plugin")
    (root / "wp-content").mkdir()
    (root / "wp-content" / "index.php").write_text("my index")
    with zipfile.ZipFile(root / "evil.zip", "w") as archive:
        archive.writestr("../escaped.txt", "x")

    async def run(on_conflict: Any) -> Any:
        started = await client.files.extract(
            stack.server_id, SITE, f"{folder}/wp-content.zip", folder, on_conflict=on_conflict
        )
        return [e async for e in client.files.operation(stack.server_id, started)][-1]

    async with Client(stack.base_url, token=stack.token) as client:
        check = await client.files.extract_check(stack.server_id, SITE, f"{folder}/wp-content.zip", folder)
        assert check.roots == ["wp-content"] and check.entries == 2
        assert check.conflicts == [f"{folder}/wp-content/index.php"] and check.conflicts_total == 1
        assert sorted(os.listdir(root / "wp-content")) == ["index.php"]  # nothing written
        refused = await run("refuse")
        assert refused.event == "error" and refused.data["code"] == "conflict"
        assert sorted(os.listdir(root / "wp-content")) == ["index.php"]
        kept = await run("skip")
        assert kept.event == "done" and kept.data["result"]["kept"] == 1
        assert (root / "wp-content" / "index.php").read_text() == "my index"
        assert (root / "wp-content" / "plugins" / "a.php").read_text() == "new plugin"
        replaced = await run("overwrite")
        assert replaced.event == "done" and replaced.data["result"]["replaced"] == 2
        assert (root / "wp-content" / "index.php").read_text() == "new index"
        assert not (root / "wp-content" / "wp-content").exists()
    with stack.http() as http:
        evil = fs(stack, http, "GET", "extract/check", params=site_body(path=f"{folder}/evil.zip", destination=folder))
        assert evil.status_code == 422 and evil.json()["error"]["code"] == "validation_error"
        assert not (root.parent / "escaped.txt").exists()
        body = site_body(path=f"{folder}/wp-content.zip", destination=folder, on_conflict="merge")
        assert fs(stack, http, "POST", "extract", json=body).status_code == 422
        not_archive = site_body(path=f"{folder}/wp-content/index.php", destination=folder)
        assert fs(stack, http, "GET", "extract/check", params=not_archive).status_code == 422


@pytest.mark.anyio
async def test_an_archive_takes_more_items_than_one_bulk_request(stack: Stack, folder: str) -> None:
    """Compress cannot be batched (one archive, one operation): marking every file of a folder over
    the bulk bound and compressing them works; past the archive bound it is refused in words."""
    root = site_root(stack) / folder
    count = MAX_PATHS + 500
    names = [f"f-{i:05d}.txt" for i in range(count)]
    for name in names:
        (root / name).write_bytes(b"x")
    async with Client(stack.base_url, token=stack.token) as client:
        paths = [f"{folder}/{name}" for name in names]
        operation = await client.files.compress(stack.server_id, SITE, paths, f"{folder}/all.zip", format="zip")
        events = [e async for e in client.files.operation(stack.server_id, operation)]
        assert events[-1].event == "done", events[-1]
        with zipfile.ZipFile(root / "all.zip") as made:
            assert sorted(made.namelist()) == names
        with pytest.raises(TooManyPaths, match=f"up to {MAX_ARCHIVE_PATHS:,} marked items"):
            await client.files.compress(stack.server_id, SITE, paths * 10, f"{folder}/x.zip", format="zip")
    with stack.http() as http:
        body = site_body(paths=[f"{folder}/{names[0]}"] * (MAX_ARCHIVE_PATHS + 1), format="zip", destination=folder)
        assert fs(stack, http, "POST", "compress", json=body).status_code == 422


@pytest.mark.anyio
@pytest.mark.parametrize(
    "size", [0, 1, 3 * 1024 * 1024 + 7, RELAY_UPLOAD_LIMIT, RELAY_UPLOAD_LIMIT + 1, 300 * 1024 * 1024]
)
async def test_upload_and_download_round_trip(stack: Stack, folder: str, size: int) -> None:
    data = os.urandom(size)
    path = f"{folder}/blob-{size}.bin"
    async with Client(stack.base_url, token=stack.token) as client:
        entry = await client.files.upload(stack.server_id, SITE, path, data)
        assert entry.size == size
        received = b"".join([chunk async for chunk in client.files.download(stack.server_id, SITE, path)])
    assert received == data


def _raw_upload(stack: Stack, path: str, *, chunked: bool) -> tuple[bytes, bool]:
    """PUT an upload over raw HTTP/1.1; the status line, and whether a temporary file appeared
    while the body was sent. Stops sending once answered.

    The server answers 413 without reading a body it will refuse (and closes the connection):
    here the sender watches for the answer.
    """
    host, port = stack.base_url.removeprefix("http://").split(":")
    query = f"scope=site&domain=example.com&path={path}"
    length = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {RELAY_UPLOAD_LIMIT + 1}"
    head = f"PUT /v1/servers/{stack.server_id}/fs/upload?{query} HTTP/1.1\r\nHost: {host}\r\n"
    head += f"Authorization: Bearer {stack.token}\r\n{length}\r\n\r\n"
    chunk = b"x" * (1024 * 1024)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(head.encode())
        sent, spooled = 0, False
        while chunked and sent <= RELAY_UPLOAD_LIMIT:
            spooled = spooled or any((site_root(stack) / path).parent.iterdir())
            readable, _, _ = select.select([sock], [], [], 0)
            if readable:
                break
            try:
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            except OSError:
                break
            sent += len(chunk)
        return sock.recv(65536).split(b"\r\n", 1)[0], spooled


@pytest.mark.parametrize("chunked", [False, True])
def test_relay_upload_over_64_mib_is_413(stack: Stack, folder: str, chunked: bool) -> None:
    status, spooled = _raw_upload(stack, f"{folder}/big.bin", chunked=chunked)
    assert status.startswith(b"HTTP/1.1 413"), status
    # A declared length is refused on the head, before a file exists; a chunked body is spooled first.
    assert spooled == chunked
    wait_until(lambda: list((site_root(stack) / folder).iterdir()) == [])  # no file, no temporary left


@pytest.mark.parametrize("chunked", [False, True])
def test_an_http_client_sees_the_413_of_a_relay_upload_over_64_mib(stack: Stack, folder: str, chunked: bool) -> None:
    """The answer comes before the body is read: the server closes the connection after it, so
    the client's write fails and it reads the 413 (its write timeout turns a hang into a failure)."""
    piece = b"x" * (1024 * 1024)
    body = (piece for _ in range(100)) if chunked else piece * 100
    with stack.http() as http:
        answer = http.put(
            f"/v1/servers/{stack.server_id}/fs/upload",
            params={"scope": "site", "domain": "example.com", "path": f"{folder}/big.bin"},
            content=body,
        )
    assert (answer.status_code, answer.json()["error"]["code"]) == (413, "too_large")
    assert answer.headers["connection"] == "close"
    wait_until(lambda: list((site_root(stack) / folder).iterdir()) == [])


def test_a_relay_upload_that_trickles_is_cut_off(stack: Stack, folder: str) -> None:
    host, port = stack.base_url.removeprefix("http://").split(":")
    query = f"scope=site&domain=example.com&path={folder}/slow.bin"
    head = f"PUT /v1/servers/{stack.server_id}/fs/upload?{query} HTTP/1.1\r\nHost: {host}\r\n"
    head += f"Authorization: Bearer {stack.token}\r\nContent-Length: {1024 * 1024}\r\n\r\n"
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(head.encode())
        for _ in range(240):  # a byte every half second, until answered (two minutes at most)
            sock.sendall(b"x")
            if select.select([sock], [], [], 0.5)[0]:
                break
        answer = b""
        while data := sock.recv(65536):  # to the end: the server closes the connection
            answer += data
    # The front door's pace (`control_plane.frontdoor`): after its grace, 16 KiB/s on average.
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert b"connection: close" in answer.lower() and b'"code":"timeout"' in answer
    wait_until(lambda: list((site_root(stack) / folder).iterdir()) == [])


@pytest.mark.anyio
async def test_interrupted_upload_leaves_nothing(stack: Stack, folder: str) -> None:
    path = f"{folder}/cut.bin"

    async def half_then_fail() -> Any:
        yield b"x" * (1024 * 1024)
        await eventually(lambda: any((site_root(stack) / folder).iterdir()))  # the agent is spooling
        raise ConnectionResetError("the client went away")

    with pytest.raises(Exception):  # noqa: B017 - whatever the transport makes of a cut request
        async with httpx.AsyncClient(
            base_url=stack.base_url, headers={"Authorization": f"Bearer {stack.token}"}
        ) as http:
            await http.put(
                f"/v1/servers/{stack.server_id}/fs/upload",
                params={"scope": "site", "domain": "example.com", "path": path},
                content=half_then_fail(),
                headers={"Content-Length": str(4 * 1024 * 1024)},
            )
    await eventually(lambda: not any((site_root(stack) / folder).iterdir()))


@pytest.mark.anyio
async def test_interrupted_stream_upload_leaves_nothing(stack: Stack, folder: str) -> None:
    params = {
        "scope": "site",
        "domain": "example.com",
        "path": f"{folder}/cut-stream.bin",
        "size": str(200 * 1024 * 1024),
    }
    route = f"/v1/servers/{stack.server_id}/fs/upload/stream"
    async with Client(stack.base_url, token=stack.token) as client, client.websocket(route, params=params) as socket:
        for _ in range(20):
            await socket.send_bytes(b"y" * (1024 * 1024))
        await eventually(lambda: any((site_root(stack) / folder).iterdir()))  # the agent is spooling
        # and gone, a tenth of the way in, without `done`
    await eventually(lambda: not any((site_root(stack) / folder).iterdir()))


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("size", "frame", "code"),
    [
        (str(2**63), None, "validation_error"),  # past what any integer column or the link takes
        ("5", "not json", "bad_request"),  # a text frame that is not {"done": true}
        ("5", "[1, 2]", "bad_request"),
    ],
)
async def test_stream_upload_refuses_bad_input_with_an_error_frame(
    stack: Stack, folder: str, size: str, frame: str | None, code: str
) -> None:
    params = {"scope": "site", "domain": "example.com", "path": f"{folder}/bad.bin", "size": size}
    route = f"/v1/servers/{stack.server_id}/fs/upload/stream"
    async with Client(stack.base_url, token=stack.token) as client, client.websocket(route, params=params) as socket:
        if frame is not None:
            await socket.send_bytes(b"hello")
            await socket.send_text(frame)
        with trio.fail_after(30):  # before the fix the server closed with 1011 and sent no answer
            answer = orjson.loads(await socket.receive_text())
    assert answer["error"]["code"] == code
    # The agent removes the upload's temporary file once the control plane calls the upload off.
    wait_until(lambda: list((site_root(stack) / folder).iterdir()) == [])


async def _stream_upload_answer(stack: Stack, server_id: str, params: dict[str, str], *, send: bool) -> dict[str, Any]:
    """What the streaming upload named by `params` answers: at once (a target it refuses, before
    any frame is read: a frame sent then may meet the closed socket), or once it has its one byte
    (`send`)."""
    route = f"/v1/servers/{server_id}/fs/upload/stream"
    async with Client(stack.base_url, token=stack.token) as client, client.websocket(route, params=params) as socket:
        with trio.fail_after(30):
            if send:
                await socket.send_bytes(b"x")
                await socket.send_text('{"done": true}')
            answer: dict[str, Any] = orjson.loads(await socket.receive_text())
    return answer


def _refusal(answer: httpx.Response | dict[str, Any]) -> tuple[int | None, str, list[Any]]:
    """An answer's status (None: a WebSocket frame), error code and its first error's location."""
    status, body = (answer.status_code, answer.json()) if isinstance(answer, httpx.Response) else (None, answer)
    if "error" not in body:
        return status, "", []
    errors = body["error"]["details"].get("errors") if body["error"]["details"] else None
    return status, body["error"]["code"], errors[0]["loc"] if errors else []


@pytest.mark.anyio
@pytest.mark.stack_variants("sqlite")  # the routes' checks, not the database's
@pytest.mark.parametrize(
    ("case", "in_query", "in_body"),
    [
        ("another org's server", (404, "not_found", []), (404, "not_found", [])),
        ("no domain", (422, "validation_error", ["query", "domain"]), (422, "validation_error", ["body", "domain"])),
        ("unknown scope", (400, "bad_request", []), (422, "validation_error", ["body", "scope"])),
        ("path outside", (422, "path_outside_scope", []), (422, "path_outside_scope", [])),
    ],
)
async def test_a_target_is_refused_alike_in_the_query_the_body_and_the_websocket(
    stack: Stack, folder: str, case: str, in_query: tuple[int, str, list[str]], in_body: tuple[int, str, list[str]]
) -> None:
    """The routes that name their target in a JSON body (one dependency, `target_in_body`), in the
    query (`ReadTarget`, `WriteTarget`: the raw upload among them) and the streaming upload (which
    calls the query's dependency itself) check it alike; as the contract says, a scope outside its
    set is a 400 in a query and a 422 in a JSON body, which has a schema."""
    server_id, target = stack.server_id, {"scope": "site", "domain": "example.com", "path": f"{folder}/t.txt"}
    if case == "another org's server":
        server_id = str(stack.admin("create-server", "web-1", "--org", _other_org(stack))["id"])
    elif case == "no domain":
        del target["domain"]
    elif case == "unknown scope":
        target["scope"] = "planet"
    else:
        target["path"] = "../escaped.txt"
    scope = {name: value for name, value in target.items() if name != "path"}
    with stack.http() as http:
        route = f"/v1/servers/{server_id}/fs"
        by_query = [
            http.get(f"{route}/stat", params=target),
            http.put(f"{route}/upload", params=target, content=b"x"),
        ]
        by_body = [
            http.put(f"{route}/write", json={**target, "content": "x"}),
            http.post(f"{route}/mkdir", json=target),
            http.post(f"{route}/delete", json={**scope, "paths": [target["path"]]}),
            http.post(f"{route}/upload/direct", json={**target, "size": 1}),
        ]
    streamed = await _stream_upload_answer(stack, server_id, {**target, "size": "1"}, send=case == "path outside")
    assert [_refusal(answer) for answer in by_query] == [in_query] * 2, case
    assert [_refusal(answer) for answer in by_body[:3]] == [in_body] * 3, case
    # A server without an ingress has no direct upload: the client is sent to the relay, where
    # the agent checks the path (`test_direct_upload` checks it at a direct one).
    assert _refusal(by_body[3]) == ((200, "", []) if case == "path outside" else in_body), case
    assert _refusal(streamed) == (None, *in_query[1:]), case
    assert not (site_root(stack) / folder / "t.txt").exists() and not (site_root(stack) / "escaped.txt").exists()


def _other_org(stack: Stack) -> str:
    """The name of a new org of its own."""
    name = f"org-{uuid.uuid4().hex[:8]}"
    stack.admin("create-org", name, "--plan", "max")
    return name


def test_roles_matrix(stack: Stack, folder: str) -> None:
    tokens = {}
    for role in ("admin", "operator", "member"):
        email = f"{role}-{uuid.uuid4().hex[:6]}@demo.test"
        stack.admin("create-user", email, "--org", "demo", "--role", role, "--password", "pw-123456")
        tokens[role] = stack.login(email, "pw-123456")
    tokens["owner"] = stack.token
    expect_site_write = {"owner": 200, "admin": 200, "operator": 200, "member": 403}
    expect_root = {"owner": 200, "admin": 403, "operator": 403, "member": 403}
    for role, token in tokens.items():
        with stack.http(token) as http:
            read = fs(stack, http, "GET", "list", params={"scope": "site", "domain": "example.com", "path": folder})
            assert read.status_code == 200, role
            write = fs(stack, http, "POST", "mkdir", json=site_body(path=f"{folder}/by-{role}"))
            assert write.status_code == expect_site_write[role], (role, write.text)
            root = fs(stack, http, "GET", "list", params={"scope": "root", "path": ""})
            assert root.status_code == expect_root[role], role
            cross = fs(
                stack,
                http,
                "POST",
                "copy",
                json=site_body(paths=[f"{folder}"], destination="", to={"scope": "site", "domain": "shop.example.org"}),
            )
            assert (cross.status_code == 200) == (role == "owner"), (role, cross.text)


def test_every_write_is_audited(stack: Stack, folder: str) -> None:
    with stack.http() as http:
        fs(stack, http, "PUT", "write", json=site_body(path=f"{folder}/audited.txt", content="secret-content-xyz"))
        fs(stack, http, "POST", "mkdir", json=site_body(path=f"{folder}/audited.txt"))  # conflict: audited as error
        entries = http.get("/v1/audit", params={"server_id": stack.server_id, "limit": 20}).json()["entries"]
    mine = [e for e in entries if folder in (e["target"] or "")]
    outcomes = {(e["action"], e["outcome"], e["error_code"]) for e in mine}
    assert ("fs.write", "ok", None) in outcomes and ("fs.mkdir", "error", "conflict") in outcomes
    assert "secret-content-xyz" not in str(entries)


# --- what the file system refuses: a clear error, never a 500 ---------------------------------


def _refusals(stack: Stack, http: httpx.Client, folder: str, name: str) -> dict[str, httpx.Response]:
    """Every writing operation aimed at `folder/name`."""
    site = {"scope": "site", "domain": "example.com"}
    path = f"{folder}/{name}"
    return {
        "write": fs(stack, http, "PUT", "write", json=site_body(path=path, content="x")),
        "mkdir": fs(stack, http, "POST", "mkdir", json=site_body(path=f"{path}-dir")),
        "upload": fs(stack, http, "PUT", "upload", params={**site, "path": f"{path}-up"}, content=b"bytes"),
        "move": fs(stack, http, "POST", "move", json=site_body(paths=[f"{folder}/plain.txt"], destination=path)),
        "delete": fs(stack, http, "POST", "delete", json=site_body(paths=[path])),
        "delete permanent": fs(stack, http, "POST", "delete", json=site_body(paths=[path], permanent=True)),
        "chmod": fs(stack, http, "POST", "chmod", json=site_body(paths=[path], mode="0600")),
    }


def test_a_name_over_255_bytes_is_a_validation_error(stack: Stack, folder: str) -> None:
    (site_root(stack) / folder / "plain.txt").write_text("plain\n")
    log_before = len(stack.log())
    with stack.http() as http:
        for operation, answer in _refusals(stack, http, folder, "é" * 128).items():  # 256 bytes
            assert answer.status_code == 422, (operation, answer.text)
            assert answer.json()["error"]["code"] == "validation_error", operation
    assert "Traceback" not in stack.log()[log_before:]
    assert sorted(os.listdir(site_root(stack) / folder)) == ["plain.txt"]


@pytest.fixture
def immutable(stack: Stack, folder: str) -> Any:
    """`folder/locked/` and `folder/locked/kept.txt`, immutable (chattr +i): even root is refused
    (EPERM), as a site user is refused another's files."""
    if os.geteuid() != 0:
        pytest.skip("chattr +i needs root")
    root = site_root(stack) / folder
    (root / "plain.txt").write_text("plain\n")
    (root / "locked").mkdir()
    (root / "locked" / "kept.txt").write_text("kept\n")
    locked = [root / "locked" / "kept.txt", root / "locked"]
    done = subprocess.run(["chattr", "+i", *map(str, locked)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"chattr +i is not supported here: {done.stderr.strip()}")
    try:
        yield root / "locked"
    finally:
        subprocess.run(["chattr", "-i", *map(str, locked)], check=True)


def test_permission_denied_is_forbidden_with_the_path(stack: Stack, folder: str, immutable: Path) -> None:
    log_before = len(stack.log())
    with stack.http() as http:
        answers = {
            **{f"{op} (new name)": a for op, a in _refusals(stack, http, folder, "locked/new").items()},
            **_refusals(stack, http, folder, "locked/kept.txt"),
        }
        other_answers = {  # nothing there to delete or chmod; a move never overwrites without asking
            "delete (new name)": 404,
            "delete permanent (new name)": 404,
            "chmod (new name)": 404,
            "move": 409,
        }
        for operation, answer in answers.items():
            assert answer.status_code == other_answers.get(operation, 403), (operation, answer.text)
            if answer.status_code == 403:
                error = answer.json()["error"]
                assert error["code"] == "forbidden" and error["details"]["path"].startswith(folder), (operation, error)
    assert "Traceback" not in stack.log()[log_before:]
    assert "internal error" not in stack.log()[log_before:]
    assert sorted(os.listdir(immutable)) == ["kept.txt"] and (immutable / "kept.txt").read_text() == "kept\n"
    assert (immutable.parent / "plain.txt").read_text() == "plain\n"
