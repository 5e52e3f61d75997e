"""The service kinds through the API against the hosting server's real root agent.

Services are the Debian init scripts (PID 1 is not systemd here; the systemd path is
tests/agent/jobs/toolkit/test_host.py): start, stop, restart, reload, enable and disable
act for real on supervisor's own init script, whose state and rc.d links are put back afterwards.

Its readers of tool output are tested on recorded output too (tests/data/tool_output/): they
run where the tool is absent, and cover what a live machine rarely shows."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.jobs.service import (
    parse_journal,
    parse_list_unit_files,
    parse_list_units,
    parse_service_status,
    parse_status_all,
    parse_systemctl_show,
)
from agent.jobs.toolkit.host import rc_links, systemd_running, sysv_enabled
from agent.jobs.toolkit.output import JobError
from tests.helpers import wait_until
from tests.helpers.agent_jobs import (
    Env,
    linked,
)
from tests.helpers.hosting import Hosting
from tests.helpers.recorded_systemd import RECORDED


def gone(pids: list[int]) -> bool:
    return not any(Path(f"/proc/{pid}").exists() for pid in pids)


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


def recorded(name: str) -> str:
    return (RECORDED / name).read_text()


# --- systemctl show / service status -------------------------------------------------------------


def test_a_running_systemd_service() -> None:
    assert parse_systemctl_show("cron", recorded("systemctl_show_running.txt")) == {
        "name": "cron",
        "active": True,
        "state": "active (running)",
        "description": "Regular background program processing daemon",
        "pid": 612,
        "enabled": True,
        "manager": "systemd",
    }


def test_a_failed_systemd_service_and_an_equals_sign_in_its_description() -> None:
    status = parse_systemctl_show("nginx", recorded("systemctl_show_failed.txt"))
    assert status["active"] is False and status["state"] == "failed (failed)"
    assert status["description"] == "Web = proxy (nginx)"
    assert status["pid"] is None and status["enabled"] is False


def test_a_missing_systemd_service() -> None:
    with pytest.raises(JobError, match="no service named nosuch"):
        parse_systemctl_show("nosuch", recorded("systemctl_show_not_found.txt"))


def test_systemctl_output_without_properties() -> None:
    status = parse_systemctl_show("odd", "\nnot a property line\n")
    assert status["active"] is False and status["state"] == "unknown (unknown)" and status["description"] is None
    assert status["pid"] is None and status["enabled"] is None


def test_sysv_service_status() -> None:
    stopped = parse_service_status("cron", 3, "cron is not running ... failed!\n", "")
    assert stopped == {
        "name": "cron",
        "active": False,
        "state": "cron is not running ... failed!",
        "status_code": 3,
        "manager": "sysv",
    }
    running = parse_service_status("ssh", 0, "", "")
    assert running["active"] and running["state"] == "running"
    assert parse_service_status("x", 4, "\n  \n", "")["state"] == "not running (status 4)"
    with pytest.raises(JobError, match="no service named nosuchxyz"):
        parse_service_status("nosuchxyz", 1, "", "nosuchxyz: unrecognized service\n")


def test_systemd_units_skip_the_header_legend_and_counts() -> None:
    units = parse_list_units(recorded("systemctl_list_units.txt"))
    assert [u["name"] for u in units] == [
        "apparmor",
        "cron",
        "dbus",
        "getty@tty1",
        "mariadb",
        "nginx",
        "php8.2-fpm",
        "plymouth-start",
        "ssh",
        "systemd-journald",
    ]
    assert units[1] == {
        "name": "cron",
        "active": True,
        "state": "active (running)",
        "loaded": True,
        "description": "Regular background program processing daemon",
    }
    assert units[4]["state"] == "failed (failed)" and not units[4]["active"]
    assert units[7]["loaded"] is False
    assert units[5]["description"] == "A high performance web server and a reverse proxy server"


def test_a_failed_unit_keeps_its_name_when_systemctl_marks_it() -> None:
    marked = "● mariadb.service loaded failed failed MariaDB database server\n"
    assert parse_list_units(marked)[0]["name"] == "mariadb"


def test_systemd_unit_files_say_which_start_at_boot() -> None:
    enabled = parse_list_unit_files(recorded("systemctl_list_unit_files.txt"))
    assert enabled["cron"] is True and enabled["nginx"] is False and enabled["sshd"] is True
    assert enabled["dbus"] is None  # static: started by something else, not enabled itself


def test_init_scripts_from_service_status_all() -> None:
    services = parse_status_all(recorded("service_status_all.txt"))
    by_name = {s["name"]: s for s in services}
    assert by_name["hwclock.sh"] == {"name": "hwclock.sh", "active": None, "state": "unknown"}
    assert by_name["cron"]["active"] is False and by_name["cron"]["state"] == "stopped"
    assert parse_status_all(" [ + ]  nginx\nnot a status line\n") == [
        {"name": "nginx", "active": True, "state": "running"}
    ]


def test_journal_lines_without_journalctl_notes() -> None:
    lines = parse_journal(recorded("journalctl_nginx.txt"))
    assert len(lines) == 5 and all(line.startswith("2026-11-") for line in lines)
    assert parse_journal(recorded("journalctl_no_entries.txt")) == []


HAS_CRON_SCRIPT = os.path.exists("/etc/init.d/cron") and not os.path.isdir("/run/systemd/system")


@pytest.mark.skipif(not HAS_CRON_SCRIPT, reason="no /etc/init.d/cron to ask (Debian package: cron), or systemd runs")
@pytest.mark.anyio
async def test_service_status_of_a_real_service(env: Env) -> None:
    async with linked(env) as agent:
        status = (await agent.run("service", "status", "cron", "--json")).json()
    assert status["name"] == "cron" and isinstance(status["active"], bool) and status["state"]
