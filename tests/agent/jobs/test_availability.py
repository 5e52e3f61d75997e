"""Availability per host (issue 24, point 4): each kind declares what it needs, the agent checks
it at start and when the host may have changed, and says per kind "runs here" or "needs
<package>" to the control plane, which `GET /v1/servers/{id}` shows; a job of such a kind ends
with exit 69 naming the package, one of a kind without a handler with 127.

The software is hidden by the host layout (a tool it names pointing at a missing file), never by
removing a package other tests use.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from agent import __version__
from agent.jobs.availability import Availability, FileWatch
from agent.jobs.kinds import all_kinds
from agent.jobs.manager import JobManager
from agent.jobs.toolkit.base import JobContext
from agent.jobs.toolkit.host import BindLayout, HostLayout
from agent.jobs.toolkit.needs import AnyFile, HostTool, Tool, first_unmet
from agent.sites import SiteRegistry
from tests.helpers import wait_until
from tests.helpers.hosting import Hosting, start_server, stop_hosting
from tests.helpers.stacks import Stack

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the hosting server's agent runs as root")


@pytest.fixture(scope="module")
def server(stack: Stack) -> Iterator[Hosting]:
    """A server of its own, whose agent's host layout this module changes (not the session's)."""
    folder = Path(tempfile.mkdtemp(prefix="fleetdeck-needs-"))
    folder.chmod(0o755)
    started = start_server(stack, folder)
    try:
        yield started
    finally:
        stop_hosting(started)
        shutil.rmtree(folder, ignore_errors=True)


def agent_of(server: Hosting) -> dict[str, Any]:
    with server.http() as http:
        answer = http.get(f"/v1/servers/{server.server_id}")
    assert answer.status_code == 200, answer.text
    agent: dict[str, Any] = answer.json()["agent"]
    return agent


def needs_of(server: Hosting) -> dict[str, str]:
    needs = agent_of(server)["needs"]
    assert needs is not None, "the agent said nothing of what it needs"
    return dict(needs)


BIND_KINDS = {name for name in all_kinds() if name.startswith("dns.")} - {"dns.lookup"}


def test_a_tool_the_layout_names_going_missing_is_announced_and_its_kinds_end_69(server: Hosting) -> None:
    assert not BIND_KINDS & needs_of(server).keys()
    missing = server.folder / "no-such-rndc"
    server.configure("bind", {"rndc": [str(missing)]})
    try:
        # The agent is told by inotify that its layout file changed: no restart, no poll.
        wait_until(lambda: needs_of(server).get("dns.zone-list") == "bind9-utils")
        needs = needs_of(server)
        assert {kind for kind in needs if kind.startswith("dns.")} == BIND_KINDS  # dns.lookup needs dig only
        assert set(needs) <= set(agent_of(server)["job_kinds"])
        run = server.run("dns.zone-list")
        assert run.exit_code == 69
        assert run.stderr == [f"{missing} is not on this server (Debian package bind9-utils): dns.zone-list needs it"]
    finally:
        server.configure("bind", {})
    wait_until(lambda: not BIND_KINDS & needs_of(server).keys())
    assert server.run("dns.zone-list").exit_code != 69


def test_a_kind_without_a_handler_is_no_need_and_ends_127(server: Hosting) -> None:
    agent = agent_of(server)
    assert "docker.restart" not in agent["job_kinds"] and "docker.restart" not in agent["needs"]
    run = server.run("docker.restart")
    assert run.exit_code == 127 and "has no handler for docker.restart" in run.text


# --- the parts, without a control plane ---------------------------------------------------------


def test_each_need_names_its_package_and_a_path_or_tool_that_is_absent(tmp_path: Path) -> None:
    layout = HostLayout(bind=BindLayout(rndc=[str(tmp_path / "rndc")]))
    rndc = HostTool(lambda host: host.bind.rndc[0], "bind9-utils")
    assert first_unmet([Tool("sh"), rndc], layout) == first_unmet([rndc], layout)
    unmet = first_unmet([rndc], layout)
    assert unmet is not None and (unmet.package, unmet.absent) == ("bind9-utils", str(tmp_path / "rndc"))
    (tmp_path / "rndc").write_text("#!/bin/sh\n")
    assert first_unmet([rndc], layout) is not None  # not executable: not a tool
    (tmp_path / "rndc").chmod(0o755)
    assert first_unmet([rndc], layout) is None
    # A tool by name: its package is the one the handlers' `require` names.
    unmet = first_unmet([Tool("no-such-tool-here"), Tool("nft")], layout)
    assert unmet is not None and unmet.package == "no-such-tool-here"
    assert Tool("named-checkzone").package == "bind9-utils"
    # Any version of a versioned package.
    fpm = AnyFile(str(tmp_path / "php-fpm[0-9]*"), "php-fpm")
    assert first_unmet([fpm], layout) == first_unmet([AnyFile(fpm.pattern, "php-fpm")], layout) is not None
    (tmp_path / "php-fpm8.2").write_text("")
    assert first_unmet([fpm], layout) is None


def test_a_job_that_changes_the_server_asks_for_a_recheck_and_a_read_does_not(tmp_path: Path) -> None:
    ctx = JobContext(str(tmp_path), str(tmp_path / "state"), SiteRegistry(str(tmp_path / "state")), __version__)
    rechecks: list[str] = []
    jobs = JobManager(ctx, after_change=lambda: rechecks.append("asked"))

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(jobs.run)
            # Neither changes anything: site.list reads; user.delete without its name ends 2.
            for job_id, kind, argv in (("r", "site.list", ["site", "list"]), ("w", "user.delete", ["user", "delete"])):
                job = jobs.start(job_id, kind, argv)
                with trio.fail_after(30):
                    await job.wait_done()
                assert rechecks == ([] if job_id == "r" else ["asked"]), job.exit_code
            nursery.cancel_scope.cancel()

    (tmp_path / "state").mkdir()
    trio.run(main)


def test_a_recheck_tells_the_link_once_per_change(tmp_path: Path) -> None:
    layout = [HostLayout()]
    availability = Availability(all_kinds(), lambda: layout[0], watched=())
    told: list[dict[str, str]] = []
    availability.on_change = lambda: told.append(dict(availability.unmet))
    assert not BIND_KINDS & availability.unmet.keys()
    assert not availability.recheck() and told == []
    layout[0] = HostLayout(bind=BindLayout(rndc=[str(tmp_path / "rndc")]))
    assert availability.recheck() and not availability.recheck()
    assert len(told) == 1 and {kind for kind in told[0] if kind.startswith("dns.")} == BIND_KINDS
    layout[0] = HostLayout()
    assert availability.recheck() and len(told) == 2 and not BIND_KINDS & told[1].keys()


def test_the_watch_wakes_when_a_watched_file_is_replaced_as_dpkg_does(tmp_path: Path) -> None:
    status = tmp_path / "status"
    status.write_text("Package: a\n")

    async def main() -> None:
        with FileWatch((str(status),)) as watch:
            (tmp_path / "available").write_text("not watched\n")
            written = tmp_path / "status-new"
            written.write_text("Package: b\n")
            os.replace(written, status)
            with trio.fail_after(10):
                await watch.changed()

    trio.run(main)
