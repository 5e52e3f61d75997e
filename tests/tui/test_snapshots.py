"""Every screen of the TUI at 80x24, compared with its stored text snapshot (`tests/helpers/snapshots`).

A new user's first terminal is often 80x24: a cut path, a footer whose last key is half drawn or
a dialog wider than the screen shows up here as a diff. The screens open on an org of their own
with fixed names (`snapshots`), a server with an agent over a small site whose files have fixed
times, so that only a change of the screen changes the text. Screens are reached through their
actions rather than keys where the key is not what the test is about.
"""

from __future__ import annotations

import asyncio
import io
import os
import shutil
import tarfile
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from rich.color import ColorType
from rich.style import Style
from textual.pilot import Pilot

from api_client import Client
from contract.models import Job
from tests.conftest import AgentProcess, Stack
from tests.helpers import wait_for, wait_until
from tests.helpers.site_logs import logs_layout, write_site_log
from tests.helpers.snapshots import (
    SNAPSHOT_FOLDER_PREFIX,
    assert_snapshot,
    colours_used,
    screen_cells,
    screen_text,
    unreadable_cells,
)
from tests.helpers.tui import SIZE, highlight, highlight_server, run, show_location
from tui.app import FleetdeckApp
from tui.audit.screen import AuditScreen
from tui.command_line import CommandLine
from tui.connection import ConnectError, Connection, PendingConnection
from tui.files.commander import CommanderScreen
from tui.files.dialogs.conflict import ConflictDialog
from tui.files.editor_screen import EditorScreen
from tui.files.viewer import ViewerScreen
from tui.help import HelpScreen
from tui.jobs.dialogs import ChoicePicker, ConfirmCancel, ConfirmRun
from tui.jobs.run import JobRunScreen
from tui.jobs.screen import JobsScreen
from tui.load_balancers.conflict import Difference, LbConflictDialog
from tui.load_balancers.screen import LoadBalancersScreen
from tui.servers.screen import ServerListScreen
from tui.starting import StartingScreen

ORG = "snapshots"
PASSWORD = "pw-123456"
FIXED_TIME = 1767323040  # 2026-01-02 03:04 UTC: every file of the site has it


@dataclass
class SnapOrg:
    stack: Stack
    token: str
    web: str  # the server with an agent

    def app(self, theme: str | None = "fleetdeck-dark") -> FleetdeckApp:
        """The TUI on the org; `theme=None`: the one it picks from the terminal's environment."""
        client = Client(self.stack.base_url, token=self.token)
        connection = Connection(self.stack.base_url, self.token, "test stack")
        return FleetdeckApp(connection, theme=theme, client=client)


def make_site(home: Path) -> None:
    """A small site: folders, a PHP page, a log, an archive, a dotfile; all at `FIXED_TIME`."""
    site = home / "example-com"
    (site / "public_html" / "css").mkdir(parents=True)
    (site / "logs").mkdir()
    (site / "public_html" / "index.php").write_text("<?php\necho 'hello';\n")
    (site / "public_html" / "css" / "site.css").write_text("body { margin: 0; }\n")
    (site / "logs" / "access.log").write_text("".join(f"127.0.0.1 GET /page/{n} 200\n" for n in range(40)))
    (site / "notes.md").write_text("# Notes\n\nDeploy on Fridays? Never.\n")
    (site / ".env").write_text("APP_ENV=production\n")
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w:gz") as tar:
        info = tarfile.TarInfo("wp-content/readme.txt")
        info.size, info.mtime = 6, FIXED_TIME
        tar.addfile(info, io.BytesIO(b"hello\n"))
    (site / "backup.tar.gz").write_bytes(archive.getvalue())
    for path in [site, *site.rglob("*")]:
        os.utime(path, (FIXED_TIME, FIXED_TIME))


def make_site_logs(folder: Path) -> Path:
    """The site's web server logs in the sites' log folder (outside the site), at `FIXED_TIME`, which
    `logs.tail` reads (the job log's snapshot): the host layout file that names the folder."""
    layout, logs = logs_layout(folder)
    write_site_log(logs, "example-com", "access.log", "".join(f"127.0.0.1 GET /page/{n} 200\n" for n in range(40)))
    write_site_log(logs, "example-com", "error.log", "[error] upstream timed out\n")
    for path in logs.rglob("*"):
        os.utime(path, (FIXED_TIME, FIXED_TIME))
    return layout


@pytest.fixture(scope="module")
def snap_org(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SnapOrg]:
    stack.admin("create-org", ORG, "--plan", "max")
    email = f"owner@{ORG}.test"
    stack.admin("create-user", email, "--org", ORG, "--role", "owner", "--password", PASSWORD)
    token = stack.login(email, PASSWORD)
    with stack.http(token) as http:
        for name, kind, address in [("db-1", "full", "10.0.0.2"), ("cdn-1", "lite", "10.0.0.3")]:
            assert http.post("/v1/servers", json={"name": name, "kind": kind, "address": address}).status_code == 201
        created = http.post("/v1/servers", json={"name": "web-1", "kind": "full", "address": "10.0.0.1"}).json()
    # A folder of one length on every run (pytest-xdist puts pytest's own a level deeper): a
    # picker shows the site's home, cut at the screen's edge.
    base = Path(tempfile.mkdtemp(prefix=SNAPSHOT_FOLDER_PREFIX))
    home, state = base / "home", base / "state"
    make_site(home)
    layout = make_site_logs(base)
    state.mkdir()
    (state / "sites.json").write_text('{"sites": [{"domain": "example.com", "slug": "example-com"}]}')
    server_id, agent_token = created["server"]["id"], created["agent_token"]
    # No pulses: live figures would change the server list under every screen and dialog over it
    # (its sparklines are tests/tui/servers/test_screen.py's).
    no_pulses = ("--pulse-interval", "0")
    agent = AgentProcess(
        stack, server_id, agent_token, home, state, "--host-layout", str(layout), *no_pulses, api_token=token
    )
    yield SnapOrg(stack, token, created["server"]["id"])
    agent.stop()
    shutil.rmtree(base, ignore_errors=True)


Scenario = Callable[[Pilot[Any]], Awaitable[None]]


def snapshot_after(org: SnapOrg, name: str, reach: Scenario, settled: Callable[[str], bool]) -> None:
    """Open the app, `reach` the screen, wait until its text is `settled`, compare the snapshot."""
    snapshot_of(org.app(), name, reach, settled)


async def server_list(pilot: Pilot[Any]) -> ServerListScreen:
    app = pilot.app
    await wait_for(pilot, lambda: isinstance(app.screen, ServerListScreen) and len(app.screen.servers) == 3)
    screen = app.screen
    assert isinstance(screen, ServerListScreen)
    await wait_for(pilot, lambda: "online" in screen_text(app))
    return screen


async def files(pilot: Pilot[Any]) -> CommanderScreen:
    """The files of web-1 (the server list opens on it: it sorts last, so go to it)."""
    screen = await server_list(pilot)
    while screen.highlighted_server is None or screen.highlighted_server.name != "web-1":
        await pilot.press("down")
    await pilot.press("enter")
    await wait_for(
        pilot, lambda: isinstance(pilot.app.screen, CommanderScreen) and pilot.app.screen.active.pane.entries
    )
    commander = pilot.app.screen
    assert isinstance(commander, CommanderScreen)
    await wait_for(pilot, lambda: bool(commander.other.pane.entries))
    return commander


async def files_on(pilot: Pilot[Any], name: str) -> CommanderScreen:
    commander = await files(pilot)
    await highlight(pilot, commander.active, name)
    return commander


async def action(pilot: Pilot[Any], screen: Any, name: str) -> None:
    await screen.run_action(name)
    await pilot.pause()


def snapshot_of(
    app: FleetdeckApp, name: str, reach: Scenario, settled: Callable[[str], bool], size: tuple[int, int] = SIZE
) -> None:
    async def scenario(pilot: Pilot[Any]) -> None:
        await reach(pilot)
        await wait_for(pilot, lambda: settled(screen_text(app)))
        await pilot.pause()
        assert_snapshot(app, name)

    run(app, scenario, size)


# --- the screens ---------------------------------------------------------------------------------


def test_server_list(snap_org: SnapOrg) -> None:
    # The sparklines' columns: CPU and memory fit at 80 columns.
    snapshot_after(snap_org, "servers_80x24", server_list, lambda text: "web-1" in text and "Mem" in text)


def test_server_list_wide(snap_org: SnapOrg) -> None:
    """At 200 columns the CPU, memory and disk sparklines all fit."""
    settled = lambda text: "web-1" in text and "Disk" in text and "F10 Quit" in text  # noqa: E731 - the footer too
    snapshot_of(snap_org.app(), "servers_200x50", server_list, settled, (200, 50))


def test_help(snap_org: SnapOrg) -> None:
    async def reach(pilot: Pilot[Any]) -> None:
        await server_list(pilot)
        await pilot.app.run_action("help")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, HelpScreen))

    snapshot_after(snap_org, "help_80x24", reach, lambda text: "Keys" in text)


def test_files(snap_org: SnapOrg) -> None:
    snapshot_after(snap_org, "files_80x24", files, lambda text: "notes.md" in text)


def test_files_in_a_folder(snap_org: SnapOrg) -> None:
    async def reach(pilot: Pilot[Any]) -> None:
        commander = await files_on(pilot, "public_html")
        await pilot.press("enter")
        await wait_for(pilot, lambda: commander.active.path == "public_html" and bool(commander.active.pane.entries))

    snapshot_after(snap_org, "files_folder_80x24", reach, lambda text: "index.php" in text)


def test_viewer(snap_org: SnapOrg) -> None:
    async def reach(pilot: Pilot[Any]) -> None:
        commander = await files_on(pilot, "notes.md")
        await action(pilot, commander, "view")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, ViewerScreen))

    snapshot_after(snap_org, "viewer_80x24", reach, lambda text: "Fridays" in text)


def test_editor(snap_org: SnapOrg) -> None:
    async def reach(pilot: Pilot[Any]) -> None:
        commander = await files_on(pilot, "notes.md")
        await action(pilot, commander, "edit")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, EditorScreen))

    snapshot_after(snap_org, "editor_80x24", reach, lambda text: "Fridays" in text)


# The files screen's dialogs: (snapshot name, entry highlighted, action, text once it is drawn).
DIALOGS = [
    ("location_picker", "notes.md", "pick_location", "example.com"),
    ("new_file", "notes.md", "new_file", "ew file"),
    ("mkdir", "notes.md", "mkdir", "older"),
    ("rename", "notes.md", "rename", "notes.md"),
    ("delete", "notes.md", "delete", "notes.md"),
    ("properties", "notes.md", "properties", "notes.md"),
    ("permissions", "notes.md", "permissions", "rw-r--r--"),
    ("search", "notes.md", "search", "earch"),
    ("trash", "notes.md", "trash", "rash"),
    ("compress", "public_html", "compress", "public_html"),
    ("extract", "backup.tar.gz", "extract", "backup.tar.gz"),
    ("upload", "notes.md", "upload", "pload"),
]


@pytest.mark.parametrize(("name", "entry", "action_name", "shown"), DIALOGS, ids=[row[0] for row in DIALOGS])
def test_files_dialog(
    snap_org: SnapOrg, name: str, entry: str, action_name: str, shown: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir("/tmp")  # the upload dialog proposes the working folder: one that is the same everywhere

    async def reach(pilot: Pilot[Any]) -> None:
        commander = await files_on(pilot, entry)
        await action(pilot, commander, action_name)
        await wait_for(pilot, lambda: pilot.app.screen is not commander)

    snapshot_after(snap_org, f"files_{name}_80x24", reach, lambda text: shown in text)


def test_files_on_the_site_logs(snap_org: SnapOrg) -> None:
    """A panel on a site's logs, picked with `s`: its title names them, its status says read-only."""

    async def reach(pilot: Pilot[Any]) -> None:
        commander = await files(pilot)
        await show_location(pilot, commander, "web-1 · example.com logs")
        await highlight(pilot, commander.active, "access.log")

    snapshot_after(snap_org, "files_logs_80x24", reach, lambda text: "read-only · 1/2 · access.log" in text)


def test_files_copy_dialog(snap_org: SnapOrg) -> None:
    async def reach(pilot: Pilot[Any]) -> None:
        commander = await files(pilot)
        await action(pilot, commander, "switch_panel")
        await highlight(pilot, commander.active, "public_html")
        await pilot.press("enter")
        await wait_for(pilot, lambda: commander.active.path == "public_html" and bool(commander.active.pane.entries))
        await action(pilot, commander, "switch_panel")
        await highlight(pilot, commander.active, "notes.md")
        await action(pilot, commander, "copy")
        await wait_for(pilot, lambda: pilot.app.screen is not commander)

    snapshot_after(snap_org, "files_copy_80x24", reach, lambda text: "notes.md" in text)


async def jobs(pilot: Pilot[Any]) -> JobsScreen:
    screen = await server_list(pilot)
    while screen.highlighted_server is None or screen.highlighted_server.name != "web-1":
        await pilot.press("down")
    await action(pilot, screen, "open_jobs")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, JobsScreen) and bool(pilot.app.screen.kinds))
    jobs_screen = pilot.app.screen
    assert isinstance(jobs_screen, JobsScreen)
    return jobs_screen


def test_jobs(snap_org: SnapOrg) -> None:
    snapshot_after(snap_org, "jobs_80x24", jobs, lambda text: "web-1" in text)


def test_job_kind_picker(snap_org: SnapOrg) -> None:
    async def reach(pilot: Pilot[Any]) -> None:
        screen = await jobs(pilot)
        await action(pilot, screen, "new_job")
        await wait_for(pilot, lambda: pilot.app.screen is not screen)

    snapshot_after(snap_org, "job_kinds_80x24", reach, lambda text: "Run a job" in text)


def test_job_form(snap_org: SnapOrg) -> None:
    async def reach(pilot: Pilot[Any]) -> None:
        screen = await jobs(pilot)
        await action(pilot, screen, "new_job")
        await wait_for(pilot, lambda: pilot.app.screen is not screen)
        await pilot.press(*"cron.add")
        await pilot.press("enter")
        await wait_for(pilot, lambda: "chedule" in screen_text(pilot.app))

    snapshot_after(snap_org, "job_form_80x24", reach, lambda text: "chedule" in text)


def test_job_field_picker(snap_org: SnapOrg) -> None:
    """↓ in a field that names a site: the sites of the server, read with `site.list`. Before
    `test_job_log`, so the jobs behind it are none, in the module as alone."""

    async def reach(pilot: Pilot[Any]) -> None:
        screen = await jobs(pilot)
        await action(pilot, screen, "new_job")
        await wait_for(pilot, lambda: pilot.app.screen is not screen)
        await pilot.press(*"logs.tail")
        await pilot.press("enter")
        await wait_for(pilot, lambda: "Domain" in screen_text(pilot.app))
        await pilot.press("down")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, ChoicePicker))

    snapshot_after(snap_org, "job_field_picker_80x24", reach, lambda text: "example.com" in text)


def test_job_log(snap_org: SnapOrg) -> None:
    with snap_org.stack.http(snap_org.token) as http:
        body = {"kind": "logs.tail", "args": {"domain": "example.com", "lines": 5}}
        job = http.post(f"/v1/servers/{snap_org.web}/jobs", json=body).json()

    async def reach(pilot: Pilot[Any]) -> None:
        screen = await jobs(pilot)
        await wait_for(pilot, lambda: screen.highlighted_job is not None and screen.highlighted_job.id == job["id"])
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, JobRunScreen))

    snapshot_after(snap_org, "job_log_80x24", reach, lambda text: "page/39" in text and "exit" in text.lower())


def finished_job(org: SnapOrg, kind: str, args: dict[str, Any]) -> str:
    """The id of a job of `kind` run on web-1 to its end (succeeded)."""
    with org.stack.http(org.token) as http:
        job_id: str = http.post(f"/v1/servers/{org.web}/jobs", json={"kind": kind, "args": args}).json()["id"]
        wait_until(lambda: http.get(f"/v1/jobs/{job_id}").json()["status"] not in ("queued", "running"), 60)
        assert http.get(f"/v1/jobs/{job_id}").json()["status"] == "succeeded"
    return job_id


async def open_job(pilot: Pilot[Any], job_id: str) -> JobRunScreen:
    screen = await jobs(pilot)
    await wait_for(pilot, lambda: screen.highlighted_job is not None and screen.highlighted_job.id == job_id)
    await pilot.press("enter")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, JobRunScreen) and pilot.app.screen._has_result)
    run_screen = pilot.app.screen
    assert isinstance(run_screen, JobRunScreen)
    return run_screen


def test_job_result_of_a_read(snap_org: SnapOrg) -> None:
    """A read's result is a table (logs.list: the site's logs, their sizes and times)."""
    job_id = finished_job(snap_org, "logs.list", {"domain": "example.com"})

    async def reach(pilot: Pilot[Any]) -> None:
        await open_job(pilot, job_id)

    snapshot_after(snap_org, "job_result_read_80x24", reach, lambda text: "2 rows" in text)


def test_job_result_of_a_write(snap_org: SnapOrg) -> None:
    """A write's result is a summary, its message first, not a line of JSON (metrics.alert-delete:
    a write that changes only the agent's own state, so the server's nginx is left as it was)."""
    finished_job(snap_org, "metrics.alert-set", {"metric": "disk", "threshold_percent": 90})
    job_id = finished_job(snap_org, "metrics.alert-delete", {"id": "al-1"})

    async def reach(pilot: Pilot[Any]) -> None:
        await open_job(pilot, job_id)

    snapshot_after(snap_org, "job_result_write_80x24", reach, lambda text: "deleted" in text)


def test_load_balancers_without_any(snap_org: SnapOrg) -> None:
    async def reach(pilot: Pilot[Any]) -> None:
        await server_list(pilot)
        await pilot.app.run_action("go_load_balancers")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, LoadBalancersScreen))

    snapshot_after(snap_org, "load_balancers_empty_80x24", reach, lambda text: "0 load balancers" in text)


def test_load_balancer_form(snap_org: SnapOrg) -> None:
    async def reach(pilot: Pilot[Any]) -> None:
        await server_list(pilot)
        await pilot.app.run_action("go_load_balancers")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, LoadBalancersScreen))
        screen = pilot.app.screen
        await wait_for(pilot, lambda: "0 load balancers" in screen_text(pilot.app))
        # The action run directly does not wait for the org's servers as a typed `n` does.
        assert isinstance(screen, LoadBalancersScreen)
        await wait_for(pilot, lambda: len(screen.servers) == 3)
        await action(pilot, screen, "new")
        await wait_for(pilot, lambda: pilot.app.screen is not screen)

    # settled when the backends (the org's servers, fetched after the form opens) are listed
    snapshot_after(snap_org, "load_balancer_form_80x24", reach, lambda text: "web-1 (10.0.0.1)" in text)


def test_load_balancer_edit_conflict(snap_org: SnapOrg) -> None:
    """The form's save refused as the load balancer changed meanwhile: theirs beside mine."""
    differences = [
        Difference("Name", "shop", "shop-eu"),
        Difference("Check path", "/healthz", "/"),
        Difference("Pool", "web-1:8080, web-1:8081, db-1:9000", "web-1:8080, web-1:8081"),
    ]

    async def reach(pilot: Pilot[Any]) -> None:
        await server_list(pilot)
        pilot.app.push_screen(LbConflictDialog("shop", 4, 6, differences))
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, LbConflictDialog))

    snapshot_after(snap_org, "load_balancer_conflict_80x24", reach, lambda text: "Overwrite (o)" in text)


def test_the_starting_screen_when_the_stack_does_not_start() -> None:
    def never() -> Connection:
        raise ConnectError("the control plane exited with 1 before it answered:\nAddress already in use")

    app = FleetdeckApp(PendingConnection("Starting the local control plane and agent in /data/local…", never))

    async def reach(pilot: Pilot[Any]) -> None:
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, StartingScreen))

    snapshot_of(app, "starting_failed_80x24", reach, lambda text: "Address already in use" in text)


def test_job_cancel_confirmation(snap_org: SnapOrg) -> None:
    with snap_org.stack.http(snap_org.token) as http:
        body = {"kind": "logs.tail", "args": {"domain": "example.com", "lines": 1}}
        job = Job.model_validate(http.post(f"/v1/servers/{snap_org.web}/jobs", json=body).json())

    async def reach(pilot: Pilot[Any]) -> None:
        screen = await server_list(pilot)
        web = next(server for server in screen.servers.values() if server.name == "web-1")
        running = job.model_copy(update={"status": "running", "exit_code": None})
        pilot.app.push_screen(ConfirmCancel(running, web))
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, ConfirmCancel))

    snapshot_after(snap_org, "job_cancel_80x24", reach, lambda text: "TERM" in text)


def test_copy_onto_a_taken_name(snap_org: SnapOrg) -> None:
    async def reach(pilot: Pilot[Any]) -> None:
        await server_list(pilot)
        dialog = ConflictDialog("copy", "notes.md", "web-1:example.com:/public_html", 2, folder=False)
        pilot.app.push_screen(dialog)
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, ConflictDialog))

    snapshot_after(snap_org, "files_conflict_80x24", reach, lambda text: "taken" in text)


def test_command_line(snap_org: SnapOrg) -> None:
    async def reach(pilot: Pilot[Any]) -> None:
        await server_list(pilot)
        await pilot.press("colon")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, CommandLine))
        await pilot.press(*"files ")

    snapshot_after(snap_org, "command_line_80x24", reach, lambda text: "files web-1" in text)


def test_audit_log(snap_org: SnapOrg) -> None:
    """Narrowed to the servers the fixture made (what else is there depends on the tests run)."""

    async def reach(pilot: Pilot[Any]) -> None:
        await server_list(pilot)
        await pilot.app.run_action("go_audit")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, AuditScreen) and bool(pilot.app.screen.entries))
        await pilot.press("slash", *"servers.create", "enter")

    snapshot_after(snap_org, "audit_80x24", reach, lambda text: "cdn-1" in text and "jobs." not in text)


async def retype_confirmation(pilot: Pilot[Any]) -> None:
    """`site.delete`'s confirmation (point 8 of issue 25): its domain is to be typed again. Over
    the server list, as the job cancel's: the jobs screen behind it lists what other tests ran."""
    site_delete = (await jobs(pilot)).kinds["site.delete"]  # the catalog, as the jobs screen read it
    await pilot.press("escape")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, ServerListScreen))
    screen = pilot.app.screen
    assert isinstance(screen, ServerListScreen)
    web = next(server for server in screen.servers.values() if server.name == "web-1")
    pilot.app.push_screen(ConfirmRun(site_delete, web, {"domain": "example.com", "keep_files": False}))
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, ConfirmRun))


def test_job_retype_confirmation(snap_org: SnapOrg) -> None:
    snapshot_after(snap_org, "job_retype_80x24", retype_confirmation, lambda text: "Type example.com" in text)


# --- without colour, and with 16 ------------------------------------------------------------
# NO_COLOR (no-color.org) gives the monochrome theme: no colour reaches the terminal, and what a
# colour says elsewhere is a glyph, reverse video, bold or underline. A terminal of 16 colours
# (TERM=xterm, no COLORTERM) gives the ANSI theme. Both are asserted on what the screen sends, cell
# by cell: the text snapshots cannot see a cell drawn black on black.


def reversed_text(row: list[tuple[str, Style]]) -> str:
    """The characters of a row drawn in reverse video (the monochrome cursor)."""
    return "".join(char for char, style in row if style.reverse).strip()


def row_with(app: FleetdeckApp, text: str) -> list[tuple[str, Style]]:
    return next(row for row in screen_cells(app) if text in "".join(char for char, _ in row))


async def marked_files(pilot: Pilot[Any]) -> None:
    """The files, `.env` marked (Insert: the cursor goes on to the next entry)."""
    commander = await files_on(pilot, ".env")
    await pilot.press("insert")
    await wait_for(pilot, lambda: bool(commander.active.pane.marked))
    # Both listings drawn (a loaded run caught the other panel still loading)
    await wait_for(pilot, lambda: screen_text(pilot.app).count("notes.md") == 2)


def check_marked_files(app: FleetdeckApp) -> None:
    # The active (left) panel: its title in reverse video, its cursor row too; the other panel's
    # cursor row is underlined. `.env` is marked with a `*`, the cursor is past it.
    commander = app.screen
    assert isinstance(commander, CommanderScreen)
    assert commander.active is commander.left
    title = row_with(app, "web-1:example.com:/")
    assert reversed_text(title[:40]) == "web-1:example.com:/" and not reversed_text(title[40:])
    assert "".join(char for char, _ in row_with(app, ".env")).startswith("* .env")
    assert reversed_text(row_with(app, "backup.tar.gz")[:40]).startswith("backup.tar.gz")
    other_cursor = row_with(app, "logs/")[40:]
    assert not reversed_text(other_cursor)
    assert "".join(char for char, style in other_cursor if style.underline).startswith("▸ logs/")


async def delete_dialog(pilot: Pilot[Any]) -> None:
    commander = await files_on(pilot, "notes.md")
    await action(pilot, commander, "delete")
    await wait_for(pilot, lambda: pilot.app.screen is not commander)


def check_delete_dialog(app: FleetdeckApp) -> None:
    # A destructive dialog has a heavy frame (its red one has no colour here); the focused button
    # is in reverse video.
    assert "┏" in screen_text(app)
    assert reversed_text(row_with(app, "Move to trash")) == "Move to trash (t)"


async def servers_on_web(pilot: Pilot[Any]) -> None:
    screen = await server_list(pilot)
    await highlight_server(pilot, "web-1")
    await wait_for(pilot, lambda: screen.highlighted_server is not None and screen.highlighted_server.name == "web-1")


def check_servers(app: FleetdeckApp) -> None:
    # The cursor row in reverse video, the others not; online says so in a word and a glyph.
    assert reversed_text(row_with(app, "web-1")).startswith("●  web-1")
    assert not reversed_text(row_with(app, "db-1"))
    assert "online" in "".join(char for char, _ in row_with(app, "web-1"))


async def job_form(pilot: Pilot[Any]) -> None:
    screen = await jobs(pilot)
    await action(pilot, screen, "new_job")
    await wait_for(pilot, lambda: pilot.app.screen is not screen)
    await pilot.press(*"cron.add")
    await pilot.press("enter")
    await wait_for(pilot, lambda: "chedule" in screen_text(pilot.app))


def check_job_form(app: FleetdeckApp) -> None:
    # The focused field (the first, empty) shows its cursor as a reversed cell on its placeholder.
    assert reversed_text(row_with(app, "(required)")) == "("


async def help_screen(pilot: Pilot[Any]) -> None:
    await server_list(pilot)
    await pilot.app.run_action("help")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, HelpScreen))


async def editor(pilot: Pilot[Any]) -> None:
    commander = await files_on(pilot, "notes.md")
    await action(pilot, commander, "edit")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, EditorScreen))


def check_editor(app: FleetdeckApp) -> None:
    # The text cursor (on the first character) is a reversed cell.
    assert reversed_text(row_with(app, "# Notes")) == "#"


async def viewer(pilot: Pilot[Any]) -> None:
    commander = await files_on(pilot, "notes.md")
    await action(pilot, commander, "view")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, ViewerScreen))


async def load_balancers(pilot: Pilot[Any]) -> None:
    await server_list(pilot)
    await pilot.app.run_action("go_load_balancers")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, LoadBalancersScreen))


def check_retype_confirmation(app: FleetdeckApp) -> None:
    # The field to type into has the focus (its cursor a reversed cell on the placeholder); Run is
    # disabled, so no button is in reverse video.
    assert reversed_text(row_with(app, "Type example.com")) == ""
    assert reversed_text(row_with(app, "Run (y)")) == ""


def nothing_more(app: FleetdeckApp) -> None:
    """Screens whose states are words already: what every screen is checked for is enough."""


# (name, how to reach the screen, text once it is drawn, what shows without colour)
WITHOUT_COLOUR: list[tuple[str, Scenario, str, Callable[[FleetdeckApp], None]]] = [
    ("servers", servers_on_web, "web-1", check_servers),
    ("files_marked", marked_files, "1 marked", check_marked_files),
    ("files_delete", delete_dialog, "notes.md", check_delete_dialog),
    ("job_form", job_form, "chedule", check_job_form),
    ("editor", editor, "Fridays", check_editor),
    ("viewer", viewer, "Fridays", nothing_more),
    ("help", help_screen, "Keys", nothing_more),
    ("load_balancers_empty", load_balancers, "0 load balancers", nothing_more),
    ("job_retype", retype_confirmation, "Type example.com", check_retype_confirmation),
]


@pytest.mark.parametrize(("name", "reach", "shown", "check"), WITHOUT_COLOUR, ids=[row[0] for row in WITHOUT_COLOUR])
def test_no_color_is_monochrome_and_readable(
    snap_org: SnapOrg,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    reach: Scenario,
    shown: str,
    check: Callable[[FleetdeckApp], None],
) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.delenv("COLORTERM", raising=False)
    app = snap_org.app(theme=None)

    async def scenario(pilot: Pilot[Any]) -> None:
        await reach(pilot)
        await wait_for(pilot, lambda: shown in screen_text(app))
        await pilot.pause()
        assert app.theme == "fleetdeck-mono"
        assert_snapshot(app, f"{name}_mono_80x24")
        assert colours_used(app) <= {ColorType.DEFAULT}  # the terminal's own colours only
        check(app)

    run(app, scenario)


@pytest.mark.parametrize(
    ("name", "reach", "shown"), [row[:3] for row in WITHOUT_COLOUR], ids=[row[0] for row in WITHOUT_COLOUR]
)
def test_sixteen_colours_are_readable(
    snap_org: SnapOrg, monkeypatch: pytest.MonkeyPatch, name: str, reach: Scenario, shown: str
) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("COLORTERM", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    app = snap_org.app(theme=None)

    async def scenario(pilot: Pilot[Any]) -> None:
        await reach(pilot)
        await wait_for(pilot, lambda: shown in screen_text(app))
        await pilot.pause()
        assert app.theme == "fleetdeck-ansi"
        assert_snapshot(app, f"{name}_16_80x24")
        assert colours_used(app) <= {ColorType.DEFAULT, ColorType.STANDARD}
        assert unreadable_cells(app) == []

    run(app, scenario)


def test_a_theme_chosen_by_name_keeps_its_colours_under_no_color(
    snap_org: SnapOrg, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As no-color.org asks of an explicit choice. Textual's own NO_COLOR filter, picked before the
    app's theme was set, drew the ANSI theme black on black (every cell): no longer."""
    monkeypatch.setenv("NO_COLOR", "1")
    app = snap_org.app(theme="ansi")

    async def scenario(pilot: Pilot[Any]) -> None:
        await servers_on_web(pilot)
        assert app.theme == "fleetdeck-ansi"
        assert unreadable_cells(app) == []
        assert ColorType.STANDARD in colours_used(app)

    run(app, scenario)


def test_no_color_notifications_tell_their_severity(snap_org: SnapOrg, monkeypatch: pytest.MonkeyPatch) -> None:
    """A warning is bold, an error bold behind a solid bar: elsewhere their bars' colours say it."""
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.delenv("COLORTERM", raising=False)
    app = snap_org.app(theme=None)

    def bar_and_bold(text: str) -> tuple[str, bool]:
        row = row_with(app, text)
        start = "".join(char for char, _ in row).index(text)
        bar = "".join(char for char, _ in row[:start]).rstrip()[-1]
        return bar, all(style.bold for _, style in row[start : start + len(text)])

    async def scenario(pilot: Pilot[Any]) -> None:
        await server_list(pilot)
        for severity in ("information", "warning", "error"):
            app.notify(f"{severity} note", severity=severity, timeout=600)  # type: ignore[arg-type]
        await wait_for(pilot, lambda: "error note" in screen_text(app))
        assert bar_and_bold("information note") == ("▌", False)
        assert bar_and_bold("warning note") == ("▌", True)
        assert bar_and_bold("error note") == ("█", True)

    async def main() -> None:
        async with app.run_test(size=(80, 24), notifications=True) as pilot:  # `run` leaves toasts out
            await scenario(pilot)

    asyncio.run(main())
