"""The TUI end to end, at 80x24: on the embedded stack the README opens, and on the shared test stack.

Trio work is not awaited by `pilot.pause()`: `wait_for` polls until the trio side has delivered.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.color import ColorType
from textual.color import Color
from textual.pilot import Pilot
from textual.theme import Theme
from textual.widgets import Static

from api_client import Client
from fleetdeck.cli import local_connection, pending_local_connection
from fleetdeck.launcher import LocalStack
from fleetdeck.running import SharedStack, stop_running
from tests.conftest import Stack
from tests.helpers import wait_for
from tests.helpers.snapshots import colours_used
from tests.helpers.tui import highlight_server, run
from themes import DARK, LIGHT
from tui.app import FleetdeckApp
from tui.connection import ConnectError, Connection, PendingConnection
from tui.files.commander import CommanderScreen
from tui.files.directory_pane import DirectoryPane
from tui.files.viewer import PageView, ViewerScreen
from tui.help import HelpScreen
from tui.servers.screen import ServerListScreen
from tui.starting import StartingScreen

SIZE = (80, 24)


def notifications(app: FleetdeckApp) -> list[str]:
    return [n.message for n in app._notifications]


async def open_entry(pilot: Pilot[None], name: str) -> None:
    """Put the cursor on `name` in the directory pane and press Enter."""
    pane = active_pane(pilot.app)
    index = pane.index_of(name)
    assert index is not None, f"{name} not in {[e['name'] for e in pane.entries][:20]}"
    pane.move_cursor(index)
    await pilot.press("enter")


async def edit_entry(pilot: Pilot[None], name: str) -> None:
    """Put the cursor on `name` in the directory pane and press F4."""
    pane = active_pane(pilot.app)
    pane.move_cursor(pane.index_of(name) or 0)
    await pilot.press("f4")


def files_screen(app: FleetdeckApp) -> CommanderScreen:
    screen = app.screen
    assert isinstance(screen, CommanderScreen)
    return screen


def active_pane(app: FleetdeckApp) -> DirectoryPane:
    screen = app.screen
    assert isinstance(screen, CommanderScreen)
    return screen.active.pane


def listed(app: FleetdeckApp) -> set[str]:
    screen = app.screen
    return (
        {str(entry["name"]) for entry in screen.active.pane.entries} if isinstance(screen, CommanderScreen) else set()
    )


# --- on the embedded stack ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    stack = LocalStack(tmp_path_factory.mktemp("tui-local"))
    stack.start()
    yield stack
    assert stack.stop() is not None


def embedded_connection(stack: LocalStack) -> Connection:
    assert stack.credentials is not None
    return local_connection(stack.credentials)


def test_browse_the_embedded_stack_from_servers_to_a_file(embedded: LocalStack) -> None:
    assert embedded.credentials is not None
    server_id = embedded.credentials.server_id
    app = FleetdeckApp(embedded_connection(embedded), theme="fleetdeck-dark")

    async def scenario(pilot: Pilot[None]) -> None:
        # The server list shows the demo server, its agent online.
        await wait_for(pilot, lambda: isinstance(app.screen, ServerListScreen) and app.screen.servers)
        servers = app.screen
        assert isinstance(servers, ServerListScreen)
        assert servers.servers[server_id].agent.online
        assert servers.highlighted_server is not None and servers.highlighted_server.id == server_id

        # Enter: its files, in the first site scope.
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, CommanderScreen) and listed(app))
        files = files_screen(app)
        assert files.active.scope is not None and files.active.scope.domain == "example.com"
        assert {"public_html", "logs", ".env"} <= listed(app)
        assert app.focused is files.active.pane

        # Into a directory, then a file.
        await open_entry(pilot, "public_html")
        await wait_for(pilot, lambda: files.active.path == "public_html" and "index.php" in listed(app))
        await open_entry(pilot, "index.php")
        await wait_for(pilot, lambda: isinstance(app.screen, ViewerScreen) and app.screen.page is not None)
        view = app.screen.query_one(PageView)
        assert view.lines[0] == "<?php" and view.language == "PHP"

        # Back to the directory, up to the scope root with the cursor on where we came from.
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is files)
        await pilot.press("backspace")
        await wait_for(pilot, lambda: files.active.path == "")
        highlighted = files.active.pane.highlighted
        assert highlighted is not None and highlighted["name"] == "public_html"

        # A binary file is shown in hex.
        await open_entry(pilot, "public_html")
        await wait_for(pilot, lambda: files.active.path == "public_html")
        await open_entry(pilot, "favicon.ico")
        await wait_for(pilot, lambda: isinstance(app.screen, ViewerScreen) and app.screen.page is not None)
        assert app.screen.page is not None and app.screen.page.mode == "hex"
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is files)

        # The help screen lists this screen's keys.
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is files)

    run(app, scenario)


def test_a_directory_of_20000_files_scrolls_to_its_end(embedded: LocalStack) -> None:
    app = FleetdeckApp(embedded_connection(embedded), theme="fleetdeck-ansi")

    async def scenario(pilot: Pilot[None]) -> None:
        await wait_for(pilot, lambda: isinstance(app.screen, ServerListScreen) and app.screen.servers)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, CommanderScreen) and listed(app))
        files = files_screen(app)
        files.active.load("public_html/wp-content/cache")
        pane = files.active.pane
        await wait_for(pilot, lambda: len(pane.entries) >= 20_000, seconds=30)
        pane.focus()
        await pilot.press("end")
        assert pane.cursor == len(pane.entries) - 1
        assert pane.scroll_y == pane.max_scroll_y

    run(app, scenario)


# --- on the shared test stack ----------------------------------------------------------------


def stack_app(stack: Stack) -> FleetdeckApp:
    client = Client(stack.base_url, token=stack.token)
    return FleetdeckApp(Connection(stack.base_url, stack.token, "test stack"), theme="fleetdeck-light", client=client)


@pytest.fixture(scope="module")
def offline_server(stack: Stack) -> str:
    """A server of the demo org whose agent never connects."""
    server = stack.admin("create-server", "aa-offline", "--org", "demo")
    return str(server["name"])


def test_errors_are_notifications_in_plain_words(stack: Stack, offline_server: str) -> None:
    site = stack.data_dir / "home" / "example-com"
    (site / "tui-app.bin").write_bytes(b"\x7fELF\x00\x01\x02" * 100)
    (site / "tui-dump.sql").write_bytes(b"-- dump\n" * (11 * 1024 * 1024 // 8))
    app = stack_app(stack)

    async def scenario(pilot: Pilot[None]) -> None:
        await highlight_server(pilot, offline_server)
        await wait_for(pilot, lambda: app.sub_title.endswith(" · demo"))
        await pilot.press("enter")
        # Said where the listing would be (the panels list by themselves once it is back), not a toast.
        await wait_for(pilot, lambda: isinstance(app.screen, CommanderScreen))
        commander = app.screen
        assert isinstance(commander, CommanderScreen)
        offline = f"The agent of {offline_server} is offline"
        await wait_for(pilot, lambda: all(offline in str(p.pane.message) for p in (commander.left, commander.right)))
        assert not any(offline in note for note in notifications(app))
        await pilot.press("escape", "escape")

        await highlight_server(pilot, "local")
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, CommanderScreen) and "tui-app.bin" in listed(app))
        await edit_entry(pilot, "tui-app.bin")  # the editor refuses what the viewer shows
        binary = "tui-app.bin is a binary file: it cannot be edited (F3 views it in hex)."
        await wait_for(pilot, lambda: binary in notifications(app))
        await edit_entry(pilot, "tui-dump.sql")
        await wait_for(pilot, lambda: any(note.startswith("tui-dump.sql is too large") for note in notifications(app)))
        assert any("the limit is 10 MiB" in note for note in notifications(app))
        assert all(n.severity == "error" for n in app._notifications)

    try:
        run(app, scenario)
    finally:
        (site / "tui-app.bin").unlink()
        (site / "tui-dump.sql").unlink()


def test_command_palette_offers_themes_and_navigation(stack: Stack) -> None:
    app = stack_app(stack)

    async def scenario(pilot: Pilot[None]) -> None:
        await highlight_server(pilot, "local")
        titles = [command.title for command in app.get_system_commands(app.screen)]
        assert "Switch theme: fleetdeck-dark" in titles and "Switch theme: fleetdeck-ansi" in titles
        assert "Go to servers" in titles and "Go to files" in titles
        app.action_go_files()
        await wait_for(pilot, lambda: isinstance(app.screen, CommanderScreen))
        app.action_go_servers()
        await wait_for(pilot, lambda: isinstance(app.screen, ServerListScreen))
        app.action_switch_theme("fleetdeck-ansi")
        await pilot.pause()
        assert app.theme == "fleetdeck-ansi" and app.current_theme.ansi
        # The monochrome theme, picked while running: no colour reaches the terminal, then colour again.
        assert "Switch theme: fleetdeck-mono" in titles
        app.action_switch_theme("fleetdeck-mono")
        await wait_for(pilot, lambda: colours_used(app) == {ColorType.DEFAULT})
        app.action_switch_theme("fleetdeck-ansi")
        await wait_for(pilot, lambda: ColorType.STANDARD in colours_used(app))

    run(app, scenario)


class BrokenStack(LocalStack):
    @property
    def command(self) -> list[str]:
        return ["python3", "-c", "import sys; print('boom: no database', file=sys.stderr); sys.exit(3)"]


def test_the_embedded_stack_reports_why_it_did_not_start(tmp_path: Path) -> None:
    stack = BrokenStack(tmp_path, startup_timeout=20)
    with pytest.raises(Exception, match=r"(?s)exited with code 3.*boom: no database"):
        stack.start()


def shown_text(app: FleetdeckApp, selector: str) -> str:
    return str(app.screen.query_one(selector, Static).render())


def test_the_first_screen_says_what_starts_before_the_stack_answers(stack: Stack) -> None:
    answered = threading.Event()

    def wait() -> Connection:
        answered.wait(60)
        return Connection(stack.base_url, stack.token, "test stack")

    pending = PendingConnection("Starting the local control plane and agent in /data/local…", wait)
    app = FleetdeckApp(pending, theme="fleetdeck-ansi")

    async def scenario(pilot: Pilot[None]) -> None:
        await pilot.pause()
        assert isinstance(app.screen, StartingScreen)
        assert shown_text(app, "#starting-what") == "Starting the local control plane and agent in /data/local…"
        answered.set()
        await wait_for(pilot, lambda: isinstance(app.screen, ServerListScreen) and app.screen.servers)
        assert app.sub_title == "test stack" or app.me is not None
        starting = app.screen_stack[0]  # stays under the server list, as Textual's blank first screen would
        assert isinstance(starting, StartingScreen) and not starting.query("#starting-spinner")  # no ticking there

    try:
        run(app, scenario)
    finally:
        answered.set()


@pytest.mark.parametrize("theme", [DARK, LIGHT], ids=lambda theme: theme.name)
def test_the_first_screen_is_styled_in_the_wanted_theme(theme: Theme) -> None:
    """The theme is set before the app runs, and its CSS is parsed once, with that theme's
    colours (`FleetdeckApp.refresh_css`): nothing keeps Textual's default theme."""

    def failing() -> Connection:
        raise ConnectError("no stack in this test")

    app = FleetdeckApp(PendingConnection("Starting…", failing), theme=theme.name)

    async def scenario(pilot: Pilot[None]) -> None:
        assert isinstance(app.screen, StartingScreen)
        assert app.screen.styles.background == Color.parse(theme.background)

    run(app, scenario)


def test_the_embedded_default_fills_the_server_list_and_the_next_start_joins_its_stack(tmp_path: Path) -> None:
    data_dir = tmp_path / "local"
    first = SharedStack(data_dir, idle_minutes=10)
    app = FleetdeckApp(pending_local_connection(first), theme="fleetdeck-ansi")

    async def scenario(pilot: Pilot[None]) -> None:
        assert shown_text(app, "#starting-what").startswith("Starting the local control plane and agent in")
        await wait_for(pilot, lambda: isinstance(app.screen, ServerListScreen) and app.screen.servers, seconds=60)
        assert first.launcher is not None and first.launcher.credentials is not None
        assert first.launcher.credentials.server_id in app.screen.servers

    second = SharedStack(data_dir, idle_minutes=10)
    try:
        run(app, scenario)
        first.detach()  # the TUI quit: its stack stays
        app = FleetdeckApp(pending_local_connection(second), theme="fleetdeck-ansi")

        async def joined(pilot: Pilot[None]) -> None:
            assert shown_text(app, "#starting-what") == f"Connecting to the local control plane in {data_dir}…"
            await wait_for(pilot, lambda: isinstance(app.screen, ServerListScreen) and app.screen.servers, seconds=60)

        run(app, joined)
        assert second.reused and second.launcher is None  # no second control plane
    finally:
        second.detach()
        stop_running(data_dir)
        assert first.launcher is not None and first.launcher.process is not None
        assert first.launcher.process.wait(30) == 0


def test_a_stack_that_does_not_start_says_why_and_lets_the_user_quit(tmp_path: Path) -> None:
    stack = SharedStack(
        tmp_path, 10, lambda data_dir, idle: BrokenStack(data_dir, idle_minutes=idle, startup_timeout=20)
    )
    app = FleetdeckApp(pending_local_connection(stack), theme="fleetdeck-ansi")

    async def scenario(pilot: Pilot[None]) -> None:
        await wait_for(pilot, lambda: "boom" in shown_text(app, "#starting-error"), seconds=30)
        error = shown_text(app, "#starting-error")
        assert "exited with code 3" in error and "boom: no database" in error and "Press q to quit" in error
        assert not app.screen.query_one("#starting-spinner").display
        await pilot.press("q")
        assert not app.is_running

    run(app, scenario)


def test_opening_and_leaving_screens_faster_than_they_mount_is_harmless(stack: Stack) -> None:
    app = stack_app(stack)

    async def scenario(pilot: Pilot[None]) -> None:
        await highlight_server(pilot, "local")
        for _ in range(5):
            await pilot.press("enter", "escape", "escape")
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, CommanderScreen) and listed(app))
        assert {"public_html", "logs", ".env"} <= listed(app)

    run(app, scenario)
