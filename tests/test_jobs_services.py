"""The service and daemon kinds through the API against the hosting server's real root agent.

Daemons run under the session's own supervisord (its own socket, pid file, log and ``conf.d``
under the hosting folder); each test checks the processes themselves in /proc. Services are the
Debian init scripts (PID 1 is not systemd here): start, stop, restart, reload, enable and disable
act for real on supervisor's own init script, whose state and rc.d links are put back afterwards.
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agent.jobs.toolkit.host import rc_links, systemd_running, sysv_enabled
from tests.helpers import wait_until
from tests.helpers.hosting import Hosting
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


# --- services, through the init scripts -------------------------------------------------------------

SUPERVISOR_PID = Path("/var/run/supervisord.pid")
SUPERVISOR_LOG = Path("/var/log/supervisor/supervisord.log")
needs_init_scripts = pytest.mark.skipif(
    systemd_running() or not Path("/etc/init.d/supervisor").exists(),
    reason="drives supervisor's init script: needs it (Debian package supervisor) and no systemd",
)


def system_supervisor_pid() -> int | None:
    """The pid of the system's supervisord when it runs."""
    try:
        pid = int(SUPERVISOR_PID.read_text())
    except (OSError, ValueError):
        return None
    try:
        return pid if b"supervisord" in Path(f"/proc/{pid}/cmdline").read_bytes() else None
    except OSError:
        return None


@pytest.fixture(scope="module")
def system_supervisor() -> Iterator[None]:
    """The system's supervisor service as the tests found it afterwards: running or not, its
    rc.d links, and no log file it did not have."""
    was_running = system_supervisor_pid() is not None
    links = {link: os.readlink(link) for link in rc_links("supervisor")}
    had_log = SUPERVISOR_LOG.exists()
    assert not any(Path("/etc/supervisor/conf.d").glob("*.conf")), "the system's supervisor must have no programs"
    yield
    now_running = system_supervisor_pid() is not None
    if now_running != was_running:
        subprocess.run(["service", "supervisor", "start" if was_running else "stop"], check=True, capture_output=True)
    for link in rc_links("supervisor"):
        os.unlink(link)
    for link, target in links.items():
        os.symlink(target, link)
    if not had_log and not was_running:
        SUPERVISOR_LOG.unlink(missing_ok=True)


@needs_init_scripts
def test_services_are_listed_from_the_init_scripts(hosting: Hosting) -> None:
    services = {s["name"]: s for s in hosting.run("service.list").ok().result["services"]}
    assert {"cron", "supervisor"} <= set(services)
    assert services["supervisor"]["manager"] == "sysv"
    assert services["supervisor"]["enabled"] == sysv_enabled("supervisor")
    assert services["supervisor"]["active"] == (system_supervisor_pid() is not None)


@needs_init_scripts
def test_start_stop_restart_and_reload_a_service(hosting: Hosting, system_supervisor: None) -> None:
    if system_supervisor_pid() is not None:
        hosting.run("service.stop", name="supervisor").ok()
    assert system_supervisor_pid() is None

    started = hosting.run("service.start", name="supervisor").ok()
    assert "supervisor is running" in started.text
    first = system_supervisor_pid()
    assert first is not None
    status = hosting.run("service.status", name="supervisor").ok().result
    assert (status["active"], status["manager"], status["status_code"]) == (True, "sysv", 0)
    assert "already running" in hosting.run("service.start", name="supervisor").ok().text

    hosting.run("service.restart", name="supervisor").ok()
    second = system_supervisor_pid()
    assert second is not None and second != first

    reloaded = hosting.run("service.reload", name="supervisor").ok()  # its script has only force-reload
    assert "has no reload: force-reload" in reloaded.text
    third = system_supervisor_pid()
    assert third is not None and third != second

    hosting.run("service.stop", name="supervisor").ok()
    assert system_supervisor_pid() is None
    wait_until(lambda: gone([third]))  # the script sends TERM; supervisord removes its pid file, then exits
    assert hosting.run("service.status", name="supervisor").ok().result["active"] is False
    assert "already stopped" in hosting.run("service.stop", name="supervisor").ok().text
    not_running = hosting.run("service.reload", name="supervisor")
    assert not_running.exit_code == 1 and "is not running" in not_running.text


@needs_init_scripts
def test_disable_and_enable_a_service_at_boot(hosting: Hosting, system_supervisor: None) -> None:
    hosting.run("service.enable", name="supervisor").ok()
    assert sysv_enabled("supervisor")
    disabled = hosting.run("service.disable", name="supervisor").ok()
    assert "supervisor is disabled at boot" in disabled.text
    assert not sysv_enabled("supervisor")
    assert all(os.path.basename(link).startswith("K") for link in rc_links("supervisor"))
    assert hosting.run("service.status", name="supervisor").ok().result["enabled"] is False
    assert "already disabled" in hosting.run("service.disable", name="supervisor").ok().text
    hosting.run("service.enable", name="supervisor").ok()
    assert sysv_enabled("supervisor")
    assert hosting.run("service.status", name="supervisor").ok().result["enabled"] is True


@needs_init_scripts
def test_a_script_without_boot_links_gets_them_from_its_header(hosting: Hosting, system_supervisor: None) -> None:
    for link in rc_links("supervisor"):  # as after `update-rc.d supervisor remove`
        os.unlink(link)
    assert "already disabled" in hosting.run("service.disable", name="supervisor").ok().text
    assert rc_links("supervisor") == []
    hosting.run("service.enable", name="supervisor").ok()  # update-rc.d supervisor defaults
    levels = {os.path.basename(link)[0] + os.path.basename(os.path.dirname(link))[2] for link in rc_links("supervisor")}
    assert levels == {"S2", "S3", "S4", "S5", "K0", "K1", "K6"}  # its LSB header's Default-Start and -Stop


@needs_init_scripts
def test_a_services_logs_without_a_journal(hosting: Hosting, system_supervisor: None) -> None:
    if system_supervisor_pid() is None:
        hosting.run("service.start", name="supervisor").ok()
    logs = hosting.run("service.logs", name="supervisor", lines=50).ok()
    assert any("supervisord started with pid" in line for line in logs.stdout), logs.text
    assert len(hosting.run("service.logs", name="supervisor", lines=1).ok().stdout) == 1
    none = hosting.run("service.logs", name="cron")
    assert none.exit_code == 1 and "no journal" in none.text and "cron has no log file" in none.text
    missing = hosting.run("service.logs", name="no-such-service")
    assert missing.exit_code == 1 and "no service named no-such-service" in missing.text


def test_services_that_keep_the_server_reachable_are_never_stopped(hosting: Hosting) -> None:
    for kind in ("service.stop", "service.disable"):
        answer = hosting.post(kind, name="ssh")
        assert answer.status_code == 422, answer.text
        assert "keeps the server reachable" in answer.text
