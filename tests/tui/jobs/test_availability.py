"""The job picker says what a kind needs on this server (issue 24, point 4): a kind the agent
announced as lacking software reads "needs <package>", dimmed and still visible, after the kinds
that run; picking it asks first, saying the job would end with exit 69 (127 for a kind without a
handler), and only a yes creates it. On the real stack, with an agent whose host layout names an
rndc that does not exist (no package is removed)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Input, OptionList, Static

from tests.helpers import wait_for, wait_until
from tests.helpers.hosting import Hosting, start_server, stop_hosting
from tests.helpers.snapshots import assert_snapshot, screen_text
from tests.helpers.stacks import Stack
from tests.helpers.tui import open_jobs_of, real_app_and_wire, run
from tui.jobs.dialogs import ConfirmRun, KindPicker
from tui.jobs.screen import JobsScreen

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the hosting server's agent runs as root")


@pytest.fixture(scope="module")
def server(stack: Stack) -> Iterator[Hosting]:
    folder = Path(tempfile.mkdtemp(prefix="fleetdeck-needs-tui-"))
    folder.chmod(0o755)
    started = start_server(stack, folder, {"bind": {"rndc": [str(folder / "no-such-rndc")]}})
    try:
        yield started
    finally:
        stop_hosting(started)
        shutil.rmtree(folder, ignore_errors=True)


def needs_of(server: Hosting) -> dict[str, str]:
    with server.http() as http:
        needs: dict[str, str] | None = http.get(f"/v1/servers/{server.server_id}").json()["agent"]["needs"]
    return needs or {}


def picker_rows(picker: KindPicker) -> dict[str, tuple[str, bool]]:
    """Each drawn row of the picker by its kind: its text, and whether the kind's name is dimmed."""
    options = picker.query_one(OptionList)
    rows = [options.render_line(y) for y in range(options.scrollable_content_region.height)]
    found: dict[str, tuple[str, bool]] = {}
    for row in rows:
        if row.text.strip():
            name = next(segment for segment in row if segment.text.strip())
            found[row.text.split()[0]] = (row.text, bool(name.style and name.style.dim))
    return found


async def open_picker(pilot: Pilot[Any], query: str) -> KindPicker:
    """`n` on the jobs of web-1 (opened first from the server list), then `query` searched."""
    if not isinstance(pilot.app.screen, JobsScreen):
        await open_jobs_of(pilot, "web-1")
    await pilot.press("n")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, KindPicker) and pilot.app.screen.matches)
    picker = pilot.app.screen
    assert isinstance(picker, KindPicker)
    picker.query_one("#kind-search", Input).value = query
    await wait_for(pilot, lambda: picker.matches[0].kind.kind.startswith(query))
    return picker


def test_the_picker_says_what_a_kind_needs_and_asks_before_running_it(stack: Stack, server: Hosting) -> None:
    wait_until(lambda: needs_of(server).get("dns.zone-list") == "bind9-utils")
    app, wire = real_app_and_wire(stack, server.token)

    async def scenario(pilot: Pilot[Any]) -> None:
        picker = await open_picker(pilot, "dns.")
        names = [match.kind.kind for match in picker.matches]
        assert names[0] == "dns.lookup"  # it runs here: before the kinds that do not
        rows = picker_rows(picker)
        text, dimmed = rows["dns.zone-list"]
        assert "needs bind9-utils" in text and dimmed and len(text) <= pilot.app.size.width
        text, dimmed = rows["dns.lookup"]
        assert "needs" not in text and not dimmed
        note = str(picker.query_one("#kind-availability", Static).render())
        assert "lack software" in note
        await pilot.pause()
        assert_snapshot(app, "job_kinds_needs_80x24")

        # Picked anyway: asked first, with why; no says no job.
        picker.query_one("#kind-search", Input).value = "dns.zone-list"
        await wait_for(pilot, lambda: picker.matches[0].kind.kind == "dns.zone-list")
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, ConfirmRun))
        problem = str(pilot.app.screen.query_one("#confirm-problem", Static).render())
        assert "dns.zone-list needs bind9-utils" in problem and "exit code 69" in problem
        assert "Run dns.zone-list on web-1 anyway?" in screen_text(app)
        await pilot.press("n")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, JobsScreen))
        assert wire.creations() == []

        # Yes creates it; the agent ends it with 69, naming the package.
        await open_picker(pilot, "dns.zone-list")
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, ConfirmRun))
        await pilot.press("y")
        await wait_for(pilot, lambda: [kind for kind, *_ in wire.creations()] == ["dns.zone-list"])

    run(app, scenario)
    with server.http() as http:
        job_id = http.get(f"/v1/servers/{server.server_id}/jobs", params={"limit": 1}).json()["jobs"][0]["id"]
    ended = server.wait(job_id)
    assert ended.exit_code == 69 and "bind9-utils" in ended.text


def test_a_kind_without_a_handler_is_asked_about_with_127(stack: Stack, server: Hosting) -> None:
    app, wire = real_app_and_wire(stack, server.token)

    async def scenario(pilot: Pilot[Any]) -> None:
        picker = await open_picker(pilot, "docker.restart")
        text, dimmed = picker_rows(picker)["docker.restart"]
        assert "no handler on this agent" in text and dimmed
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, ConfirmRun))
        problem = str(pilot.app.screen.query_one("#confirm-problem", Static).render())
        assert "no handler for docker.restart" in problem and "exit code 127" in problem
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, JobsScreen))
        assert wire.creations() == []

    run(app, scenario)
