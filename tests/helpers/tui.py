"""Driving the TUI in tests: run an app under a `Pilot`, the real app on the test stack, common moves."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from textual.app import App
from textual.pilot import Pilot
from textual.widgets import OptionList

from api_client import Client
from tests.conftest import Stack
from tests.helpers import wait_for
from tui.app import FleetdeckApp
from tui.connection import Connection
from tui.files.commander import CommanderScreen
from tui.files.location_picker import LocationPicker
from tui.files.panel import FilePanel
from tui.servers.screen import ServerListScreen

SIZE = (80, 24)


def run(app: App[Any], scenario: Callable[[Pilot[Any]], Awaitable[None]], size: tuple[int, int] = SIZE) -> None:
    """Run `scenario` against `app` in a headless terminal of `size`."""

    async def main() -> None:
        async with app.run_test(size=size) as pilot:
            await scenario(pilot)

    asyncio.run(main())


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
