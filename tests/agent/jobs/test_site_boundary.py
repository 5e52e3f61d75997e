"""The site kinds against a hostile site user, through the API on the session's real root agent,
nginx and PHP-FPM: ``site.clone`` and ``site.delete`` with folders exchanged with a link while they
walk (a racing thread, `tests.helpers.races`), a clone that fails, a delete the site's own
processes would stop or that is interrupted, and the web server's logs, which a link planted in
the site never redirects (the pattern of CVE-2016-1247)."""

from __future__ import annotations

import json
import os
import pwd
import secrets
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent.jobs.toolkit.boundary import processes_of
from tests.helpers import wait_until
from tests.helpers.hosting import Hosting, JobRun, ModuleSites
from tests.helpers.races import Flipper

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs the root agent's system users")

SITES = ModuleSites()
unique_domain = SITES.domain


@pytest.fixture(scope="module", autouse=True)
def no_site_left_behind(hosting: Hosting) -> Iterator[None]:
    yield
    SITES.delete_left(hosting, strict=False)


def reported(run: JobRun) -> Any:
    return json.loads(run.ok().stdout[-1])


def slug(domain: str) -> str:
    return domain.replace(".", "-")


class Outside:
    """Root's files beside the sites: what a hostile site user would like to read, or to change."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        (folder / "keys").mkdir(parents=True)
        (folder / "keys" / "agent-token").write_text("outside secret\n")
        (folder / "victim.log").write_text("outside, untouched\n")
        folder.chmod(0o700)

    def state(self) -> dict[str, tuple[int, int, str]]:
        return {
            str(path): (path.stat().st_ino, path.stat().st_mode, path.read_text())
            for path in sorted(self.folder.rglob("*"))
            if path.is_file()
        }


@pytest.fixture
def outside(hosting: Hosting) -> Outside:
    return Outside(hosting.folder / f"root-only-{secrets.token_hex(3)}")


def race_tree(hosting: Hosting, domain: str, n: int = 10) -> list[Path]:
    """Folders of the site's user (with files in them) to exchange with a link."""
    owner = pwd.getpwnam(slug(domain))
    victims = []
    for i in range(n):
        victim = hosting.home / slug(domain) / "public_html" / "race" / f"v{i:02d}"
        (victim / "deeper").mkdir(parents=True)
        (victim / "f.txt").write_text("inside\n")
        (victim / "deeper" / "g.txt").write_text("inside\n")
        for path in (victim.parent, victim, victim / "deeper", victim / "f.txt", victim / "deeper" / "g.txt"):
            os.chown(path, owner.pw_uid, owner.pw_gid)
        victims.append(victim)
    return victims


def outside_content_in(folder: Path) -> list[str]:
    return [
        str(path)
        for path in folder.rglob("*")
        if path.is_file() and not path.is_symlink() and "outside" in path.read_text(errors="replace")
    ]


# --- clone ---------------------------------------------------------------------------------------


def test_a_clone_never_copies_what_a_swapped_link_leads_to(hosting: Hosting, outside: Outside) -> None:
    source = unique_domain("src")
    hosting.run("site.create", domain=source).ok()
    victims = race_tree(hosting, source)
    home = hosting.home / slug(source)
    os.mkfifo(home / "public_html" / "fifo")
    os.link(outside.folder / "victim.log", home / "public_html" / "hardlink")  # root's file, two links
    before = outside.state()
    target = unique_domain("cln")
    with Flipper(victims, outside.folder) as flipper:
        run = hosting.run("site.clone", domain=source, target=target)
    assert flipper.flips > 0
    cloned = reported(run)
    assert cloned["cloned_from"] == source and cloned["site"]["user"] == slug(target)
    clone = hosting.home / slug(target)
    assert outside_content_in(clone) == []
    assert not (clone / "public_html" / "fifo").exists() and not (clone / "public_html" / "hardlink").exists()
    assert any("not copied" in line and "public_html/fifo" in line for line in run.stderr)
    owner = pwd.getpwnam(slug(target))
    assert (clone / "public_html" / "index.html").stat().st_uid == owner.pw_uid
    assert outside.state() == before
    os.unlink(home / "public_html" / "hardlink")


def test_a_clone_that_fails_leaves_no_folder_user_entry_or_web_file(hosting: Hosting) -> None:
    source = unique_domain("deep")
    hosting.run("site.create", domain=source).ok()
    deep = hosting.home / slug(source) / "public_html" / "deep"
    deep.joinpath(*["d"] * 300).mkdir(parents=True)  # deeper than a copy goes: it fails half-way
    names_before = sorted(os.listdir(hosting.home))
    target = unique_domain("failed")
    run = hosting.run("site.clone", domain=source, target=target)
    assert run.exit_code == 1 and "nested too deeply" in run.text
    assert sorted(os.listdir(hosting.home)) == names_before  # no target, no temporary folder
    with pytest.raises(KeyError):
        pwd.getpwnam(slug(target))
    assert target not in {site["domain"] for site in hosting.run("site.list").ok().result["sites"]}
    assert hosting.nginx is not None and not (hosting.nginx.sites_dir / f"fleetdeck-{slug(target)}.conf").exists()
    assert not hosting.site_logs(target).exists()


# --- delete --------------------------------------------------------------------------------------


def test_a_delete_stops_a_running_cron_run_and_removes_everything(hosting: Hosting) -> None:
    domain = unique_domain("cronrun")
    hosting.run("site.create", domain=domain).ok()
    hosting.run("cron.add", domain=domain, schedule="0 0 1 1 *", command="sleep 300").ok()
    [entry] = hosting.run("cron.list", domain=domain).ok().result["entries"]
    uid = pwd.getpwnam(slug(domain)).pw_uid
    started = hosting.post("cron.run", id=entry["id"])
    assert started.status_code == 201, started.text
    wait_until(lambda: any(_comm(pid) == "sleep" for pid in processes_of(uid)[0]), timeout=30)

    deleted = reported(hosting.run("site.delete", domain=domain))
    assert deleted["user_removed"] == slug(domain) and deleted["files_removed"] is True
    assert processes_of(uid) == ([], [])
    assert not (hosting.home / slug(domain)).exists() and not hosting.site_logs(domain).exists()
    with pytest.raises(KeyError):
        pwd.getpwnam(slug(domain))
    assert domain not in {site["domain"] for site in hosting.run("site.list").ok().result["sites"]}
    ended = hosting.wait(started.json()["id"])
    assert ended.exit_code != 0  # its process was killed


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


# The site's user exchanges its folders with a link to root's folder, in a loop, in a process of its own.
USER_RACER = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
pairs = [(os.fsencode(v), os.fsencode(v + ".mine")) for v in sys.argv[2:]]
for victim, link in pairs:
    os.symlink(sys.argv[1], link)
while True:
    for victim, link in pairs:
        libc.renameat2(-100, victim, -100, link, 2)
"""


def test_a_delete_removes_the_files_while_a_folder_is_exchanged_with_a_link(hosting: Hosting, outside: Outside) -> None:
    """The site's user races the delete with exchanges of its own (its process is stopped with
    the others), and so does a thread of root's here, which no delete stops: whichever moment a
    swap lands at, the removal never follows the link, and ends."""
    domain = unique_domain("race")
    hosting.run("site.create", domain=domain).ok()
    victims = race_tree(hosting, domain, n=20)
    user = pwd.getpwnam(slug(domain))
    racer = subprocess.Popen(
        ["python3", "-c", USER_RACER, str(outside.folder), *map(str, victims[10:])],
        user=user.pw_uid, group=user.pw_gid, extra_groups=[], cwd="/",
    )  # fmt: skip
    before = outside.state()
    try:
        wait_until(lambda: all(Path(f"{v}.mine").is_symlink() or v.is_symlink() for v in victims[10:]))
        with Flipper(victims[:10], outside.folder) as flipper:
            deleted = reported(hosting.run("site.delete", domain=domain))
        assert racer.wait(timeout=30) == -signal.SIGKILL  # stopped by the delete
    finally:
        racer.kill()
        racer.wait()
    assert flipper.flips > 0
    assert deleted["files_removed"] is True and not (hosting.home / slug(domain)).exists()
    assert outside.state() == before


def _shadow(name: str) -> list[str]:
    """The user's line of /etc/shadow, split on ':'."""
    with open("/etc/shadow") as f:
        return next(line.rstrip("\n").split(":") for line in f if line.startswith(f"{name}:"))


def test_a_delete_that_fails_half_way_is_finished_by_running_it_again(hosting: Hosting) -> None:
    """A file that cannot be removed (made immutable here, as a fault: that is not a site user's
    power) stops the delete half-way: the registry entry and the user stay, the account is locked,
    and running it again once the fault is gone finishes it."""
    domain = unique_domain("half")
    hosting.run("site.create", domain=domain).ok()
    stuck = hosting.home / slug(domain) / "public_html" / "stuck.txt"
    stuck.write_text("cannot go\n")
    subprocess.run(["chattr", "+i", str(stuck)], check=True)
    try:
        failed = hosting.run("site.delete", domain=domain)
    finally:
        subprocess.run(["chattr", "-i", str(stuck)], check=True)
    assert failed.exit_code == 1 and "run site.delete again to finish" in failed.text and "stuck.txt" in failed.text
    assert domain in {site["domain"] for site in hosting.run("site.list").ok().result["sites"]}
    locked = _shadow(slug(domain))
    assert locked[1].startswith("!") and locked[7] == "1"  # no login, cron job or su any more
    deleted = reported(hosting.run("site.delete", domain=domain))
    assert deleted["user_removed"] == slug(domain) and deleted["files_removed"] is True
    assert not (hosting.home / slug(domain)).exists()
    assert domain not in {site["domain"] for site in hosting.run("site.list").ok().result["sites"]}


class Spawner:
    """Something of root's that keeps starting processes as a user (as a pool's master would): a
    shell of root's, which the user's ``kill -1`` cannot reach, starting one every 10 ms."""

    def __init__(self, user: pwd.struct_passwd) -> None:
        start = f"setpriv --reuid {user.pw_uid} --regid {user.pw_gid} --clear-groups sleep 60"
        self.loop = f"while :; do {start} & sleep 0.01; done"
        self.uid = user.pw_uid

    def __enter__(self) -> Spawner:
        self.shell = subprocess.Popen(["/bin/sh", "-c", self.loop], start_new_session=True)
        wait_until(lambda: processes_of(self.uid)[0] != [])
        return self

    def __exit__(self, *exc: object) -> None:
        os.killpg(self.shell.pid, signal.SIGKILL)
        self.shell.wait()
        subprocess.run(["pkill", "-KILL", "-u", str(self.uid)], check=False)
        wait_until(lambda: processes_of(self.uid)[0] == [], timeout=30)


def test_a_cancelled_delete_is_finished_by_running_it_again(hosting: Hosting) -> None:
    domain = unique_domain("cancel")
    hosting.run("site.create", domain=domain).ok()
    user = pwd.getpwnam(slug(domain))
    with Spawner(user):
        started = hosting.post("site.delete", domain=domain)
        assert started.status_code == 201, started.text
        # Under way (the account is locked), and busy stopping processes that keep coming:
        wait_until(lambda: _shadow(slug(domain))[1].startswith("!"), timeout=30)
        with hosting.http() as http:
            assert http.post(f"/v1/jobs/{started.json()['id']}/cancel").status_code == 202
        assert hosting.wait(started.json()["id"]).job["status"] == "cancelled"
    assert domain in {site["domain"] for site in hosting.run("site.list").ok().result["sites"]}
    deleted = reported(hosting.run("site.delete", domain=domain))
    assert deleted["user_removed"] == slug(domain) and deleted["files_removed"] is True
    assert not (hosting.home / slug(domain)).exists() and not hosting.site_logs(domain).exists()
    assert domain not in {site["domain"] for site in hosting.run("site.list").ok().result["sites"]}


def test_a_delete_that_cannot_stop_the_users_processes_says_so_and_keeps_the_site(hosting: Hosting) -> None:
    domain = unique_domain("respawn")
    hosting.run("site.create", domain=domain).ok()
    with Spawner(pwd.getpwnam(slug(domain))):
        failed = hosting.run("site.delete", domain=domain)
    assert failed.exit_code == 1 and "still running" in failed.text and "run site.delete again" in failed.text
    assert (hosting.home / slug(domain)).exists()  # nothing removed while the user's processes run
    reported(hosting.run("site.delete", domain=domain))
    assert domain not in {site["domain"] for site in hosting.run("site.list").ok().result["sites"]}


# --- logs: root's daemons open nothing in the site ------------------------------------------------


def test_a_link_planted_where_the_logs_were_leads_the_web_server_nowhere(hosting: Hosting, outside: Outside) -> None:
    domain = unique_domain("logs")
    hosting.run("site.create", domain=domain).ok()
    logs = hosting.home / slug(domain) / "logs"
    (logs / "access.log").symlink_to(outside.folder / "victim.log")  # the site's user plants links
    (logs / "error.log").symlink_to(outside.folder / "created-by-root.log")
    before = outside.state()
    hosting.run("site.alias-add", domain=domain, alias=f"www.{domain}").ok()  # written again, reloaded
    assert hosting.nginx is not None
    wait_until(lambda: hosting.get(domain, "/planted").status_code == 404)
    access = hosting.site_logs(domain) / "access.log"
    wait_until(lambda: access.exists() and "GET /planted" in access.read_text())
    assert outside.state() == before and not (outside.folder / "created-by-root.log").exists()
    folder = access.parent.stat()
    assert (folder.st_uid, folder.st_gid, folder.st_mode & 0o777) == (0, pwd.getpwnam(slug(domain)).pw_gid, 0o750)
    vhost = (hosting.nginx.sites_dir / f"fleetdeck-{slug(domain)}.conf").read_text()
    assert str(hosting.home / slug(domain) / "logs") not in vhost


def test_php_errors_go_to_the_root_owned_folder_written_as_the_site_user(hosting: Hosting) -> None:
    if hosting.php is None:
        pytest.skip("PHP-FPM is not installed (Debian package php-fpm)")
    domain = unique_domain("phperr")
    hosting.run("site.create", domain=domain, profile="php").ok()
    hosting.put_page(domain, "warn.php", "<?php trigger_error('boundary-check', E_USER_WARNING); echo 'ok';\n")
    wait_until(lambda: _answer(hosting, domain, "/warn.php") == 200, timeout=20)
    log = hosting.site_logs(domain) / "php-error.log"
    wait_until(lambda: "boundary-check" in log.read_text())
    owner = pwd.getpwnam(slug(domain))
    assert (log.stat().st_uid, log.parent.stat().st_uid) == (owner.pw_uid, 0)
    assert hosting.php is not None
    pool = (hosting.php.pool_dir / f"fleetdeck-{slug(domain)}.conf").read_text()
    assert f"php_admin_value[error_log] = {log}" in pool
    shown = hosting.run("logs.list", domain=domain).ok().result["logs"]
    assert str(log) in {entry["path"] for entry in shown}


def _answer(hosting: Hosting, domain: str, path: str) -> int:
    try:
        return hosting.get(domain, path).status_code
    except httpx.HTTPError:
        return 0
