"""The keys and the 80x24 screen as a Midnight Commander or k9s user expects them (issue 12, points
4, 5, 6 and 8): titles and footers that fit, highlights in view, Home/End, keys typed ahead kept,
toggles readable without colour, F1 help, F10 quit, Esc clearing a filter first.

Trio work is not awaited by `pilot.pause()`: `wait_for` polls until the trio side has delivered.
"""

from __future__ import annotations

import logging
import shlex
import subprocess
import sys
import time
import uuid
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from textual.app import App, ComposeResult
from textual.pilot import Pilot
from textual.widgets import DataTable, Input
from textual.widgets._footer import FooterKey

from api_client import Scope
from contract.load_balancers import LoadBalancer, LoadBalancerList
from tests.conftest import Stack
from tests.helpers import wait_for
from tests.helpers.audit import app_for as audit_app_for
from tests.helpers.audit import new_org as new_audit_org
from tests.helpers.jobs import finished_job
from tests.helpers.load_balancers import AgentlessOrg, new_org
from tests.helpers.snapshots import screen_text
from tests.helpers.tui import (
    SIZE,
    edit,
    highlight,
    highlight_server,
    names,
    open_commander,
    open_jobs_of,
    open_screen,
    pick,
    real_app,
    real_app_and_wire,
    run,
    site_dir,
    type_at_once,
)
from tui.audit.filters import AuditFilters
from tui.audit.screen import AuditScreen, AuditTable
from tui.files.commander import CommanderScreen
from tui.files.dialogs import DeleteDialog, PermissionsDialog, SearchDialog
from tui.files.editor_screen import EditorScreen
from tui.files.save_conflict import DiscardChangesDialog, SaveConflictDialog
from tui.files.viewer import ViewerScreen
from tui.help import HelpScreen, screen_title
from tui.jobs.dialogs import ConfirmRun, JobFormScreen, KindPicker
from tui.jobs.run import JobRunScreen
from tui.jobs.screen import JobsScreen
from tui.keys import ESCAPE_AFTER
from tui.load_balancers.screen import LoadBalancersScreen
from tui.servers.screen import ServerListScreen
from tui.widgets.toggles import Checkbox, RadioButton, SelectionList

DEEP = "public_html/wp-content/uploads/a-long-folder-name"


def footer_keys(pilot: Pilot[None]) -> list[tuple[str, str, int]]:
    """(key shown, description, rightmost column) of each key in the footer of the screen shown."""
    keys = pilot.app.screen.query(FooterKey)
    return [(key.key_display, key.description, key.region.right) for key in keys if key.region.width]


async def footer_fits(pilot: Pilot[None], *first: str) -> None:
    """The footer at 80 columns: uncut, its first keys `first`, F1 Help and F10 Quit in it."""
    await wait_for(pilot, lambda: footer_keys(pilot) and footer_keys(pilot)[-1][1] == "Quit")
    keys = footer_keys(pilot)
    assert all(right <= SIZE[0] for _, _, right in keys), keys
    assert [description for _, description, _ in keys[: len(first)]] == list(first)
    assert ("F1", "Help") in [(key, description) for key, description, _ in keys]
    assert ("F10", "Quit") in [(key, description) for key, description, _ in keys]


def title_of(screen: CommanderScreen, side: str) -> str:
    panel = screen.left if side == "left" else screen.right
    return str(panel.query_one(".file-panel--title").render())


# --- 4: what an 80x24 screen shows ------------------------------------------------------------


def test_the_panel_title_keeps_the_end_of_a_long_path(stack: Stack) -> None:
    (site_dir(stack) / DEEP).mkdir(parents=True, exist_ok=True)
    app = real_app(stack)

    async def scenario(pilot: Pilot[None]) -> None:
        screen = await open_commander(pilot)
        screen.left.load(DEEP)
        await wait_for(pilot, lambda: screen.left.path == DEEP)
        await pilot.pause()
        title = title_of(screen, "left")
        width = screen.left.content_size.width
        assert title.startswith("…") and title.endswith("/uploads/a-long-folder-name")
        assert len(title) == width < len(screen.left.location)
        assert title_of(screen, "right") == "local:example.com:/"  # short: whole

    run(app, scenario)


def test_every_footer_fits_80_columns_most_used_keys_first(stack: Stack) -> None:
    app = real_app(stack)

    async def scenario(pilot: Pilot[None]) -> None:
        await highlight_server(pilot, "local")
        await footer_fits(pilot, "Files", "Jobs", "Load balancers")
        screen = await open_commander(pilot)
        await footer_fits(pilot, "View", "Edit", "Copy", "Move", "Mkdir", "Delete")
        await highlight(pilot, screen.left, ".env")
        await pilot.press("f3")
        await wait_for(pilot, lambda: isinstance(app.screen, ViewerScreen))
        await footer_fits(pilot)
        await pilot.press("escape")
        await pilot.press("f4")
        await wait_for(pilot, lambda: isinstance(app.screen, EditorScreen))
        await footer_fits(pilot, "Undo", "Redo", "Save", "Find")
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is screen)
        await pilot.press("escape", "escape")
        await wait_for(pilot, lambda: isinstance(app.screen, ServerListScreen))
        await pilot.press("J")
        await wait_for(pilot, lambda: isinstance(app.screen, JobsScreen) and app.screen._loaded)
        await footer_fits(pilot, "Open", "Servers", "New job")
        await run_system_info(pilot)
        await wait_for(pilot, lambda: isinstance(app.screen, JobRunScreen) and app.screen.exited)
        await pilot.press("2")  # the log: its own keys, most of them
        await footer_fits(pilot, "Follow", "Wrap", "Time", "Full", "Filter", "Save")
        await pilot.press("escape", "escape")
        await wait_for(pilot, lambda: isinstance(app.screen, ServerListScreen))
        await pilot.press("b")
        await wait_for(pilot, lambda: isinstance(app.screen, LoadBalancersScreen))
        await footer_fits(pilot)

    run(app, scenario)


async def run_system_info(pilot: Pilot[None]) -> None:
    """`n` on the jobs screen, then the read `system.info` (no form, no confirmation)."""
    await pilot.press("n")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, KindPicker))
    picker = pilot.app.screen
    assert isinstance(picker, KindPicker)
    picker.query_one("#kind-search", Input).value = "system.info"
    await wait_for(pilot, lambda: picker.matches and picker.matches[0].kind.kind == "system.info")
    await pilot.press("enter")


# --- 5: the highlight stays in view, Home/End, keys typed ahead --------------------------------


def test_esc_clears_a_filter_first_and_the_highlight_stays_in_view(stack: Stack) -> None:
    many = site_dir(stack) / "many"
    many.mkdir(exist_ok=True)
    for number in range(120):
        (many / f"file-{number:03}.txt").write_text("x")
    app = real_app(stack)

    async def scenario(pilot: Pilot[None]) -> None:
        screen = await open_commander(pilot)
        left, pane = screen.left, screen.left.pane
        left.load("many")
        await wait_for(pilot, lambda: len(names(left)) == 120)

        def in_view() -> bool:
            top = round(pane.scroll_y)
            return top <= pane.cursor < top + pane.page_rows

        # A filter kept with Enter, the cursor on its last match, far down the whole folder.
        await pilot.press("slash", "1", "1", "enter")
        await wait_for(pilot, lambda: names(left)[-1] == "file-119.txt" and app.focused is pane)
        await pilot.press("end")
        # Esc: the filter goes (not the F-key prefix), the same file stays highlighted, in view.
        await pilot.press("escape")
        assert pane.filter_text == "" and len(names(left)) == 120
        assert pane.highlighted is not None and pane.highlighted["name"] == "file-119.txt"
        assert in_view() and round(pane.scroll_y) > 0
        assert "Esc: leave" not in str(left.query_one(".file-panel--status").render())
        # The filter typed and cleared with Esc while editing it: the same.
        await highlight(pilot, left, "file-005.txt")
        await pilot.press("slash", "1", "0", "9")
        await wait_for(pilot, lambda: names(left) == ["file-109.txt"])
        await pilot.press("escape")
        assert pane.filter_text == "" and pane.highlighted is not None
        assert pane.highlighted["name"] == "file-109.txt" and in_view()
        # A search result far down a folder of the scope root: highlighted, in view.
        left.load("")
        await wait_for(pilot, lambda: left.path == "" and "many" in names(left))
        await pilot.press("ctrl+f")
        await wait_for(pilot, lambda: isinstance(app.screen, SearchDialog))
        search = app.screen
        assert isinstance(search, SearchDialog)
        await pilot.press(*"file-110", "enter")
        await wait_for(pilot, lambda: search.matches)
        await pilot.press("down", "enter")
        await wait_for(pilot, lambda: app.screen is screen and left.path == "many")
        await wait_for(pilot, lambda: pane.highlighted is not None and pane.highlighted["name"] == "file-110.txt")
        await pilot.pause()
        assert in_view()
        # Without a filter, Esc arms the F-key prefix as before: Esc Esc leaves.
        await pilot.press("escape")
        assert "Esc: leave" in str(left.query_one(".file-panel--status").render())
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, ServerListScreen))

    run(app, scenario)


@pytest.fixture
def two_more_servers(stack: Stack) -> Iterator[None]:
    """Lite servers sorted first and last in the demo org's list (whatever other tests added to
    it), removed afterwards."""
    made = [stack.admin("create-server", name, "--org", "demo", "--kind", "lite") for name in ("0-first", "zzzz-last")]
    yield
    with stack.http() as http:
        for server in made:
            assert http.delete(f"/v1/servers/{server['id']}").status_code == 204


def test_home_and_end_in_the_server_and_job_lists_and_a_new_job_is_highlighted(
    stack: Stack, two_more_servers: None
) -> None:
    with stack.http() as http:
        for _ in range(30):  # more than a screen
            finished_job(http, stack.server_id, "system.info")
    app = real_app(stack)

    async def scenario(pilot: Pilot[None]) -> None:
        await wait_for(pilot, lambda: isinstance(app.screen, ServerListScreen) and len(app.screen.servers) >= 3)
        servers = app.screen
        assert isinstance(servers, ServerListScreen)
        await pilot.press("end")
        assert servers.highlighted_server is not None and servers.highlighted_server.name == "zzzz-last"
        await pilot.press("home")
        assert servers.highlighted_server is not None and servers.highlighted_server.name == "0-first"
        # j and k move, as in vim (J opens the jobs).
        await pilot.press("j")
        assert servers.highlighted_server is not None and servers.highlighted_server.name != "0-first"
        await pilot.press("k")
        assert servers.highlighted_server is not None and servers.highlighted_server.name == "0-first"

        await highlight_server(pilot, "local")
        await pilot.press("J")
        await wait_for(pilot, lambda: isinstance(app.screen, JobsScreen) and len(app.screen.jobs) >= 30)
        jobs = app.screen
        assert isinstance(jobs, JobsScreen)
        table = jobs.query_one(DataTable)
        await pilot.press("end")
        assert table.cursor_row == table.row_count - 1 and table.scroll_y > 0
        await pilot.press("home")
        assert table.cursor_row == 0
        await pilot.press("end")

        # From the bottom of the history, a new job: back on the list, it is the one highlighted.
        await run_system_info(pilot)
        await wait_for(pilot, lambda: isinstance(app.screen, JobRunScreen) and app.screen.exited)
        started = app.screen.job.id  # type: ignore[attr-defined]
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is jobs and started in jobs.jobs)
        await wait_for(pilot, lambda: jobs.highlighted_job is not None and jobs.highlighted_job.id == started)
        row = table.cursor_row
        await pilot.pause()
        assert table.scroll_y <= row < table.scroll_y + table.scrollable_content_region.height - 1

    run(app, scenario)


def test_keys_typed_while_a_folder_loads_are_kept_for_it(stack: Stack) -> None:
    app = real_app(stack)

    async def scenario(pilot: Pilot[None]) -> None:
        # Typed right after Enter on the server list, before the first listing: kept for it.
        await highlight_server(pilot, "local")
        await pilot.press("enter", "end")
        await wait_for(pilot, lambda: isinstance(app.screen, CommanderScreen) and names(app.screen.left))
        screen = app.screen
        assert isinstance(screen, CommanderScreen)
        pane = screen.left.pane
        await wait_for(pilot, lambda: pane.cursor == len(pane.entries) - 1 > 0)

        # Enter on a folder then End: End is for the folder opened, not the one left.
        await highlight(pilot, screen.left, "public_html")
        await pilot.press("enter", "end")
        await wait_for(pilot, lambda: screen.left.path == "public_html")
        await wait_for(pilot, lambda: pane.cursor == len(pane.entries) - 1 > 0)
        assert app.focused is pane
        # Backspace then Enter: up, and Enter opens the folder the cursor lands on (where we came from).
        await pilot.press("backspace", "enter")
        await wait_for(pilot, lambda: screen.left.path == "public_html" and "wp-content" in names(screen.left))

        # Typed right after the keys that open the jobs and their catalog: the picker's search.
        await pilot.press("escape", "escape")
        await wait_for(pilot, lambda: isinstance(app.screen, ServerListScreen))
        await pilot.press("J", "n", "s", "y", "s")
        await wait_for(pilot, lambda: isinstance(app.screen, KindPicker))
        picker = app.screen
        await wait_for(pilot, lambda: picker.query_one("#kind-search", Input).value == "sys")

    run(app, scenario)


# --- 6: toggles readable without colour -------------------------------------------------------


def test_toggles_show_their_state_in_the_glyph(stack: Stack) -> None:
    (site_dir(stack) / "mode-640.txt").write_text("x")
    (site_dir(stack) / "mode-640.txt").chmod(0o640)
    app = real_app(stack)

    async def scenario(pilot: Pilot[None]) -> None:
        screen = await open_commander(pilot)
        await highlight(pilot, screen.left, "mode-640.txt")
        await pilot.press("p")
        await wait_for(pilot, lambda: isinstance(app.screen, PermissionsDialog))
        dialog = app.screen
        glyphs = {box.id: str(box.render())[:3] for box in dialog.query(Checkbox) if (box.id or "").startswith("bit-")}
        assert glyphs["bit-owner-read"] == glyphs["bit-owner-write"] == glyphs["bit-group-read"] == "[x]"
        assert glyphs["bit-owner-execute"] == glyphs["bit-group-write"] == glyphs["bit-other-read"] == "[ ]"
        await pilot.press("escape")

    run(app, scenario)


class Toggles(App[None]):
    def compose(self) -> ComposeResult:
        yield RadioButton("on", True, id="radio-on")
        yield RadioButton("off", False, id="radio-off")
        yield Checkbox("ticked", True, id="ticked")
        yield SelectionList[str](("picked", "a", True), ("left out", "b", False))


def test_every_kind_of_toggle_differs_ticked_and_not() -> None:
    app = Toggles()

    async def scenario(pilot: Pilot[None]) -> None:
        assert str(app.query_one("#radio-on", RadioButton).render()).startswith("(*)")
        assert str(app.query_one("#radio-off", RadioButton).render()).startswith("( )")
        ticked = app.query_one("#ticked", Checkbox)
        assert str(ticked.render()).startswith("[x]")
        ticked.focus()
        await pilot.press("space")
        assert str(ticked.render()).startswith("[ ]")
        rows = app.query_one(SelectionList)
        assert [rows.render_line(y).text[:3] for y in (0, 1)] == ["[x]", "[ ]"]

    run(app, scenario)


# --- 8: F1, titles in words, F10 --------------------------------------------------------------


def test_f1_is_help_everywhere_and_the_editor_types_a_question_mark(stack: Stack) -> None:
    app = real_app(stack)

    async def scenario(pilot: Pilot[None]) -> None:
        await highlight_server(pilot, "local")
        await pilot.press("f1")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        assert app.screen.query_one("#help-box").border_title == "Keys · Servers"
        await pilot.press("f1")  # F1 closes it too
        await wait_for(pilot, lambda: isinstance(app.screen, ServerListScreen))

        screen = await open_commander(pilot)
        await highlight(pilot, screen.left, ".env")
        await pilot.press("f4")
        await wait_for(pilot, lambda: isinstance(app.screen, EditorScreen))
        editor = app.screen
        assert isinstance(editor, EditorScreen)
        # `?` is text in the editor; the footer names F1, which opens the help.
        await pilot.press("question_mark")
        assert editor.editor.lines[0].startswith("?") and app.screen is editor
        assert ("F1", "Help") in [(key, description) for key, description, _ in footer_keys(pilot)]
        assert "?" not in [key for key, _, _ in footer_keys(pilot)]
        await pilot.press("f1")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        assert app.screen.query_one("#help-box").border_title == "Keys · Editor"
        await pilot.press("escape")

        # F10 quits, asking first about the unsaved edit (Esc keeps editing).
        await pilot.press("f10")
        await wait_for(pilot, lambda: isinstance(app.screen, DiscardChangesDialog))
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is editor)
        assert not app._exit
        await pilot.press("ctrl+z", "escape")
        await wait_for(pilot, lambda: app.screen is screen)
        # Esc 1 is F1 where F-keys do not reach.
        await pilot.press("escape", "1")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        assert app.screen.query_one("#help-box").border_title == "Keys · Files"
        await pilot.press("escape")
        await pilot.press("f10")
        await wait_for(pilot, lambda: app._exit)

    run(app, scenario)


def test_help_titles_are_words() -> None:
    assert screen_title(ServerListScreen()) == "Servers"
    assert screen_title(DiscardChangesDialog(["/a"], "quit")) == "Discard changes dialog"


# --- issue 25, 1: no key is ever lost, typed as fast as a paste ---------------------------------
# Each case is typed twice: with `pilot.press` of the whole sequence, and all at once as a paste
# or tmux `send-keys` delivers it (`type_at_once`); what counts is what the server saved.

TYPING = ["pilot.press", "at once"]


@pytest.fixture
def org(stack: Stack) -> AgentlessOrg:
    return new_org(stack)


async def type_keys(pilot: Pilot[None], typing: str, *keys: str) -> None:
    if typing == "at once":
        type_at_once(pilot.app, *keys)
    else:
        await pilot.press(*keys)


@pytest.mark.parametrize("typing", TYPING)
def test_p_7_5_5_enter_sets_the_mode_on_the_server(stack: Stack, typing: str) -> None:
    target = site_dir(stack) / f"typed-mode-{typing.replace(' ', '-')}.txt"
    target.write_text("x")
    target.chmod(0o644)
    app = real_app(stack)

    async def scenario(pilot: Pilot[None]) -> None:
        screen = await open_commander(pilot)
        await highlight(pilot, screen.left, target.name)
        await type_keys(pilot, typing, "p", "7", "5", "5", "enter")
        await wait_for(pilot, lambda: app.screen is screen and target.stat().st_mode & 0o777 == 0o755)
        assert not screen.query(PermissionsDialog)

    run(app, scenario)


@pytest.mark.parametrize("typing", TYPING)
def test_keys_typed_while_the_trash_opens_restore_what_it_lists(stack: Stack, typing: str) -> None:
    doomed = site_dir(stack) / f"typed-trash-{typing.replace(' ', '-')}.txt"
    doomed.write_text("keep me")
    app = real_app(stack)

    async def scenario(pilot: Pilot[None]) -> None:
        screen = await open_commander(pilot)
        await highlight(pilot, screen.left, doomed.name)
        await pilot.press("f8")
        await wait_for(pilot, lambda: isinstance(app.screen, DeleteDialog))
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.screen is screen and not doomed.exists())
        # `t`, then tick the newest item (the one just deleted) and restore it, before the list came.
        await type_keys(pilot, typing, "t", "space", "r")
        await wait_for(pilot, lambda: doomed.exists() and doomed.read_text() == "keep me")

    run(app, scenario)


@pytest.mark.parametrize("typing", TYPING)
def test_the_save_conflict_accelerator_c_never_types_into_the_copy_name(stack: Stack, typing: str) -> None:
    name = f"typed-conflict-{typing.replace(' ', '-')}"
    target = site_dir(stack) / f"{name}.txt"
    target.write_text("original\n")
    chosen = site_dir(stack) / f"{name}.copy.txt"
    offered = site_dir(stack) / f"{name}.mine.txt"
    app = real_app(stack)

    async def scenario(pilot: Pilot[None]) -> None:
        screen = await edit(pilot, target.name)
        target.write_text("theirs\n")
        await pilot.press("ctrl+home", "z", "ctrl+s")
        await wait_for(pilot, lambda: isinstance(app.screen, SaveConflictDialog))
        # `c`, then the name of the copy typed over the one offered, and Enter.
        await type_keys(pilot, typing, "c", *f"{name}.copy.txt", "enter")
        await wait_for(pilot, lambda: chosen.exists() and screen.path == chosen.name)
        assert chosen.read_text() == "zoriginal\n" and target.read_text() == "theirs\n"
        assert not offered.exists()

    run(app, scenario)


@pytest.mark.parametrize("typing", TYPING)
def test_a_new_backend_port_typed_in_the_form_is_saved_whole(org: AgentlessOrg, typing: str) -> None:
    created = org.create_lb("typed", ["app-1"])
    app = org.app()

    async def scenario(pilot: Pilot[None]) -> None:
        screen = await open_screen(pilot)
        await pick(pilot, screen, created.id)
        # `e`, Tab past name, port, algorithm, check path and interval, the pool's app-1 port, and
        # app-1's tick, ports and weight, to app-2's tick: tick it, Tab to its ports, type over the
        # default, ctrl+s.
        await type_keys(pilot, typing, "e", *["tab"] * 9, "space", "tab", *"18471", "ctrl+s")
        await wait_for(pilot, lambda: app.screen is screen and len(org.lb(created.id).backends) == 2)
        ports = {backend.server_id: backend.port for backend in org.lb(created.id).backends}
        assert ports[org.backends["app-2"]] == 18471

    run(app, scenario)


def saved_lb(org: AgentlessOrg, name: str) -> LoadBalancer | None:
    """The load balancer called `name` as the control plane has it (None: not there)."""
    listed = LoadBalancerList.model_validate(org.get("/v1/load-balancers"))
    return next((lb for lb in listed.load_balancers if lb.name == name), None)


# From the server list: `b`, `n`, the name, then each dropdown opened with ↓, moved with ↓ and
# picked with Enter (node: edge-1 under the prompt; engine: HAProxy after nginx; algorithm: IP
# hash, third), Tab past the port (the hostname is off at 80), the check path and interval, app-1
# ticked, ctrl+s.
NEW_LB_KEYS = [
    "b",
    "n",
    *"typed-lb",
    *["tab", "down", "down", "enter"],
    *["tab", "down", "down", "enter"],
    *["tab", "tab", "down", "down", "down", "enter"],
    *["tab", "tab", "tab", "space"],
    "ctrl+s",
]


@pytest.mark.parametrize("typing", TYPING)
def test_a_new_load_balancer_typed_whole_is_saved_with_what_its_dropdowns_picked(
    org: AgentlessOrg, typing: str
) -> None:
    app = org.app()

    async def scenario(pilot: Pilot[None]) -> None:
        await wait_for(pilot, lambda: isinstance(app.screen, ServerListScreen) and app.screen.servers)
        # Esc right after ctrl+s: for the screen the saved form returns to (back to the servers),
        # not for the form while it saves (which cancelled the save).
        await type_keys(pilot, typing, *NEW_LB_KEYS, "escape")
        await wait_for(pilot, lambda: isinstance(app.screen, ServerListScreen) and saved_lb(org, "typed-lb"))

    run(app, scenario)
    saved = saved_lb(org, "typed-lb")
    assert saved is not None
    assert (saved.node_server_id, saved.engine, saved.algorithm) == (org.node, "haproxy", "ip_hash")
    assert [(backend.server_id, backend.port) for backend in saved.backends] == [(org.backends["app-1"], 8080)]


def audit_rows(screen: AuditScreen) -> list[tuple[str, str | None]]:
    """(action, target) of each row of the table, top to bottom (a row whose entry a reload has
    just cleared, not yet redrawn, is left out)."""
    keys = [str(key.value) for key in screen.query_one(AuditTable).rows]
    return [(screen.entries[key].action, screen.entries[key].target) for key in keys if key in screen.entries]


@pytest.mark.parametrize("typing", TYPING)
def test_the_audit_filters_typed_whole_narrow_the_rows_the_server_returns(stack: Stack, typing: str) -> None:
    """From the server list: `a`, `f`, the server dropdown (Shift+Tab to it, ↓ ↓ Enter: web-b, the
    second), the action typed, the outcome dropdown (ok), ctrl+s; then `x` and the `/` search
    typed whole. The rows are those the control plane returned for what was typed."""
    token = new_audit_org(stack)
    app = audit_app_for(stack, token)

    async def scenario(pilot: Pilot[None]) -> None:
        await wait_for(pilot, lambda: isinstance(app.screen, ServerListScreen) and app.screen.servers)
        await type_keys(
            pilot,
            typing,
            *["a", "f", "shift+tab", "down", "down", "down", "enter", "tab"],
            *"servers.create",
            *["tab", "tab", "down", "down", "enter", "ctrl+s"],
        )
        await wait_for(pilot, lambda: isinstance(app.screen, AuditScreen) and app.screen.filters.outcome == "ok")
        screen = app.screen
        assert isinstance(screen, AuditScreen)
        await wait_for(pilot, lambda: audit_rows(screen) == [("servers.create", "web-b")])
        assert screen.servers[screen.filters.server_id or ""].name == "web-b"
        assert (screen.filters.action, screen.filters.actor) == ("servers.create", None)

        await type_keys(pilot, typing, "x", "slash", *"WEB-A", "enter")
        await wait_for(pilot, lambda: [target for _action, target in audit_rows(screen)] == ["web-a"])
        assert screen.filters == AuditFilters()

    run(app, scenario)


@pytest.mark.parametrize("typing", TYPING)
def test_a_user_tab_and_a_password_typed_in_one_go_land_in_their_fields(stack: Stack, typing: str) -> None:
    app, wire = real_app_and_wire(stack)
    secret = f"s3cret-{typing.replace(' ', '-')}-XJQ"

    async def scenario(pilot: Pilot[None]) -> None:
        jobs = await open_jobs_of(pilot, "local")
        # `w` right after `y`: for the job's screen (its log wraps), not for the form while it
        # creates the job (a `w` in its field). Typed at once only: `pilot.press` waits for the
        # app to be idle after `y`, and the job's result, which takes the focus from the log, may
        # come first.
        keys = ["n", *"db.user-create", "enter", *"shop_app", "tab", *secret, "enter", "y", "w"]
        await type_keys(pilot, typing, *(keys if typing == "at once" else keys[:-1]))
        await wait_for(pilot, lambda: wire.creations())
        assert jobs.is_attached
        await wait_for(pilot, lambda: isinstance(app.screen, JobRunScreen))
        run_screen = app.screen
        assert isinstance(run_screen, JobRunScreen)
        if typing == "at once":
            await wait_for(pilot, lambda: run_screen.is_mounted and run_screen.log_view.panel.wrap)

    run(app, scenario)
    [(kind, args, _key)] = wire.creations()
    assert kind == "db.user-create" and (args["user"], args["password"]) == ("shop_app", secret)


# The files screen's dialogs and the editor, each driven by its whole sequence from the panel's
# cursor on an entry of a folder of its own (`file_folder`): (the entry, the keys given the
# folder's path in the scope, what the server then holds in the folder).
FileCase = tuple[str, Callable[[str], list[str]], Callable[[Path], bool]]
FILE_CASES: dict[str, FileCase] = {
    "F7 new folders": (
        "file.txt",
        lambda _folder: ["f7", *"typed-made/sub", "enter"],
        lambda folder: (folder / "typed-made" / "sub").is_dir(),
    ),
    "F8 delete": ("file.txt", lambda _folder: ["f8", "enter"], lambda folder: not (folder / "file.txt").exists()),
    "F4 edit and save": (
        "file.txt",
        lambda _folder: ["f4", *"new ", "ctrl+s", "escape"],
        lambda folder: holds(folder / "file.txt", "new x"),
    ),
    # The whole name is selected: what is typed replaces it (not `renamed.md.txt`).
    "F2 rename": (
        "file.txt",
        lambda _folder: ["f2", *"renamed.md", "enter"],
        lambda folder: holds(folder / "renamed.md", "x") and not (folder / "file.txt").exists(),
    ),
    "F5 copy to a typed folder": (
        "file.txt",
        lambda folder: ["f5", *f"{folder}/into", "enter"],
        lambda folder: holds(folder / "into" / "file.txt", "x") and holds(folder / "file.txt", "x"),
    ),
    "F6 move to a typed folder": (
        "file.txt",
        lambda folder: ["f6", *f"{folder}/into", "enter"],
        lambda folder: holds(folder / "into" / "file.txt", "x") and not (folder / "file.txt").exists(),
    ),
    # `o` typed right after Enter: for the question the taken name asks, once the folder is listed.
    "F5 onto a taken name, then o": (
        "file.txt",
        lambda folder: ["f5", *f"{folder}/taken", "enter", "o"],
        lambda folder: holds(folder / "taken" / "file.txt", "x"),
    ),
    # The name offered is cleared (ctrl+u), the one typed is the archive's.
    "c compress, its name typed": (
        "file.txt",
        lambda _folder: ["c", "ctrl+u", *"typed.zip", "enter"],
        lambda folder: zip_names(folder / "typed.zip") == ["file.txt"],
    ),
    "x extract into a typed folder": (
        "bundle.zip",
        lambda folder: ["x", *f"{folder}/out", "enter"],
        lambda folder: holds(folder / "out" / "inside.txt", "inside"),
    ),
    # n, the name, Enter: created and opened in the editor, which gets what is typed next.
    "n new file, then edited": (
        "file.txt",
        lambda _folder: ["n", *"made.txt", "enter", *"hello", "ctrl+s", "escape"],
        lambda folder: holds(folder / "made.txt", "hello"),
    ),
    # F2 right after the permissions' Enter: for the panel once the mode is set, not the dialog.
    "p 755 Enter, then F2": (
        "file.txt",
        lambda _folder: ["p", *"755", "enter", "f2", *"after-mode.txt", "enter"],
        lambda folder: (
            holds(folder / "after-mode.txt", "x") and (folder / "after-mode.txt").stat().st_mode & 0o777 == 0o755
        ),
    ),
    # The filter moves the cursor to the one match (from bundle.zip), which F2 renames.
    "/ filter, then F2": (
        "bundle.zip",
        lambda _folder: ["slash", *"file.t", "enter", "f2", *"filtered.txt", "enter"],
        lambda folder: holds(folder / "filtered.txt", "x") and (folder / "bundle.zip").exists(),
    ),
}


def holds(file: Path, text: str) -> bool:
    """Whether `file` is there and holds `text`."""
    return file.is_file() and file.read_text() == text


def zip_names(archive: Path) -> list[str] | None:
    """The names in `archive`, once it is there whole (None before)."""
    try:
        with zipfile.ZipFile(archive) as opened:
            return opened.namelist()
    except (FileNotFoundError, zipfile.BadZipFile):
        return None


@pytest.fixture
def file_folder(stack: Stack) -> Path:
    """A folder of the site of its own: file.txt (`x`), the folders into/ and taken/ (holding a
    file.txt of its own) and bundle.zip (holding inside.txt)."""
    folder = site_dir(stack) / f"typed-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    (folder / "file.txt").write_text("x")
    (folder / "into").mkdir()
    (folder / "taken").mkdir()
    (folder / "taken" / "file.txt").write_text("taken")
    with zipfile.ZipFile(folder / "bundle.zip", "w") as archive:
        archive.writestr("inside.txt", "inside")
    return folder


@pytest.mark.parametrize("typing", TYPING)
@pytest.mark.parametrize("case", list(FILE_CASES))
def test_each_files_dialog_driven_by_its_whole_sequence_saves_it(
    stack: Stack, file_folder: Path, case: str, typing: str
) -> None:
    entry, keys, saved = FILE_CASES[case]
    app = real_app(stack)

    async def scenario(pilot: Pilot[None]) -> None:
        screen = await open_commander(pilot)
        screen.left.load(file_folder.name)
        await highlight(pilot, screen.left, entry)
        await type_keys(pilot, typing, *keys(file_folder.name))
        await wait_for(pilot, lambda: saved(file_folder) and app.screen is screen)

    run(app, scenario)


@pytest.mark.parametrize("typing", TYPING)
def test_a_content_search_typed_whole_opens_the_hit_at_its_line(stack: Stack, file_folder: Path, typing: str) -> None:
    """ctrl+f, ctrl+t (in content), the pattern, Enter, then ↓ Enter on the hit the server found:
    the viewer opens that file at the hit's line."""
    (file_folder / "needle.txt").write_text("one\ntwo\nthe typed-needle is here\n")
    app = real_app(stack)

    async def scenario(pilot: Pilot[None]) -> None:
        screen = await open_commander(pilot)
        screen.left.load(file_folder.name)
        await highlight(pilot, screen.left, "file.txt")
        await type_keys(pilot, typing, "ctrl+f", "ctrl+t", *"typed-needle", "enter", "down", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ViewerScreen))
        viewer = app.screen
        assert isinstance(viewer, ViewerScreen)
        assert viewer.path == f"{file_folder.name}/needle.txt"
        await wait_for(pilot, lambda: "line 3" in screen_text(app) and "the typed-needle is here" in screen_text(app))

    run(app, scenario)


def test_an_esc_held_behind_a_server_that_does_not_answer_goes_after_a_few_seconds(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The permissions dialog holds the keys while it reads the mode, and the read does not
    answer (held back at the client, as a stalled agent would). An Esc typed then reaches the
    dialog after `ESCAPE_AFTER`, long before any timeout: the dialog closes, its read unanswered."""
    (site_dir(stack) / "esc-held.txt").write_text("a\n")
    app = real_app(stack)
    stat, answering = app.client.files.stat, []

    async def stalled_stat(*args: Any, **kwargs: Any) -> Any:
        # The test's flag polled from trio (the client's side): no event of it to wait on.
        while not answering:  # noqa: ASYNC110
            await trio.sleep(0.01)
        return await stat(*args, **kwargs)

    monkeypatch.setattr(app.client.files, "stat", stalled_stat)

    async def scenario(pilot: Pilot[None]) -> None:
        await highlight_server(pilot, "local")
        list_screen = app.screen
        local = next(server for server in list_screen.servers.values() if server.name == "local")
        dialog = PermissionsDialog(local, Scope(scope="site", domain="example.com"), ["esc-held.txt"], has_dirs=False)
        app.push_screen(dialog)
        await wait_for(pilot, lambda: app.screen is dialog and dialog.holding_keys)
        asked = time.monotonic()
        type_at_once(app, "escape")
        await wait_for(pilot, lambda: app.screen is list_screen, seconds=ESCAPE_AFTER + 10)
        assert time.monotonic() - asked >= ESCAPE_AFTER  # it waited for the hold first
        assert dialog.current is None  # closed while its read was on its way
        answering.append(True)

    run(app, scenario)


# --- issue 25, 2: a secret typed fast shows nowhere ----------------------------------------------


def everything_shown(app: App[Any]) -> str:
    """The screen's text, what every field of every screen on the stack holds (a password field's
    value aside: it shows as dots) and the notifications."""
    fields = [
        field.value for screen in app.screen_stack for field in screen.query(Input).results() if not field.password
    ]
    notes = [f"{note.title} {note.message}" for note in app._notifications]
    return "\n".join([screen_text(app), *fields, *notes])


def test_a_password_typed_from_the_server_list_in_one_go_shows_nowhere(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    """J, n and the kind's name, its form's user, Tab and the password, all typed before the jobs
    screen, its catalog and the form are there: the password reaches its field only, and never the
    screen (the confirmation masks it), a notification or the log; the user field has the user."""
    caplog.set_level(logging.DEBUG)
    secret = "Zq7-secret-VXK-typed-fast"
    app = real_app(stack)

    async def scenario(pilot: Pilot[None]) -> None:
        await highlight_server(pilot, "local")
        type_at_once(app, "J", "n", *"db.user-create", "enter", *"shop_app", "tab", *secret, "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmRun))
        form = app.screen_stack[-2]
        assert isinstance(form, JobFormScreen)
        assert form.form.raw_value("user") == "shop_app" and form.form.raw_value("password") == secret
        await wait_for(pilot, lambda: "password = ***" in screen_text(app))
        assert secret not in everything_shown(app)
        await pilot.press("n", "escape")
        await wait_for(pilot, lambda: isinstance(app.screen, JobsScreen))
        assert secret not in everything_shown(app)

    run(app, scenario)
    assert secret not in caplog.text


# --- the real app in tmux: a whole sequence in one `send-keys` ----------------------------------


class Tmux:
    """The real `fleetdeck` in a tmux server of its own (its socket in the test's folder: other
    tmux sessions on the machine are left alone), as the user runs it, at 80x24."""

    def __init__(self, home: Path, env: dict[str, str]) -> None:
        self.socket = str(home / "tmux.sock")
        self.home = home
        settings = [f"{name}={value}" for name, value in env.items()]
        command = [sys.executable, "-m", "fleetdeck"]
        self.tmux("new-session", "-d", "-x", "80", "-y", "24", *[f"-e{s}" for s in settings], shlex.join(command))

    def tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-S", self.socket, *args], check=True, capture_output=True, text=True).stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p")

    def wait_for(self, predicate: Callable[[], object], seconds: float = 30) -> None:
        deadline = time.monotonic() + seconds
        while not predicate():
            assert time.monotonic() < deadline, f"not met within {seconds} s; the screen:\n{self.screen()}"
            time.sleep(0.1)

    def close(self) -> None:
        subprocess.run(["tmux", "-S", self.socket, "kill-server"], check=False, capture_output=True)


def tmux_env(stack: Stack, home: Path, token: str) -> dict[str, str]:
    """The environment of `fleetdeck` on the test stack with `token`, its files under `home`."""
    return {
        "FLEETDECK_URL": stack.base_url,
        "FLEETDECK_TOKEN": token,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_STATE_HOME": str(home / "state"),
        "XDG_CACHE_HOME": str(home / "cache"),
        "XDG_DATA_HOME": str(home / "data"),
        "TERM": "xterm-256color",
        "PYTHONPATH": str(Path(__file__).parents[2]),
    }


@pytest.fixture
def tmux_fleetdeck(stack: Stack, tmp_path: Path) -> Iterator[Tmux]:
    session = Tmux(tmp_path, tmux_env(stack, tmp_path, stack.token))
    try:
        yield session
    finally:
        session.close()


def test_tmux_send_keys_of_a_whole_sequence_sets_the_mode_and_shows_no_secret(
    stack: Stack, tmux_fleetdeck: Tmux
) -> None:
    """One `send-keys` call: `:files local`, the panel's filter on the file, `p 7 5 5 Enter`; then
    a job form's user, Tab and password, from the jobs screen to its confirmation. The mode is
    755 on the server, and the password is in no screen and no line of the TUI's log file."""
    target = site_dir(stack) / "tmux-typed-mode.txt"
    target.write_text("x")
    target.chmod(0o644)
    secret = "Tmux-secret-QZ8-typed"
    tmux = tmux_fleetdeck
    tmux.wait_for(lambda: "local" in tmux.screen())
    tmux.tmux("send-keys", ":files local", "Enter", f"/{target.name}", "Enter", "p755", "Enter")
    tmux.wait_for(lambda: target.stat().st_mode & 0o777 == 0o755)
    tmux.wait_for(lambda: "Permissions" not in tmux.screen())

    screens: list[str] = []

    def looked() -> str:
        """The screen now, kept: every screen seen is checked for the secret."""
        screens.append(tmux.screen())
        return screens[-1]

    tmux.tmux("send-keys", ":jobs local", "Enter", "n", "db.user-create", "Enter", "shop_app", "Tab", secret, "Enter")
    tmux.wait_for(lambda: "password = ***" in looked())
    assert "user = shop_app" in screens[-1]
    tmux.tmux("send-keys", "n", "Escape")
    tmux.wait_for(lambda: "Jobs of local" in looked() and "Run " not in screens[-1])
    assert not [screen for screen in screens if secret in screen]
    logs = list(tmux.home.rglob("tui.log"))
    assert logs and all(secret not in log.read_text() for log in logs)


def test_tmux_send_keys_of_a_whole_rename_and_a_whole_load_balancer_form_saves_them(
    stack: Stack, org: AgentlessOrg, tmux_fleetdeck: Tmux, tmp_path: Path
) -> None:
    """One `send-keys` call: `:files local`, the panel's filter on the file, F2 and the new name
    typed over the one selected: renamed on the server. Then, as an org's owner (its servers have no
    agent: nothing is applied), one call from the server list through the new load balancer form,
    its dropdowns opened with Down and picked with Enter, to ctrl+s: saved as typed."""
    target = site_dir(stack) / "tmux-typed-rename.txt"
    target.write_text("renamed whole")
    renamed = target.with_name("tmux-typed-renamed.md")
    tmux = tmux_fleetdeck
    tmux.wait_for(lambda: "local" in tmux.screen())
    tmux.tmux("send-keys", ":files local", "Enter", f"/{target.name}", "Enter", "F2", renamed.name, "Enter")
    tmux.wait_for(lambda: renamed.is_file() and not target.exists())
    assert renamed.read_text() == "renamed whole"

    home = tmp_path / "org"
    home.mkdir()
    owner = Tmux(home, tmux_env(stack, home, org.token))
    try:
        owner.wait_for(lambda: "edge-1" in owner.screen())
        names = {"tab": "Tab", "down": "Down", "enter": "Enter", "space": "Space", "ctrl+s": "C-s"}
        owner.tmux("send-keys", *[names.get(key, key) for key in NEW_LB_KEYS])
        owner.wait_for(lambda: saved_lb(org, "typed-lb") is not None)
    finally:
        owner.close()
    saved = saved_lb(org, "typed-lb")
    assert saved is not None
    assert (saved.node_server_id, saved.engine, saved.algorithm) == (org.node, "haproxy", "ip_hash")
    assert [(backend.server_id, backend.port) for backend in saved.backends] == [(org.backends["app-1"], 8080)]
