"""The agent's readers of tool output, on recorded output (tests/data/tool_output/): they run where
apt, openssl or systemd are absent, and cover what a live machine rarely shows (no updates, an
expired certificate, a date openssl might print differently, a missing service)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.jobs.cron import parse_history
from agent.jobs.daemon import parse_status
from agent.jobs.service import (
    parse_journal,
    parse_list_unit_files,
    parse_list_units,
    parse_service_status,
    parse_status_all,
    parse_systemctl_show,
)
from agent.jobs.ssl import parse_x509
from agent.jobs.system import cpu_model, os_release
from agent.jobs.toolkit.machine import meminfo
from agent.jobs.toolkit.output import JobError
from agent.jobs.updates import parse_upgradable

RECORDED = Path(__file__).parent / "data" / "tool_output"


def recorded(name: str) -> str:
    return (RECORDED / name).read_text()


# --- apt list --upgradable ---------------------------------------------------------------------


def test_upgradable_packages_skip_the_warning_listing_and_notices() -> None:
    updates = parse_upgradable(recorded("apt_list_upgradable.txt"))
    assert [u["name"] for u in updates] == [
        "appstream",
        "apt-transport-https",
        "ca-certificates",
        "libssl3",
        "firmware-misc-nonfree",
    ]
    assert updates[0] == {
        "name": "appstream",
        "version": "0.16.1-2+b1",
        "current_version": "0.16.1-2",
        "arch": "amd64",
        "suites": ["oldstable"],
        "security": False,
    }
    libssl = updates[3]
    assert libssl["suites"] == ["bookworm-updates", "bookworm-security"] and libssl["security"]
    assert libssl["version"] == "3.0.19-1~deb12u1" and libssl["current_version"] == "3.0.17-1~deb12u2"
    assert [u["name"] for u in updates if u["security"]] == ["apt-transport-https", "ca-certificates", "libssl3"]
    assert updates[-1]["current_version"] is None  # a line without "[upgradable from: ...]"


@pytest.mark.parametrize("text", ["", "Listing... Done\n", "\n\n", "garbage without a slash\n"])
def test_no_upgradable_packages(text: str) -> None:
    assert parse_upgradable(text) == []


def test_recorded_empty_listing() -> None:
    assert parse_upgradable(recorded("apt_list_upgradable_none.txt")) == []


# --- openssl x509 -------------------------------------------------------------------------------


def test_certificate_with_alternative_names() -> None:
    cert = parse_x509(recorded("openssl_x509_san.txt"))
    assert cert["subject"] == "CN = example.com, O = Example Ltd"
    assert cert["issuer"] == "C = US, O = Let's Encrypt, CN = R11"
    assert cert["not_after"] == "2126-12-23T15:23:44Z"
    assert cert["expired"] is False and cert["days_left"] > 365 * 99
    assert cert["names"] == ["example.com", "www.example.com", "IP Address:192.0.2.1"]


def test_certificate_without_alternative_names_is_named_by_its_common_name() -> None:
    cert = parse_x509(recorded("openssl_x509_no_san_expired.txt"))
    assert cert["names"] == ["old.example.org"]
    assert cert["not_after"] == "2001-11-24T15:23:45Z"
    assert cert["expired"] is True and cert["days_left"] < 0


def test_an_unreadable_date_is_kept_as_printed_and_no_name_is_invented() -> None:
    cert = parse_x509(recorded("openssl_x509_odd_date.txt"))
    assert cert["not_after"] == "sometime next year"
    assert "expired" not in cert and "days_left" not in cert
    assert cert["names"] == [] and cert["subject"] == "O = No Common Name"


def test_no_openssl_output() -> None:
    assert parse_x509("") == {"subject": None, "issuer": None, "not_after": None, "names": []}


def test_alternative_names_header_as_the_last_line() -> None:
    assert parse_x509("subject=CN = a.example\nX509v3 Subject Alternative Name: \n")["names"] == ["a.example"]


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


# --- a cron entry's run history --------------------------------------------------------------------


def test_cron_runs_pair_by_key_newest_first() -> None:
    text = "\n".join(
        [
            "end 90 1700000001 0",  # its start was trimmed away
            "start 101 1700000060",
            "start run-ab12 1700000070",
            "end 101 1700000062 0",
            "end run-ab12 1700000075 3",
            "start 102 1700000120",  # never ended, its shell is gone
            "start 103 1700000180",  # still running
            "start 102 1700000240",  # pid 102 again
            "end 102 1700000241 1",
            "garbage",
        ]
    )
    runs = parse_history(text, alive=lambda pid: pid == 103)
    assert [(r["trigger"], r["state"], r["exit_code"], r["duration_s"]) for r in runs] == [
        ("schedule", "failed", 1, 1),
        ("schedule", "running", None, None),
        ("schedule", "interrupted", None, None),
        ("manual", "failed", 3, 5),
        ("schedule", "ok", 0, 2),
    ]
    assert runs[-1]["started_at"] == "2023-11-14T22:14:20Z" and runs[-1]["ended_at"] == "2023-11-14T22:14:22Z"
    assert parse_history("", alive=lambda pid: True) == []


# --- /proc and /etc files --------------------------------------------------------------------------


def test_meminfo_in_bytes_and_used_memory() -> None:
    memory = meminfo(str(RECORDED / "proc_meminfo.txt"))
    assert memory == {
        "total": 8142404 * 1024,
        "free": 512344 * 1024,
        "available": 4123456 * 1024,
        "buffers": 102400 * 1024,
        "cached": 3000000 * 1024,
        "swap_total": 2097148 * 1024,
        "swap_free": 2097148 * 1024,
        "used": (8142404 - 4123456) * 1024,
    }


def test_meminfo_without_available_memory_has_no_used_figure(tmp_path: Path) -> None:
    old = tmp_path / "meminfo"
    old.write_text("MemTotal:        1024 kB\nMemFree: x kB\nOdd line\n")
    assert meminfo(str(old)) == {"total": 1024 * 1024}


def test_os_release_unquotes_and_skips_comments_and_blank_lines(tmp_path: Path) -> None:
    fields = os_release(str(RECORDED / "os_release.txt"))
    assert fields == {
        "PRETTY_NAME": "Debian GNU/Linux 12 (bookworm)",
        "NAME": "Debian GNU/Linux",
        "VERSION_ID": "12",
        "ID": "debian",
        "HOME_URL": "https://www.debian.org/",
    }
    assert os_release(str(tmp_path / "absent")) == {}


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("proc_cpuinfo_x86.txt", "Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz"),
        ("proc_cpuinfo_arm.txt", "Raspberry Pi 4 Model B Rev 1.1"),
    ],
)
def test_cpu_model(name: str, model: str) -> None:
    assert cpu_model(str(RECORDED / name)) == model
