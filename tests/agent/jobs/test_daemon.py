"""The daemon kinds through the API against the hosting server's real root agent.

Daemons run under the session's own supervisord (its own socket, pid file, log and ``conf.d``
under the hosting folder); each test checks the processes themselves in /proc.

Its readers of tool output are tested on recorded output too (tests/data/tool_output/): they
run where the tool is absent, and cover what a live machine rarely shows."""

from __future__ import annotations

import json
import os
import pwd
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agent.jobs.daemon import parse_status
from tests.helpers import wait_until
from tests.helpers.hosting import Hosting
from tests.helpers.recorded_systemd import RECORDED
from tests.helpers.supervisor import SUPERVISORD, Supervisor, start_supervisor

needs_supervisor = pytest.mark.skipif(SUPERVISORD is None, reason="needs supervisor (Debian package supervisor)")
WORKER = """#!/bin/sh
echo "worker up in $(pwd) as $(id -un)"
echo "worker complaint" >&2
exec sleep 600
"""


def unique(prefix: str) -> str:
    return f"{prefix}{secrets.token_hex(3)}"


# --- the session's supervisord ------------------------------------------------------------------------


@pytest.fixture(scope="session")
def supervisor(hosting: Hosting) -> Iterator[Supervisor]:
    if SUPERVISORD is None:
        pytest.skip("needs supervisor (Debian package supervisor)")
    started = start_supervisor(hosting.folder / "supervisor")
    hosting.configure("supervisor", started.layout())
    yield started
    started.stop()


@dataclass
class Site:
    domain: str
    folder: Path
    user: pwd.struct_passwd


@pytest.fixture(scope="module")
def site(hosting: Hosting, supervisor: Supervisor) -> Iterator[Site]:
    """A static site with a ``worker.sh`` that says who and where it is, then sleeps."""
    domain = f"{unique('dmn')}.example.test"
    hosting.run("site.create", domain=domain, profile="static").ok()
    folder = hosting.home / domain.replace(".", "-")
    made = Site(domain, folder, pwd.getpwnam(domain.replace(".", "-")))
    (folder / "worker.sh").write_text(WORKER)
    (folder / "worker.sh").chmod(0o755)
    (folder / "jobs").mkdir()
    os.chown(folder / "jobs", made.user.pw_uid, made.user.pw_gid)
    yield made
    for conf in supervisor.conf_dir.glob("fleetdeck-*.conf"):  # what a failed test left behind
        hosting.run("daemon.delete", name=conf.stem.removeprefix("fleetdeck-"))
    hosting.run("site.delete", domain=domain).ok()


def processes(hosting: Hosting, name: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = hosting.run("daemon.status", name=name).ok().result["processes"]
    return found


def running_pids(hosting: Hosting, name: str, count: int) -> list[int]:
    """The pids of the daemon's `count` instances once all of them are RUNNING."""
    found: list[int] = []

    def all_running() -> bool:
        listed = processes(hosting, name)
        found[:] = [p["pid"] for p in listed if p["state"] == "RUNNING"]
        return len(found) == count == len(listed)

    wait_until(all_running, timeout=30)
    return found


def owner_and_folder(pid: int) -> tuple[int, str]:
    status = Path(f"/proc/{pid}/status").read_text()
    uid = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("Uid:"))
    return uid, os.readlink(f"/proc/{pid}/cwd")


def gone(pids: list[int]) -> bool:
    return not any(Path(f"/proc/{pid}").exists() for pid in pids)


# --- daemons ------------------------------------------------------------------------------------------


@needs_supervisor
def test_a_daemon_runs_as_the_site_user_in_its_folder_and_creating_it_again_says_so(
    hosting: Hosting, supervisor: Supervisor, site: Site
) -> None:
    name = unique("work")
    created = hosting.run("daemon.create", name=name, domain=site.domain, command="./worker.sh", instances=2).ok()
    assert f"daemon {name} created" in created.text
    assert json.loads(created.stdout[-1])["outcome"] == "created"  # --json: the result comes last
    pids = running_pids(hosting, name, 2)
    for pid in pids:
        assert owner_and_folder(pid) == (site.user.pw_uid, str(site.folder))
    conf = (supervisor.conf_dir / f"fleetdeck-{name}.conf").read_text()
    assert f"user={site.user.pw_name}" in conf and f"command={site.folder}/worker.sh" in conf

    again = hosting.run("daemon.create", name=name, domain=site.domain, command="./worker.sh", instances=2).ok()
    assert f"daemon {name} already exists with this definition" in again.text
    assert json.loads(again.stdout[-1])["outcome"] == "unchanged"
    assert running_pids(hosting, name, 2) == pids  # untouched

    status = hosting.run("daemon.status", name=name).ok().result
    assert (status["domain"], status["command"], status["instances"], status["running"]) == (
        site.domain,
        "./worker.sh",
        2,
        2,
    )
    hosting.run("daemon.delete", name=name).ok()


@needs_supervisor
def test_changing_a_daemon_restarts_it_in_its_new_folder(hosting: Hosting, site: Site) -> None:
    name = unique("move")
    sleeper = {"name": name, "domain": site.domain, "command": "/usr/bin/sleep 600"}
    hosting.run("daemon.create", **sleeper).ok()
    [before] = running_pids(hosting, name, 1)
    changed = hosting.run("daemon.create", **sleeper, directory="jobs")
    assert f"daemon {name} changed" in changed.ok().text
    [after] = running_pids(hosting, name, 1)
    assert after != before and gone([before])
    assert owner_and_folder(after) == (site.user.pw_uid, str(site.folder / "jobs"))
    hosting.run("daemon.delete", name=name).ok()


@needs_supervisor
def test_a_bad_command_or_folder_is_refused_before_anything_is_written(
    hosting: Hosting, supervisor: Supervisor, site: Site
) -> None:
    for args in (
        {"command": "./no-such-worker.sh"},
        {"command": "no-such-program-anywhere --flag"},
        {"command": "./worker.sh", "directory": "no-such-folder"},
    ):
        refused = hosting.run("daemon.create", name="refused", domain=site.domain, **args)
        assert refused.exit_code == 78, refused.text
        assert not (supervisor.conf_dir / "fleetdeck-refused.conf").exists()
    taken = hosting.run("daemon.create", name="x", domain="no-such-site.example.test", command="/usr/bin/sleep 1")
    assert taken.exit_code == 1 and "no site no-such-site.example.test" in taken.text


@needs_supervisor
def test_a_configuration_supervisor_cannot_read_stops_the_change_before_it_is_written(
    hosting: Hosting, supervisor: Supervisor, site: Site
) -> None:
    name = unique("keep")
    hosting.run("daemon.create", name=name, domain=site.domain, command="/usr/bin/sleep 600").ok()
    running_pids(hosting, name, 1)
    broken = supervisor.conf_dir / "zz-broken.conf"
    broken.write_text("this is not an ini file\n")  # someone else's broken file: nothing can be changed
    try:
        refused = hosting.run("daemon.create", name=name, domain=site.domain, command="/usr/bin/sleep 601")
        assert refused.exit_code == 1 and "does not read before the change" in refused.text
    finally:
        broken.unlink()
    conf = (supervisor.conf_dir / f"fleetdeck-{name}.conf").read_text()
    assert "command=/usr/bin/sleep 600" in conf
    hosting.run("daemon.delete", name=name).ok()


@needs_supervisor
def test_stop_start_and_restart_a_daemon(hosting: Hosting, site: Site) -> None:
    name = unique("ctl")
    hosting.run("daemon.create", name=name, domain=site.domain, command="./worker.sh").ok()
    [first] = running_pids(hosting, name, 1)

    hosting.run("daemon.stop", name=name).ok()
    assert gone([first])
    assert [p["state"] for p in processes(hosting, name)] == ["STOPPED"]
    assert "already stopped" in hosting.run("daemon.stop", name=name).ok().text

    hosting.run("daemon.start", name=name).ok()
    [second] = running_pids(hosting, name, 1)
    assert second != first and owner_and_folder(second)[0] == site.user.pw_uid
    assert "already running" in hosting.run("daemon.start", name=name).ok().text

    hosting.run("daemon.restart", name=name).ok()
    [third] = running_pids(hosting, name, 1)
    assert third != second and gone([second])
    hosting.run("daemon.delete", name=name).ok()


@needs_supervisor
def test_a_daemons_logs_show_what_it_printed(hosting: Hosting, site: Site) -> None:
    name = unique("talk")
    hosting.run("daemon.create", name=name, domain=site.domain, command="./worker.sh").ok()
    running_pids(hosting, name, 1)
    expected = [f"worker up in {site.folder} as {site.user.pw_name}", "worker complaint"]
    wait_until(lambda: hosting.run("daemon.logs", name=name, lines=10).ok().stdout == expected)
    assert hosting.run("daemon.logs", name=name, lines=1).ok().stdout == ["worker complaint"]
    hosting.run("daemon.delete", name=name).ok()


@needs_supervisor
def test_the_list_shows_each_daemon_with_its_processes(hosting: Hosting, site: Site) -> None:
    name = unique("lst")
    hosting.run("daemon.create", name=name, domain=site.domain, command="/usr/bin/sleep 600", instances=3).ok()
    pids = running_pids(hosting, name, 3)
    listed = {d["name"]: d for d in hosting.run("daemon.list").ok().result["daemons"]}
    assert listed[name]["domain"] == site.domain and listed[name]["running"] == 3
    assert sorted(p["pid"] for p in listed[name]["processes"]) == sorted(pids)
    assert [p["process"] for p in listed[name]["processes"]] == [f"fleetdeck-{name}_{n:02d}" for n in range(3)]
    hosting.run("daemon.delete", name=name).ok()


@needs_supervisor
def test_deleting_a_daemon_stops_it_and_removes_its_files(hosting: Hosting, supervisor: Supervisor, site: Site) -> None:
    name = unique("del")
    hosting.run("daemon.create", name=name, domain=site.domain, command="./worker.sh").ok()
    pids = running_pids(hosting, name, 1)
    wait_until(lambda: (supervisor.log_dir / f"fleetdeck-{name}-00.log").exists())
    deleted = hosting.run("daemon.delete", name=name).ok()
    assert f"daemon {name} of {site.domain} stopped and deleted" in deleted.text
    assert gone(pids)
    assert not (supervisor.conf_dir / f"fleetdeck-{name}.conf").exists()
    assert not (supervisor.log_dir / f"fleetdeck-{name}-00.log").exists()
    assert f"fleetdeck-{name}" not in supervisor.ctl("status").stdout
    missing = hosting.run("daemon.status", name=name)
    assert missing.exit_code == 1 and f"no daemon {name} on this server" in missing.text
    assert "nothing to delete" in hosting.run("daemon.delete", name=name).ok().text


@needs_supervisor
def test_deleting_a_site_stops_and_removes_its_daemons(hosting: Hosting, supervisor: Supervisor) -> None:
    domain = f"{unique('gone')}.example.test"
    hosting.run("site.create", domain=domain, profile="static").ok()
    folder = hosting.home / domain.replace(".", "-")
    (folder / "worker.sh").write_text(WORKER)
    (folder / "worker.sh").chmod(0o755)
    name = unique("orphan")
    hosting.run("daemon.create", name=name, domain=domain, command="./worker.sh").ok()
    pids = running_pids(hosting, name, 1)
    deleted = hosting.run("site.delete", domain=domain).ok()
    assert json.loads(deleted.stdout[-1])["daemons_removed"] == 1
    assert json.loads(deleted.stdout[-1])["user_removed"] == domain.replace(".", "-")  # no process held it
    assert gone(pids)
    assert not (supervisor.conf_dir / f"fleetdeck-{name}.conf").exists()


def recorded(name: str) -> str:
    return (RECORDED / name).read_text()


# --- supervisorctl status ------------------------------------------------------------------------


def test_supervisor_processes_of_each_state() -> None:
    processes = parse_status(recorded("supervisorctl_status.txt"))
    assert [(p["group"], p["process"], p["state"]) for p in processes] == [
        ("fleetdeck-queue", "fleetdeck-queue_00", "RUNNING"),
        ("fleetdeck-queue", "fleetdeck-queue_01", "STOPPED"),
        ("fleetdeck-broken", "fleetdeck-broken_00", "BACKOFF"),
        ("fleetdeck-new", "fleetdeck-new_00", "STARTING"),
        ("handwritten", "handwritten", "FATAL"),
    ]
    assert processes[0]["pid"] == 13283 and processes[0]["uptime"] == "0:00:02"
    assert processes[1]["pid"] is None and processes[1]["description"] == "Nov 23 08:46 PM"
    assert processes[3]["description"] is None
    assert parse_status("fleetdeck-x: ERROR (no such group)\n") == []
