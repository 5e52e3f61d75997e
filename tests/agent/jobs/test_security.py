"""``security.*`` through the API against the real root agent and real services of the session's
own: a fail2ban-server on its own socket and configuration (a jail on a test log, the ``dummy``
ban action writing to a file of ours), an sshd on 127.0.0.1 and a free port whose configuration
includes the test's drop-in folder, and nftables in a table named for this run (deleted at the
end; no other table is touched, loopback stays allowed).

``security.scan`` and ``security.scan-report`` against a real ClamAV daemon (Debian's
``clamd``, `tests.helpers.clamd`: the module's own, running as the user clamav), with the test's own
signatures: one hash signature, of the EICAR test file, because the ClamAV signature mirror that
``freshclam`` reads is a boundary these machines cannot reach."""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import stat
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent.files.fdops import CancelToken
from agent.files.jail import Jail
from agent.jobs.security.clamd import Clamd
from agent.jobs.security.fail2ban import parse_status
from agent.jobs.security.firewall import _kernel_refusal, rule_statement, ruleset
from agent.jobs.security.malware import FOREIGN_LINK, quarantine, scan_tree
from agent.jobs.security.sshd import PRIVILEGE_SEPARATION_DIR, parse_dropin, parse_effective, render_dropin
from agent.jobs.toolkit.base import JobContext
from agent.jobs.toolkit.output import EXIT_MISSING, EXIT_REFUSED
from agent.sites import SiteRegistry
from fleetdeck.launcher import free_port
from tests.helpers import wait_until
from tests.helpers.clamd import CLAMD, EICAR, FOUND_AS, ClamdServer, eicar_database, run_clamd
from tests.helpers.hosting import Hosting
from tests.helpers.races import Flipper
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


STREAM_MAX = 1024 * 1024  # the module's clamd's StreamMaxLength


@pytest.fixture(scope="module")
def clamav(hosting: Hosting) -> Iterator[ClamdServer]:
    if CLAMD is None:
        pytest.skip("needs clamd (Debian package clamav-daemon)")
    folder = hosting.folder / f"clamav-{secrets.token_hex(3)}"
    folder.mkdir(mode=0o755)
    with run_clamd(folder / "clamd", eicar_database(folder / "db"), stream_max_length=str(STREAM_MAX)) as server:
        hosting.configure("clamav", server.layout())
        yield server
        hosting.configure("clamav", {})


class ScanSite:
    def __init__(self, hosting: Hosting) -> None:
        self.hosting = hosting
        self.domain = f"scan{secrets.token_hex(4)}.example.test"
        self.slug = self.domain.replace(".", "-")

    @property
    def home(self) -> Path:
        return self.hosting.home / self.slug

    def regular_files(self) -> int:
        """The files the scan gives clamd: regular, not empty (a link is not followed)."""
        files = [path for path in self.home.rglob("*") if path.is_file() and not path.is_symlink()]
        return sum(1 for path in files if path.stat().st_size)

    def put(self, inside: str, data: bytes) -> Path:
        """A file of the site's, owned by its user (as an upload through the site would be)."""
        path = self.home / inside
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        owner = pwd.getpwnam(self.slug)
        os.chown(path, owner.pw_uid, owner.pw_gid)
        return path


@pytest.fixture
def site(hosting: Hosting, clamav: ClamdServer) -> Iterator[ScanSite]:
    made = ScanSite(hosting)
    hosting.run("site.create", domain=made.domain).ok()
    yield made
    hosting.run("site.delete", domain=made.domain).ok()
    subprocess.run(["userdel", made.slug], capture_output=True, check=False)


def clamd_engine() -> str:
    """The engine version clamd says it is (``clamd --version``: ``ClamAV 1.4.6``, a database's after ``/``)."""
    assert CLAMD is not None
    said = subprocess.run([CLAMD, "--version"], capture_output=True, text=True, check=True).stdout
    return said.strip().removeprefix("ClamAV ").partition("/")[0]


def test_a_scan_reports_what_it_finds_and_leaves_it_in_place(hosting: Hosting, site: ScanSite) -> None:
    infected = site.put("public_html/uploads/shell.php", EICAR)
    site.put("public_html/index.php", b"<?php echo 'fine';\n")
    outside = hosting.folder / f"outside-{site.slug}.txt"  # another's file, linked from the site
    outside.write_bytes(EICAR)
    (site.home / "public_html" / "link.php").symlink_to(outside)

    run = hosting.run("security.scan", domain=site.domain).ok()
    assert f"{infected}: {FOUND_AS} FOUND" in run.stdout  # streamed as it is found
    report = hosting.run("security.scan-report").ok().result
    assert json.loads(run.stdout[-1]) == report
    assert report["sites"] == [site.domain] and report["engine"] == clamd_engine()
    assert report["signatures"] is None  # clamd gives a database version; a database of one's own has none
    assert report["scanned_files"] == site.regular_files()  # the link is not followed
    assert report["not_scanned"] == []
    assert report["infected"] == [
        {
            "domain": site.domain,
            "file": "public_html/uploads/shell.php",
            "path": str(infected),
            "signature": FOUND_AS,
            "quarantined": None,
        }
    ]
    assert infected.read_bytes() == EICAR and outside.read_bytes() == EICAR  # a report, nothing moved
    assert hosting.run("security.scan-report", id=report["id"]).ok().result == report
    status = hosting.run("security.status").ok().result["scan"]
    assert status == {
        "available": True,
        "last": {"id": report["id"], "finished_at": report["finished_at"], "infected": 1},
    }
    outside.unlink()


def test_root_reads_each_file_and_clamd_gets_only_its_bytes(
    hosting: Hosting, clamav: ClamdServer, site: ScanSite
) -> None:
    """clamd runs as clamav, which may open nothing of the site's: a file of mode 000 in a folder
    of mode 0700 is found all the same, because the agent opened it beneath the site's jail and
    streamed its bytes (a scan as the site's user could not read it)."""
    hidden = site.put("private/shell.php", EICAR)
    hidden.chmod(0)
    hidden.parent.chmod(0o700)
    status = Path(f"/proc/{clamav.process.pid}/status").read_text()
    uid = int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])
    assert uid == pwd.getpwnam("clamav").pw_uid  # the daemon is not root: it never reads a site path

    report = json.loads(hosting.run("security.scan", domain=site.domain).ok().stdout[-1])
    assert [(hit["file"], hit["signature"]) for hit in report["infected"]] == [("private/shell.php", FOUND_AS)]
    assert hidden.stat().st_mode & 0o777 == 0  # left as it was


def test_what_the_scan_does_not_read_is_named_not_scanned(
    hosting: Hosting, clamav: ClamdServer, site: ScanSite
) -> None:
    """A hard link to root's file (where fs.protected_hardlinks is off: made here as root) is not
    read, not even opened (its access time stays); a file over clamd's StreamMaxLength is not
    reported clean; a FIFO is no file to scan (the scan does not wait on it)."""
    roots = hosting.folder / f"root-{site.slug}.php"
    roots.write_bytes(EICAR)
    roots.chmod(0o600)
    old = time.time() - 7 * 86400
    os.utime(roots, (old, old + 3600))  # an access time before the change: a read moves it (relatime)
    linked = site.home / "public_html" / "linked.php"
    os.link(roots, linked)
    big = site.put("public_html/big.bin", b"x" * (STREAM_MAX + 1))
    os.mkfifo(site.home / "public_html" / "pipe")

    report = json.loads(hosting.run("security.scan", domain=site.domain).ok().stdout[-1])
    assert report["infected"] == []
    assert sorted((entry["file"], entry["path"], entry["reason"]) for entry in report["not_scanned"]) == [
        ("public_html/big.bin", str(big), "larger than clamd's StreamMaxLength"),
        ("public_html/linked.php", str(linked), FOREIGN_LINK),
    ]
    assert report["scanned_files"] == site.regular_files() - 2
    assert roots.stat().st_atime == old and roots.read_bytes() == EICAR
    linked.unlink()
    roots.unlink()


def test_quarantine_takes_the_infected_file_out_of_the_site(hosting: Hosting, site: ScanSite) -> None:
    infected = site.put("public_html/wp-content/uploads/x: y.php", EICAR)
    clean = site.put("public_html/index.html", b"<h1>fine</h1>\n")
    owner = pwd.getpwnam(site.slug)

    run = hosting.run("security.scan", domain=site.domain, quarantine=True)
    report = json.loads(run.ok().stdout[-1])
    [hit] = report["infected"]
    moved = Path(hit["quarantined"]["to"])
    assert not infected.exists() and moved.read_bytes() == EICAR
    assert (
        moved == hosting.state / "quarantine" / report["id"] / site.domain / "public_html/wp-content/uploads/x: y.php"
    )
    assert (moved.stat().st_uid, moved.stat().st_mode & 0o777) == (0, 0o600)
    assert hit["quarantined"] | {"to": None} == {"to": None, "uid": owner.pw_uid, "gid": owner.pw_gid, "mode": "0644"}
    assert clean.read_bytes() == b"<h1>fine</h1>\n"
    again = json.loads(hosting.run("security.scan", domain=site.domain, quarantine=True).ok().stdout[-1])
    assert again["infected"] == [] and again["scanned_files"] == site.regular_files()


def test_a_scan_without_a_domain_covers_every_site(hosting: Hosting, site: ScanSite) -> None:
    other = ScanSite(hosting)
    hosting.run("site.create", domain=other.domain).ok()
    try:
        site.put("public_html/a.php", EICAR)
        other.put("logs/b.txt", EICAR)
        report = json.loads(hosting.run("security.scan").ok().stdout[-1])
        assert {site.domain, other.domain} <= set(report["sites"])
        found = {(hit["domain"], hit["file"]) for hit in report["infected"]}
        assert {(site.domain, "public_html/a.php"), (other.domain, "logs/b.txt")} <= found
    finally:
        hosting.run("site.delete", domain=other.domain).ok()


def test_without_clamd_the_scan_says_which_package_and_status_says_it_is_not_there(
    hosting: Hosting, clamav: ClamdServer, site: ScanSite
) -> None:
    nothing = clamav.socket.with_name("nothing.ctl")  # no clamd answers there
    hosting.configure("clamav", {"socket": str(nothing), "database_dir": str(clamav.database_dir)})
    try:
        run = hosting.run("security.scan", domain=site.domain)
        assert run.exit_code == EXIT_MISSING and "clamav-daemon" in run.text and str(nothing) in run.text
        assert hosting.run("security.status").ok().result["scan"]["available"] is False
    finally:
        hosting.configure("clamav", clamav.layout())


def test_without_signatures_the_scan_says_where_to_get_them(
    hosting: Hosting, clamav: ClamdServer, site: ScanSite
) -> None:
    """clamd does not start without a signature database: the scan names freshclam."""
    empty = hosting.folder / f"clamav-empty-{site.slug}"
    empty.mkdir()
    hosting.configure("clamav", {"socket": str(clamav.socket.with_name("nothing.ctl")), "database_dir": str(empty)})
    try:
        run = hosting.run("security.scan", domain=site.domain)
        assert run.exit_code == EXIT_MISSING and "freshclam" in run.text and "clamav-freshclam" in run.text
    finally:
        hosting.configure("clamav", clamav.layout())


def test_a_report_that_does_not_exist_is_an_error(hosting: Hosting, clamav: ClamdServer) -> None:
    run = hosting.run("security.scan-report", id="scan-19700101T000000Z-0000")
    assert run.exit_code == 1 and "no scan report scan-19700101T000000Z-0000" in run.text


# --- the quarantine against a hostile site user ---------------------------------------------------


def test_a_hit_whose_folder_became_a_link_after_the_scan_stays_and_nothing_outside_moves(
    tmp_path: Path, clamav: ClamdServer
) -> None:
    """Deterministic: the scan (the agent's own function, in this process, with the real clamd)
    finds the files, then their folder is swapped for a link to a folder of root's holding a file
    of the same name, then the quarantine runs: it moves nothing, and root's file keeps its place,
    mode and owner."""
    home, state, outside = tmp_path / "home", tmp_path / "state", tmp_path / "root-only"
    (home / "site-a" / "uploads").mkdir(parents=True)
    state.mkdir()
    outside.mkdir()
    (home / "site-a" / "uploads" / "shell.php").write_bytes(EICAR)
    (home / "site-a" / "uploads" / "other.php").write_bytes(EICAR)
    (outside / "shell.php").write_bytes(EICAR)  # root's: it must stay where it is, as it is
    os.chmod(outside / "shell.php", 0o644)
    before = (outside / "shell.php").stat()
    registry = SiteRegistry(str(state))
    site = registry.add({"domain": "a.example.test", "slug": "site-a"})
    ctx = JobContext(str(home), str(state), registry, "test")

    with Jail(str(home / "site-a")) as jail:
        found = scan_tree(jail, Clamd(str(clamav.socket)), CancelToken(), lambda path, what: None)
    assert found.infected == [("uploads/other.php", FOUND_AS), ("uploads/shell.php", FOUND_AS)]
    os.rename(home / "site-a" / "uploads", home / "site-a" / "moved")
    os.symlink(outside, home / "site-a" / "uploads")  # the site's user swaps the folder for a link

    assert quarantine(ctx, "scan-1", site, "uploads/shell.php") is None
    assert quarantine(ctx, "scan-1", site, "moved/other.php") is not None  # a plain hit still goes
    after = (outside / "shell.php").stat()
    assert (after.st_ino, after.st_mode, after.st_uid) == (before.st_ino, before.st_mode, before.st_uid)
    assert (outside / "shell.php").read_bytes() == EICAR
    assert [p.name for p in (state / "quarantine" / "scan-1" / "a.example.test").rglob("*.php")] == ["other.php"]


def test_a_racing_exchange_during_a_quarantine_moves_only_the_sites_files(hosting: Hosting, site: ScanSite) -> None:
    """Folders of the site exchanged with a link to root's folder (holding infected files of the
    same names) all through the scan and the quarantine: whatever moment each swap lands at, what
    is quarantined is the site's, and root's files keep their place, inode and mode, and are never
    read (their access time stays)."""
    outside = hosting.folder / f"root-only-{site.slug}"
    outside.mkdir()
    (outside / "hit.php").write_bytes(EICAR)
    old = time.time() - 7 * 86400
    os.utime(outside / "hit.php", (old, old + 3600))  # a read would move its access time (relatime)
    before = (outside / "hit.php").stat()
    victims = []
    for i in range(8):
        site.put(f"race/v{i}/hit.php", EICAR)
        victims.append(site.home / "race" / f"v{i}")
    with Flipper(victims, outside) as flipper:
        for _ in range(3):
            report = json.loads(hosting.run("security.scan", domain=site.domain, quarantine=True).ok().stdout[-1])
            for hit in report["infected"]:
                if hit["quarantined"] is not None:
                    assert hit["quarantined"]["uid"] == pwd.getpwnam(site.slug).pw_uid  # the site's own file
    assert flipper.flips > 0
    after = (outside / "hit.php").stat()
    assert (after.st_ino, after.st_mode, after.st_uid) == (before.st_ino, before.st_mode, before.st_uid)
    assert after.st_atime == before.st_atime
    assert sorted(os.listdir(outside)) == ["hit.php"]
    shutil.rmtree(outside)
