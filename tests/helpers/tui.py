"""Driving the TUI in tests: run an app under a `Pilot`, the real app on the test stack, common moves
(the files, the editor, the jobs screens and their forms, the load-balancer screen)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
from textual import events
from textual.app import App
from textual.pilot import Pilot
from textual.widgets import Input, OptionList

from api_client import Client
from tests.helpers import wait_for
from tests.helpers.stacks import Stack
from tui.app import FleetdeckApp
from tui.connection import Connection
from tui.files.commander import CommanderScreen
from tui.files.editor_screen import EditorScreen
from tui.files.location_picker import LocationPicker
from tui.files.panel import FilePanel
from tui.jobs.dialogs import JobFormScreen, KindPicker
from tui.jobs.screen import JobsScreen
from tui.load_balancers.screen import LoadBalancersScreen
from tui.load_balancers.tables import LbTable, PoolTable
from tui.servers.screen import ServerListScreen

SIZE = (80, 24)


def run(app: App[Any], scenario: Callable[[Pilot[Any]], Awaitable[None]], size: tuple[int, int] = SIZE) -> None:
    """Run `scenario` against `app` in a headless terminal of `size`."""

    async def main() -> None:
        async with app.run_test(size=size) as pilot:
            await scenario(pilot)

    asyncio.run(main())


CHARACTERS = {
    "enter": "\r",
    "tab": "\t",
    "space": " ",
    "slash": "/",
    "full_stop": ".",
    "minus": "-",
    "underscore": "_",
    "colon": ":",
}
"""The character a terminal sends for the named keys the tests type (the others send none)."""


def type_at_once(app: App[Any], *keys: str) -> None:
    """`keys` as a paste or tmux `send-keys` delivers them: all in the app's queue at once, none
    waiting for what the one before does (`pilot.press` waits for the app to be idle after each)."""
    for key in keys:
        character = key if len(key) == 1 else CHARACTERS.get(key)
        name = {".": "full_stop", "-": "minus", "_": "underscore", "/": "slash", " ": "space", ":": "colon"}.get(
            key, key
        )
        app.post_message(events.Key(name, character))


def real_app(stack: Stack) -> FleetdeckApp:
    """The TUI on the test stack as its demo owner."""
    client = Client(stack.base_url, token=stack.token)
    return FleetdeckApp(Connection(stack.base_url, stack.token, "test stack"), theme="fleetdeck-dark", client=client)


def site_dir(stack: Stack) -> Path:
    """The directory of the `example.com` scope (the one the files screen opens first)."""
    return stack.data_dir / "home" / "example-com"


async def highlight_server(pilot: Pilot[Any], name: str) -> None:
    """Move the server list's cursor to the server called `name`."""
    app = pilot.app
    await wait_for(pilot, lambda: isinstance(app.screen, ServerListScreen) and app.screen.servers)
    servers = app.screen
    assert isinstance(servers, ServerListScreen)
    for _ in servers.servers:
        if servers.highlighted_server is not None and servers.highlighted_server.name == name:
            return
        await pilot.press("down")
    raise AssertionError(f"no server {name}")


def names(panel: FilePanel) -> list[str]:
    return [str(entry["name"]) for entry in panel.pane.entries]


async def highlight(pilot: Pilot[Any], panel: FilePanel, name: str) -> None:
    """Move `panel`'s cursor to the entry `name`, once it is listed."""
    await wait_for(pilot, lambda: panel.pane.index_of(name) is not None)
    panel.pane.move_cursor(panel.pane.index_of(name) or 0)
    await pilot.pause()


async def show_location(pilot: Pilot[Any], screen: CommanderScreen, label: str) -> None:
    """`s` in the active panel, then the picker's line called `label` (e.g. `local · /home (server root)`)."""
    await pilot.press("s")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, LocationPicker) and pilot.app.screen.locations)
    options = pilot.app.screen.query_one(OptionList)
    labels = [str(options.get_option_at_index(i).prompt) for i in range(options.option_count)]
    options.highlighted = labels.index(label)
    await pilot.press("enter")
    await wait_for(pilot, lambda: pilot.app.screen is screen)


async def open_commander(pilot: Pilot[Any]) -> CommanderScreen:
    """Enter on the server `local`: its files screen, once both panels have listed."""
    app = pilot.app
    await highlight_server(pilot, "local")
    await pilot.press("enter")
    await wait_for(
        pilot, lambda: isinstance(app.screen, CommanderScreen) and names(app.screen.left) and names(app.screen.right)
    )
    screen = app.screen
    assert isinstance(screen, CommanderScreen)
    return screen


async def press_f4_on(pilot: Pilot[None], files: CommanderScreen, name: str) -> None:
    pane = files.active.pane
    await wait_for(pilot, lambda: pane.index_of(name) is not None)
    index = pane.index_of(name)
    assert index is not None
    pane.move_cursor(index)
    await pilot.press("f4")


async def edit(pilot: Pilot[None], name: str) -> EditorScreen:
    """From the server list to `name` (at the scope root) in the editor."""
    files = await open_commander(pilot)
    await press_f4_on(pilot, files, name)
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, EditorScreen))
    screen = pilot.app.screen
    assert isinstance(screen, EditorScreen)
    await pilot.pause()
    return screen


# --- the jobs screens -------------------------------------------------------------------------------


class Wire:
    """What the app's real client sent: an httpx request hook that only looks (every request
    still goes to the control plane)."""

    def __init__(self, client: Client) -> None:
        self.requests: list[httpx.Request] = []
        http = client._http
        hooks = http.event_hooks
        http.event_hooks = {**hooks, "request": [*hooks.get("request", []), self._sent]}

    async def _sent(self, request: httpx.Request) -> None:
        self.requests.append(request)

    def creations(self) -> list[tuple[str, dict[str, Any], str | None]]:
        """`POST /v1/servers/{id}/jobs`: (kind, args, Idempotency-Key header) of each."""
        sent = [r for r in self.requests if r.method == "POST" and r.url.path.endswith("/jobs")]
        bodies = [json.loads(r.content) for r in sent]
        return [(b["kind"], b["args"], r.headers.get("Idempotency-Key")) for b, r in zip(bodies, sent, strict=True)]

    def stream_requests(self, job_id: str) -> list[str | None]:
        """The Last-Event-ID header of each request of the job's stream."""
        path = f"/v1/jobs/{job_id}/stream"
        return [r.headers.get("Last-Event-ID") for r in self.requests if r.method == "GET" and r.url.path == path]


def real_app_and_wire(stack: Stack, token: str | None = None) -> tuple[FleetdeckApp, Wire]:
    """The TUI on the stack, as `token`'s user (the demo owner by default), and what its client sends."""
    token = token or stack.token
    client = Client(stack.base_url, token=token)
    app = FleetdeckApp(Connection(stack.base_url, token, "test stack"), theme="fleetdeck-light", client=client)
    return app, Wire(client)


async def open_jobs_of(pilot: Pilot[None], name: str) -> JobsScreen:
    app = pilot.app
    await highlight_server(pilot, name)
    await pilot.press("J")
    await wait_for(pilot, lambda: isinstance(app.screen, JobsScreen) and app.screen._loaded and app.screen.kinds)
    screen = app.screen
    assert isinstance(screen, JobsScreen) and screen.server.name == name
    return screen


async def pick_kind(pilot: Pilot[None], query: str, kind: str | None = None) -> None:
    """`n`, search for `query` and pick the first match, which must be `kind` (default: `query`)."""
    await pilot.press("n")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, KindPicker))
    picker = pilot.app.screen
    assert isinstance(picker, KindPicker)
    # As if typed, at once: each key would rank the whole catalog (hundreds of kinds) again.
    picker.query_one("#kind-search", Input).value = query
    await wait_for(pilot, lambda: picker.matches and picker.matches[0].kind.kind == (kind or query))
    await pilot.press("enter")


async def open_form(pilot: Pilot[None], kind: str) -> JobFormScreen:
    await pick_kind(pilot, kind)
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, JobFormScreen))
    screen = pilot.app.screen
    assert isinstance(screen, JobFormScreen) and screen.kind.kind == kind
    return screen


# --- the load-balancer screen -----------------------------------------------------------------------


async def open_screen(pilot: Pilot[Any]) -> LoadBalancersScreen:
    """From the server list, `b`; once the list is in."""
    app = pilot.app
    await wait_for(pilot, lambda: isinstance(app.screen, ServerListScreen) and app.screen.servers)
    await pilot.press("b")
    await wait_for(pilot, lambda: isinstance(app.screen, LoadBalancersScreen) and app.screen.loaded)
    screen = app.screen
    assert isinstance(screen, LoadBalancersScreen)
    return screen


async def pick(pilot: Pilot[Any], screen: LoadBalancersScreen, lb_id: str, backend_id: str | None = None) -> None:
    """The cursor on load balancer `lb_id` (and on its backend `backend_id`, the pool focused)."""
    await wait_for(pilot, lambda: lb_id in screen.lbs)
    table = screen.query_one(LbTable)
    table.move_cursor(row=table.get_row_index(lb_id))
    await wait_for(pilot, lambda: screen.highlighted_lb is not None and screen.highlighted_lb.id == lb_id)
    if backend_id is not None:
        pool = screen.query_one(PoolTable)
        await wait_for(pilot, lambda: backend_id in [str(key.value) for key in pool.rows])
        pool.focus()
        pool.move_cursor(row=pool.get_row_index(backend_id))
        await pilot.pause()
