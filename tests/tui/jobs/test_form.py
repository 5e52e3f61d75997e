"""The job form on the real stack: pickers of what a field names, Enter from any field, the error
line that clears once fixed, and labels in words."""

from __future__ import annotations

from typing import Any

from textual.pilot import Pilot
from textual.widgets import Input, Label, OptionList, Select

from contract.job_kinds import json_schemas
from contract.models import JobKindInfo
from tests.conftest import Stack
from tests.helpers import wait_for
from tests.helpers.tui import open_form, open_jobs_of, real_app_and_wire, run
from tui.jobs.choices import Source, source_of
from tui.jobs.dialogs import ChoicePicker, JobFormScreen
from tui.jobs.form import JobForm, humanize, parse_schema
from tui.jobs.run import JobRunScreen

KINDS = {entry["kind"]: JobKindInfo.model_validate(entry) for entry in json_schemas()}


def test_the_fields_that_name_a_thing_have_a_source_except_where_the_thing_is_made() -> None:
    # What the catalog's `x-source` declares, read from `args_schema` as GET /v1/job-kinds serves it.
    sites = Source("sites", "site.list", "sites", "domain", ("home",))
    php = Source("PHP versions", "php.versions", "versions", "version")
    assert source_of(KINDS["logs.tail"], "domain") == sites
    assert source_of(KINDS["cron.delete"], "id") == Source(
        "cron entries", "cron.list", "entries", "id", ("domain", "schedule", "command")
    )
    assert source_of(KINDS["db.drop"], "name") == Source("databases", "db.list", None, "name", ("charset",))
    assert source_of(KINDS["pg.size"], "name") == Source("databases", "pg.list", "databases", "name")  # optional
    assert source_of(KINDS["cron.add"], "domain") == sites  # the site exists already
    assert source_of(KINDS["site.create"], "domain") is None  # a new site: nothing to pick
    assert source_of(KINDS["db.create"], "name") is None
    assert source_of(KINDS["logs.tail"], "lines") is None
    assert source_of(KINDS["php.set"], "version") == php  # the versions installed
    assert source_of(KINDS["site.create"], "php") == php
    assert source_of(KINDS["php.install"], "version") is None  # one not installed yet
    assert source_of(KINDS["user.create"], "username") is None
    assert source_of(KINDS["user.lock"], "username") == Source("users", "user.list", "users", "username", ("home",))
    # A malformed declaration is no picker rather than an error.
    broken = KINDS["logs.tail"].model_copy(
        update={"args_schema": {"properties": {"domain": {"type": "string", "x-source": {"kind": 3}}}}}
    )
    assert source_of(broken, "domain") is None


def test_labels_are_words_never_a_class_name() -> None:
    titles = {spec.name: spec.title for spec in parse_schema(KINDS["lb.apply"].args_schema)}
    assert titles["health_check"] == "Health check"  # was `LbHealthCheck`, the model's name
    assert (titles["id"], titles["tls"]) == ("ID", "TLS")
    assert humanize("php_version") == "PHP version"
    for kind in KINDS.values():
        for spec in parse_schema(kind.args_schema, kind.secret_fields):
            assert not any(a.islower() and b.isupper() for a, b in zip(spec.title, spec.title[1:], strict=False)), (
                kind.kind,
                spec.title,
            )


def labels(form: JobForm) -> list[str]:
    return [str(label.render()) for label in form.query(".job-field--label").results(Label)]


def picked_values(picker: ChoicePicker) -> list[str]:
    return [choice.value for choice in picker.shown]


async def open_picker(pilot: Pilot[Any], form_screen: JobFormScreen, name: str) -> ChoicePicker:
    form_screen.form.focus_field(name)
    await pilot.press("down")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, ChoicePicker) and pilot.app.screen.loaded, 30)
    picker = pilot.app.screen
    assert isinstance(picker, ChoicePicker)
    return picker


def test_a_domain_is_picked_from_the_sites_and_enter_runs_from_any_field(stack: Stack) -> None:
    app, wire = real_app_and_wire(stack)

    async def scenario(pilot: Pilot[Any]) -> None:
        jobs = await open_jobs_of(pilot, "local")
        form_screen = await open_form(pilot, "logs.tail")
        form = form_screen.form
        hint = " ".join(str(s.render()) for s in form.query(".job-field--hint"))
        assert "↓: pick one of the sites" in hint

        # ↓ in the domain field lists the server's sites (site.list, run as a job); Enter picks one.
        picker = await open_picker(pilot, form_screen, "domain")
        assert "example.com" in picked_values(picker)
        assert [kind for kind, _args, _key in wire.creations()] == ["site.list"]
        options = picker.query_one(OptionList)
        options.highlighted = picked_values(picker).index("example.com")
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.screen is form_screen)
        assert form.raw_value("domain") == "example.com" and app.focused is form.query_one("#arg-domain")

        # The list is read once per jobs screen: typing narrows it; Esc leaves the field as it was.
        form.set_raw_value("domain", "example.c")
        picker = await open_picker(pilot, form_screen, "domain")
        assert picked_values(picker) == ["example.com"] and len(wire.creations()) == 1
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is form_screen)
        assert form.raw_value("domain") == "example.c"
        form.set_raw_value("domain", "example.com")

        # Enter in an open dropdown picks its option and runs nothing; in the closed one it runs.
        log = form.query_one("#arg-log", Select)
        log.focus()
        await pilot.press("space")
        await wait_for(pilot, lambda: log.expanded)
        await pilot.press("down", "enter")
        await wait_for(pilot, lambda: not log.expanded)
        assert app.screen is form_screen and log.value == "error" and len(wire.creations()) == 1
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, JobRunScreen))
        assert wire.creations()[-1][:2] == ("logs.tail", {"domain": "example.com", "log": "error", "lines": 200})
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is jobs)
        # The picker's site.list was the TUI's own look-up, not a job the user ran: not in the history.
        with stack.http() as http:
            listed = http.get(f"/v1/servers/{stack.server_id}/jobs", params={"limit": 500, "lookups": True}).json()
        looked_up = [j["id"] for j in listed["jobs"] if j["lookup"] and j["kind"] == "site.list"]
        await wait_for(pilot, lambda: "logs.tail" in [job.kind for job in jobs.jobs.values()])
        assert looked_up and not set(looked_up) & set(jobs.jobs)

    run(app, scenario)


def test_the_error_line_clears_once_the_field_is_fixed(stack: Stack) -> None:
    app, wire = real_app_and_wire(stack)

    async def scenario(pilot: Pilot[Any]) -> None:
        await open_jobs_of(pilot, "local")
        form_screen = await open_form(pilot, "logs.tail")
        status = form_screen.query_one("#job-form-status")
        lines = form_screen.query_one("#arg-lines", Input)
        lines.focus()
        await pilot.press("enter")  # from the lines field, with the required domain empty
        await pilot.pause()
        assert str(status.render()) == "Not run: 1 field to fix (marked ✘)." and status.has_class("-error")
        assert form_screen.form.error_of("domain") == "required" and app.focused is form_screen.query_one("#arg-domain")
        await pilot.press(*"example.com")
        assert form_screen.form.error_of("domain") == ""
        assert not status.has_class("-error") and str(status.render()).startswith("* required · Enter: run")
        assert wire.creations() == []

    run(app, scenario)
