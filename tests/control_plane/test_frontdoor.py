"""The control plane's front door, on both of its HTTP servers (hypercorn's trio worker and
uvicorn): request bodies over their route's cap are refused before they are read (413), heads
and bodies that stall are cut (408), and what must live long (event streams, streamed uploads)
lives on. Raw sockets, so that the test decides every byte and every pause."""

from __future__ import annotations

import json
import math
import os
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from api_client import Client
from contract.models import JSON_BODY_LIMIT, READ_LIMIT, Scope
from control_plane.auth.throttle import source_key
from control_plane.frontdoor import BODY_GRACE_S, BODY_IDLE_TIMEOUT_S, REQUEST_HEAD_TIMEOUT_S
from fleetdeck.launcher import start_agent
from tests.conftest import Stack

pytestmark = pytest.mark.stack_variants("sqlite", "uvicorn")

SITE = Scope(scope="site", domain="example.com")
# How late a cut may come after its limit on this busy machine (other helpers' tests share it).
SLACK_S = 8.0


def _address(stack: Stack) -> tuple[str, int]:
    host, port = stack.base_url.removeprefix("http://").split(":")
    return host, int(port)


async def exchange(stack: Stack, head: bytes, pieces: Iterable[bytes] = (), every: float = 0.0) -> tuple[bytes, float]:
    """Send `head`, then each of `pieces` after a pause of `every` seconds, until the server
    answers; returns all it sent until it closed the connection, and the seconds that took."""
    stream = await trio.open_tcp_stream(*_address(stack))
    started = trio.current_time()
    answered = trio.Event()
    answer = b""

    async def feed() -> None:
        await stream.send_all(head)
        for piece in pieces:
            with trio.move_on_after(every):
                await answered.wait()
            if answered.is_set():
                return
            try:
                await stream.send_all(piece)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return

    async with stream, trio.open_nursery() as nursery:
        nursery.start_soon(feed)
        with trio.fail_after(120):
            try:
                while chunk := await stream.receive_some(65536):
                    answer += chunk
                    answered.set()
            except trio.BrokenResourceError:
                pass  # a reset after the answer: the server closed with bytes of ours unread
        answered.set()
        nursery.cancel_scope.cancel()
    return answer, trio.current_time() - started


def error_of(answer: bytes) -> tuple[int, dict[str, Any], dict[str, str]]:
    """The status, the error body and the headers of a raw HTTP/1.1 answer."""
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), json.loads(body)["error"], headers


def request_head(stack: Stack, method: str, path: str, *headers: str) -> bytes:
    host, port = _address(stack)
    return "\r\n".join([f"{method} {path} HTTP/1.1", f"Host: {host}:{port}", *headers, "", ""]).encode()


def _json_routes(stack: Stack) -> Iterator[tuple[str, str, int]]:
    """(method, path, cap) of every route of the OpenAPI document that takes a JSON body."""
    spec = httpx.get(f"{stack.base_url}/v1/openapi.json").json()
    for template, methods in spec["paths"].items():
        for method, operation in methods.items():
            if "application/json" in operation.get("requestBody", {}).get("content", {}):
                path = "/".join("x" if part.startswith("{") else part for part in template.split("/"))
                yield method.upper(), path, operation.get("x-body-limit", JSON_BODY_LIMIT)


@pytest.mark.anyio
async def test_every_json_route_refuses_a_body_over_its_cap_before_reading_it(stack: Stack) -> None:
    """Only the head is sent, with a length one byte over the route's cap: the 413 comes without a
    byte of the body (no token either: the door answers before anything else)."""
    routes = list(_json_routes(stack))
    assert ("POST", "/v1/auth/login", JSON_BODY_LIMIT) in routes and len(routes) >= 15
    assert any(path.endswith("/fs/write") and cap > 6 * READ_LIMIT for _method, path, cap in routes)
    for method, path, cap in routes:
        head = request_head(stack, method, path, "Content-Type: application/json", f"Content-Length: {cap + 1}")
        answer, _took = await exchange(stack, head)
        status, error, headers = error_of(answer)
        assert (status, error["code"]) == (413, "too_large"), (method, path, answer[:300])
        assert error["details"] == {"limit": cap, "size": cap + 1} and headers["connection"] == "close"


@pytest.mark.anyio
async def test_a_chunked_body_is_cut_once_past_the_cap(stack: Stack) -> None:
    """No length said: the body is counted as it comes, and refused once past the cap; the
    sender is told while it is still sending."""
    head = request_head(stack, "POST", "/v1/auth/login", "Content-Type: application/json", "Transfer-Encoding: chunked")
    piece = b"x" * 65536
    chunk = b"%x\r\n%s\r\n" % (len(piece), piece)
    answer, _took = await exchange(stack, head, [chunk] * 1024)  # 64 MiB, if nothing stopped it
    status, error, headers = error_of(answer)
    assert (status, error["code"]) == (413, "too_large") and headers["connection"] == "close"
    assert error["details"]["limit"] == JSON_BODY_LIMIT
    # Cut at the first message past the cap, of the 64 MiB sent: a server may hand the app what
    # it read of several chunks in one message (uvicorn did 128 KiB on a loaded machine).
    assert JSON_BODY_LIMIT < error["details"]["size"] <= JSON_BODY_LIMIT + 4 * len(piece)


@pytest.mark.anyio
async def test_the_editor_limit_still_fits_fs_write(stack: Stack) -> None:
    """A text at the editor's limit whose JSON is twice its size (every character a quote) is saved."""
    text = '"' * (READ_LIMIT - 1)
    path = f"frontdoor-{uuid.uuid4().hex[:8]}.txt"
    async with Client(stack.base_url, token=stack.token) as client:
        await client.files.write(stack.server_id, SITE, path, text)
        read = await client.files.read(stack.server_id, SITE, path)
        await client.files.delete(stack.server_id, SITE, [path], permanent=True)
    assert read.content == text


@pytest.mark.anyio
async def test_stalled_heads_and_bodies_are_cut_while_streams_live_on(stack: Stack, tmp_path: Path) -> None:
    """At once, on connections of their own: a head sent a byte a second (slowloris), a silent
    connection, a JSON body sent a byte a second, a relay upload that stops after a fast start;
    and an event stream and a streamed upload that pause past those limits and live on."""
    login = "POST /v1/auth/login"
    slow_head = request_head(stack, "GET", "/v1/health", "X-Slow: " + "a" * 60)
    trickled = request_head(stack, *login.split(), "Content-Type: application/json", "Content-Length: 100")
    upload = request_head(
        stack,
        "PUT",
        f"/v1/servers/{stack.server_id}/fs/upload?scope=site&domain=example.com&path=frontdoor-{uuid.uuid4().hex[:8]}",
        f"Authorization: Bearer {stack.token}",
        f"Content-Length: {4 * 1024 * 1024}",
    )
    results: dict[str, tuple[bytes, float]] = {}

    async def run(name: str, head: bytes, pieces: Iterable[bytes] = (), every: float = 0.0) -> None:
        results[name] = await exchange(stack, head, pieces, every)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run, "head", slow_head[:20], [bytes([b]) for b in slow_head[20:]], 1.0)
        nursery.start_soon(run, "silent", b"")
        nursery.start_soon(run, "body", trickled, [b"{"] * 100, 1.0)
        # 1 MiB at once, then nothing: under the average pace for 74 s, so the idle rule cuts it.
        nursery.start_soon(run, "upload", upload + b"x" * 1024 * 1024, [b"x"], 3 * BODY_IDLE_TIMEOUT_S)
        lived = await _streams_outlive(stack, tmp_path)

    status, error, headers = error_of(results["head"][0])
    assert (status, error["code"], headers["connection"]) == (408, "timeout", "close")
    assert REQUEST_HEAD_TIMEOUT_S - 1 <= results["head"][1] <= REQUEST_HEAD_TIMEOUT_S + SLACK_S
    assert results["silent"][0] == b"" and results["silent"][1] <= REQUEST_HEAD_TIMEOUT_S + SLACK_S
    status, error, headers = error_of(results["body"][0])
    assert (status, error["code"], headers["connection"]) == (408, "timeout", "close")
    assert BODY_GRACE_S - 1 <= results["body"][1] <= BODY_GRACE_S + SLACK_S
    status, error, _headers = error_of(results["upload"][0])
    assert (status, error["code"]) == (408, "timeout")
    assert BODY_IDLE_TIMEOUT_S - 1 <= results["upload"][1] <= BODY_IDLE_TIMEOUT_S + SLACK_S
    assert lived == {"presence": True, "upload": 3 * 1024 * 1024}


async def _streams_outlive(stack: Stack, folder: Path) -> dict[str, Any]:
    """An event stream that hears nothing past the head and body limits, then an agent's presence;
    a streamed upload with pauses as long, which totals more than the idle limit."""
    async with Client(stack.base_url, token=stack.token) as client:
        created = await client.servers.create(f"door-{uuid.uuid4().hex[:6]}")
    server_id, token = created.server.id, created.agent_token
    (folder / "home").mkdir()
    (folder / "state").mkdir()
    pause = math.ceil(max(REQUEST_HEAD_TIMEOUT_S, BODY_GRACE_S)) + 2
    lived: dict[str, Any] = {}
    async with Client(stack.base_url, token=stack.token) as client:
        events = client.events("/v1/servers/events").__aiter__()
        assert (await events.__anext__()).event == "ready"
        route = f"/v1/servers/{stack.server_id}/fs/upload/stream"
        params = {"scope": "site", "domain": "example.com", "path": f"frontdoor-{uuid.uuid4().hex[:8]}.bin"}
        async with client.websocket(route, params={**params, "size": str(3 * 1024 * 1024)}) as socket:
            for _ in range(3):  # 3 pauses, together longer than the idle limit
                await socket.send_bytes(os.urandom(1024 * 1024))
                await trio.sleep(pause)
            await socket.send_text('{"done": true}')
            lived["upload"] = json.loads(await socket.receive_text())["entry"]["size"]
        agent = await trio.to_thread.run_sync(start_agent, stack.base_url, token, folder / "home", folder / "state")
        try:
            with trio.fail_after(30):
                async for event in events:
                    if event.event == "presence" and event.data["server_id"] == server_id:
                        lived["presence"] = event.data["online"]
                        break
        finally:
            agent.kill()
            await trio.to_thread.run_sync(agent.wait)
        await events.aclose()
        await client.files.delete(stack.server_id, SITE, [params["path"]], permanent=True)
        await client.servers.delete(server_id)
    return lived


def test_ipv6_sources_are_counted_per_64_and_ipv4_mapped_as_ipv4() -> None:
    """One subscriber's IPv6 block is one source for the login throttle (it holds 2**64 addresses)."""
    assert source_key("2001:db8:1:2:aaaa::1") == source_key("2001:db8:1:2:bbbb::2") == "2001:db8:1:2::/64"
    assert source_key("2001:db8:1:3::1") != source_key("2001:db8:1:2::1")
    assert source_key("::ffff:192.0.2.7") == source_key("192.0.2.7") == "192.0.2.7"
