"""The host toolkit (`agent.jobs.toolkit.host`): what the agent knows of the machine it runs on.

- When an nginx reload took (`nginx_reload_took`, the one check behind the sites' reloads and the
  load balancers' engine): new workers under the master, and every old one gone or leaving. Real
  processes stand in for the workers, this test process for their master.
- The host layout file, re-read while the agent runs (a broken one keeps the last good), and the
  hosting server's harness itself: a job through the API reaches the real root agent; a service is
  driven through its Debian init script, or its layout's own commands.
- The systemd path of the kinds that drive services, end to end on recorded output. PID 1 here is
  not systemd (the init-script path is tested for real in `test_service` and `test_system`), so a
  server of this module's own has a real root agent, linked to the session's control plane, whose
  host layout says PID 1 is systemd and whose systemctl, journalctl, timedatectl and hostnamectl
  are the stand-ins of `tests.helpers.recorded_systemd`: they replay what systemd 252 printed on a
  Debian 12 machine and record the argv the agent chose. Each test checks that argv, what the job
  made of the recorded answer, and that nothing else was asked.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from agent.jobs.toolkit.host import (
    DEFAULT_LAYOUT,
    InitLayout,
    LayoutFile,
    ServiceControl,
    control_argv,
    nginx_reload_took,
    worker_leaving,
)
from agent.jobs.toolkit.output import JobError
from agent.jobs.toolkit.proc import pid_alive
from tests.conftest import Stack
from tests.helpers import wait_until
from tests.helpers.hosting import Hosting, start_server, stop_hosting
from tests.helpers.recorded_systemd import RECORDED, Answer, RecordedSystemd, Script

# --- an nginx reload --------------------------------------------------------------------------


def a_worker() -> subprocess.Popen[bytes]:
    """A live child that serves until its stdin closes."""
    return subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)


def test_an_old_worker_that_exited_before_its_master_reaped_it_has_left() -> None:
    """An old worker with nothing left to serve exits right after saying "shutting down"; until its
    master reaps it, its cmdline reads empty. Taken for a worker still serving, it made a reload
    that had taken fail with "nginx started no new worker process after the reload"."""
    old = a_worker()
    assert not worker_leaving(old.pid)  # running, and not shutting down
    assert old.stdin is not None
    old.stdin.close()
    wait_until(lambda: not pid_alive(old.pid))  # exited: a zombie, as this process does not reap it yet
    new = a_worker()
    try:
        assert Path(f"/proc/{old.pid}").exists() and Path(f"/proc/{old.pid}/cmdline").read_bytes() == b""
        assert worker_leaving(old.pid)
        assert nginx_reload_took(os.getpid(), {old.pid})
        old.wait()
        assert worker_leaving(old.pid)  # reaped: gone
    finally:
        new.kill()
        new.wait()


# --- the layout and the services' control --------------------------------------------------


@pytest.mark.skipif(shutil.which("crontab") is None, reason="needs cron's init script")
def test_a_service_status_runs_through_the_init_script(hosting: Hosting) -> None:
    run = hosting.run("service.status", name="cron").ok()
    assert run.result["manager"] == "sysv"
    assert run.result["name"] == "cron"


def test_an_unknown_service_is_a_clear_failure(hosting: Hosting) -> None:
    run = hosting.run("service.status", name="no-such-service")
    assert run.exit_code == 1
    assert "no service named no-such-service" in run.text


def test_the_layout_file_is_reread_and_a_broken_one_keeps_the_last_good(tmp_path: Path) -> None:
    path = tmp_path / "layout.json"
    layout = LayoutFile(str(path))
    assert layout.current() == DEFAULT_LAYOUT  # no file: Debian's defaults
    path.write_text(json.dumps({"mariadb": {"socket": "/tmp/a.sock"}}))
    assert layout.current().mariadb.socket == "/tmp/a.sock"
    assert layout.current().nginx == DEFAULT_LAYOUT.nginx
    path.write_text(json.dumps({"mariadb": {"socket": "/tmp/b.sock", "no_such_field": 1}}))
    assert layout.current().mariadb.socket == "/tmp/a.sock"
    path.write_text(json.dumps({"mariadb": {"socket": "/tmp/b.sock"}}))
    assert layout.current().mariadb.socket == "/tmp/b.sock"


def test_a_service_is_controlled_by_its_own_commands_or_the_system() -> None:
    given = ServiceControl(unit="php{version}-fpm", commands={"reload": ["kill", "-USR2", "{version}"]})
    init = DEFAULT_LAYOUT.init
    assert control_argv(given, "reload", init=init, version="8.2") == ["kill", "-USR2", "8.2"]
    assert control_argv(given, "restart", init=init, version="8.2")[-2:] == ["php8.2-fpm", "restart"]
    with pytest.raises(JobError, match="no service named nothing-here"):
        control_argv(ServiceControl(unit="nothing-here"), "reload", init=init)


def test_the_session_runs_its_own_nginx_and_php_fpm(hosting: Hosting) -> None:
    assert hosting.nginx is not None
    assert httpx.get(hosting.nginx.url("/")).status_code == 404  # the default server: no site yet
    if hosting.php is not None:
        assert (hosting.php.run_dir / "idle.sock").exists()


# --- the systemd path, on recorded output ----------------------------------------------------


RUNNING = "systemctl_show_nginx_running.txt"
STOPPED = "systemctl_show_nginx_stopped.txt"
DISABLED = "systemctl_show_nginx_disabled.txt"
FAILED = "systemctl_show_nginx_failed.txt"
NGINX = "A high performance web server and a reverse proxy server"
UTC = "/usr/share/zoneinfo/Etc/UTC"


def show(unit: str) -> list[str]:
    """How the agent asks systemd for a unit's state."""
    properties = "--property=LoadState,ActiveState,SubState,Description,MainPID,UnitFileState"
    return ["systemctl", "show", unit, properties, "--no-pager"]


def recorded_lines(name: str) -> list[str]:
    return (RECORDED / name).read_text().splitlines()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> RecordedSystemd:
    return RecordedSystemd(tmp_path_factory.mktemp("recorded-systemd"))


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The module's server, and the files its agent would write were PID 1 not systemd."""
    made = tmp_path_factory.mktemp("systemd-server")
    (made / "localtime").symlink_to(UTC)
    return made


@pytest.fixture(scope="module")
def server(stack: Stack, folder: Path, recorded: RecordedSystemd) -> Iterator[Hosting]:
    """A server whose agent believes PID 1 is systemd."""
    system = {
        "localtime": str(folder / "localtime"),
        "timezone_file": str(folder / "timezone"),
        "hostname_file": str(folder / "hostname"),
        "locale_file": str(folder / "locale"),
    }
    started = start_server(stack, folder, {"init": recorded.layout, "system": system})
    yield started
    stop_hosting(started)


def test_services_are_listed_from_systemctl(server: Hosting, recorded: RecordedSystemd) -> None:
    recorded.script(Script())
    services = {s["name"]: s for s in server.run("service.list").ok().result["services"]}
    assert recorded.asked() == [
        ["systemctl", "list-units", "--type=service", "--all", "--no-pager", "--plain"],
        ["systemctl", "list-unit-files", "--type=service", "--no-pager", "--plain", "--no-legend"],
    ]
    assert len(services) == 10  # the recorded units, without the header, the legend and the count
    assert services["cron"] == {
        "name": "cron",
        "active": True,
        "state": "active (running)",
        "loaded": True,
        "description": "Regular background program processing daemon",
        "enabled": True,
        "manager": "systemd",
    }
    nginx = services["nginx"]
    assert (nginx["active"], nginx["state"], nginx["enabled"]) == (False, "inactive (dead)", False)
    assert (services["mariadb"]["active"], services["mariadb"]["state"]) == (False, "failed (failed)")
    assert services["plymouth-start"]["loaded"] is False
    assert services["getty@tty1"]["enabled"] is None  # its unit file is the template getty@.service
    assert services["systemd-journald"]["enabled"] is None  # static


def test_a_services_status_is_what_systemctl_show_says(server: Hosting, recorded: RecordedSystemd) -> None:
    recorded.script(Script(units={"nginx": RUNNING}))
    status = server.run("service.status", name="nginx").ok().result
    assert recorded.asked() == [show("nginx")]
    assert status == {
        "name": "nginx",
        "active": True,
        "state": "active (running)",
        "description": NGINX,
        "pid": 4127,
        "enabled": True,
        "manager": "systemd",
        "status_code": None,  # the init script's exit code: sysv only
    }
    recorded.script(Script(units={"nginx": FAILED}))
    failed = server.run("service.status", name="nginx").ok().result
    assert (failed["active"], failed["state"], failed["pid"], failed["enabled"]) == (
        False,
        "failed (failed)",
        None,
        True,
    )


def test_a_unit_systemd_does_not_know_is_refused_before_anything_is_done(
    server: Hosting, recorded: RecordedSystemd
) -> None:
    recorded.script(Script())
    for kind in ("service.status", "service.start", "service.restart", "service.enable", "service.stop"):
        run = server.run(kind, name="nosuch")
        assert (run.exit_code, run.stdout, run.stderr) == (1, [], ["no service named nosuch on this server"]), kind
        assert recorded.asked() == [show("nosuch")], kind


def test_start_reload_restart_and_stop_go_through_systemctl(server: Hosting, recorded: RecordedSystemd) -> None:
    recorded.script(
        Script(
            units={"nginx": STOPPED},
            answers={"systemctl start nginx": Answer(then=RUNNING), "systemctl stop nginx": Answer(then=STOPPED)},
        )
    )
    assert server.run("service.start", name="nginx").ok().stdout == ["nginx is running"]
    assert recorded.asked() == [show("nginx"), ["systemctl", "start", "nginx"], show("nginx")]
    assert server.run("service.start", name="nginx").ok().stdout == ["nginx is already running"]
    assert recorded.asked() == [show("nginx")]

    for action in ("reload", "restart"):
        assert server.run(f"service.{action}", name="nginx").ok().stdout == ["nginx is running"]
        assert recorded.asked() == [show("nginx"), ["systemctl", action, "nginx"], show("nginx")]

    assert server.run("service.stop", name="nginx").ok().stdout == ["nginx is stopped"]
    assert recorded.asked() == [show("nginx"), ["systemctl", "stop", "nginx"], show("nginx")]
    assert server.run("service.stop", name="nginx").ok().stdout == ["nginx is already stopped"]
    not_running = server.run("service.reload", name="nginx")
    assert (not_running.exit_code, not_running.stderr) == (
        1,
        ["nginx is not running: start it instead of reloading it"],
    )
    assert recorded.asked() == [show("nginx"), show("nginx")]


def test_a_failed_restart_fails_the_job_in_systemctls_words(server: Hosting, recorded: RecordedSystemd) -> None:
    failing = Answer(stderr="systemctl_restart_nginx_failed.txt", exit_code=1, then=FAILED)
    recorded.script(Script(units={"nginx": RUNNING}, answers={"systemctl restart nginx": failing}))
    run = server.run("service.restart", name="nginx")
    assert run.exit_code == 1
    assert run.stderr == [
        "Job for nginx.service failed because the control process exited with error code.",
        'See "systemctl status nginx.service" and "journalctl -xeu nginx.service" for details.',
        "restart nginx failed (exit 1)",
    ]
    assert recorded.asked() == [show("nginx"), ["systemctl", "restart", "nginx"]]
    status = server.run("service.status", name="nginx").ok().result
    assert (status["active"], status["state"]) == (False, "failed (failed)")


def test_enable_and_disable_at_boot_go_through_systemctl(server: Hosting, recorded: RecordedSystemd) -> None:
    recorded.script(
        Script(
            units={"nginx": DISABLED},
            answers={
                "systemctl enable nginx": Answer(stderr="systemctl_enable_nginx.txt", then=STOPPED),
                "systemctl disable nginx": Answer(stderr="systemctl_disable_nginx.txt", then=DISABLED),
            },
        )
    )
    enabled = server.run("service.enable", name="nginx").ok()
    assert recorded.asked() == [show("nginx"), ["systemctl", "enable", "nginx"], show("nginx")]
    assert enabled.stderr == recorded_lines("systemctl_enable_nginx.txt")
    assert enabled.stdout == ["nginx is enabled at boot"]  # enabled, not started: systemctl enable without --now
    assert server.run("service.status", name="nginx").ok().result["active"] is False
    assert server.run("service.enable", name="nginx").ok().stdout == ["nginx is already enabled at boot"]
    assert recorded.asked() == [show("nginx"), show("nginx")]

    disabled = server.run("service.disable", name="nginx").ok()
    assert recorded.asked() == [show("nginx"), ["systemctl", "disable", "nginx"], show("nginx")]
    assert disabled.stderr == recorded_lines("systemctl_disable_nginx.txt")
    assert disabled.stdout == ["nginx is disabled at boot"]
    assert server.run("service.status", name="nginx").ok().result["enabled"] is False


def test_a_services_logs_are_its_journal_without_journalctls_notes(server: Hosting, recorded: RecordedSystemd) -> None:
    recorded.script(Script(journals={"nginx": "journalctl_nginx.txt"}))
    logs = server.run("service.logs", name="nginx", lines=50).ok()
    assert recorded.asked() == [["journalctl", "-u", "nginx", "-n", "50", "--no-pager", "-o", "short-iso"]]
    assert logs.stdout == [line for line in recorded_lines("journalctl_nginx.txt") if not line.startswith("-- Boot")]
    assert len(logs.stdout) == 5 and logs.stdout[-1].endswith("nginx.service: Deactivated successfully.")
    assert server.run("service.logs", name="cron", lines=10).ok().stdout == []  # "-- No entries --"


def test_the_journal_is_read_through_journalctl(server: Hosting, recorded: RecordedSystemd) -> None:
    recorded.script(Script(journals={"": "journalctl_priority_err.txt"}))
    journal = server.run("logs.journal", priority="err", since="1h", lines=100).ok()
    assert recorded.asked() == [
        ["journalctl", "--no-pager", "--output=short-iso", "--lines=100", "--priority=err", "--since=-1h"]
    ]
    assert journal.stdout == recorded_lines("journalctl_priority_err.txt")
    quiet = server.run("logs.journal", unit="php8.2-fpm.service", lines=20).ok()
    assert recorded.asked() == [
        ["journalctl", "--no-pager", "--output=short-iso", "--lines=20", "--unit=php8.2-fpm.service"]
    ]
    assert quiet.stdout == ["-- No entries --"]


def test_the_time_zone_and_host_name_are_set_through_systemds_tools(
    server: Hosting, recorded: RecordedSystemd, folder: Path
) -> None:
    recorded.script(Script())
    zone = server.run("system.timezone-set", timezone="Europe/Berlin").ok()
    assert recorded.asked() == [["timedatectl", "set-timezone", "Europe/Berlin"]]
    assert zone.stdout == ["time zone Europe/Berlin (was Etc/UTC)"]
    assert os.readlink(folder / "localtime") == UTC  # timedatectl's to change, not the agent's
    assert not (folder / "timezone").exists()

    before = socket.gethostname()
    name = server.run("system.hostname-set", hostname="web2.example.test").ok()
    assert recorded.asked() == [["hostnamectl", "set-hostname", "web2.example.test"]]
    assert name.stdout == [f"host name web2.example.test (was {before})"]
    assert socket.gethostname() == before and not (folder / "hostname").exists()


def test_a_reboot_goes_through_systemctl(server: Hosting, recorded: RecordedSystemd) -> None:
    recorded.script(Script(units={"nginx": RUNNING}))
    # The agent must be on the stand-ins before it is asked to reboot: the init scripts' path reboots.
    server.run("service.status", name="nginx").ok()
    assert recorded.asked() == [show("nginx")]
    name = socket.gethostname()
    refused = server.run("system.reboot", confirm=f"not-{name}")
    assert refused.exit_code == 2 and recorded.asked() == []
    reboot = server.run("system.reboot", confirm=name).ok()
    assert recorded.asked() == [["systemctl", "reboot"]]
    assert reboot.stdout == [f"rebooting {name} now"]


def test_a_layouts_service_without_its_own_commands_is_controlled_through_systemctl(recorded: RecordedSystemd) -> None:
    """What site, php and ssh jobs reload after a change (`control_service`) follows the same init."""
    init = InitLayout.model_validate(recorded.layout)
    php = ServiceControl(unit="php{version}-fpm")
    assert control_argv(php, "reload", init=init, version="8.2") == [
        str(recorded.bin / "systemctl"),
        "reload",
        "php8.2-fpm",
    ]
    own = ServiceControl(unit="nginx", commands={"reload": ["nginx", "-s", "reload"]})
    assert control_argv(own, "reload", init=init) == ["nginx", "-s", "reload"]
