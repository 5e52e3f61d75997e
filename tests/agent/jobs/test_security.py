"""``security.*`` through the API against the real root agent and real services of the session's
own: a fail2ban-server on its own socket and configuration (a jail on a test log, the ``dummy``
ban action writing to a file of ours), an sshd on 127.0.0.1 and a free port whose configuration
includes the test's drop-in folder, and nftables in a table named for this run (deleted at the
end; no other table is touched, loopback stays allowed)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent.jobs.security.fail2ban import parse_status
from agent.jobs.security.firewall import _kernel_refusal, rule_statement, ruleset
from agent.jobs.security.sshd import PRIVILEGE_SEPARATION_DIR, parse_dropin, parse_effective, render_dropin
from agent.jobs.toolkit.output import EXIT_MISSING, EXIT_REFUSED
from fleetdeck.launcher import free_port
from tests.helpers import wait_until
from tests.helpers.hosting import Hosting
from tests.helpers.sshd import Sshd, running_sshd

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root")

needs = {tool: shutil.which(tool) is None for tool in ("fail2ban-server", "nft")}


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False)


# --- fail2ban ------------------------------------------------------------------------------


@dataclass
class Fail2ban:
    socket: str
    conf: Path
    banned_file: Path

    def client(self, *words: str) -> str:
        done = _run("fail2ban-client", "-s", self.socket, *words)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()


@pytest.fixture(scope="module")
def fail2ban(hosting: Hosting) -> Iterator[Fail2ban]:
    if needs["fail2ban-server"]:
        pytest.skip("needs fail2ban")
    folder = hosting.folder / "fail2ban"
    conf = folder / "conf"
    shutil.copytree("/etc/fail2ban", conf)
    for packaged in (conf / "jail.d").iterdir():  # Debian's defaults turn the real sshd jail on
        packaged.unlink()
    socket, pidfile, log = folder / "fail2ban.sock", folder / "fail2ban.pid", folder / "auth-test.log"
    log.touch()
    banned = folder / "banned.txt"
    (conf / "fail2ban.local").write_text(
        f"[Definition]\nlogtarget = {folder / 'fail2ban.log'}\nsocket = {socket}\npidfile = {pidfile}\n"
        "dbfile = :memory:\n"
    )
    (conf / "filter.d" / "fdtest.conf").write_text("[Definition]\nfailregex = ^auth failure from <HOST>$\n")
    (conf / "jail.local").write_text(
        f"[DEFAULT]\nbackend = polling\n\n[fdtest]\nenabled = true\nfilter = fdtest\nlogpath = {log}\n"
        f"action = dummy[target={banned}]\n"
    )
    started = _run("fail2ban-server", "-b", "-s", str(socket), "-p", str(pidfile), "-c", str(conf))
    assert started.returncode == 0, started.stderr
    server = Fail2ban(str(socket), conf, banned)
    wait_until(lambda: _run("fail2ban-client", "-s", str(socket), "ping").returncode == 0)
    hosting.configure("fail2ban", {"socket": str(socket), "conf_dir": str(conf), "jail_dir": str(conf / "jail.d")})
    yield server
    _run("fail2ban-client", "-s", str(socket), "stop")


def test_fail2ban_status_ban_and_unban(hosting: Hosting, fail2ban: Fail2ban) -> None:
    status = hosting.run("security.fail2ban-status").ok().result
    assert [jail["name"] for jail in status["jails"]] == ["fdtest"]

    hosting.run("security.fail2ban-ban", jail="fdtest", ip="198.51.100.23").ok()
    assert "198.51.100.23" in fail2ban.client("get", "fdtest", "banned")
    assert "+198.51.100.23" in fail2ban.banned_file.read_text().split()  # the jail's action ran
    again = hosting.run("security.fail2ban-ban", jail="fdtest", ip="198.51.100.23").ok()
    assert "already banned" in again.text
    jail = hosting.run("security.fail2ban-status", jail="fdtest").ok().result["jails"][0]
    assert jail["banned"] == ["198.51.100.23"] and jail["currently_banned"] == 1

    hosting.run("security.fail2ban-unban", jail="fdtest", ip="198.51.100.23").ok()
    assert "198.51.100.23" not in fail2ban.client("get", "fdtest", "banned")
    assert "was not banned" in hosting.run("security.fail2ban-unban", jail="fdtest", ip="198.51.100.23").ok().text

    missing = hosting.run("security.fail2ban-ban", jail="nojail", ip="198.51.100.23")
    assert missing.exit_code == 1 and "no jail nojail" in missing.text


def test_fail2ban_jail_set_applies_now_and_keeps_it(hosting: Hosting, fail2ban: Fail2ban) -> None:
    hosting.run("security.fail2ban-jail-set", jail="fdtest", max_retry=3, ban_time_s=3600, find_time_s=120).ok()
    assert (fail2ban.client("get", "fdtest", "maxretry"), fail2ban.client("get", "fdtest", "bantime")) == ("3", "3600")
    assert fail2ban.client("get", "fdtest", "findtime") == "120"
    kept = fail2ban.conf / "jail.d" / "fleetdeck-fdtest.local"
    assert "maxretry = 3" in kept.read_text()
    assert _run("fail2ban-client", "-c", str(fail2ban.conf), "-t").returncode == 0


def test_a_jail_setting_fail2ban_refuses_leaves_the_previous_one(hosting: Hosting, fail2ban: Fail2ban) -> None:
    hosting.run("security.fail2ban-jail-set", jail="fdtest", max_retry=4).ok()
    kept = fail2ban.conf / "jail.d" / "fleetdeck-fdtest.local"
    before = kept.read_text()
    broken = fail2ban.conf / "jail.d" / "zz-broken.local"  # someone else's mistake in the same folder
    broken.write_text("[fdtest]\nfilter = no-such-filter\n")
    try:
        run = hosting.run("security.fail2ban-jail-set", jail="fdtest", max_retry=9)
        assert run.exit_code == EXIT_REFUSED, run.text
        assert "no-such-filter" in run.text
    finally:
        broken.unlink()
    assert kept.read_text() == before
    assert fail2ban.client("get", "fdtest", "maxretry") == "4"


# --- sshd ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sshd(hosting: Hosting) -> Iterator[Sshd]:
    yield from running_sshd(hosting)


def test_ssh_set_turns_password_login_off_and_on(hosting: Hosting, sshd: Sshd) -> None:
    wait_until(lambda: sshd.methods().endswith("(publickey,password)."))
    hosting.run("security.ssh-set", password_auth="off", root_login="no").ok()
    assert sshd.effective()["password_auth"] == "off" and sshd.effective()["root_login"] == "no"
    wait_until(lambda: sshd.methods().endswith("(publickey)."))  # reloaded: a login attempt sees it

    assert "nothing changed" in hosting.run("security.ssh-set", password_auth="off").ok().text
    hosting.run("security.ssh-set", password_auth="on", root_login="prohibit-password").ok()
    effective = sshd.effective()
    assert effective["password_auth"] == "on" and effective["root_login"] == "prohibit-password"
    wait_until(lambda: sshd.methods().endswith("(publickey,password)."))
    assert parse_dropin((sshd.dropins / "00-fleetdeck.conf").read_text()) == {
        "PasswordAuthentication": "yes",
        "PermitRootLogin": "prohibit-password",
    }


def test_ssh_set_port_adds_the_listening_port(hosting: Hosting, sshd: Sshd) -> None:
    port = free_port()
    hosting.run("security.ssh-set", port=port).ok()
    assert port in sshd.effective()["ports"]  # type: ignore[operator]
    status = hosting.run("security.status").ok().result
    assert port in status["ssh"]["ports"]


def test_an_ssh_setting_sshd_refuses_leaves_the_previous_one(hosting: Hosting, sshd: Sshd) -> None:
    hosting.run("security.ssh-set", root_login="no").ok()
    dropin = sshd.dropins / "00-fleetdeck.conf"
    before = dropin.read_text()
    broken = sshd.dropins / "99-broken.conf"
    broken.write_text("NoSuchKeyword yes\n")
    try:
        run = hosting.run("security.ssh-set", root_login="yes")
        assert run.exit_code == EXIT_REFUSED, run.text
        assert "NoSuchKeyword" in run.text
        assert dropin.read_text() == before
    finally:
        broken.unlink()
    assert sshd.effective()["root_login"] == "no"


def test_ssh_set_makes_the_privilege_separation_folder_sshd_needs(hosting: Hosting, sshd: Sshd) -> None:
    """/run/sshd is on a tmpfs, made by ssh's service: where it is missing (a fresh container),
    `sshd -t` refuses every configuration, so the job makes it first, root's and 0755."""
    other = "no" if sshd.effective()["root_login"] != "no" else "prohibit-password"
    was_there = os.path.isdir(PRIVILEGE_SEPARATION_DIR)
    if was_there:
        os.rmdir(PRIVILEGE_SEPARATION_DIR)  # sshd's empty chroot: another sshd remakes nothing in it
    try:
        hosting.run("security.ssh-set", root_login=other).ok()  # a change: `sshd -t` runs
        made = os.lstat(PRIVILEGE_SEPARATION_DIR)
        assert stat.S_ISDIR(made.st_mode) and made.st_uid == 0 and stat.S_IMODE(made.st_mode) == 0o755
        assert sshd.effective()["root_login"] == other
    finally:
        if was_there:
            os.makedirs(PRIVILEGE_SEPARATION_DIR, 0o755, exist_ok=True)
        elif os.path.isdir(PRIVILEGE_SEPARATION_DIR):
            os.rmdir(PRIVILEGE_SEPARATION_DIR)


# --- nftables ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def nft_table(hosting: Hosting) -> Iterator[str]:
    if needs["nft"] or _run("nft", "list", "tables").returncode != 0:
        pytest.skip("needs nftables in the kernel")
    table = f"fdtest_{uuid.uuid4().hex[:8]}"
    hosting.configure("system", {**hosting.layout.get("system", {}), "nft_table": table})
    yield table
    _run("nft", "delete", "table", "inet", table)


def _kernel(table: str) -> str | None:
    listed = _run("nft", "list", "table", "inet", table)
    return listed.stdout if listed.returncode == 0 else None


def test_firewall_rules_enable_and_disable(hosting: Hosting, nft_table: str, sshd: Sshd) -> None:
    tables_before = _run("nft", "list", "tables").stdout.replace(f"table inet {nft_table}\n", "")
    https = hosting.run("security.firewall-allow", port=8443, proto="tcp", comment="https").ok()
    rule_id = json.loads(https.stdout[0])["rule"]["id"]
    assert "exists already" in hosting.run("security.firewall-allow", port=8443, proto="tcp").ok().text
    hosting.run("security.firewall-deny", port_range="6000-6100", proto="any", source="198.51.100.0/24").ok()
    assert _kernel(nft_table) is None  # off: recorded, not loaded
    listed = hosting.run("security.firewall-list").ok().result
    assert [r["action"] for r in listed["rules"]] == ["allow", "deny"] and listed["enabled"] is False

    try:
        hosting.run("security.firewall-enable").ok()
        loaded = _kernel(nft_table)
        assert loaded is not None
        assert "policy drop" in loaded and 'iif "lo" accept' in loaded
        assert f'tcp dport 8443 accept comment "{rule_id} https"' in loaded
        assert "ip saddr 198.51.100.0/24 meta l4proto { tcp, udp } th dport 6000-6100 drop" in loaded
        assert "ct state established,related accept" in loaded and 'accept comment "ssh"' in loaded
        assert loaded.index("6000-6100 drop") < loaded.index("8443 accept")  # deny first

        hosting.run("security.firewall-delete", rule=rule_id).ok()
        assert "8443" not in (_kernel(nft_table) or "")
        assert "nothing to delete" in hosting.run("security.firewall-delete", rule=rule_id).ok().text
        assert hosting.run("security.status").ok().result["firewall"]["loaded"] is True

        port = free_port()  # SSH moves to a new port: the firewall follows at once
        assert "firewall reloaded" in hosting.run("security.ssh-set", port=port).ok().text
        ssh_rule = next(line for line in (_kernel(nft_table) or "").splitlines() if 'comment "ssh"' in line)
        assert str(port) in ssh_rule and str(sshd.port) in ssh_rule
    finally:
        hosting.run("security.firewall-disable").ok()
    assert _kernel(nft_table) is None
    assert _run("nft", "list", "tables").stdout == tables_before  # no other table touched
    assert [r["action"] for r in hosting.run("security.firewall-list").ok().result["rules"]] == ["deny"]


# --- parsers -------------------------------------------------------------------------------

JAIL_STATUS = """Status for the jail: sshd
|- Filter
|  |- Currently failed:\t2
|  |- Total failed:\t17
|  `- File list:\t/var/log/auth.log
`- Actions
   |- Currently banned:\t2
   |- Total banned:\t5
   `- Banned IP list:\t198.51.100.7 2001:db8::1
"""


def test_parse_fail2ban_status() -> None:
    assert parse_status("Status\n|- Number of jail:\t2\n`- Jail list:\tnginx-http-auth, sshd\n") == {
        "jail_count": 2,
        "jails": ["nginx-http-auth", "sshd"],
    }
    assert parse_status(JAIL_STATUS) == {
        "currently_failed": 2,
        "total_failed": 17,
        "files": ["/var/log/auth.log"],
        "currently_banned": 2,
        "total_banned": 5,
        "banned": ["198.51.100.7", "2001:db8::1"],
    }
    assert parse_status("Status\n|- Number of jail:\t0\n`- Jail list:\t\n")["jails"] == []


def test_parse_sshd_effective_and_the_dropin() -> None:
    text = "port 22\nport 2222\npasswordauthentication no\npermitrootlogin without-password\nusepam yes\n"
    assert parse_effective(text) == {"ports": [22, 2222], "password_auth": "off", "root_login": "prohibit-password"}
    values = {"PermitRootLogin": "no", "Port": "2222", "PasswordAuthentication": "no"}
    rendered = render_dropin(values)
    assert rendered.splitlines()[1:] == ["Port 2222", "PasswordAuthentication no", "PermitRootLogin no"]
    assert parse_dropin(rendered) == values


def test_firewall_statements_and_kernel_refusal() -> None:
    rule = {
        "id": "fw-1",
        "action": "allow",
        "proto": "udp",
        "port": None,
        "port_range": None,
        "source": "2001:db8::/32",
    }
    assert rule_statement(rule) == 'ip6 saddr 2001:db8::/32 meta l4proto udp accept comment "fw-1"'
    assert ruleset("t", False, [rule], [22]) == "table inet t {\n}\ndelete table inet t\n"
    refusal = _kernel_refusal("Error: Could not process rule: Operation not permitted")
    assert refusal is not None and refusal.exit_code == EXIT_MISSING
    assert _kernel_refusal("Error: syntax error, unexpected number") is None
