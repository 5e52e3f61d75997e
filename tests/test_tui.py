"""The TUI end to end, at 80x24: on the embedded stack (`fleetdeck local`), and on a fake `/v1`.

Trio work is not awaited by `pilot.pause()`: `wait_for` polls until the trio side has delivered.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from textual.pilot import Pilot

from api_client import Client
from tui.app import FleetdeckApp
from tui.connection import Connection
from tui.embedded import EmbeddedStack
from tui.screens.files import FilesScreen
from tui.screens.help import HelpScreen
from tui.screens.servers import ServerListScreen
from tui.screens.viewer import ViewerScreen
from tui.widgets.code_view import CodeView
from tui.widgets.directory_pane import DirectoryPane

SIZE = (80, 24)


async def wait_for(pilot: Pilot[None], predicate: Callable[[], object], seconds: float = 15) -> None:
    """Poll until `predicate()` is true: results from trio arrive on their own schedule."""
    for _ in range(int(seconds / 0.05)):
        if predicate():
            return
        await pilot.pause(0.05)
    notes = [n.message for n in pilot.app._notifications]
    raise AssertionError(f"timed out; screen {pilot.app.screen!r}, notifications {notes}")


def run_app(app: FleetdeckApp, scenario: Callable[[Pilot[None]], Awaitable[None]]) -> None:
    async def main() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await scenario(pilot)

    asyncio.run(main())


def notifications(app: FleetdeckApp) -> list[str]:
    return [n.message for n in app._notifications]


async def open_entry(pilot: Pilot[None], name: str) -> None:
    """Put the cursor on `name` in the directory pane and press Enter."""
    pane = pilot.app.screen.query_one(DirectoryPane)
    index = pane.index_of(name)
    assert index is not None, f"{name} not in {[e['name'] for e in pane.entries][:20]}"
    pane.move_cursor(index)
    await pilot.press("enter")


def files_screen(app: FleetdeckApp) -> FilesScreen:
    screen = app.screen
    assert isinstance(screen, FilesScreen)
    return screen


def listed(app: FleetdeckApp) -> set[str]:
    return {str(entry["name"]) for entry in app.screen.query_one(DirectoryPane).entries}


# --- on the embedded stack ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedStack]:
    stack = EmbeddedStack(tmp_path_factory.mktemp("tui-local"))
    stack.start()
    yield stack
    assert stack.stop() is not None


def test_browse_the_embedded_stack_from_servers_to_a_file(embedded: EmbeddedStack) -> None:
    assert embedded.credentials is not None
    server_id = embedded.credentials.server_id
    app = FleetdeckApp(embedded.connection(), theme="fleetdeck-dark")

    async def scenario(pilot: Pilot[None]) -> None:
        # The server list shows the demo server, its agent online.
        await wait_for(pilot, lambda: isinstance(app.screen, ServerListScreen) and app.screen.servers)
        servers = app.screen
        assert isinstance(servers, ServerListScreen)
        assert servers.servers[server_id].agent.online
        assert servers.highlighted_server is not None and servers.highlighted_server.id == server_id

        # Enter: its files, in the first site scope.
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, FilesScreen) and listed(app))
        files = files_screen(app)
        assert files.scope is not None and files.scope.domain == "example.com"
        assert {"public_html", "logs", ".env"} <= listed(app)
        assert app.focused is files.query_one(DirectoryPane)

        # Into a directory, then a file.
        await open_entry(pilot, "public_html")
        await wait_for(pilot, lambda: files.path == "public_html" and "index.php" in listed(app))
        await open_entry(pilot, "index.php")
        await wait_for(pilot, lambda: isinstance(app.screen, ViewerScreen))
        code = app.screen.query_one(CodeView)
        await pilot.pause()
        assert code.language == "PHP"
        assert code.render_line(0).text.split() == ["1", "<?php"]

        # Back to the directory, up to the scope root with the cursor on where we came from.
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is files)
        await pilot.press("backspace")
        await wait_for(pilot, lambda: files.path == "")
        highlighted = files.query_one(DirectoryPane).highlighted
        assert highlighted is not None and highlighted["name"] == "public_html"

        # A binary file is reported, not shown.
        await open_entry(pilot, "public_html")
        await wait_for(pilot, lambda: files.path == "public_html")
        await open_entry(pilot, "favicon.ico")
        await wait_for(pilot, lambda: any("binary" in note for note in notifications(app)))
        assert app.screen is files

        # The help screen lists this screen's keys.
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is files)

    run_app(app, scenario)


def test_a_directory_of_20000_files_scrolls_to_its_end(embedded: EmbeddedStack) -> None:
    app = FleetdeckApp(embedded.connection(), theme="fleetdeck-ansi")

    async def scenario(pilot: Pilot[None]) -> None:
        await wait_for(pilot, lambda: isinstance(app.screen, ServerListScreen) and app.screen.servers)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, FilesScreen) and listed(app))
        files = files_screen(app)
        files.load("public_html/wp-content/cache")
        pane = files.query_one(DirectoryPane)
        await wait_for(pilot, lambda: len(pane.entries) >= 20_000, seconds=30)
        pane.focus()
        await pilot.press("end")
        assert pane.cursor == len(pane.entries) - 1
        assert pane.scroll_y == pane.max_scroll_y

    run_app(app, scenario)


# --- on a fake /v1 -------------------------------------------------------------------------------

NOW = "2026-11-22T10:00:00Z"


def _server(server_id: str, name: str, online: bool) -> dict[str, Any]:
    agent = {"online": online, "version": "0.1.0" if online else None, "last_seen_at": NOW}
    return {"id": server_id, "name": name, "kind": "full", "address": None, "agent": agent, "created_at": NOW}


def _entry(name: str, kind: str = "file", size: int = 10) -> dict[str, Any]:
    return {"name": name, "path": name, "type": kind, "size": size, "mode": 420, "permissions": "rw-r--r--",
            "owner": "web", "group": "web", "mtime": NOW, "link_target": None}  # fmt: skip


def _error(status: int, code: str, message: str, **details: Any) -> httpx.Response:
    return httpx.Response(status, json={"error": {"code": code, "message": message, "details": details}})


def fake_api(request: httpx.Request) -> httpx.Response:
    """Two servers: `db-1` whose agent is offline, and `web-1` with a binary and a huge file."""
    path, query = request.url.path, request.url.params
    if path == "/v1/me":
        user = {"id": "u1", "email": "owner@example.com", "name": "Owner", "super_admin": False}
        org = {"id": "o1", "name": "acme", "plan": "max"}
        return httpx.Response(200, json={"user": user, "org": org, "role": "owner", "capabilities": []})
    if path == "/v1/servers":
        return httpx.Response(200, json={"servers": [_server("s1", "web-1", True), _server("s2", "db-1", False)]})
    if path == "/v1/servers/events":
        return _error(404, "not_found", "no presence stream here")
    if path.startswith("/v1/servers/s2/"):
        return _error(409, "agent_offline", "the agent is not connected")
    if path == "/v1/servers/s1/fs/scopes":
        return httpx.Response(200, json={"scopes": [{"scope": "site", "domain": "example.com", "slug": "example-com"}]})
    if path == "/v1/servers/s1/fs/list":
        entries = [_entry("app.bin"), _entry("dump.sql", size=50_000_000)]
        return httpx.Response(200, json={"path": "", "entries": entries, "next_cursor": None, "total": 2})
    if path == "/v1/servers/s1/fs/read" and query["path"] == "app.bin":
        return _error(415, "binary_file", "binary")
    if path == "/v1/servers/s1/fs/read":
        return _error(413, "too_large", "too large", limit=10 * 1024 * 1024, size=50_000_000)
    return _error(404, "not_found", path)


def fake_app() -> FleetdeckApp:
    client = Client("http://fake.test", token="t", transport=httpx.MockTransport(fake_api))
    return FleetdeckApp(Connection("http://fake.test", "t", "fake"), theme="fleetdeck-light", client=client)


def test_errors_are_notifications_in_plain_words() -> None:
    app = fake_app()

    async def scenario(pilot: Pilot[None]) -> None:
        await wait_for(pilot, lambda: isinstance(app.screen, ServerListScreen) and app.screen.servers)
        assert app.sub_title == "owner@example.com · acme"

        # db-1 sorts first; its agent is offline.
        await pilot.press("enter")
        await wait_for(pilot, lambda: "The agent of db-1 is offline." in notifications(app))
        assert isinstance(app.screen, FilesScreen)
        await pilot.press("escape")

        await wait_for(pilot, lambda: isinstance(app.screen, ServerListScreen))
        await pilot.press("down", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, FilesScreen) and listed(app))
        await open_entry(pilot, "app.bin")
        binary = "app.bin is a binary file: download it instead of viewing it."
        await wait_for(pilot, lambda: binary in notifications(app))
        await open_entry(pilot, "dump.sql")
        await wait_for(pilot, lambda: any(note.startswith("dump.sql is too large") for note in notifications(app)))
        assert any("the limit is 10 MiB" in note for note in notifications(app))
        assert all(n.severity == "error" for n in app._notifications if "Live agent status" not in n.message)

    run_app(app, scenario)


def test_command_palette_offers_themes_and_navigation() -> None:
    app = fake_app()

    async def scenario(pilot: Pilot[None]) -> None:
        await wait_for(pilot, lambda: isinstance(app.screen, ServerListScreen) and app.screen.servers)
        titles = [command.title for command in app.get_system_commands(app.screen)]
        assert "Switch theme: fleetdeck-dark" in titles and "Switch theme: fleetdeck-ansi" in titles
        assert "Go to servers" in titles and "Go to files" in titles
        app.action_go_files()
        await wait_for(pilot, lambda: isinstance(app.screen, FilesScreen))
        app.action_go_servers()
        await wait_for(pilot, lambda: isinstance(app.screen, ServerListScreen))
        app.action_switch_theme("fleetdeck-ansi")
        await pilot.pause()
        assert app.theme == "fleetdeck-ansi" and app.current_theme.ansi

    run_app(app, scenario)


def test_the_embedded_stack_reports_why_it_did_not_start(tmp_path: Path) -> None:
    class BrokenStack(EmbeddedStack):
        @property
        def command(self) -> list[str]:
            return ["python3", "-c", "import sys; print('boom: no database', file=sys.stderr); sys.exit(3)"]

    stack = BrokenStack(tmp_path, startup_timeout=20)
    with pytest.raises(Exception, match=r"(?s)exited with code 3.*boom: no database"):
        stack.start()


def test_opening_and_leaving_screens_faster_than_they_mount_is_harmless() -> None:
    app = fake_app()

    async def scenario(pilot: Pilot[None]) -> None:
        await wait_for(pilot, lambda: isinstance(app.screen, ServerListScreen) and app.screen.servers)
        await pilot.press("down")
        for _ in range(5):
            await pilot.press("enter", "escape")
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, FilesScreen) and listed(app))
        assert listed(app) == {"app.bin", "dump.sql"}

    run_app(app, scenario)
