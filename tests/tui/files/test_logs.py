"""A files panel on a site's logs (the demo's example.com, on the real stack): the scope picker offers
them, the panel lists them read-only, each key that would write there says so without asking the
server, F3 opens a log at its end, and F5 saves a log into the site in the other panel."""

from __future__ import annotations

import shutil
import uuid
from typing import Any

import httpx
from textual.pilot import Pilot
from textual.widgets import Static

from tests.conftest import Stack
from tests.helpers import wait_for
from tests.helpers.tui import highlight, names, open_commander, real_app_and_wire, run, show_location, site_dir
from tui.files.commander import CommanderScreen
from tui.files.dialogs import CopyDialog
from tui.files.panel import READ_ONLY
from tui.files.viewer import ViewerScreen

# The commander's actions that write in the active panel (F4, F6, F7, F8, F2, p, n, t, u, c, x).
WRITES = [
    "edit",
    "move",
    "mkdir",
    "delete",
    "rename",
    "permissions",
    "new_file",
    "trash",
    "upload",
    "compress",
    "extract",
]


def files_requests(requests: list[httpx.Request]) -> list[str]:
    """The files API's requests among `requests` (the app also asks for its health meanwhile)."""
    return [f"{r.method} {r.url.path}" for r in requests if "/fs/" in r.url.path]


def notified(pilot: Pilot[Any]) -> list[str]:
    return [n.message for n in pilot.app._notifications]


def test_a_panel_on_the_logs_is_read_only_and_a_log_is_saved_into_the_site(stack: Stack) -> None:
    folder = f"saved-{uuid.uuid4().hex[:8]}"
    (site_dir(stack) / folder).mkdir()
    # A log whose name does not say so (a rotated one, say): in the logs it opens at its end too.
    unnamed = stack.data_dir / "site-logs" / "example-com" / f"{folder}-rotated"
    unnamed.write_text("".join(f"line {n}\n" for n in range(200)))
    app, wire = real_app_and_wire(stack)

    async def scenario(pilot: Pilot[Any]) -> None:
        screen = await open_commander(pilot)
        await show_location(pilot, screen, "local · example.com logs")
        logs = screen.active
        await wait_for(pilot, lambda: "access.log" in names(logs))
        assert logs.read_only and logs.location == "local:example.com logs:/"
        await highlight(pilot, logs, "access.log")
        assert "read-only" in str(logs.query_one(".file-panel--status", Static).render())
        for action in WRITES:
            asked = len(wire.requests)
            app.clear_notifications()
            await screen.run_action(action)
            await pilot.pause()
            assert (action, notified(pilot), pilot.app.screen) == (action, [READ_ONLY], screen)
            assert files_requests(wire.requests[asked:]) == [], action  # said without asking the server
        await copy_into(pilot, screen)
        await view_at_the_end(pilot, screen, unnamed.name)
        await save_a_log(pilot, screen, folder)
        log = (stack.data_dir / "site-logs" / "example-com" / "access.log").read_bytes()
        assert (site_dir(stack) / folder / "access.log").read_bytes()[:1000] == log[:1000]

    try:
        run(app, scenario)
    finally:
        shutil.rmtree(site_dir(stack) / folder)
        unnamed.unlink()


async def copy_into(pilot: Pilot[Any], screen: CommanderScreen) -> None:
    """F5 from the site's panel towards the logs: read-only, no dialog."""
    await screen.run_action("switch_panel")
    pilot.app.clear_notifications()
    await screen.run_action("copy")
    await pilot.pause()
    assert (notified(pilot), pilot.app.screen) == ([READ_ONLY], screen)
    await screen.run_action("switch_panel")


async def view_at_the_end(pilot: Pilot[Any], screen: CommanderScreen, name: str) -> None:
    await highlight(pilot, screen.active, name)
    await screen.run_action("view")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, ViewerScreen) and pilot.app.screen.page is not None)
    viewer = pilot.app.screen
    assert isinstance(viewer, ViewerScreen) and viewer.page is not None and viewer.page.at_end
    await pilot.press("escape")
    await wait_for(pilot, lambda: pilot.app.screen is screen)


async def save_a_log(pilot: Pilot[Any], screen: CommanderScreen, folder: str) -> None:
    """F5 from the logs into a folder of the site in the other panel: a copy out, said so."""
    site = screen.other
    site.load(folder)
    await wait_for(pilot, lambda: site.path == folder and site.settled)
    await highlight(pilot, screen.active, "access.log")
    await screen.run_action("copy")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, CopyDialog) and pilot.app.screen.query("#copy-cross"))
    assert "Out of the site's logs" in str(pilot.app.screen.query_one("#copy-cross", Static).render())
    await pilot.press("enter")
    await wait_for(pilot, lambda: "access.log" in names(site))
