"""The audit view (`a` on the server list) on the real stack: newest first, paged as you scroll,
filtered by the highlighted entry's action or server, live, an entry in full; a member is told
why there is no audit log for them.

Each test works in an org of its own, so the log holds only what the test did.
"""

from __future__ import annotations

import uuid
from typing import Any

from textual.pilot import Pilot
from textual.widgets import Select, Static

from contract.models import AuditEntry
from tests.conftest import Stack
from tests.helpers import wait_for
from tests.helpers.audit import app_for, new_org
from tests.helpers.snapshots import screen_text
from tests.helpers.tui import run
from tui.audit.entry import AuditEntryScreen
from tui.audit.filters import AuditFilterDialog
from tui.audit.screen import PAGE, AuditScreen, AuditTable
from tui.servers.screen import ServerListScreen


def shown(screen: AuditScreen) -> list[AuditEntry]:
    """The entries in the table, top to bottom."""
    return [screen.entries[str(key.value)] for key in screen.query_one(AuditTable).rows]


def text_of(screen: AuditScreen, selector: str) -> str:
    return str(screen.query_one(selector, Static).render())


async def open_audit(pilot: Pilot[Any]) -> AuditScreen:
    app = pilot.app
    await wait_for(pilot, lambda: isinstance(app.screen, ServerListScreen) and app.screen.servers)
    await pilot.press("a")
    await wait_for(pilot, lambda: isinstance(app.screen, AuditScreen) and app.screen.entries)
    screen = app.screen
    assert isinstance(screen, AuditScreen)
    return screen


def test_the_log_is_newest_first_pages_as_you_scroll_filters_and_shows_new_entries_live(stack: Stack) -> None:
    token = new_org(stack, tokens=PAGE + 5)

    async def scenario(pilot: Pilot[Any]) -> None:
        screen = await open_audit(pilot)
        entries = shown(screen)
        assert len(entries) == PAGE  # one page first
        ids = [int(e.id) for e in entries]
        assert ids == sorted(ids, reverse=True)
        assert entries[0].action == "tokens.create" and entries[0].details == {"name": f"token-{PAGE + 4}"}

        # `/` before any older page came: the control plane finds web-a's entry, which is not loaded.
        assert all(e.target != "web-a" for e in entries)
        await pilot.press("slash", *"WEB-A", "enter")
        await wait_for(pilot, lambda: [e.target for e in shown(screen)] == ["web-a"])
        assert "1 entry with 'WEB-A'" in text_of(screen, "#audit-status")
        await pilot.press("escape")
        await wait_for(pilot, lambda: len(shown(screen)) == PAGE and pilot.app.focused is screen.query_one(AuditTable))

        # Down to the end: the older pages come, none twice, still newest first.
        table = screen.query_one(AuditTable)
        table.move_cursor(row=table.row_count - 2)
        await pilot.press("down")
        await wait_for(pilot, lambda: any(e.action == "servers.create" for e in shown(screen)))
        ids = [int(e.id) for e in shown(screen)]
        assert ids == sorted(ids, reverse=True) and len(set(ids)) == len(ids) >= PAGE + 7
        assert {e.target for e in shown(screen) if e.action == "servers.create"} == {"web-a", "web-b"}

        # `s` on a servers.create entry: only that server's entries (asked of the control plane).
        web_b = next(e for e in shown(screen) if e.target == "web-b")
        screen.query_one(AuditTable).move_cursor(row=shown(screen).index(web_b))
        await pilot.press("s")
        await wait_for(pilot, lambda: [e.target for e in shown(screen)] == ["web-b"])
        assert "server web-b" in text_of(screen, "#audit-bar")
        await pilot.press("s")  # again: the filter goes
        await wait_for(pilot, lambda: len(shown(screen)) == PAGE)

        # `a` on the top entry: only tokens.create; a new one appears on top while the screen is open.
        table.move_cursor(row=0)
        await pilot.press("a")
        await wait_for(pilot, lambda: screen.filters.action == "tokens.create" and len(shown(screen)) == PAGE)
        assert {e.action for e in shown(screen)} == {"tokens.create"}
        with stack.http(token) as http:
            assert http.post("/v1/tokens", json={"name": "made-while-watching"}).status_code == 201
        await wait_for(pilot, lambda: shown(screen)[0].details == {"name": "made-while-watching"})
        ids = [int(e.id) for e in shown(screen)]
        assert ids == sorted(ids, reverse=True) and len(set(ids)) == len(ids)

        # Enter: the entry in full.
        table.move_cursor(row=0)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, AuditEntryScreen))
        details = str(pilot.app.screen.query_one("#audit-entry-details", Static).render())
        assert '"name": "made-while-watching"' in details
        assert "tokens.create" in str(pilot.app.screen.query_one("#audit-entry-fields", Static).render())
        await pilot.press("escape")
        await wait_for(pilot, lambda: pilot.app.screen is screen)

        # `x`: no filters.
        await pilot.press("x")
        await wait_for(pilot, lambda: screen.filters.action is None and len(shown(screen)) == PAGE)

        # `f`: the filters in a form, e.g. a server none of the newest page's entries is about.
        await pilot.press("f")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, AuditFilterDialog))
        web_a = next(s.id for s in screen.servers.values() if s.name == "web-a")
        pilot.app.screen.query_one("#audit-server", Select).value = web_a
        await pilot.press("enter")  # in the action field: apply
        await wait_for(pilot, lambda: [e.target for e in shown(screen)] == ["web-a"])
        assert screen.filters.server_id == web_a and "server web-a" in text_of(screen, "#audit-bar")

    run(app_for(stack, token), scenario)


def test_a_member_is_told_the_log_is_for_owners_and_admins(stack: Stack) -> None:
    email = f"member-{uuid.uuid4().hex[:6]}@demo.test"
    stack.admin("create-user", email, "--org", "demo", "--role", "member", "--password", "pw-member-1")
    token = stack.login(email, "pw-member-1")

    async def scenario(pilot: Pilot[Any]) -> None:
        app = pilot.app
        await wait_for(pilot, lambda: isinstance(app.screen, ServerListScreen) and app.screen.servers)
        await pilot.press("a")
        await wait_for(pilot, lambda: isinstance(app.screen, AuditScreen) and app.screen.refused)
        screen = app.screen
        assert isinstance(screen, AuditScreen)
        status = text_of(screen, "#audit-status")
        assert "for the org's owners and admins" in status and "member" in status
        assert not screen.entries

    run(app_for(stack, token), scenario)


def test_at_80_columns_a_long_action_wraps_whole_in_its_cell(stack: Stack) -> None:
    token = new_org(stack)

    async def scenario(pilot: Pilot[Any]) -> None:
        screen = await open_audit(pilot)
        # An entry as the control plane writes a load balancer's backend change (this org has none).
        newest = shown(screen)[0]
        long = newest.model_copy(update={"id": str(int(newest.id) + 10**9), "action": "load_balancers.backend_add"})
        screen.entries = {long.id: long, **screen.entries}
        screen._draw(keep_cursor=False)
        await pilot.pause()
        table = screen.query_one(AuditTable)
        assert table.rows[table.coordinate_to_cell_key((0, 0)).row_key].height == 2
        lines = screen_text(pilot.app).splitlines()
        row = next(i for i, line in enumerate(lines) if "load_balancers" in line)
        assert "load_balancers  " in lines[row] and lines[row + 1].strip() == ".backend_add"

    run(app_for(stack, token), scenario)
