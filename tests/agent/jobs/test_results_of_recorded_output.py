"""What the agent's readers make of recorded tool output (tests/data/tool_output/) is what the
kinds' result models declare: the branches a live run on one machine does not reach (systemd where
PID 1 is not, an init script, an expired certificate, a date openssl printed its own way, an apt
upgrade and a dependency) print through the model as they are, with nothing left out or renamed."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from agent.jobs import cron, daemon, dns, ssl, system, updates
from agent.jobs.service import parse_list_units, parse_service_status, parse_status_all, parse_systemctl_show
from contract.job_kinds import lookup

RECORDED = Path(__file__).parents[2] / "data" / "tool_output"


def recorded(name: str) -> str:
    return (RECORDED / name).read_text()


def printed(kind: str, result: Any) -> Any:
    """`result` as the agent prints it for `kind` (through its declared model)."""
    spec = lookup(kind)
    assert spec is not None and spec.result is not None, kind
    return spec.dump_result(result)


@pytest.mark.parametrize("name", ["systemctl_show_running.txt", "systemctl_show_failed.txt",
                                  "systemctl_show_nginx_stopped.txt", "systemctl_show_nginx_disabled.txt"])  # fmt: skip
def test_a_systemd_service_status_prints_every_field_it_read(name: str) -> None:
    status = parse_systemctl_show("nginx", recorded(name))
    assert printed("service.status", status) == {**status, "status_code": None}


def test_an_init_scripts_status_prints_with_the_systemd_only_fields_null() -> None:
    status = {**parse_service_status("cron", 3, "cron is not running ... failed!\n", ""), "enabled": True}
    assert printed("service.status", status) == {**status, "description": None, "pid": None}


def test_both_service_lists_print_as_the_same_rows() -> None:
    listed = parse_list_units(recorded("systemctl_list_units.txt"))
    units = [{**unit, "enabled": None, "manager": "systemd"} for unit in listed]
    scripts = [{**s, "enabled": False, "manager": "sysv"} for s in parse_status_all(recorded("service_status_all.txt"))]
    rows = printed("service.list", {"services": units + scripts})["services"]
    assert rows[: len(units)] == units
    assert rows[len(units) :] == [{**script, "loaded": None, "description": None} for script in scripts]
    assert {row["active"] for row in rows[len(units) :]} == {True, False, None}  # "[ ? ]": the script cannot tell


def test_apt_history_prints_every_transaction_with_the_same_keys() -> None:
    entries = updates.parse_history(recorded("apt_history.log"))
    history = printed("updates.history", {"entries": entries, "count": len(entries), "log": "/var/log/apt/history.log"})
    upgraded = history["entries"][0]["packages"]["upgrade"][0]
    assert upgraded["from_version"] == "252.36-1~deb12u1" and upgraded["automatic"] is False
    dependency = history["entries"][1]["packages"]["install"][1]
    assert (dependency["name"], dependency["from_version"], dependency["automatic"]) == ("cpp", None, True)
    assert [entry["count"] for entry in history["entries"]] == [entry["count"] for entry in entries]


def test_pending_updates_print_as_read() -> None:
    pending = updates.parse_upgradable(recorded("apt_list_upgradable.txt"))
    listed = {"updates": pending, "count": len(pending), "security_count": sum(u["security"] for u in pending)}
    assert printed("updates.list", listed) == listed


@pytest.mark.parametrize("name", ["openssl_x509_san.txt", "openssl_x509_no_san_expired.txt",
                                  "openssl_x509_odd_date.txt"])  # fmt: skip
def test_every_certificate_file_prints_with_the_same_keys(name: str) -> None:
    certificate = {"path": f"/etc/letsencrypt/live/x/{name}", "source": "letsencrypt", **ssl.parse_x509(recorded(name))}
    shown = printed("ssl.list", {"certificates": [certificate]})["certificates"][0]
    assert shown == {"error": None, "days_left": None, "expired": None, **certificate}


def test_a_certificate_file_that_does_not_read_prints_its_error() -> None:
    unreadable = {"path": "/var/lib/fleetdeck/ssl/x.pem", "source": "agent", "error": "not a readable certificate"}
    shown = printed("ssl.list", {"certificates": [unreadable]})["certificates"][0]
    assert shown["error"] == unreadable["error"] and shown["names"] == [] and shown["not_after"] is None


def test_supervisor_processes_of_each_state_print_as_read() -> None:
    processes = daemon.parse_status(recorded("supervisorctl_status.txt"))
    definition = {"name": "queue", "domain": "example.com", "command": "php artisan queue:work", "directory": "",
                  "instances": len(processes)}  # fmt: skip
    described = {**definition, "program": "fleetdeck-queue", "running": 1, "processes": processes}
    assert printed("daemon.status", described) == described


def test_cron_runs_of_every_state_print_as_read() -> None:
    text = "start 101 1700000060\nend 101 1700000062 0\nstart run-ab12 1700000070\nstart 102 1700000120"
    runs = cron.parse_history(text, alive=lambda pid: False)
    entry = {"id": "c0123456789ab", "domain": "example.com", "schedule": "* * * * *", "command": "true",
             "paused": False, "history_file": "/home/example-com/.cron-c0123456789ab.log", "runs": runs}  # fmt: skip
    assert printed("cron.history", entry) == entry
    assert {run["state"] for run in runs} == {"ok", "running", "interrupted"}


def test_a_dig_answer_prints_its_class_under_digs_own_name() -> None:
    status, answers = dns.parse_dig(
        ";; ->>HEADER<<- opcode: QUERY, status: NOERROR, id: 1\nexample.com. 300 IN MX 10 mail.example.com.\n"
    )
    looked_up = {"name": "example.com", "type": "MX", "server": None, "status": status, "answers": answers}
    assert printed("dns.lookup", looked_up)["answers"] == [
        {"name": "example.com.", "ttl": 300, "class": "IN", "type": "MX", "value": "10 mail.example.com."}
    ]


def test_the_processes_and_the_server_of_this_machine_print_as_read() -> None:
    processes = system.parse_ps(f"{os.getpid()} root 1.5 0.3 2048 12 python3 python3 -m pytest -q\n")
    assert printed("system.processes", {"sort": "cpu", "processes": processes})["processes"] == processes
    info = system.info("0.0.0-test")
    assert printed("system.info", info) == info


def test_a_result_that_drifts_from_its_model_is_refused() -> None:
    status = parse_systemctl_show("nginx", recorded("systemctl_show_running.txt"))
    with pytest.raises(ValueError, match="unit"):
        printed("service.status", {**status, "unit": "nginx.service"})  # a key the model does not declare
    with pytest.raises(ValueError, match="pid"):
        printed("service.status", {**status, "pid": "not a number"})
