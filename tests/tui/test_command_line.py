"""k9s's keys on the real stack: `:` command mode (completion, each resource opens its screen,
Esc cancels, a `:` typed into a field stays text) and the one `/` filter on every list (servers,
jobs, load balancers; the audit log's is in tests/tui/audit/test_screen.py, the files panels' in
tests/tui/files/test_commander.py)."""

from __future__ import annotations

from typing import Any

from textual.pilot import Pilot
from textual.widgets import DataTable, Input, Static

from tests.conftest import Stack
from tests.helpers import wait_for
from tests.helpers.load_balancers import new_org
from tests.helpers.tui import edit, highlight_server, real_app, run, site_dir
from tui.audit.screen import AuditScreen
from tui.command_line import CommandLine
from tui.files.commander import CommanderScreen
from tui.jobs.screen import JobsScreen
from tui.load_balancers.screen import LoadBalancersScreen
from tui.servers.screen import ServerListScreen
from tui.widgets.filter_line import FilterLine


def candidates(pilot: Pilot[Any]) -> str:
    return str(pilot.app.screen.query_one("#command-candidates", Static).render())


async def command(pilot: Pilot[Any], *keys: str) -> None:
    """`:`, then `keys` (not Enter)."""
    await pilot.press("colon")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, CommandLine))
    await pilot.press(*keys)


def rows(pilot: Pilot[Any], selector: str) -> int:
    return pilot.app.screen.query_one(selector, DataTable).row_count


def test_colon_completes_and_opens_each_resource_and_esc_cancels(stack: Stack) -> None:
    with stack.http() as http:
        assert http.post(f"/v1/servers/{stack.server_id}/jobs", json={"kind": "system.info"}).status_code == 201

    async def scenario(pilot: Pilot[Any]) -> None:
        app = pilot.app
        await wait_for(pilot, lambda: isinstance(app.screen, ServerListScreen) and app.screen.servers)
        server_list = app.screen
        assert isinstance(server_list, ServerListScreen)
        name = server_list.servers[stack.server_id].name
        await highlight_server(pilot, name)

        # Candidates as you type; Tab completes; Enter goes.
        await command(pilot, "a")
        assert "audit" in candidates(pilot) and "files" not in candidates(pilot)
        await pilot.press("tab")
        assert app.screen.query_one("#command-input", Input).value == "audit"
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, AuditScreen))

        await command(pilot, "l", "b", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, LoadBalancersScreen))

        # :jobs acts on the server highlighted on the server list; :files then on the one in view.
        await command(pilot, *"jobs", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, JobsScreen) and app.screen.server.id == stack.server_id)
        await command(pilot, "f", "tab", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, CommanderScreen))
        commander = app.screen
        assert isinstance(commander, CommanderScreen)
        await wait_for(pilot, lambda: commander.active.server is not None)
        assert commander.active.server is not None and commander.active.server.id == stack.server_id

        # A server by name, completed.
        await command(pilot, *"jobs ", "tab")
        completed = app.screen.query_one("#command-input", Input).value
        assert completed.startswith("jobs ") and completed.removeprefix("jobs ") in {
            s.name for s in server_list.servers.values()
        }

        # Esc cancels; an unknown word says so and stays.
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is commander)
        await command(pilot, *"zz", "enter")
        assert isinstance(app.screen, CommandLine) and "No resource 'zz'" in candidates(pilot)
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is commander)

        await command(pilot, "s", "e", "tab", "enter")
        await wait_for(pilot, lambda: app.screen is server_list)

        # A `:` typed into a field is text.
        await pilot.press("slash", "colon")
        assert app.screen is server_list and server_list.query_one(FilterLine).value == ":"
        await pilot.press("escape")

    run(real_app(stack), scenario)


def test_slash_filters_the_server_jobs_and_load_balancer_lists_and_esc_clears(stack: Stack) -> None:
    org = new_org(stack)
    org.create_lb("alpha", ["app-1"])
    org.create_lb("beta", ["app-2"])

    async def scenario(pilot: Pilot[Any]) -> None:
        app = pilot.app
        await wait_for(pilot, lambda: isinstance(app.screen, ServerListScreen) and len(app.screen.servers) == 4)
        # Servers: typing narrows, Esc (in the line) clears.
        await pilot.press("slash", *"app")
        await wait_for(pilot, lambda: rows(pilot, "#servers") == 3)
        assert "3 of 4 servers" in str(app.screen.query_one("#servers-status", Static).render())
        await pilot.press("escape")
        assert rows(pilot, "#servers") == 4 and app.focused is app.screen.query_one("#servers")
        # Enter keeps the filter (the line stays in sight); Esc on the list clears it.
        await pilot.press("slash", *"edge", "enter")
        assert rows(pilot, "#servers") == 1 and app.screen.query_one(FilterLine).display
        await pilot.press("escape")
        assert rows(pilot, "#servers") == 4 and not app.screen.query_one(FilterLine).display

        # Load balancers.
        await pilot.press("b")
        await wait_for(pilot, lambda: isinstance(app.screen, LoadBalancersScreen) and rows(pilot, "#lb-table") == 2)
        await pilot.press("slash", *"alp")
        await wait_for(pilot, lambda: rows(pilot, "#lb-table") == 1)
        assert "Pool of alpha" in str(app.screen.query_one("#lb-pool-bar", Static).render())
        await pilot.press("enter", "escape")  # kept, then cleared: Esc does not leave the screen
        assert rows(pilot, "#lb-table") == 2 and isinstance(app.screen, LoadBalancersScreen)

    run(org.app(), scenario)


def test_slash_filters_the_jobs_list(stack: Stack) -> None:
    with stack.http() as http:
        assert http.post(f"/v1/servers/{stack.server_id}/jobs", json={"kind": "system.info"}).status_code == 201

    async def scenario(pilot: Pilot[Any]) -> None:
        app = pilot.app
        await wait_for(pilot, lambda: isinstance(app.screen, ServerListScreen) and app.screen.servers)
        await highlight_server(pilot, app.screen.servers[stack.server_id].name)  # type: ignore[attr-defined]
        await pilot.press("J")
        await wait_for(pilot, lambda: isinstance(app.screen, JobsScreen) and app.screen.jobs)
        screen = app.screen
        assert isinstance(screen, JobsScreen)
        everything = rows(pilot, "#job-history")
        await pilot.press("slash", *"system.info")
        await wait_for(pilot, lambda: rows(pilot, "#job-history") > 0)
        shown = [screen.jobs[str(key.value)] for key in screen.query_one("#job-history", DataTable).rows]
        assert shown and all(job.kind == "system.info" for job in shown)
        await pilot.press(*"-no-such", "enter")
        assert rows(pilot, "#job-history") == 0
        assert f"0 of {everything} job" in str(screen.query_one("#jobs-status", Static).render())
        await pilot.press("escape")
        assert rows(pilot, "#job-history") == everything and app.screen is screen

    run(real_app(stack), scenario)


def test_a_colon_typed_in_the_editor_is_text(stack: Stack) -> None:
    (site_dir(stack) / "colon.txt").write_text("key value\n")

    async def scenario(pilot: Pilot[Any]) -> None:
        screen = await edit(pilot, "colon.txt")
        await pilot.press("right", "right", "right", "colon")
        assert screen.editor.lines == ["key: value"] and pilot.app.screen is screen

    run(real_app(stack), scenario)
