"""Under `fleetdeck serve`'s server (uvicorn, `serve_fleet`), a dial of the agent link made while
the hub sets up as many links as it may is turned away before its WebSocket upgrade: 503 with
the hub's `Retry-After`, with no handshake error logged; with room, the same dial is upgraded."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from contract.link import protocol
from control_plane.app import build_fleet
from control_plane.hub.hub import BUSY_MESSAGE
from control_plane.serving import bind, serve_fleet
from control_plane.settings import Settings
from control_plane.state import Fleet

UPGRADE = (
    f"GET {protocol.LINK_PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
).encode()


@asynccontextmanager
async def served(tmp_path: Path) -> AsyncIterator[tuple[Fleet, int]]:
    fleet = build_fleet(Settings(db_url=f"sqlite:///{tmp_path / 'fleet.db'}", server="uvicorn"))
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    stop = anyio.Event()
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(
                lambda task_status: serve_fleet(fleet, sock, shutdown_trigger=stop.wait, task_status=task_status)
            )
            yield fleet, port
            stop.set()
    finally:
        fleet.db.dispose()


async def answer_to_an_upgrade(port: int) -> bytes:
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(UPGRADE)
        with anyio.fail_after(10):
            answer = b""
            while b"\r\n\r\n" not in answer:
                answer += await stream.receive()
            return answer


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_dial_is_turned_away_before_its_upgrade_while_the_hub_is_full(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with served(tmp_path) as (fleet, port):
        fleet.hub._admission.limit = 0  # every link slot taken
        answer = await answer_to_an_upgrade(port)
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503 ")
        retry_after = [
            line.split(b":")[1].strip() for line in head.lower().split(b"\r\n") if line.startswith(b"retry-after:")
        ]
        assert len(retry_after) == 1 and retry_after[0].isdigit()
        assert body == BUSY_MESSAGE.encode()[: len(body)]
        fleet.hub._admission.limit = 1  # room again: the same dial is upgraded (the hub then wants its token)
        assert (await answer_to_an_upgrade(port)).startswith(b"HTTP/1.1 101 ")
    assert "without completing handshake" not in caplog.text
