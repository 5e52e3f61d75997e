"""The trio bridge: trio in guest mode on Textual's asyncio loop."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import sniffio
import trio
from textual.app import App, ComposeResult
from textual.pilot import Pilot
from textual.screen import Screen
from textual.widgets import Static

from api_client import Client
from api_client import errors as api_errors
from tests.helpers import wait_for
from tests.helpers.tui import run
from tui.bridge import BridgedMixin, TrioBridge
from tui.errors import describe_error


class BridgeApp(App[None]):
    def __init__(self) -> None:
        super().__init__()
        self.bridge = TrioBridge()
        self.events: list[Any] = []

    def compose(self) -> ComposeResult:
        yield Static("bridge")

    def on_mount(self) -> None:
        self.bridge.start()

    async def on_unmount(self) -> None:
        await self.bridge.stop()


class StreamingScreen(BridgedMixin, Screen[None]):
    def __init__(self, log: list[str]) -> None:
        super().__init__()
        self.received = log

    def on_mount(self) -> None:
        app = self.app
        assert isinstance(app, BridgeApp)
        app.bridge.stream(self, self.ticks, on_item=self.received.append)

    async def ticks(self) -> AsyncIterator[str]:
        try:
            while True:
                yield "tick"
                await trio.sleep(0.01)
        finally:
            self.received.append("stream closed")


def test_results_come_back_to_the_requester_in_textual_context() -> None:
    app = BridgeApp()

    async def work(value: int) -> tuple[str, int]:
        await trio.sleep(0.01)
        return sniffio.current_async_library(), value * 2

    async def scenario(pilot: Pilot[None]) -> None:
        def done(result: tuple[str, int]) -> None:
            app.events.append((result, sniffio.current_async_library()))

        app.bridge.run(app, work, 21, on_done=done)
        await wait_for(pilot, lambda: app.events)
        assert app.events == [(("trio", 42), "asyncio")]

    run(app, scenario)


def test_a_failing_task_reports_to_its_requester_and_spares_the_others() -> None:
    app = BridgeApp()

    async def fail() -> None:
        raise api_errors.AgentOffline("agent offline")

    async def slow() -> str:
        await trio.sleep(0.2)
        return "slow finished"

    async def scenario(pilot: Pilot[None]) -> None:
        app.bridge.run(app, slow, on_done=app.events.append)
        app.bridge.run(app, fail, on_error=lambda exc: app.events.append(describe_error(exc, server="web-1")))
        app.bridge.run(app, fail)  # no on_error: a notification
        await wait_for(pilot, lambda: "slow finished" in app.events)
        assert app.events == ["The agent of web-1 is offline.", "slow finished"]
        assert [n.message for n in app._notifications] == ["The agent of this server is offline."]
        assert [n.severity for n in app._notifications] == ["error"]

    run(app, scenario)


def test_long_lived_tasks_end_when_their_requester_unmounts() -> None:
    app = BridgeApp()
    log: list[str] = []

    async def scenario(pilot: Pilot[None]) -> None:
        await app.push_screen(StreamingScreen(log))
        await wait_for(pilot, lambda: log.count("tick") >= 3)
        await app.pop_screen()
        await wait_for(pilot, lambda: "stream closed" in log)
        ticks = log.count("tick")
        await pilot.pause(0.1)
        assert log.count("tick") == ticks  # nothing delivered after the requester left

    run(app, scenario)


def test_a_cancelled_task_calls_nothing_back() -> None:
    app = BridgeApp()

    async def scenario(pilot: Pilot[None]) -> None:
        handle = app.bridge.run(app, trio.sleep, 0.2, on_done=app.events.append, on_error=app.events.append)
        handle.cancel()
        await pilot.pause(0.4)
        assert app.events == [] and handle.cancelled

    run(app, scenario)


def test_stopping_the_app_stops_the_guest_run_and_runs_shutdown_hooks() -> None:
    app = BridgeApp()
    closed: list[str] = []

    async def close() -> None:
        await trio.lowlevel.checkpoint()
        closed.append("closed")

    async def scenario(pilot: Pilot[None]) -> None:
        app.bridge.add_shutdown_hook(close)
        app.bridge.run(app, trio.sleep_forever)
        await pilot.pause(0.05)
        assert app.bridge.running

    run(app, scenario)
    assert closed == ["closed"]
    assert not app.bridge.running


@pytest.fixture
def http_server() -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps({"status": "ok", "version": "test", "agents_online": 1}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def test_httpx_runs_on_trio_inside_the_guest_run(http_server: str) -> None:
    app = BridgeApp()
    client = Client(http_server)

    async def health() -> tuple[str, str]:
        answer = await client.health()
        return sniffio.current_async_library(), answer.status

    async def scenario(pilot: Pilot[None]) -> None:
        app.bridge.add_shutdown_hook(client.aclose)
        app.bridge.run(app, health, on_done=app.events.append, on_error=app.events.append)
        await wait_for(pilot, lambda: app.events)
        assert app.events == [("trio", "ok")]

    run(app, scenario)
