"""The agent's pulses (issue 25, point 11) over a real link (the hub served by hypercorn, the
agent's own link and its metrics sampler): a frame every pulse interval with the server's CPU,
memory and disk in use, which the hub hands on; a malformed pulse breaks the protocol as a
malformed ``needs`` frame does."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import trio
from trio_websocket import ConnectionClosed, open_websocket_url

from agent.jobs.metrics import Pulses
from agent.link.client import AgentLink
from contract.link import protocol
from contract.link.params import Pulse
from tests.helpers.link import FAST, NEVER, SERVER_ID, TOKEN, make_control_plane, serving


@pytest.mark.anyio
async def test_the_agent_pulses_its_cpu_memory_and_disk_every_interval(tmp_path: Path) -> None:
    pulses: list[tuple[str, Pulse]] = []
    enough = trio.Event()

    def on_pulse(server_id: str, pulse: Pulse) -> None:
        pulses.append((server_id, pulse))
        if len(pulses) >= 4:
            enough.set()

    cp = make_control_plane(on_pulse=on_pulse)
    async with serving(cp.hub) as url, trio.open_nursery() as nursery:
        link = AgentLink(
            url,
            TOKEN,
            {},
            version="9.9",
            pulse=Pulses(str(tmp_path)).take,
            pulse_every_s=0.05,
            backoff=FAST,
            auth_backoff=NEVER,
        )
        nursery.start_soon(link.run)
        with trio.fail_after(10):
            await enough.wait()
        nursery.cancel_scope.cancel()
    assert {server_id for server_id, _ in pulses} == {SERVER_ID}
    first, *later = [pulse for _, pulse in pulses]
    assert first.cpu is None  # no pulse before it to measure the CPU against
    assert all(p.cpu is not None and 0 <= p.cpu <= 100 for p in later)
    assert all(p.memory is not None and 0 < p.memory < 100 for p in [first, *later])
    assert all(p.disk is not None and 0 < p.disk < 100 for p in [first, *later])  # tmp_path's file system
    times = [p.at for p in [first, *later]]
    assert times == sorted(times) and len(set(times)) == len(times)


@pytest.mark.parametrize(
    "frame",
    [
        {"at": 1.0, "cpu": 101.0, "memory": 1.0, "disk": 1.0},
        {"at": 1.0, "cpu": "5", "memory": 1.0, "disk": 1.0},
        {"cpu": 5.0, "memory": 1.0, "disk": 1.0},
    ],
)
@pytest.mark.anyio
async def test_a_malformed_pulse_closes_the_link(frame: dict[str, object], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    heard: list[Pulse] = []
    cp = make_control_plane(on_pulse=lambda _server_id, pulse: heard.append(pulse))
    async with serving(cp.hub) as url:
        ws_url = url.replace("http", "ws") + protocol.LINK_PATH
        hello = {"t": "hello", "version": "1", "boot_id": "b", "handlers": [], "hostname": "h"}
        async with open_websocket_url(ws_url, extra_headers=[(b"authorization", f"Bearer {TOKEN}".encode())]) as ws:
            await ws.send_message(protocol.encode(hello))
            assert protocol.decode(await ws.get_message())["t"] == protocol.WELCOME
            await ws.send_message(
                protocol.encode({"t": protocol.PULSE, "at": 2.0, "cpu": None, "memory": 3.0, "disk": 4.0})
            )
            await ws.send_message(protocol.encode({"t": protocol.PULSE, **frame}))
            with trio.fail_after(5), pytest.raises(ConnectionClosed) as closed:
                await ws.get_message()
    assert closed.value.reason.code == protocol.CLOSE_PROTOCOL_ERROR
    assert "pulse with a bad" in caplog.text
    assert not [r for r in caplog.records if r.exc_info]
    assert heard == [Pulse(at=2.0, cpu=None, memory=3.0, disk=4.0)]  # the good one before it went through
