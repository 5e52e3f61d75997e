"""The jobs screens: the log panel under 200,000 lines, the schema form, the result view, and
end to end on the real stack (`fleetdeck local`: control plane, agents, SQLite): history, the
dialogs, every refusal, an offline agent, idempotent retries, a lost stream resumed.

Trio work is not awaited by `pilot.pause()`: `wait_for` polls until the trio side has delivered.
"""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import signal
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from textual import events
from textual.app import App, ComposeResult
from textual.pilot import Pilot
from textual.widgets import Checkbox, DataTable, Input, OptionList, Select, SelectionList, Static, Tree

from contract.job_kinds import json_schemas
from contract.models import Job, JobKindInfo, Server
from tests.conftest import Stack, start_agent
from tests.helpers import soon, wait_for, wait_until
from tests.helpers.jobs import finished_job
from tests.helpers.site_logs import logs_layout, write_site_log
from tests.helpers.tui import highlight_server, open_form, open_jobs_of, pick_kind, real_app, real_app_and_wire, run
from themes import register_themes
from tui.app import FleetdeckApp
from tui.connection import Connection
from tui.jobs.dialogs import NOT_AVAILABLE, ConfirmCancel, ConfirmRun, JobFormScreen, KindPicker, rank_kinds
from tui.jobs.form import Invalid, JobForm, check_value, field_of_error, parse_schema
from tui.jobs.log_panel import Banner, LogLine, LogPanel, LogView, write_log
from tui.jobs.log_save import LogSavePrompt
from tui.jobs.result_view import ResultView, result_shape, table_columns
from tui.jobs.run import JobRunScreen
from tui.jobs.screen import JobsScreen
from tui.servers.screen import ServerListScreen

BIG = 200_000

# --- the real catalog's schemas (as `GET /v1/job-kinds` serves them) ---------------------------------

CATALOG_KINDS = {entry["kind"]: entry for entry in json_schemas()}


def schema_of(kind: str) -> dict[str, Any]:
    schema: dict[str, Any] = CATALOG_KINDS[kind]["args_schema"]
    return schema


LOGS_TAIL = schema_of("logs.tail")
DB_USER_CREATE = schema_of("db.user-create")
CONTAINER_RUN = schema_of("container.run")
STORAGE_CLEANUP = schema_of("storage.cleanup")
NO_ARGS = schema_of("system.info")
KINDS = [
    CATALOG_KINDS[kind]
    for kind in ("system.info", "logs.tail", "db.user-create", "container.run", "storage.cleanup", "site.create",
                 "quota.set", "system.reboot")
]  # fmt: skip


# --- helpers ------------------------------------------------------------------------------------


def notifications(app: App[Any]) -> list[str]:
    return [n.message for n in app._notifications]


class LogApp(App[None]):
    def __init__(self, view: LogView) -> None:
        super().__init__()
        self.view = view

    def compose(self) -> ComposeResult:
        yield self.view

    def on_mount(self) -> None:
        register_themes(self)
        self.theme = "fleetdeck-dark"
        self.view.focus()


def screen_rows(panel: LogPanel) -> list[str]:
    """What the panel shows, row by row (the scrollbars excluded)."""
    return [panel.render_line(y).text for y in range(panel.scrollable_content_region.height)]


def numbered(start: int, count: int) -> list[LogLine]:
    return [LogLine(f"line {n} " + ("warning: disk" if n % 10 == 3 else "ok"), n % 7 == 0, "2026-11-22T10:00:00Z")
            for n in range(start, start + count)]  # fmt: skip


# --- the log panel ------------------------------------------------------------------------------


def test_the_log_panel_answers_keys_while_200000_lines_arrive_in_batches() -> None:
    batches = [numbered(start, 2_000) for start in range(0, 200_000, 2_000)]
    view = LogView(save_name="x.log")
    app = LogApp(view)

    async def scenario(pilot: Pilot[None]) -> None:
        panel = view.panel
        assert panel.max_lines == 100_000 and panel.follow
        done = asyncio.Event()

        async def feed() -> None:
            # As the bridge delivers them: one callback per batch, the loop free in between.
            for batch in batches:
                panel.append_lines(batch)
                await asyncio.sleep(0.03)
            done.set()

        feeder = asyncio.create_task(feed())
        await wait_for(pilot, lambda: panel.appended >= 20_000)

        async def press(keys: str | list[str], effect: Callable[[], bool]) -> None:
            """Send keys as the terminal would, and wait for their effect (`pilot.press` would also
            wait for the screen to be idle, which it never is while lines pour in)."""
            for key in [keys] if isinstance(keys, str) else keys:
                app.post_message(events.Key(key, key if len(key) == 1 else None))
            await wait_for(pilot, effect)

        # `s`: follow off, while lines keep coming.
        await press("s", lambda: not panel.follow)
        top = panel.scroll_y
        await pilot.pause(0.1)
        assert panel.scroll_y == top, "not following: new lines do not move the view"

        # `/`: the filter narrows what is shown, batches arriving meanwhile are filtered too.
        await press("slash", lambda: app.focused is view.filter_input)
        await press(list("warning"), lambda: view.filter_input.value == "warning")
        await press("enter", lambda: panel.filter == "warning" and app.focused is panel)
        assert 0 < panel.shown_count < panel.line_count

        # `w`: wrap on; `s` again: follow the end.
        await press("w", lambda: panel.wrap)
        await press("s", lambda: panel.follow)
        assert not done.is_set(), "the keys were handled while the lines were still arriving"
        assert panel.appended < 150_000

        await asyncio.wait_for(done.wait(), 60)
        await feeder
        panel.flush_now()

        # The ring buffer keeps the newest 100,000 lines.
        assert panel.appended == 200_000 and panel.line_count == 100_000 and panel.dropped == 100_000
        assert panel.lines[0].text.startswith("line 100000 ") and panel.lines[-1].text.startswith("line 199999 ")
        # The filter's matches are exactly the buffer's matching lines (old matches dropped with their lines).
        expected = [line for line in panel.lines if "warning" in line.text]
        assert panel.shown_lines() == expected and panel.shown_count == 10_000
        # Following the end: the last match is on the last body row.
        assert screen_rows(panel)[-1].strip().startswith("line 199993 warning")

        # Esc clears the filter.
        await press("escape", lambda: panel.filter == "")
        assert panel.shown_count == 100_000

    run(app, scenario)


def test_the_ring_buffer_bound_is_honoured_and_the_filter_follows_it() -> None:
    view = LogView(max_lines=1_000)
    app = LogApp(view)

    async def scenario(pilot: Pilot[None]) -> None:
        panel = view.panel
        panel.filter = "warning"
        panel.append_lines(numbered(0, 2_500))
        panel.flush_now()
        await pilot.pause()
        assert panel.line_count == 1_000 and panel.dropped == 1_500
        assert panel.lines[0].text == "line 1500 ok"
        assert [line.text.split()[1] for line in panel.shown_lines()][:2] == ["1503", "1513"]
        assert panel.shown_count == 100
        status = panel.render_line(0).text
        assert "Follow:on" in status and "/warning" in status and "100 of 1,000 lines" in status

        # Not following: the lines on screen stay there while older ones fall out of the buffer.
        panel.filter = ""
        panel.follow = False
        panel.scroll_to(y=400, animate=False, immediate=True, force=True)
        await pilot.pause()
        assert screen_rows(panel)[1].rstrip() == " line 1900 ok"
        panel.append_lines(numbered(2_500, 300))
        panel.flush_now()
        await pilot.pause()
        assert panel.lines[0].text == "line 1800 ok" and screen_rows(panel)[1].rstrip() == " line 1900 ok"

    run(app, scenario)


def test_stderr_timestamps_wrap_and_the_exit_banner_are_drawn() -> None:
    view = LogView()
    app = LogApp(view)

    async def scenario(pilot: Pilot[None]) -> None:
        panel = view.panel
        panel.append_lines([LogLine("starting", False, "2026-11-22T10:00:00.250Z"),
                            LogLine("E: no such package " + "x" * 150, True, "2026-11-22T10:00:01Z")])  # fmt: skip
        panel.set_banner(Banner("failed", 100, 3.4))
        panel.flush_now()
        await pilot.pause()
        rows = screen_rows(panel)
        assert rows[1].startswith(" starting") and rows[2].startswith("▌E: no such package")
        assert rows[-1].strip() == "✘ failed · exit code 100 · 3.4 s"
        await pilot.press("t", "w")
        rows = screen_rows(panel)
        assert panel.timestamps and panel.wrap
        assert rows[1].startswith(" ") and rows[1][13] == " " and rows[1][14:22] == "starting"
        # The long stderr line wraps, its later rows indented past the mark and the time.
        assert rows[2].startswith("▌") and "E: no such package" in rows[2]
        assert rows[3].startswith(" " * 14 + "x")

    run(app, scenario)


def test_ctrl_s_saves_the_buffer_where_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "logs.tail-job_1.log").write_text("older\n")
    view = LogView(save_name="logs.tail-job_1.log")
    app = LogApp(view)
    lines = numbered(0, 500)

    async def scenario(pilot: Pilot[None]) -> None:
        view.panel.append_lines(lines)
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: isinstance(app.screen, LogSavePrompt))
        field = app.screen.query_one(Input)
        assert field.value == "./logs.tail-job_1.log"
        # The file exists: a first Enter only warns, a second one replaces it.
        await pilot.press("enter")
        assert isinstance(app.screen, LogSavePrompt)
        await pilot.press("enter")
        await wait_for(pilot, lambda: any("Saved 500 lines" in note for note in notifications(app)))
        saved = (tmp_path / "logs.tail-job_1.log").read_text().splitlines()
        assert saved == [line.text for line in lines]
        assert str(tmp_path / "logs.tail-job_1.log") in " ".join(notifications(app))

        # Another name, with timestamps on.
        await pilot.press("t", "ctrl+s")
        await wait_for(pilot, lambda: isinstance(app.screen, LogSavePrompt))
        field = app.screen.query_one(Input)
        field.value = str(tmp_path / "other.log")
        await pilot.press("enter")
        await wait_for(pilot, lambda: (tmp_path / "other.log").exists())
        assert (tmp_path / "other.log").read_text().splitlines()[0] == "2026-11-22T10:00:00Z line 0 ok"

    run(app, scenario)


def test_batches_arriving_between_two_repaints_are_painted_once() -> None:
    view = LogView()
    app = LogApp(view)

    async def scenario(pilot: Pilot[None]) -> None:
        panel = view.panel
        await pilot.pause()
        before = panel.flush_count
        for start in range(0, 50_000, 1_000):  # no turn of the event loop in between
            panel.append_lines(numbered(start, 1_000))
        await wait_for(pilot, lambda: panel.flush_count > before)
        assert panel.flush_count == before + 1 and panel.appended == 50_000

    run(app, scenario)


def at_second(second: int, count: int) -> list[LogLine]:
    """`count` lines written in the `second`-th second after 10:00:00 (a job's lines carry their time)."""
    return [LogLine(f"line {n}", False, f"2026-11-22T10:00:{second:02d}.{n:03d}Z") for n in range(count)]


def test_the_status_row_draws_the_output_rate_by_the_time_lines_were_written() -> None:
    view = LogView()
    app = LogApp(view)

    async def scenario(pilot: Pilot[None]) -> None:
        panel = view.panel
        # Replayed at once, as a finished job's stored lines are: the pace is their times'.
        panel.append_lines([*at_second(0, 2), *at_second(1, 8), *at_second(3, 4)])
        panel.set_banner(Banner("succeeded", 0, 3.0))
        panel.flush_now()
        await pilot.pause()
        status = screen_rows(panel)[0]
        # 2, 8, none and 4 lines a second, from the first line's second; the last second's figure
        assert status.endswith("   ▃█▁▅ 4/s  14 lines ")

        panel.clear()  # another job, still running: its rate moves on each second, lines or none
        panel.append_lines(at_second(0, 6))
        panel.flush_now()
        await wait_for(pilot, lambda: screen_rows(panel)[0].endswith("  █▁ 6/s  6 lines "))
        await wait_for(pilot, lambda: screen_rows(panel)[0].endswith("  █▁▁ 0/s  6 lines "))

    run(app, scenario, size=(120, 30))


def test_write_log_keeps_the_lines_whole(tmp_path: Path) -> None:
    long = "y" * 20_000
    assert write_log(tmp_path / "a.log", [LogLine(long), LogLine("b", True)]) == 2
    assert (tmp_path / "a.log").read_text() == f"{long}\nb\n"


# --- the schema form -----------------------------------------------------------------------------


def test_fields_are_generated_from_the_schemas() -> None:
    fields = {f.name: f for f in parse_schema(LOGS_TAIL)}
    assert [f.kind for f in fields.values()] == ["string", "enum", "integer"]
    assert fields["domain"].required and not fields["log"].required
    assert fields["log"].choices == ("access", "error") and fields["lines"].default == 200
    assert "1-1000000" in fields["lines"].hint() and "default 200" in fields["lines"].hint()

    secret = {f.name: f for f in parse_schema(DB_USER_CREATE, ["password"])}
    assert secret["password"].secret and not secret["user"].secret

    container = {f.name: f for f in parse_schema(CONTAINER_RUN)}
    assert container["publish"].kind == "string_list" and container["publish"].max_items == 64
    assert container["memory_mb"].kind == "integer" and container["memory_mb"].nullable
    assert container["memory_mb"].minimum == 6

    cleanup = {f.name: f for f in parse_schema(STORAGE_CLEANUP)}
    assert cleanup["targets"].kind == "enum_list" and cleanup["dry_run"].kind == "boolean"
    assert parse_schema(NO_ARGS) == []


def test_values_are_validated_against_the_schema() -> None:
    fields = {f.name: f for f in parse_schema({**LOGS_TAIL, **{}}) + parse_schema(CONTAINER_RUN)}
    assert check_value(fields["domain"], "example.com") == "example.com"
    for bad, why in [("", "required"), ("ex", "at least 3"), ("Example.COM", "not in the expected form"),
                     ("a" * 254 + ".com", "at most 253")]:  # fmt: skip
        with pytest.raises(Invalid, match=why):
            check_value(fields["domain"], bad)
    assert check_value(fields["lines"], "200") == 200
    for bad, why in [("0", "at least 1"), ("1000001", "at most 1000000"), ("12.5", "whole number")]:
        with pytest.raises(Invalid, match=why):
            check_value(fields["lines"], bad)
    assert check_value(fields["lines"], "") is None  # optional: the server's default applies
    with pytest.raises(Invalid, match="pick one of access, error"):
        check_value(fields["log"], "debug")
    assert check_value(fields["publish"], "8080:80, 443:443/tcp") == ["8080:80", "443:443/tcp"]
    with pytest.raises(Invalid, match=r"item 2 \(99999:x\)"):
        check_value(fields["publish"], "8080:80, 99999:x")
    with pytest.raises(Invalid, match="at most 64 items"):
        check_value(fields["publish"], ",".join(f"{port}:{port}" for port in range(1, 66)))
    assert field_of_error(["body", "args", "domain"], fields) == "domain"
    assert field_of_error(["body", "args", "argv", "3"], fields) is None


class FormApp(App[None]):
    def __init__(self, schema: dict[str, Any], secrets: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.schema, self.secrets = schema, secrets
        self.submitted = 0

    def compose(self) -> ComposeResult:
        yield JobForm(self.schema, self.secrets)

    def on_job_form_submitted(self) -> None:
        self.submitted += 1


def test_the_form_builds_its_fields_and_validates_as_you_type() -> None:
    app = FormApp(DB_USER_CREATE, ("password",))

    async def scenario(pilot: Pilot[None]) -> None:
        form = app.query_one(JobForm)
        user, password, host = (form.query_one(f"#arg-{name}", Input) for name in ("user", "password", "host"))
        assert password.password and not user.password
        assert host.value == "localhost" and password.value == ""  # defaults, never for a secret
        assert form.error_of("user") == ""  # untouched: no "required" yet
        form.focus_first()
        await pilot.press(*"9lives")
        assert form.error_of("user") == "not in the expected form"
        assert user.has_class("-invalid")
        await pilot.press(*["backspace"] * 6, *"app_user")
        assert form.error_of("user") == "" and not user.has_class("-invalid")
        password.focus()
        await pilot.press(*"short")
        assert form.error_of("password") == "at least 8 characters"
        await pilot.press(*"-enough")
        assert form.error_of("password") == ""
        assert form.values() == {"user": "app_user", "password": "short-enough", "host": "localhost"}
        await pilot.press("enter")
        assert app.submitted == 1

        # The server's validation errors land next to their fields; the rest on top.
        general = form.show_server_errors([
            {"loc": ["body", "args", "host"], "msg": "host 'db.example' is not allowed"},
            {"loc": ["body", "args", "argv", 4], "msg": "argument contains a shell character"},
        ])  # fmt: skip
        await pilot.pause()
        assert form.error_of("host") == "host 'db.example' is not allowed"
        assert general == ["argv.4: argument contains a shell character"]
        assert app.focused is host

    run(app, scenario)


def test_the_form_has_selects_checkboxes_and_lists() -> None:
    app = FormApp(STORAGE_CLEANUP)

    async def scenario(pilot: Pilot[None]) -> None:
        form = app.query_one(JobForm)
        targets = form.query_one("#arg-targets", SelectionList)
        assert [str(targets.get_option_at_index(i).prompt) for i in range(3)] == ["tmp", "logs", "cache"]
        assert isinstance(form.query_one("#arg-dry_run"), Checkbox)
        with pytest.raises(Invalid):
            form.values()
        assert form.error_of("targets") == "required"
        targets.select("logs")
        targets.select("tmp")
        form.query_one("#arg-dry_run", Checkbox).value = True
        await pilot.pause()
        assert form.error_of("targets") == ""
        assert form.values() == {"targets": ["logs", "tmp"], "older_than_days": 7, "dry_run": True}

    run(app, scenario)

    enum_app = FormApp(LOGS_TAIL)

    async def enum_scenario(pilot: Pilot[None]) -> None:
        form = enum_app.query_one(JobForm)
        assert form.query_one("#arg-log", Select).value == "access"
        form.set_raw_value("domain", "example.com")
        form.set_raw_value("log", "error")
        await pilot.pause()
        assert form.values() == {"domain": "example.com", "log": "error", "lines": 200}

    run(enum_app, enum_scenario)


# --- the result view ----------------------------------------------------------------------------


class ResultApp(App[None]):
    def compose(self) -> ComposeResult:
        yield ResultView()


def test_a_list_of_objects_is_a_table_and_nested_objects_a_tree() -> None:
    app = ResultApp()
    sites = [
        {"domain": "example.com", "php": "8.3", "disk_bytes": 52_428_800, "ssl": True},
        {"domain": "shop.example.com", "php": None, "aliases": ["www.shop.example.com"]},
    ]

    async def scenario(pilot: Pilot[None]) -> None:
        view = app.query_one(ResultView)
        view.show(sites)
        await pilot.pause()
        assert view.shape == "table"
        table = view.query_one(DataTable)
        assert [str(c.label) for c in table.columns.values()] == ["domain", "php", "disk bytes", "ssl", "aliases"]
        assert table.row_count == 2
        assert [cell.plain for cell in table.get_row_at(0)] == ["example.com", "8.3", "50 MiB (52,428,800)",
                                                                "yes", "—"]  # fmt: skip
        assert table.get_row_at(1)[4].plain == "www.shop.example.com"

        view.show({"sites": sites, "total": 2})
        await pilot.pause()
        assert view.shape == "keyed_table" and view.query_one(DataTable).row_count == 2

        view.show({"hostname": "vm", "os": {"name": "Debian GNU/Linux 12", "id": "debian"}, "uptime_s": 3600})
        await pilot.pause()
        assert view.shape == "tree"
        tree = view.query_one(Tree)
        labels = [str(node.label) for node in tree.root.children]
        assert labels == ["hostname: vm", "os  Debian GNU/Linux 12", "uptime s: 1 h 00 min (3600)"]
        assert [str(n.label) for n in tree.root.children[1].children] == ["name: Debian GNU/Linux 12", "id: debian"]
        assert not view.query(DataTable)

        view.show({"[bold]markup[/]": "[red]not markup[/]"})
        await pilot.pause()
        assert view.shape == "fields"
        assert view.query_one(DataTable).get_row_at(0)[1].plain == "[red]not markup[/]"

    run(app, scenario)
    assert result_shape(None) == "empty" and result_shape([1, 2]) == "values" and result_shape("ok") == "scalar"
    assert [column.key for column in table_columns([{"a": 1}, {"b": 2, "a": 3}])] == ["a", "b"]


# --- the kind picker ----------------------------------------------------------------------------


def test_kinds_are_found_by_fuzzy_search() -> None:
    kinds = [JobKindInfo.model_validate(k) for k in KINDS]
    assert rank_kinds(kinds, "sysinfo")[0].kind.kind == "system.info"
    assert rank_kinds(kinds, "log tail")[0].kind.kind == "logs.tail"
    assert rank_kinds(kinds, "create site")[0].kind.kind == "site.create"
    assert rank_kinds(kinds, "reboot")[0].kind.kind == "system.reboot"
    assert rank_kinds(kinds, "zzzz") == []
    assert [m.kind.kind for m in rank_kinds(kinds, "")] == sorted(k["kind"] for k in KINDS)

    # The kinds the agent runs come first, each part in its own order; a name typed in full wins.
    runnable = {"system.info", "site.create"}
    assert [m.kind.kind for m in rank_kinds(kinds, "", runnable)][:3] == ["site.create", "system.info", "container.run"]
    assert [m.kind.kind for m in rank_kinds(kinds, "system", runnable)] == ["system.info", "system.reboot"]
    assert [m.kind.kind for m in rank_kinds(kinds, "create", runnable)][:2] == ["site.create", "db.user-create"]
    assert rank_kinds(kinds, "system.reboot", {"system.info"})[0].kind.kind == "system.reboot"


# --- on the real stack: `fleetdeck local` (control plane, in-process agent, SQLite) ------------
#
# The session's `stack` (tests/conftest.py): the demo org "demo" on plan max, its server "local"
# with the in-process agent, the owner's token. Each condition below is produced for real: other
# orgs, users and servers made with `fleetdeck admin` and `/v1`, agent processes started and
# killed. Every job these tests let through is harmless (a read, or a kind the agent has no
# handler for, which ends with exit code 127).


def stored_idempotency_key(stack: Stack, job_id: str) -> str | None:
    """The Idempotency-Key the control plane stored with the job (its SQLite file)."""
    with closing(sqlite3.connect(stack.db_url.removeprefix("sqlite:///"))) as conn:
        row = conn.execute("SELECT idempotency_key FROM jobs WHERE id = ?", (job_id,)).fetchone()
    assert row is not None, f"no job {job_id} in the database"
    key: str | None = row[0]
    return key


def newest_job_id(stack: Stack, server_id: str) -> str | None:
    with stack.http() as http:
        jobs = http.get(f"/v1/servers/{server_id}/jobs", params={"limit": 1}).json()["jobs"]
    return str(jobs[0]["id"]) if jobs else None


@dataclass
class OtherOrg:
    """An org on plan plus, its owner's token, a full server without agent and a lite server."""

    token: str
    full: str
    lite: str


@pytest.fixture(scope="module")
def plus_org(stack: Stack) -> OtherOrg:
    token = stack.new_owner("plus", "plus")
    with stack.http(token) as http:
        for server, kind in (("web-1", "full"), ("edge-1", "lite")):
            created = http.post("/v1/servers", json={"name": server, "kind": kind})
            assert created.status_code == 201, created.text
    return OtherOrg(token=token, full="web-1", lite="edge-1")


@pytest.fixture(scope="module")
def member_token(stack: Stack) -> str:
    """A `member` of the demo org: the observe group only."""
    email = f"member-{uuid.uuid4().hex[:6]}@demo.test"
    stack.admin("create-user", email, "--org", "demo", "--role", "member", "--password", "pw-123456")
    return stack.login(email, "pw-123456")


@pytest.fixture(scope="module")
def big_log(stack: Stack) -> list[str]:
    """The demo site's access log, 200,000 lines (the same file tests/control_plane/jobs/test_dispatch.py plants)."""
    lines = [f'203.0.113.{i % 250} - - [22/Nov/2026] "GET /item/{i} HTTP/1.1" 200 {i}' for i in range(BIG)]
    log = stack.data_dir / "site-logs" / "example-com" / "access.log"  # the stack's sites_log_dir
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("".join(f"{line}\n" for line in lines))
    return lines


class OwnAgent:
    """A server of the demo org with its own agent process, which a test may kill and restart."""

    def __init__(self, stack: Stack, root: Path) -> None:
        self.stack = stack
        self.name = f"own-{uuid.uuid4().hex[:6]}"
        with stack.http() as http:
            created = http.post("/v1/servers", json={"name": self.name, "kind": "full"}).json()
        self.server_id, self._token = created["server"]["id"], created["agent_token"]
        self._home, self._state = root / "home", root / "state"
        (self._home / "site-a").mkdir(parents=True)
        self._layout, logs = logs_layout(root)
        write_site_log(logs, "site-a", "access.log", "".join(f"line {i}\n" for i in range(100)))
        self._state.mkdir()
        (self._state / "sites.json").write_text('{"sites": [{"domain": "a.example.com", "slug": "site-a"}]}')
        self.process = start_agent(
            stack.base_url, self._token, self._home, self._state, "--host-layout", str(self._layout)
        )
        wait_until(self.online, timeout=20)

    def online(self) -> bool:
        with self.stack.http() as http:
            return bool(http.get(f"/v1/servers/{self.server_id}").json()["agent"]["online"])

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        wait_until(lambda: not self.online(), timeout=10)

    def restart(self) -> None:
        self.process = start_agent(
            self.stack.base_url, self._token, self._home, self._state, "--host-layout", str(self._layout)
        )
        wait_until(self.online, timeout=20)


@pytest.fixture
def own_agent(stack: Stack, tmp_path: Path) -> Iterator[OwnAgent]:
    agent = OwnAgent(stack, tmp_path)
    yield agent
    agent.process.kill()
    agent.process.wait()
    with stack.http() as http:  # the demo org's server list stays as it was
        assert http.delete(f"/v1/servers/{agent.server_id}").status_code == 204


async def confirm(pilot: Pilot[None], answer: str = "y") -> None:
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, ConfirmRun))
    await pilot.press(answer)


def row_cells(table: DataTable[Any], job_id: str) -> list[str]:
    return [cell.plain for cell in table.get_row(job_id)]


def test_history_replay_a_validation_error_and_a_cancelled_confirmation(stack: Stack) -> None:
    with stack.http() as http:
        failed = finished_job(http, stack.server_id, "logs.tail", {"domain": "nosuch.example.com", "lines": 2})
        info = finished_job(http, stack.server_id, "system.info")
    assert (failed["status"], failed["exit_code"], info["status"]) == ("failed", 1, "succeeded")
    app, wire = real_app_and_wire(stack)

    async def scenario(pilot: Pilot[None]) -> None:
        jobs = await open_jobs_of(pilot, "local")
        table = jobs.query_one(DataTable)
        # Newest first: the read, then the failed tail.
        assert table.get_row_index(info["id"]) < table.get_row_index(failed["id"])
        kind, status, exit_code, _created, took, *_ = row_cells(table, info["id"])
        assert (kind, status, exit_code) == ("system.info", "✔ succeeded", "0")
        assert took.endswith((" ms", " s"))
        assert row_cells(table, failed["id"])[:3] == ["logs.tail", "✘ failed", "1"]

        # A finished job is replayed: its line, stderr marked, then the banner.
        table.move_cursor(row=table.get_row_index(failed["id"]))
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, JobRunScreen) and app.screen.exited
                       and app.screen.log_view.panel.line_count == 1 and app.screen.log_view.panel.banner)  # fmt: skip
        run_screen = app.screen
        assert isinstance(run_screen, JobRunScreen) and run_screen.job.id == failed["id"]
        panel = run_screen.log_view.panel
        panel.flush_now()
        assert [(line.text, line.stderr) for line in panel.lines] == [("no site nosuch.example.com on this server",
                                                                         True)]  # fmt: skip
        assert panel.banner is not None and panel.banner[:2] == ("failed", 1) and panel.banner.duration_s is not None
        assert not run_screen._has_result
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is jobs and info["id"] in jobs.jobs)

        # A read with a result opens on its result.
        table.move_cursor(row=table.get_row_index(info["id"]))
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, JobRunScreen) and app.screen._has_result)
        assert app.screen.query_one(ResultView).shape == "tree"
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is jobs)

        # A validation error of the server (not of the form: the top-level label is all digits)
        # is shown next to its field; the form stays open.
        form_screen = await open_form(pilot, "logs.rotate")
        form_screen.form.set_raw_value("domain", "old.example.123")
        await pilot.pause()
        assert form_screen.form.error_of("domain") == ""
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmRun))
        assert "domain = old.example.123" in str(app.screen.query_one("#confirm-args").render())
        await pilot.press("y")
        await wait_for(pilot, lambda: "may not be all digits" in form_screen.form.error_of("domain"))
        assert app.screen is form_screen and "Some arguments are not valid: see the form." in notifications(app)
        assert wire.creations()[-1][:2] == ("logs.rotate", {"domain": "old.example.123"})
        first_key = wire.creations()[-1][2]
        assert first_key
        # Fixed and run again: a new idempotency key (new arguments); the job opens.
        form_screen.form.set_raw_value("domain", "nosuch.example.com")
        await pilot.pause()
        assert form_screen.form.error_of("domain") == ""
        await pilot.press("enter")
        await confirm(pilot)
        await wait_for(pilot, lambda: isinstance(app.screen, JobRunScreen))
        assert isinstance(app.screen, JobRunScreen)
        created = app.screen.job
        assert (created.kind, created.args) == ("logs.rotate", {"domain": "nosuch.example.com"})
        kind, args, key = wire.creations()[-1]
        assert (kind, args) == ("logs.rotate", {"domain": "nosuch.example.com"}) and key not in (None, first_key)
        assert stored_idempotency_key(stack, created.id) == key
        await pilot.press("escape")

        # Cancelling the confirmation starts nothing.
        await wait_for(pilot, lambda: app.screen is jobs)
        sent = len(wire.creations())
        await pick_kind(pilot, "system.ntp-sync")
        await confirm(pilot, "n")
        await pilot.pause(0.3)
        assert jobs.is_current and len(wire.creations()) == sent
        assert newest_job_id(stack, stack.server_id) == created.id

    run(app, scenario)


def test_refusals_are_notifications_in_plain_words(stack: Stack, plus_org: OtherOrg, member_token: str) -> None:
    # The owner of an org on plan plus, on its server without an agent (every refusal here comes
    # before the agent would matter).
    app, wire = real_app_and_wire(stack, plus_org.token)

    async def scenario(pilot: Pilot[None]) -> None:
        jobs = await open_jobs_of(pilot, plus_org.full)
        # tier_required: a pro kind.
        await pick_kind(pilot, "quota.list")
        await wait_for(pilot, lambda: "quota.list needs plan pro (this organisation is on plus)." in notifications(app))
        assert app.screen is jobs
        # Backups and load balancers are made through routes of their own (the jobs route answers
        # kind_not_allowed): the picker does not offer them.
        await pilot.press("n")
        await wait_for(pilot, lambda: isinstance(app.screen, KindPicker) and app.screen.matches)
        picker = app.screen
        assert isinstance(picker, KindPicker)
        assert {"backup.schedule-list", "lb.apply", "lb.status"} <= {kind.kind for kind in jobs.kinds.values()}
        assert not [kind for kind in picker.kinds if kind.kind.startswith(("backup.", "lb."))]
        for query in ("backup.schedule-list", "lb.apply", "lb.status"):
            assert query not in [match.kind.kind for match in rank_kinds(picker.kinds, query)]
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is jobs)
        assert [kind for kind, *_ in wire.creations()] == ["quota.list"]
        with stack.http(plus_org.token) as http:
            server_id = jobs.server.id
            assert http.get(f"/v1/servers/{server_id}/jobs").json()["jobs"] == []

    run(app, scenario)

    # forbidden: a member of the demo org (the observe group only) asks for a change.
    app, wire = real_app_and_wire(stack, member_token)

    async def member(pilot: Pilot[None]) -> None:
        jobs = await open_jobs_of(pilot, "local")
        form_screen = await open_form(pilot, "logs.rotate")
        await pilot.press("enter")
        await confirm(pilot)
        await wait_for(pilot, lambda: any(n.startswith("Your role may not run logs.rotate: ")
                                          for n in notifications(app)))  # fmt: skip
        assert app.screen is form_screen and not form_screen.creating
        assert [kind for kind, *_ in wire.creations()] == ["logs.rotate"]
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is jobs)

    run(app, member)


def picker_rows(picker: KindPicker) -> list[tuple[str, bool]]:
    """The picker's rows as drawn: (text, whether the kind's name is dimmed)."""
    options = picker.query_one(OptionList)
    drawn = [options.render_line(y) for y in range(options.scrollable_content_region.height)]
    rows = [row for row in drawn if row.text.strip()]
    names = [next(seg for seg in row if seg.text.strip()) for row in rows]
    return [(row.text, bool(name.style and name.style.dim)) for row, name in zip(rows, names, strict=True)]


def test_the_picker_puts_the_agents_kinds_first_and_marks_the_others(stack: Stack, plus_org: OtherOrg) -> None:
    with stack.http() as http:
        handlers = http.get(f"/v1/servers/{stack.server_id}").json()["agent"]["job_kinds"]
        routed = {k["kind"] for k in http.get("/v1/job-kinds").json()["kinds"] if k["route"]}
    runnable = [kind for kind in handlers if kind not in routed]  # lb.*: the load-balancer screen's
    assert len(runnable) < len(handlers)
    app, wire = real_app_and_wire(stack)

    async def scenario(pilot: Pilot[None]) -> None:
        await open_jobs_of(pilot, "local")
        await pilot.press("n")
        await wait_for(pilot, lambda: isinstance(app.screen, KindPicker) and app.screen.matches)
        picker = app.screen
        assert isinstance(picker, KindPicker)
        names = [match.kind.kind for match in picker.matches]
        assert len(names) > len(runnable) and names[: len(runnable)] == sorted(runnable)
        assert not routed & set(names)
        note = str(picker.query_one("#kind-availability", Static).render())
        assert note.startswith(f"{len(runnable)} of {len(names)} kinds run on this agent")
        rows = picker_rows(picker)
        assert rows[0][0].strip().startswith(names[0]) and NOT_AVAILABLE not in rows[0][0] and not rows[0][1]
        # The first kind the agent cannot run, brought into view: dimmed, marked, in 80 columns.
        picker.action_move(len(runnable))
        await pilot.pause()
        first_other = names[len(runnable)]
        (text, dimmed), *_ = [row for row in picker_rows(picker) if row[0].strip().startswith(first_other + " ")]
        assert NOT_AVAILABLE in text and dimmed and len(text) <= pilot.app.size.width
        # Still selectable: it is created, and the agent says why it ends with 127.
        picker.query_one("#kind-search", Input).value = "docker.restart"
        await wait_for(pilot, lambda: picker.matches[0].kind.kind == "docker.restart")
        assert "docker.restart" not in runnable
        await pilot.press("enter")
        await confirm(pilot)
        await wait_for(pilot, lambda: [kind for kind, *_ in wire.creations()] == ["docker.restart"])

    run(app, scenario)

    # A server whose agent never linked: nothing is marked, and the picker says it does not know.
    app, wire = real_app_and_wire(stack, plus_org.token)

    async def never_linked(pilot: Pilot[None]) -> None:
        await open_jobs_of(pilot, plus_org.full)
        await pilot.press("n")
        await wait_for(pilot, lambda: isinstance(app.screen, KindPicker) and app.screen.matches)
        picker = app.screen
        assert isinstance(picker, KindPicker)
        note = str(picker.query_one("#kind-availability", Static).render())
        assert note == "Availability unknown: this server's agent has never linked."
        assert [m.kind.kind for m in picker.matches] == sorted(m.kind.kind for m in picker.matches)
        rows = picker_rows(picker)
        assert rows and all(NOT_AVAILABLE not in text and not dimmed for text, dimmed in rows)

    run(app, never_linked)


def test_a_lite_server_has_no_jobs(stack: Stack, plus_org: OtherOrg) -> None:
    app, wire = real_app_and_wire(stack, plus_org.token)
    refused = f"{plus_org.lite} is a lite server: it has no agent to run jobs."

    async def scenario(pilot: Pilot[None]) -> None:
        await highlight_server(pilot, plus_org.lite)
        assert "Go to jobs" in [command.title for command in app.get_system_commands(app.screen)]
        app.action_go_jobs()  # the palette's "Go to jobs"
        await wait_for(pilot, lambda: isinstance(app.screen, JobsScreen) and app.screen.kinds)
        assert refused in notifications(app)
        assert "lite server: no agent" in str(app.screen.query_one("#jobs-bar").render())
        # The control plane refuses it too (`lite_server`).
        await pick_kind(pilot, "sysinfo", "system.info")
        await wait_for(pilot, lambda: notifications(app).count(refused) == 2)
        assert isinstance(app.screen, JobsScreen)
        assert [kind for kind, *_ in wire.creations()] == ["system.info"]

    run(app, scenario)


def test_an_offline_agent_answers_reads_from_the_cache_and_refuses_changes(stack: Stack, own_agent: OwnAgent) -> None:
    app, wire = real_app_and_wire(stack)

    async def scenario(pilot: Pilot[None]) -> None:
        # Online: a read runs on the agent, and its result is remembered.
        jobs = await open_jobs_of(pilot, own_agent.name)
        assert "agent online" in str(jobs.query_one("#jobs-bar").render())
        await pick_kind(pilot, "site.list")
        await wait_for(pilot, lambda: isinstance(app.screen, JobRunScreen) and app.screen._has_result)
        live = app.screen
        assert isinstance(live, JobRunScreen) and not live.job.cached
        shape = live.query_one(ResultView).shape
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is jobs)
        await pilot.press("escape")

        # The agent dies; the server list learns it from the presence stream.
        await asyncio.to_thread(own_agent.kill)
        servers = app.screen
        assert isinstance(servers, ServerListScreen)
        await wait_for(pilot, lambda: not servers.servers[own_agent.server_id].agent.online)
        jobs = await open_jobs_of(pilot, own_agent.name)
        assert "agent offline" in str(jobs.query_one("#jobs-bar").render())

        # The same read: the cached result, said to be one.
        await pick_kind(pilot, "site.list")
        await wait_for(pilot, lambda: isinstance(app.screen, JobRunScreen) and app.screen._has_result)
        cached = app.screen
        assert isinstance(cached, JobRunScreen) and cached.job.cached and cached.job.id == live.job.id
        assert "cached at" in str(cached.query_one("#job-bar").render())
        assert any("offline: this is the result cached at" in note for note in notifications(app))
        assert cached.query_one(ResultView).shape == shape
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is jobs)

        # A change cannot run.
        await pick_kind(pilot, "system.ntp-sync")
        await confirm(pilot)
        await wait_for(pilot, lambda: any(n.startswith(f"The agent of {own_agent.name} is offline: system.ntp-sync "
                                                       "cannot run now") for n in notifications(app)))  # fmt: skip
        assert app.screen is jobs
        assert [kind for kind, *_ in wire.creations()] == ["site.list", "site.list", "system.ntp-sync"]

        # Back: the bar says so by itself, no key pressed (issue 25, point 5).
        await asyncio.to_thread(own_agent.restart)
        await wait_for(pilot, lambda: "agent online" in str(jobs.query_one("#jobs-bar").render()))

    run(app, scenario)


def test_a_retry_with_the_same_arguments_reuses_the_idempotency_key(stack: Stack, own_agent: OwnAgent) -> None:
    own_agent.kill()
    app, wire = real_app_and_wire(stack)

    async def scenario(pilot: Pilot[None]) -> None:
        await open_jobs_of(pilot, own_agent.name)
        form_screen = await open_form(pilot, "logs.rotate")
        form_screen.form.set_raw_value("domain", "a.example.com")
        await pilot.pause()
        for attempt in (1, 2):  # refused twice (agent_offline) with the same arguments
            await pilot.press("enter")
            await confirm(pilot)
            await wait_for(pilot, lambda: len(wire.creations()) == attempt and app.screen is form_screen  # noqa: B023
                           and not form_screen.creating)  # fmt: skip
        assert any(n.startswith(f"The agent of {own_agent.name} is offline") for n in notifications(app))
        # The agent is back: the retry, still with the same arguments, starts the job.
        await asyncio.to_thread(own_agent.restart)
        await pilot.press("enter")
        await confirm(pilot)
        await wait_for(pilot, lambda: isinstance(app.screen, JobRunScreen))
        assert isinstance(app.screen, JobRunScreen)
        job = app.screen.job
        sent = wire.creations()
        assert [args for _, args, _ in sent] == [{"domain": "a.example.com"}] * 3
        keys = {key for *_, key in sent}
        assert len(keys) == 1 and None not in keys  # one key, sent as the Idempotency-Key header
        (key,) = keys
        assert key is not None
        # The control plane stored it with the job, and answers a repeat with that same job.
        assert stored_idempotency_key(stack, job.id) == key
        with stack.http() as http:
            again = http.post(f"/v1/servers/{own_agent.server_id}/jobs", headers={"Idempotency-Key": key},
                              json={"kind": "logs.rotate", "args": {"domain": "a.example.com"}})  # fmt: skip
        assert again.status_code == 201 and again.json()["id"] == job.id

    run(app, scenario)


def test_a_lost_stream_is_reported_and_r_resumes_it_after_the_last_line(stack: Stack, big_log: list[str]) -> None:
    app, wire = real_app_and_wire(stack)

    async def scenario(pilot: Pilot[None]) -> None:
        await open_jobs_of(pilot, "local")
        form_screen = await open_form(pilot, "logs.tail")
        form_screen.form.set_raw_value("lines", str(BIG))
        await pilot.press(*"example.com")
        # From Enter on, the screen is busy with lines: `pilot.press` and `pilot.pause` would wait
        # for it to be idle, long after the moment to act. Post the key, poll the loop directly.
        app.post_message(events.Key("enter", None))
        await soon(lambda: isinstance(app.screen, JobRunScreen) and app.screen._stream_tasks)  # mounted
        run_screen = app.screen
        assert isinstance(run_screen, JobRunScreen)
        panel = run_screen.log_view.panel
        # The first lines are in: the output stops while the job still runs (its reading task is
        # cancelled, which ends it the way a stream closed without `exit` does).
        await soon(lambda: panel.appended > 0)
        pump = run_screen._stream_tasks[0]
        assert pump.name == "pump_job_events" and not pump.finished
        pump.cancel()
        await wait_for(pilot, lambda: run_screen.stream_lost or run_screen.exited, 30)
        assert run_screen.stream_lost and panel.banner is None, "the job ended before the TUI saw the loss"
        panel.flush_now()
        seen = panel.appended
        assert 0 < seen < BIG and run_screen._last_seq == seen
        assert [line.text for line in panel.lines] == big_log[seen - panel.line_count : seen]
        assert "output lost: r reconnects" in str(run_screen.query_one("#job-bar").render())

        # The job finishes meanwhile; `r` resumes after the last line seen: nothing twice.
        with stack.http() as http:
            job_id = run_screen.job.id
            await asyncio.to_thread(wait_until, lambda: http.get(f"/v1/jobs/{job_id}").json()["status"]
                                    == "succeeded", 60)  # fmt: skip
        await pilot.press("r")
        await wait_for(pilot, lambda: panel.banner is not None, 60)
        panel.flush_now()
        # The resume asks for what follows the last line seen. Before it, only requests that had seen
        # no line yet (the first, and any reconnect the client made on its own before a line came).
        *before, resume = wire.stream_requests(job_id)
        assert resume == str(seen) and before and set(before) == {None}
        assert panel.appended == BIG and panel.dropped == BIG - panel.max_lines
        assert [line.text for line in panel.lines] == big_log[-panel.max_lines :]
        assert panel.banner is not None and panel.banner[:2] == ("succeeded", 0) and not run_screen.stream_lost

    run(app, scenario)


def test_a_replay_cut_short_is_reported_not_shown_as_complete(stack: Stack, big_log: list[str]) -> None:
    """A finished job's replay that stops before its `exit` says the output is incomplete."""
    with stack.http() as http:
        job = Job.model_validate(
            finished_job(http, stack.server_id, "logs.tail", {"domain": "example.com", "lines": BIG})
        )
        server = Server.model_validate(http.get(f"/v1/servers/{stack.server_id}").json())
    app, _ = real_app_and_wire(stack)

    async def scenario(pilot: Pilot[None]) -> None:
        await highlight_server(pilot, "local")
        app.push_screen(JobRunScreen(server, job))
        await soon(lambda: isinstance(app.screen, JobRunScreen) and app.screen._stream_tasks)
        run_screen = app.screen
        assert isinstance(run_screen, JobRunScreen) and run_screen.exited  # known finished from the start
        panel = run_screen.log_view.panel
        await soon(lambda: panel.appended > 0)
        run_screen._stream_tasks[0].cancel()  # the replay stops before its `exit`
        await wait_for(pilot, lambda: run_screen.stream_lost or panel.banner is not None, 30)
        assert run_screen.stream_lost and panel.appended < BIG
        assert "output lost: r reconnects" in str(run_screen.query_one("#job-bar").render())

    run(app, scenario)


def test_the_jobs_screen_fits_80x24_and_200x50(stack: Stack) -> None:
    with stack.http() as http:
        finished_job(http, stack.server_id, "logs.tail", {"domain": "example.com", "log": "error", "lines": 5})
    for size in ((80, 24), (200, 50)):
        app, _wire = real_app_and_wire(stack)

        async def scenario(pilot: Pilot[None]) -> None:
            jobs = await open_jobs_of(pilot, "local")
            table = jobs.query_one(DataTable)
            assert table.row_count > 0
            # Every column fits the screen (no horizontal scrolling needed to read a row).
            assert sum(column.get_render_width(table) for column in table.columns.values()) <= pilot.app.size.width
            if pilot.app.size.width >= 100:
                assert "args" in table.columns
            # container.run has no handler on this agent: asked first, then its (long) form.
            await pick_kind(pilot, "container.run")
            await wait_for(pilot, lambda: isinstance(pilot.app.screen, ConfirmRun))
            await pilot.press("y")
            await wait_for(pilot, lambda: isinstance(pilot.app.screen, JobFormScreen))
            box = pilot.app.screen.query_one("#job-form-box")
            assert box.region.right <= pilot.app.size.width and box.region.bottom <= pilot.app.size.height

        run(app, scenario, size=size)


def test_system_info_and_logs_tail_from_the_jobs_screen(stack: Stack) -> None:
    # The client the app makes itself from its connection, as `fleetdeck-tui` runs it.
    app = FleetdeckApp(Connection(stack.base_url, stack.token, "local demo"), theme="fleetdeck-dark")

    async def scenario(pilot: Pilot[None]) -> None:
        jobs = await open_jobs_of(pilot, "local")
        assert "system.info" in jobs.kinds and "logs.tail" in jobs.kinds

        # system.info: a read without arguments runs at once; its result is shown as a tree.
        await pick_kind(pilot, "sysinfo", "system.info")
        await wait_for(pilot, lambda: isinstance(app.screen, JobRunScreen) and app.screen._has_result, 30)
        info = app.screen
        assert isinstance(info, JobRunScreen) and info.job.kind == "system.info"
        view = info.query_one(ResultView)
        assert view.shape == "tree"
        labels = [str(node.label) for node in view.query_one(Tree).root.children]
        # (Titled from the schema once system.info declares one: `Hostname`, else from the key.)
        assert any(label.lower().startswith("hostname: ") for label in labels)
        assert any(label.lower().startswith("kernel") for label in labels)
        await wait_for(pilot, lambda: info.log_view.panel.banner is not None)
        assert info.log_view.panel.banner is not None and info.log_view.panel.banner.status == "succeeded"
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is jobs)

        # logs.tail with {"domain": "example.com", "lines": 200}: 200 lines, then the exit banner.
        await pick_kind(pilot, "logs.tail")
        await wait_for(pilot, lambda: isinstance(app.screen, JobFormScreen))
        form = app.screen.query_one(JobForm)
        form.set_raw_value("lines", "200")
        await pilot.press(*"example.com", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, JobRunScreen), 30)
        tail = app.screen
        assert isinstance(tail, JobRunScreen) and tail.job.args == {"domain": "example.com", "log": "access",
                                                                    "lines": 200}  # fmt: skip
        panel = tail.log_view.panel
        # The banner comes with the exit event; its duration once the finished job is fetched.
        await wait_for(pilot, lambda: panel.banner is not None and panel.banner.duration_s is not None, 30)
        assert panel.line_count == 200
        assert panel.banner is not None and panel.banner.status == "succeeded" and panel.banner.exit_code == 0
        assert panel.banner.duration_s is not None
        assert "GET /" in panel.lines[-1].text
        assert screen_rows(panel)[-1].strip().startswith("✔ succeeded · exit code 0")
        await pilot.press("escape")

        # The history has both, newest first; opening logs.tail replays the same 200 lines.
        await wait_for(pilot, lambda: app.screen is jobs and [j.kind for j in jobs.jobs.values()][:2]
                       == ["logs.tail", "system.info"])  # fmt: skip
        jobs.query_one(DataTable).move_cursor(row=0)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, JobRunScreen) and app.screen.log_view.panel.banner
                       is not None)  # fmt: skip
        replay = app.screen
        assert isinstance(replay, JobRunScreen) and replay.job.id == tail.job.id
        replay.log_view.panel.flush_now()
        assert replay.log_view.panel.lines == panel.lines

    run(app, scenario)


# --- cancelling a running job -------------------------------------------------------------------

# Prints, then waits: TERM stops it at once.
WAITING_SCRIPT = '#!/bin/sh\necho "waiting"\nexec sleep 300\n'
# Prints nothing for seconds, then a line a second: a view must know it runs before it prints.
SILENT_SCRIPT = '#!/bin/sh\nsleep 8\nfor i in 1 2 3; do echo "tick $i"; sleep 1; done\nexec sleep 300\n'


@pytest.fixture
def waiting_agent(stack: Stack, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A server of the demo org whose agent has cron entries `wait` and `silent` that run for
    minutes (as nobody, from its site's folder): (server name, server id)."""
    name = f"cancel-{uuid.uuid4().hex[:6]}"
    with stack.http() as http:
        created = http.post("/v1/servers", json={"name": name, "kind": "full"}).json()
    tmp_path.chmod(0o755)  # nobody reaches its site's folder
    home, state = tmp_path / "home", tmp_path / "state"
    folder = home / "site-w"
    folder.mkdir(parents=True)
    for script, text in (("wait.sh", WAITING_SCRIPT), ("silent.sh", SILENT_SCRIPT)):
        (folder / script).write_text(text)
        (folder / script).chmod(0o755)
    nobody = pwd.getpwnam("nobody")
    (folder / "logs").mkdir()  # where cron.run records a run (else it says so on stderr first)
    for made in (folder, folder / "logs"):
        os.chown(made, nobody.pw_uid, nobody.pw_gid)
    state.mkdir()
    (state / "sites.json").write_text(json.dumps({"sites": [{"domain": "w.example.com", "slug": "site-w"}]}))
    entries = [
        {"id": name, "domain": "w.example.com", "schedule": "@daily", "command": f"./{name}.sh", "paused": True}
        for name in ("wait", "silent")
    ]
    (state / "cron.json").write_text(json.dumps({"entries": entries}))
    process = start_agent(stack.base_url, created["agent_token"], home, state)
    server_id = created["server"]["id"]
    try:
        with stack.http() as http:
            wait_until(lambda: http.get(f"/v1/servers/{server_id}").json()["agent"]["online"], timeout=20)
        yield name, server_id
    finally:
        process.terminate()
        process.wait(15)
        with stack.http() as http:  # the demo org's server list stays as it was
            assert http.delete(f"/v1/servers/{server_id}").status_code == 204


def footer_keys(screen: JobRunScreen) -> list[str]:
    return [binding.action for (_, binding, enabled, _) in screen.active_bindings.values() if enabled]


@pytest.mark.skipif(os.geteuid() != 0, reason="the site's command runs as nobody: the agent must be root")
def test_ctrl_k_asks_first_then_cancels_the_running_job(stack: Stack, waiting_agent: tuple[str, str]) -> None:
    name, server_id = waiting_agent
    with stack.http() as http:
        created = http.post(f"/v1/servers/{server_id}/jobs", json={"kind": "cron.run", "args": {"id": "wait"}})
        job = Job.model_validate(created.json())
        server = Server.model_validate(http.get(f"/v1/servers/{server_id}").json())
    app, wire = real_app_and_wire(stack)

    async def scenario(pilot: Pilot[None]) -> None:
        await highlight_server(pilot, name)
        app.push_screen(JobRunScreen(server, job))
        await soon(lambda: isinstance(app.screen, JobRunScreen) and app.screen._stream_tasks)  # mounted
        run_screen = app.screen
        assert isinstance(run_screen, JobRunScreen) and not run_screen.exited
        await wait_for(pilot, lambda: run_screen.log_view.panel.appended > 0)  # it printed: it runs
        assert "cancel_job" in footer_keys(run_screen)  # shown while it runs

        await pilot.press("ctrl+k")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmCancel))
        texts = [str(static.render()) for static in app.screen.query(Static)]
        assert f"Cancel job cron.run on {name}?" in texts
        assert any("TERM, then KILL" in text for text in texts)
        await pilot.press("n")  # kept running: nothing was sent
        await wait_for(pilot, lambda: app.screen is run_screen)
        assert not [r for r in wire.requests if r.url.path.endswith("/cancel")]

        await pilot.press("ctrl+k")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmCancel))
        await pilot.press("y")
        await wait_for(pilot, lambda: run_screen.exited and run_screen.log_view.panel.banner is not None, 30)
        assert run_screen.job.status == "cancelled"
        banner = run_screen.log_view.panel.banner
        assert banner is not None and banner.status == "cancelled"
        assert run_screen.log_view.panel.appended >= 1  # what it printed stays
        assert "cancel_job" not in footer_keys(run_screen)  # gone once it ended
        assert [r.method for r in wire.requests if r.url.path == f"/v1/jobs/{job.id}/cancel"] == ["POST"]

    run(app, scenario)


def test_a_destructive_kind_runs_only_once_its_name_is_typed_again(stack: Stack) -> None:
    """`site.delete` (its catalog entry confirms `domain`): Run stays disabled, y and Enter do
    nothing, until the domain is typed again; then the site is gone from the server."""
    domain = "retype.example.com"
    with stack.http() as http:
        made = finished_job(http, stack.server_id, "site.create", {"domain": domain})
    assert made["status"] == "succeeded", made
    app, wire = real_app_and_wire(stack)

    def sites() -> list[str]:
        with stack.http() as http:
            listed = finished_job(http, stack.server_id, "site.list")
        return [site["domain"] for site in listed["result"]["sites"]]

    async def scenario(pilot: Pilot[None]) -> None:
        await open_jobs_of(pilot, "local")
        form_screen = await open_form(pilot, "site.delete")
        form_screen.form.set_raw_value("domain", domain)
        await pilot.pause()
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmRun))
        dialog = app.screen
        assert isinstance(dialog, ConfirmRun)
        run_button = dialog.query_one("#confirm-run")
        assert run_button.disabled and app.focused is dialog.query_one("#confirm-retype", Input)
        sent = len(wire.creations())
        await pilot.press("y", "enter")  # y is typed into the field; Enter with "y" there runs nothing
        await pilot.pause()
        assert app.screen is dialog and len(wire.creations()) == sent and run_button.disabled
        await pilot.press("backspace", *domain[:-1])
        await pilot.pause()
        assert run_button.disabled
        await pilot.press(domain[-1])
        await wait_for(pilot, lambda: not run_button.disabled)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, JobRunScreen) and app.screen.exited, seconds=60)
        kind, args, _key = wire.creations()[-1]
        assert (kind, args["domain"]) == ("site.delete", domain)

    try:
        run(app, scenario)
        assert domain not in sites()
    finally:
        if domain in sites():
            with stack.http() as http:
                finished_job(http, stack.server_id, "site.delete", {"domain": domain})


@pytest.mark.skipif(os.geteuid() != 0, reason="the site's command runs as nobody: the agent must be root")
def test_a_job_opened_as_it_is_created_follows_its_events(stack: Stack, waiting_agent: tuple[str, str]) -> None:
    """Opened with the row as created (queued), the view says running once the job starts, before
    it prints anything, then shows its lines as they come; its cancel says it is stopped (not
    "it has not started") and it ends cancelled."""
    name, server_id = waiting_agent
    app = real_app(stack)

    async def scenario(pilot: Pilot[None]) -> None:
        await highlight_server(pilot, name)
        with stack.http() as http:  # made once the app is up: opened before the job prints (8 s)
            created = http.post(f"/v1/servers/{server_id}/jobs", json={"kind": "cron.run", "args": {"id": "silent"}})
            job = Job.model_validate(created.json())
            server = Server.model_validate(http.get(f"/v1/servers/{server_id}").json())
        assert job.status == "queued"
        app.push_screen(JobRunScreen(server, job))
        await wait_for(pilot, lambda: isinstance(app.screen, JobRunScreen) and app.screen._stream_tasks)  # mounted
        run_screen = app.screen
        assert isinstance(run_screen, JobRunScreen)
        panel = run_screen.log_view.panel
        await wait_for(pilot, lambda: run_screen.job.status == "running")
        assert panel.appended == 0, [line.text for line in panel.lines]  # told by the stream: nothing printed yet
        await wait_for(pilot, lambda: "running" in str(run_screen.query_one("#job-bar", Static).render()))
        await wait_for(pilot, lambda: run_screen.job.started_at is not None)
        await wait_for(pilot, lambda: [line.text for line in panel.lines][:2] == ["tick 1", "tick 2"], 30)

        await pilot.press("ctrl+k")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmCancel))
        what = str(app.screen.query_one("#confirm-cancel-what", Static).render())
        assert "TERM, then KILL" in what and "not started" not in what
        await pilot.press("y")
        await wait_for(pilot, lambda: run_screen.exited and panel.banner is not None, 30)
        assert run_screen.job.status == "cancelled" and panel.banner is not None and panel.banner.status == "cancelled"
        assert [line.text for line in panel.lines][:2] == ["tick 1", "tick 2"]

    run(app, scenario)
