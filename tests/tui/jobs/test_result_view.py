"""The result view read with the kind's result schema: columns in the schema's order, titled in
words, numbers in the unit the schema gives (not guessed from a name), an empty list still a
table; a write's result as a summary: its message, then its fields and what they are."""

from __future__ import annotations

from typing import Any

from pydantic import Field, TypeAdapter
from textual.app import App, ComposeResult
from textual.pilot import Pilot
from textual.widgets import DataTable, Static, Tree

from contract.job_kinds import CATALOG
from contract.job_kinds.base import Result
from tests.helpers.tui import run
from tui.jobs.log_panel import LogLine
from tui.jobs.result_view import ResultView
from tui.jobs.run import written_result


class Disk(Result):
    mount: str = Field(description="where it is mounted")
    free: int = Field(description="free space, in bytes")
    checked_s: str = Field(description="when it was last checked (RFC 3339)")  # a name that is no duration
    scan: int = Field(json_schema_extra={"x-unit": "seconds"})


class Disks(Result):
    disks: list[Disk]
    host: str


class Host(Result):
    name: str
    root: Disk | None = Field(description="the root file system (null: not mounted)")


class Made(Result):
    message: str
    name: str = Field(description="the database's name")
    size_bytes: int | None = Field(description="what it takes, in bytes (null: not measured)")
    tags: list[str]


class ResultApp(App[None]):
    def compose(self) -> ComposeResult:
        yield ResultView()


def schema_of(model: Any) -> dict[str, Any]:
    return TypeAdapter(model).json_schema()


def columns(view: ResultView) -> list[str]:
    return [str(column.label) for column in view.query_one(DataTable).columns.values()]


def row(view: ResultView, index: int) -> list[str]:
    return [cell.plain for cell in view.query_one(DataTable).get_row_at(index)]


def test_a_read_is_shown_in_its_schemas_order_titles_and_units() -> None:
    app = ResultApp()
    disks = {"host": "vm", "disks": [{"scan": 90, "free": 52_428_800, "mount": "/", "checked_s": "2026-01-02"}]}

    async def scenario(pilot: Pilot[None]) -> None:
        view = app.query_one(ResultView)
        view.show(disks, schema_of(Disks))
        await pilot.pause()
        assert view.shape == "keyed_table"
        # The schema's order, not the data's; titles in words; `free` is bytes because the schema
        # says so, `checked_s` no duration because it says otherwise, `scan` seconds by `x-unit`.
        assert columns(view) == ["Mount", "Free", "Checked s", "Scan"]
        assert row(view, 0) == ["/", "50 MiB (52,428,800)", "2026-01-02", "1 min 30 s (90)"]
        assert str(view.query_one("#result-caption", Static).render()) == "Disks · Host: vm · 1 row"

        # No schema: the keys' order, and units only where a name suggests one (none here).
        view.show(disks)
        await pilot.pause()
        assert columns(view) == ["scan", "free", "mount", "checked s"]
        assert row(view, 0) == ["90", "52,428,800", "/", "2026-01-02"]

        # An empty list is still the table the schema declares.
        view.show({"host": "vm", "disks": []}, schema_of(Disks))
        await pilot.pause()
        assert view.shape == "keyed_table" and columns(view) == ["Mount", "Free", "Checked s", "Scan"]
        assert view.query_one(DataTable).row_count == 0

        # Nesting is a tree, titled and read by the schema ($ref and null alternatives followed).
        view.show({"name": "vm", "root": disks["disks"][0]}, schema_of(Host))
        await pilot.pause()
        assert view.shape == "tree"
        root = view.query_one(Tree).root
        assert [str(node.label) for node in root.children] == ["Name: vm", "Root  {4}"]
        assert [str(node.label) for node in root.children[1].children][:2] == ["Mount: /", "Free: 50 MiB (52,428,800)"]

        # A real kind's schema (service.list), as GET /v1/job-kinds publishes it.
        services = {"services": [{"name": "nginx", "active": True, "state": "active (running)", "manager": "systemd"}]}
        view.show(services, CATALOG["service.list"].result_schema())
        await pilot.pause()
        assert columns(view) == ["Name", "Active", "State", "Enabled", "Manager", "Loaded", "Description"]
        assert row(view, 0)[:5] == ["nginx", "yes", "active (running)", "—", "systemd"]

    run(app, scenario)


def test_a_write_is_a_summary_its_message_first_then_its_fields() -> None:
    app = ResultApp()
    made = {"message": "database shop created", "name": "shop", "size_bytes": 2048, "tags": ["a", "b"]}

    async def scenario(pilot: Pilot[None]) -> None:
        view = app.query_one(ResultView)
        view.show(made, schema_of(Made), summary=True)
        await pilot.pause()
        assert view.headline == "database shop created"
        assert str(view.query_one("#result-headline", Static).render()) == "database shop created"
        assert view.shape == "fields" and columns(view) == ["Field", "Value", "About"]
        assert row(view, 0) == ["Name", "shop", "the database's name"]
        assert row(view, 1)[:2] == ["Size bytes", "2.0 KiB (2,048)"]
        assert row(view, 2) == ["Tags", "a, b", ""]

        # Without a message, no headline; nested values make a tree, titled from the schema.
        view.show({"site": {"domain": "example.com", "disk_bytes": 4096}, "served": True}, summary=True)
        await pilot.pause()
        assert view.headline == "" and not view.query_one("#result-headline", Static).display
        assert view.shape == "tree"
        labels = [str(node.label) for node in view.query_one(Tree).root.children]
        assert labels == ["site  example.com", "served: yes"]

        # A read's `message` is a field like any other.
        view.show(made, schema_of(Made))
        await pilot.pause()
        assert view.headline == "" and row(view, 0)[:2] == ["Message", "database shop created"]

    run(app, scenario)


def test_a_writes_result_is_the_last_stdout_line_when_it_is_a_json_object() -> None:
    printed = [LogLine("creating…"), LogLine('{"name": "shop", "created": true}'), LogLine("warning", stderr=True)]
    assert written_result(printed) == {"name": "shop", "created": True}
    assert written_result([LogLine('{"name": "shop"}'), LogLine("done")]) is None  # not the last line
    assert written_result([LogLine("[1, 2]")]) is None and written_result([LogLine("{not json")]) is None
    assert written_result([]) is None
