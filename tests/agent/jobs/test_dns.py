"""``dns.*`` through the API against the real agent and a real bind9: the session's own ``named``
(on 127.0.0.1 and free ports, its configuration, zones and rndc key under the hosting folder)
serves the agent's zones; every change is checked by asking it with ``dig``."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agent.jobs.dns import (
    Record,
    ZoneData,
    ZoneEntry,
    next_serial,
    parse_dig,
    parse_statements,
    parse_zone,
    render_statements,
    render_zone,
)
from fleetdeck.launcher import free_port
from tests.helpers import wait_until
from tests.helpers.hosting import Hosting, JobRun

pytestmark = pytest.mark.skipif(
    shutil.which("named", path="/usr/sbin:/usr/bin") is None or shutil.which("dig") is None,
    reason="needs bind9 and bind9-dnsutils (scripts/test installs them)",
)


@dataclass(frozen=True)
class Named:
    port: int
    folder: Path
    zones_dir: Path
    zones_conf: Path

    def dig(self, name: str, rtype: str = "A") -> list[str]:
        done = subprocess.run(
            ["dig", "@127.0.0.1", "-p", str(self.port), "+short", "+time=2", "+tries=2", name, rtype],
            capture_output=True,
            text=True,
            timeout=30,
        )
        return done.stdout.split("\n")[:-1] if done.returncode == 0 else [f"dig exit {done.returncode}"]


@pytest.fixture(scope="session")
def named(hosting: Hosting) -> Iterator[Named]:
    folder = hosting.folder / "bind"
    zones_dir, zones_conf = folder / "zones", folder / "zones.conf"
    folder.mkdir()
    port, control_port = free_port(), free_port()
    key = folder / "rndc.key"
    subprocess.run(["rndc-confgen", "-a", "-c", str(key), "-k", "fleetdeck-test"], check=True, capture_output=True)
    rndc_conf = folder / "rndc.conf"
    rndc_conf.write_text(
        f'include "{key}";\n'
        f'options {{ default-server 127.0.0.1; default-port {control_port}; default-key "fleetdeck-test"; }};\n'
    )
    zones_conf.write_text("")
    named_conf = folder / "named.conf"
    named_conf.write_text(
        f'include "{key}";\n'
        f'options {{ directory "{folder}"; listen-on port {port} {{ 127.0.0.1; }}; listen-on-v6 {{ none; }};\n'
        f'  recursion no; pid-file "{folder}/named.pid"; }};\n'
        f'controls {{ inet 127.0.0.1 port {control_port} allow {{ 127.0.0.1; }} keys {{ "fleetdeck-test"; }}; }};\n'
        f'include "{zones_conf}";\n'
    )
    log = (folder / "named.log").open("w")
    process = subprocess.Popen(["named", "-c", str(named_conf), "-g"], stdout=log, stderr=subprocess.STDOUT)
    rndc = ["rndc", "-c", str(rndc_conf)]
    try:
        wait_until(lambda: subprocess.run([*rndc, "status"], capture_output=True).returncode == 0, timeout=30)
        hosting.configure(
            "bind",
            {
                "zones_dir": str(zones_dir),
                "zones_conf": str(zones_conf),
                "named_conf": str(named_conf),
                "rndc": rndc,
                "port": port,
                "control": {"unit": "named", "commands": {"reload": [*rndc, "reload"], "status": [*rndc, "status"]}},
            },
        )
        yield Named(port, folder, zones_dir, zones_conf)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
        log.close()


def printed(run: JobRun) -> dict[str, Any]:
    """What a change kind that prints JSON (``--json``, not a read: no stored result) printed."""
    value: dict[str, Any] = json.loads("\n".join(run.stdout))
    return value


def add_zone(hosting: Hosting, zone: str) -> None:
    hosting.run("dns.zone-add", zone=zone, ipv4="192.0.2.10").ok()


def test_a_zone_is_added_served_listed_shown_and_deleted(hosting: Hosting, named: Named) -> None:
    run = hosting.run("dns.zone-add", zone="zone-a.test", ipv4="192.0.2.10", ipv6="2001:db8::10").ok()
    assert printed(run)["created"] is True and "zone zone-a.test added" in printed(run)["message"]
    wait_until(lambda: named.dig("zone-a.test") == ["192.0.2.10"])
    assert named.dig("zone-a.test", "AAAA") == ["2001:db8::10"]
    assert named.dig("zone-a.test", "NS") == ["ns1.zone-a.test."]

    again = printed(hosting.run("dns.zone-add", zone="zone-a.test", ipv4="192.0.2.99").ok())
    assert again["created"] is False and "exists already" in again["message"]

    listed = hosting.run("dns.zone-list").ok().result
    assert {"zone": "zone-a.test", "dnssec": False}.items() <= next(
        z for z in listed["zones"] if z["zone"] == "zone-a.test"
    ).items()
    shown = hosting.run("dns.zone-show", zone="zone-a.test").ok().result
    assert shown["serial"] // 100 >= 20240101
    assert {(r["name"], r["type"], r["value"]) for r in shown["records"]} >= {
        ("@", "NS", "ns1.zone-a.test"),
        ("@", "A", "192.0.2.10"),
        ("ns1", "A", "192.0.2.10"),
    }

    assert printed(hosting.run("dns.zone-delete", zone="zone-a.test").ok())["deleted"] is True
    wait_until(lambda: named.dig("zone-a.test") != ["192.0.2.10"])
    assert not list(named.zones_dir.glob("zone-a.test*"))
    assert "zone-a.test" not in named.zones_conf.read_text()
    gone = printed(hosting.run("dns.zone-delete", zone="zone-a.test").ok())
    assert gone["deleted"] is False and "nothing to delete" in gone["message"]


def test_records_are_added_listed_and_deleted_by_id(hosting: Hosting, named: Named) -> None:
    add_zone(hosting, "zone-b.test")
    added = hosting.run("dns.record-add", zone="zone-b.test", type="A", name="www", value="192.0.2.20", ttl=300).ok()
    record = printed(added)
    assert record["created"] is True
    wait_until(lambda: named.dig("www.zone-b.test") == ["192.0.2.20"])

    mx = hosting.run("dns.record-add", zone="zone-b.test", type="MX", value="mail.zone-b.test", priority=10).ok()
    txt = hosting.run("dns.record-add", zone="zone-b.test", type="TXT", value="v=spf1 mx -all").ok()
    wild = hosting.run("dns.record-add", zone="zone-b.test", type="A", name="dev", wildcard=True, value="192.0.2.30")
    wait_until(lambda: named.dig("x.dev.zone-b.test") == ["192.0.2.30"])
    assert named.dig("zone-b.test", "MX") == ["10 mail.zone-b.test."]
    assert named.dig("zone-b.test", "TXT") == ['"v=spf1 mx -all"']
    assert printed(wild.ok())["name"] == "*.dev"

    same = hosting.run("dns.record-add", zone="zone-b.test", type="A", name="www", value="192.0.2.20").ok()
    assert printed(same) == {**record, "created": False}

    listed = hosting.run("dns.record-list", zone="zone-b.test", type="MX").ok().result
    assert [r["id"] for r in listed["records"]] == [printed(mx)["id"]]
    everything = hosting.run("dns.record-list", zone="zone-b.test").ok().result["records"]
    assert printed(txt)["id"] in {r["id"] for r in everything}

    deleted = printed(hosting.run("dns.record-delete", zone="zone-b.test", id=record["id"]).ok())
    assert deleted["deleted"] == {k: v for k, v in record.items() if k != "created"}
    wait_until(lambda: named.dig("www.zone-b.test") == [])
    again = printed(hosting.run("dns.record-delete", zone="zone-b.test", id=record["id"]).ok())
    assert again["deleted"] is None and "nothing to delete" in again["message"]


def test_a_refused_record_leaves_the_zone_served_as_it_was(hosting: Hosting, named: Named) -> None:
    add_zone(hosting, "zone-c.test")
    hosting.run("dns.record-add", zone="zone-c.test", type="A", name="www", value="192.0.2.40").ok()
    wait_until(lambda: named.dig("www.zone-c.test") == ["192.0.2.40"])
    before = (named.zones_dir / "zone-c.test.zone").read_text()

    refused = hosting.run("dns.record-add", zone="zone-c.test", type="CNAME", name="www", value="other.example.com")
    assert refused.exit_code == 78, refused.text
    assert "CNAME and other data" in refused.text
    assert (named.zones_dir / "zone-c.test.zone").read_text() == before
    assert named.dig("www.zone-c.test") == ["192.0.2.40"]
    assert not list(named.zones_dir.glob("*.candidate"))


def test_a_missing_zone_is_a_clear_failure(hosting: Hosting, named: Named) -> None:
    run = hosting.run("dns.record-add", zone="no-such-zone.test", type="A", value="192.0.2.1")
    assert run.exit_code == 1
    assert "no zone no-such-zone.test" in run.text


def test_lookup_asks_the_given_server(hosting: Hosting, named: Named) -> None:
    add_zone(hosting, "zone-d.test")
    wait_until(lambda: named.dig("zone-d.test") == ["192.0.2.10"])
    found = hosting.run("dns.lookup", name="zone-d.test", type="A", server="127.0.0.1", port=named.port).ok().result
    assert found["status"] == "NOERROR"
    assert [(a["name"], a["type"], a["value"]) for a in found["answers"]] == [("zone-d.test.", "A", "192.0.2.10")]
    missing = hosting.run("dns.lookup", name="nope.zone-d.test", server="127.0.0.1", port=named.port).ok().result
    assert (missing["status"], missing["answers"]) == ("NXDOMAIN", [])


def test_check_compares_the_file_with_what_named_serves(hosting: Hosting, named: Named) -> None:
    add_zone(hosting, "zone-e.test")
    wait_until(lambda: named.dig("zone-e.test") == ["192.0.2.10"])
    checked = hosting.run("dns.check", zone="zone-e.test").ok().result
    assert checked["ok"] is True, checked
    assert checked["served_serial"] == checked["serial"]

    zone_file = named.zones_dir / "zone-e.test.zone"
    zone_file.write_text(zone_file.read_text().replace(" IN NS ", " IN NS broken..name "))
    broken = hosting.run("dns.check", zone="zone-e.test").ok().result
    assert broken["ok"] is False
    assert broken["file_ok"] is False


def test_dnssec_signs_the_zone_and_unsigns_it(hosting: Hosting, named: Named) -> None:
    add_zone(hosting, "zone-f.test")
    wait_until(lambda: named.dig("zone-f.test") == ["192.0.2.10"])
    hosting.run("dns.dnssec-set", zone="zone-f.test", state="on").ok()
    wait_until(lambda: any(line.startswith("257 3 13 ") for line in named.dig("zone-f.test", "DNSKEY")), timeout=30)
    assert hosting.run("dns.zone-show", zone="zone-f.test").ok().result["dnssec"] is True
    again = hosting.run("dns.dnssec-set", zone="zone-f.test", state="on").ok()
    assert "on already" in again.text

    # Records still change while signed (named re-signs the raw zone it reloads).
    hosting.run("dns.record-add", zone="zone-f.test", type="A", name="www", value="192.0.2.50").ok()
    wait_until(lambda: named.dig("www.zone-f.test") == ["192.0.2.50"])

    hosting.run("dns.dnssec-set", zone="zone-f.test", state="off").ok()
    assert "dnssec-policy insecure" in named.zones_conf.read_text()
    assert hosting.run("dns.zone-show", zone="zone-f.test").ok().result["dnssec"] is False
    assert named.dig("www.zone-f.test") == ["192.0.2.50"]
    hosting.run("dns.zone-delete", zone="zone-f.test").ok()
    assert not list((named.zones_dir / "keys").glob("Kzone-f.test.*"))


# --- parsers -------------------------------------------------------------------------------


def test_a_zone_file_reads_back_what_was_written() -> None:
    records = [
        Record("@", "NS", "ns1.example.com"),
        Record("@", "MX", "mail.example.com", 600, 10),
        Record("_sip._tcp", "SRV", "5 5060 sip.example.com", 300, 20),
        Record("@", "TXT", "v=spf1 include:_spf.example.net ~all"),
        Record("@", "CAA", "0 issue letsencrypt.org"),
        Record("*.dev", "A", "192.0.2.1"),
        Record("www", "CNAME", "example.net"),
    ]
    data = ZoneData("example.com", 2026010203, "ns1.example.com", "hostmaster.example.com", records)
    text = render_zone(data)
    assert "_sip._tcp 300 IN SRV 20 5 5060 sip.example.com." in text
    assert '@ 3600 IN CAA 0 issue "letsencrypt.org"' in text
    assert parse_zone("example.com", text) == data
    assert len({r.id for r in records}) == len(records)
    assert Record("www", "A", "192.0.2.1", 60).id == Record("www", "A", "192.0.2.1", 3600).id


def test_the_zone_statements_read_back() -> None:
    entries = {
        "a.test": ZoneEntry("a.test", "/z/a.test.zone"),
        "b.test": ZoneEntry("b.test", "/z/b.test.zone", "on"),
        "c.test": ZoneEntry("c.test", "/z/c.test.zone", "off"),
    }
    assert parse_statements(render_statements(entries, "/z/keys")) == entries


def test_the_serial_is_todays_or_one_more() -> None:
    assert next_serial(0, "20260102") == 2026010200
    assert next_serial(2026010200, "20260102") == 2026010201
    assert next_serial(2026010299, "20260102") == 2026010300
    assert next_serial(2025123105, "20260102") == 2026010200


DIG_OUTPUT = """\
;; Got answer:
;; ->>HEADER<<- opcode: QUERY, status: NOERROR, id: 32345
;; flags: qr aa rd; QUERY: 1, ANSWER: 2, AUTHORITY: 0, ADDITIONAL: 1

;; OPT PSEUDOSECTION:
; EDNS: version: 0, flags:; udp: 1232
;; ANSWER SECTION:
example.com.\t\t300\tIN\tMX\t10 mail.example.com.
example.com.\t\t300\tIN\tTXT\t"v=spf1 -all" "second"
"""


def test_dig_output_is_parsed() -> None:
    status, answers = parse_dig(DIG_OUTPUT)
    assert status == "NOERROR"
    assert answers == [
        {"name": "example.com.", "ttl": 300, "class": "IN", "type": "MX", "value": "10 mail.example.com."},
        {"name": "example.com.", "ttl": 300, "class": "IN", "type": "TXT", "value": '"v=spf1 -all" "second"'},
    ]
    assert parse_dig(DIG_OUTPUT.replace("NOERROR", "NXDOMAIN").split(";; ANSWER")[0]) == ("NXDOMAIN", [])
