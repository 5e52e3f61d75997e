"""The site kinds through the API against the hosting server's real root agent, checked on the
session's own nginx and PHP-FPM: the site answers over HTTP, its PHP runs as its own user.

Then against a hostile site user: ``site.clone`` and ``site.delete`` with folders exchanged with a
link while they walk (a racing thread, `tests.helpers.races`), a clone that fails, a delete the
site's own processes would stop or that is interrupted, and the web server's logs, which a link
planted in the site never redirects (the pattern of CVE-2016-1247). Last, the handlers on an
agent of the test's own."""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import signal
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent.jobs.toolkit.boundary import processes_of
from agent.load_balancers.acme import FileChallenges
from tests.helpers import wait_until
from tests.helpers.agent_jobs import (
    IS_ROOT,
    SERVER_ID,
    Env,
    linked,
    temporary_domain,
)
from tests.helpers.hosting import Hosting, JobRun, ModuleSites
from tests.helpers.races import Flipper

needs_root = pytest.mark.skipif(not IS_ROOT, reason="needs the root agent's system users")

PHP_USER_PAGE = "<?php echo posix_getpwuid(posix_geteuid())['name'];\n"


def reported(run: JobRun) -> Any:
    """What a mutation reported: the job's stored `result` (its kind declares one), which is
    what it printed with ``--json``."""
    result = run.ok().result
    assert result == json.loads(run.stdout[-1])
    return result


SITES = ModuleSites()
unique_domain = SITES.domain


@pytest.fixture(scope="module", autouse=True)
def no_site_left_behind(hosting: Hosting) -> Iterator[None]:
    yield
    SITES.delete_left(hosting, strict=True)


def answers(hosting: Hosting, host: str, path: str, status: int, text: str) -> httpx.Response:
    """The response once nginx (reloaded in the background) answers `status` with `text` in it."""
    found: list[httpx.Response] = []

    def check() -> bool:
        try:
            found[:] = [hosting.get(host, path)]
        except httpx.HTTPError:  # nginx between two workers
            return False
        return found[0].status_code == status and text in found[0].text

    wait_until(check, timeout=20)
    return found[0]


def home_of(hosting: Hosting, domain: str) -> Path:
    return hosting.home / domain.replace(".", "-")


@pytest.fixture(scope="module")
def php_site(hosting: Hosting) -> str:
    needs_php(hosting)
    domain = unique_domain("php")
    hosting.run("site.create", domain=domain, profile="php").ok()
    hosting.put_page(domain, "whoami.php", PHP_USER_PAGE)
    return domain


def test_a_static_site_answers_through_nginx(hosting: Hosting) -> None:
    domain = unique_domain()
    created = reported(hosting.run("site.create", domain=domain))
    assert created["served"] is True
    assert hosting.nginx is not None
    vhost = hosting.nginx.sites_dir / f"fleetdeck-{domain.replace('.', '-')}.conf"
    assert f"server_name {domain};" in vhost.read_text()
    page = answers(hosting, domain, "/", 200, f"<h1>{domain}</h1>")
    assert page.headers["content-type"].startswith("text/html")
    assert hosting.get("other.example.test").status_code == 404  # the default server: not this site
    again = hosting.run("site.create", domain=domain).ok()
    assert again.stderr[0] == f"site {domain} already exists on this server"
    assert reported(again)["site"]["domain"] == domain
    access_log = hosting.site_logs(domain) / "access.log"  # root's folder, never in the site
    wait_until(lambda: "GET / HTTP/1.1" in access_log.read_text())
    assert access_log.parent.stat().st_uid == 0 and not (home_of(hosting, domain) / "logs" / "access.log").exists()


def test_a_php_site_runs_as_its_own_user(hosting: Hosting, php_site: str) -> None:
    user = php_site.replace(".", "-")
    assert answers(hosting, php_site, "/whoami.php", 200, user).text == user
    assert hosting.php is not None
    pool = hosting.php.pool_dir / f"fleetdeck-{user}.conf"
    assert f"user = {user}" in pool.read_text() and oct(pool.stat().st_mode & 0o777) == "0o600"
    socket = hosting.php.run_dir / f"fleetdeck-{user}.sock"
    assert pwd.getpwuid(socket.stat().st_uid).pw_name == user and socket.stat().st_mode & 0o777 == 0o660
    assert "PHP 8" in answers(hosting, php_site, "/", 200, php_site).text  # the profile's index.php, run


def test_another_site_user_cannot_read_a_site(hosting: Hosting, php_site: str) -> None:
    other = unique_domain("other")
    hosting.run("site.create", domain=other).ok()
    index = home_of(hosting, php_site) / "public_html" / "index.php"
    as_other = as_user(other.replace(".", "-"), ["cat", str(index)])
    assert as_other.returncode == 1 and "Permission denied" in as_other.stderr
    as_nginx = as_user("www-data", ["cat", str(index)])
    assert as_nginx.returncode == 0 and php_site in as_nginx.stdout


def as_user(name: str, argv: list[str]) -> subprocess.CompletedProcess[str]:
    """`argv` run as the account `name` with its own groups (as a login would have them)."""
    account = pwd.getpwnam(name)
    groups = os.getgrouplist(name, account.pw_gid)
    return subprocess.run(
        argv, user=account.pw_uid, group=account.pw_gid, extra_groups=groups, capture_output=True, text=True
    )


def new_site(hosting: Hosting, prefix: str = "s", profile: str = "static") -> str:
    domain = unique_domain(prefix)
    hosting.run("site.create", domain=domain, profile=profile).ok()
    return domain


def needs_php(hosting: Hosting) -> None:
    if hosting.php is None:
        pytest.skip("PHP-FPM is not installed (Debian package php-fpm)")


def test_a_disabled_site_shows_its_parked_page(hosting: Hosting) -> None:
    domain = new_site(hosting)
    hosting.run("site.disable", domain=domain).ok()
    parked = answers(hosting, domain, "/", 503, "This site is disabled")
    assert domain not in parked.text
    assert "was already" in hosting.run("site.disable", domain=domain).ok().text
    assert hosting.run("site.inspect", domain=domain).ok().result["enabled"] is False
    hosting.run("site.enable", domain=domain).ok()
    answers(hosting, domain, "/", 200, f"<h1>{domain}</h1>")


def test_an_alias_answers_until_it_is_removed(hosting: Hosting) -> None:
    domain = new_site(hosting)
    alias = unique_domain("alias")
    added = reported(hosting.run("site.alias-add", domain=domain, alias=alias))
    assert added == {"domain": domain, "aliases": [alias]}
    answers(hosting, alias, "/", 200, f"<h1>{domain}</h1>")
    taken = hosting.run("site.alias-add", domain=new_site(hosting), alias=alias)
    assert taken.exit_code == 1 and f"{alias} is already served by site {domain}" in taken.text
    as_site = hosting.run("site.create", domain=alias)
    assert as_site.exit_code == 1 and f"{alias} is an alias of site {domain}" in as_site.text
    assert reported(hosting.run("site.alias-remove", domain=domain, alias=alias))["aliases"] == []
    answers(hosting, alias, "/", 404, "")  # the default server
    answers(hosting, domain, "/", 200, f"<h1>{domain}</h1>")


def test_a_refused_configuration_changes_nothing(hosting: Hosting) -> None:
    assert hosting.nginx is not None
    domain = new_site(hosting)
    vhost = hosting.nginx.sites_dir / f"fleetdeck-{domain.replace('.', '-')}.conf"
    before = vhost.read_text()
    broken = hosting.nginx.sites_dir / "zz-broken-by-hand.conf"
    broken.write_text("server { listen nonsense; }\n")
    try:
        refused = hosting.run("site.alias-add", domain=domain, alias=unique_domain("refused"))
    finally:
        broken.unlink()
    assert refused.exit_code == 78 and "nginx refused the configuration" in refused.text
    assert vhost.read_text() == before
    assert hosting.run("site.inspect", domain=domain).ok().result["aliases"] == []


def test_www_redirect(hosting: Hosting) -> None:
    domain = new_site(hosting)
    hosting.run("site.redirect-set", domain=domain, www="remove").ok()
    moved = answers(hosting, f"www.{domain}", "/a/b?c=1", 301, "")
    assert moved.headers["location"] == f"http://{domain}/a/b?c=1"
    answers(hosting, domain, "/", 200, f"<h1>{domain}</h1>")
    hosting.run("site.redirect-set", domain=domain, www="add").ok()
    assert answers(hosting, domain, "/x", 301, "").headers["location"] == f"http://www.{domain}/x"
    answers(hosting, f"www.{domain}", "/", 200, f"<h1>{domain}</h1>")


def self_signed(hosting: Hosting, domain: str) -> None:
    """A certificate where the ssl kinds put the site's (``<state>/ssl/<slug>/``)."""
    folder = hosting.state / "ssl" / domain.replace(".", "-")
    folder.mkdir(parents=True)
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-days", "2", "-subj", f"/CN={domain}", "-keyout", str(folder / "privkey.pem"),
         "-out", str(folder / "fullchain.pem")],
        check=True, capture_output=True,
    )  # fmt: skip


def test_https_redirect_once_the_site_has_a_certificate(hosting: Hosting) -> None:
    assert hosting.nginx is not None
    domain = new_site(hosting)
    no_certificate = hosting.run("site.redirect-set", domain=domain, https=True).ok()
    assert "has no certificate yet" in no_certificate.text
    answers(hosting, domain, "/", 200, f"<h1>{domain}</h1>")  # no certificate: no redirect
    self_signed(hosting, domain)
    hosting.run("site.redirect-set", domain=domain, https=True).ok()
    moved = answers(hosting, domain, "/p?q=1", 301, "")
    assert moved.headers["location"] == f"https://{domain}/p?q=1"
    challenges = FileChallenges(hosting.nginx.acme_dir)  # what ssl.issue writes (it makes the folder)
    challenges.add("token-123", "token-123.thumbprint")
    try:  # the challenge is still answered over http
        assert answers(hosting, domain, "/.well-known/acme-challenge/token-123", 200, "thumbprint").text
    finally:
        challenges.discard("token-123")
    url = f"https://127.0.0.1:{hosting.nginx.tls_port}/"
    with httpx.Client(verify=False) as client:
        secure = client.get(url, headers={"Host": domain}, extensions={"sni_hostname": domain})
    assert secure.status_code == 200 and f"<h1>{domain}</h1>" in secure.text


def test_site_logs_show_the_access_log(hosting: Hosting) -> None:
    domain = new_site(hosting)
    answers(hosting, domain, "/logged-here", 404, "")
    shown = hosting.run("site.logs", domain=domain, lines=5).ok().result
    assert shown["domain"] == domain and isinstance(shown["error"], list)
    assert any("GET /logged-here HTTP/1.1" in line for line in shown["access"])
    only_access = hosting.run("site.logs", domain=domain, log="access", lines=1).ok().result
    assert only_access["error"] is None and len(only_access["access"]) == 1  # not asked for


def test_the_environment_reaches_php_and_secrets_stay_masked(hosting: Hosting, php_site: str) -> None:
    secret = 'p@ss "w0rd" $HOME ${HOME} \\ ;# end'
    hosting.put_page(php_site, "env.php", "<?php var_export(getenv('APP_SECRET')); echo '|', getenv('APP_MODE');\n")
    hosting.run("site.env-set", domain=php_site, key="APP_MODE", value="production").ok()
    run = hosting.run("site.env-set", domain=php_site, key="APP_SECRET", value=secret, masked=True).ok()
    assert "p@ss" not in run.text and "p@ss" not in json.dumps(run.job)
    answers(hosting, php_site, "/env.php", 200, "|production")
    assert hosting.get(php_site, "/env.php").text == f"{secret!r}|production".replace('"', '"')
    listed = hosting.run("site.env-list", domain=php_site).ok().result["env"]
    assert listed == [
        {"key": "APP_MODE", "value": "production", "masked": False},
        {"key": "APP_SECRET", "value": "********", "masked": True},
    ]
    hosting.run("site.env-unset", domain=php_site, key="APP_SECRET").ok()
    answers(hosting, php_site, "/env.php", 200, "false|production")
    assert "has no APP_SECRET" in hosting.run("site.env-unset", domain=php_site, key="APP_SECRET").ok().text


# PHP-FPM reads a pool's env[NAME] line as INI text (the agent writes it in double quotes with
# \\, " and $ escaped), then replaces a value beginning with '$' by its own environment variable
# of that name and '$pool' anywhere by the pool's name, with no escape for either.
VERBATIM_ENV = {
    "QUOTE": 'a"b', "SEMICOLON": ";x", "BACKSLASHES": "x\\y\\", "DOLLAR_INSIDE": "x$HOME",
    "BRACES_INSIDE": "a${PATH}b", "SPACES": "  two  spaces ", "HASH": "#not a comment", "UNICODE": "é € ü",
    "APOSTROPHE": "it's", "EQUALS": "a=b=c", "NEAR_POOL": "po$ol $poo",
}  # fmt: skip
REFUSED_ENV = {
    "$HOME": "beginning with '$'", "${PATH}": "beginning with '$'", "$pool": "beginning with '$'",
    "x$pool": "replaces '$pool'", "two\nlines": "one line", "nul\x00": "one line", "tab\tx": "one line",
}  # fmt: skip


def test_environment_values_reach_php_exactly_as_given_or_are_refused(hosting: Hosting) -> None:
    needs_php(hosting)
    domain = new_site(hosting, "env", profile="php")
    keys = ",".join(f"'{key}'" for key in VERBATIM_ENV)
    hosting.put_page(domain, "env.php", f"<?php echo json_encode(array_map('getenv', [{keys}]));\n")
    for key, value in VERBATIM_ENV.items():
        hosting.run("site.env-set", domain=domain, key=key, value=value, masked=True).ok()
    answers(hosting, domain, "/env.php", 200, "it's")
    assert json.loads(hosting.get(domain, "/env.php").text) == list(VERBATIM_ENV.values())
    pool = hosting.php.pool_dir / f"fleetdeck-{domain.replace('.', '-')}.conf"  # type: ignore[union-attr]
    before = pool.read_text()
    for value, said in REFUSED_ENV.items():
        answer = hosting.post("site.env-set", domain=domain, key="REFUSED", value=value)
        assert answer.status_code == 422, (value, answer.text)
        assert said in answer.json()["error"]["message"] and value not in answer.text, value
    assert pool.read_text() == before


def test_limits_reach_php_and_nginx(hosting: Hosting, php_site: str) -> None:
    assert hosting.php is not None
    ini = "<?php echo ini_get('memory_limit'), ' ', ini_get('upload_max_filesize'), ' ', ini_get('post_max_size');\n"
    hosting.put_page(php_site, "limits.php", ini)
    run = hosting.run("site.limits", domain=php_site, max_children=3, memory_limit="96M", upload_limit="2M")
    assert reported(run) == {"domain": php_site, "max_children": 3, "memory_limit": "96M", "upload_limit": "2M"}
    answers(hosting, php_site, "/limits.php", 200, "96M 2M 2M")
    pool = hosting.php.pool_dir / f"fleetdeck-{php_site.replace('.', '-')}.conf"
    assert "pm.max_children = 3\n" in pool.read_text()
    assert hosting.nginx is not None
    too_big = httpx.post(hosting.nginx.url("/limits.php"), headers={"Host": php_site}, content=b"x" * 3_000_000)
    assert too_big.status_code == 413
    static = new_site(hosting)
    refused = hosting.run("site.limits", domain=static, memory_limit="64M")
    assert refused.exit_code == 1 and "static site: it has no PHP" in refused.text


def test_a_clone_answers_under_its_new_domain_as_another_user(hosting: Hosting, php_site: str) -> None:
    target = unique_domain("clone")
    answers(hosting, php_site, "/before-the-clone", 200, php_site)  # index.php answers every path
    cloned = reported(hosting.run("site.clone", domain=php_site, target=target))
    user = target.replace(".", "-")
    assert cloned["cloned_from"] == php_site and cloned["site"]["user"] == user and cloned["served"] is True
    assert answers(hosting, target, "/whoami.php", 200, user).text == user
    original = hosting.get(php_site, "/").text
    assert answers(hosting, target, "/", 200, php_site).text == original  # the same files
    copied = home_of(hosting, target) / "public_html" / "whoami.php"
    assert pwd.getpwuid(copied.stat().st_uid).pw_name == user
    assert "/before-the-clone" in (hosting.site_logs(php_site) / "access.log").read_text()
    assert "/before-the-clone" not in (hosting.site_logs(target) / "access.log").read_text()  # its own logs


def test_delete_removes_everything(hosting: Hosting) -> None:
    needs_php(hosting)
    assert hosting.nginx is not None and hosting.php is not None
    domain = new_site(hosting, "gone", "php")
    slug = domain.replace(".", "-")
    self_signed(hosting, domain)
    hosting.run("site.enable", domain=domain).ok()
    answers(hosting, domain, "/", 200, domain)
    deleted = reported(hosting.run("site.delete", domain=domain))
    assert deleted["user_removed"] == slug and deleted["certificates_removed"] is True
    assert len(deleted["web_files_removed"]) == 2
    answers(hosting, domain, "/", 404, "")
    with pytest.raises(KeyError):
        pwd.getpwnam(slug)
    assert not (hosting.nginx.sites_dir / f"fleetdeck-{slug}.conf").exists()
    assert not (hosting.php.pool_dir / f"fleetdeck-{slug}.conf").exists()
    assert not (hosting.php.run_dir / f"fleetdeck-{slug}.sock").exists()
    assert not (hosting.state / "ssl" / slug).exists() and not home_of(hosting, domain).exists()


# --- against a hostile site user ---------------------------------------------------------


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


@needs_root
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


@needs_root
def test_a_clone_that_fails_leaves_no_folder_user_entry_or_web_file(hosting: Hosting) -> None:
    source = unique_domain("deep")
    hosting.run("site.create", domain=source).ok()
    deep = hosting.home / slug(source) / "public_html" / "deep"
    deep.joinpath(*["d"] * 300).mkdir(parents=True)  # deeper than a copy goes: it fails half-way
    names_before = sorted(os.listdir(hosting.home))
    target = unique_domain("failed")
    try:
        run = hosting.run("site.clone", domain=source, target=target)
    finally:
        shutil.rmtree(deep)  # deeper than a delete goes too: the module's cleanup deletes the site
    assert run.exit_code == 1 and "nested too deeply" in run.text
    assert sorted(os.listdir(hosting.home)) == names_before  # no target, no temporary folder
    with pytest.raises(KeyError):
        pwd.getpwnam(slug(target))
    assert target not in {site["domain"] for site in hosting.run("site.list").ok().result["sites"]}
    assert hosting.nginx is not None and not (hosting.nginx.sites_dir / f"fleetdeck-{slug(target)}.conf").exists()
    assert not hosting.site_logs(target).exists()


# --- delete --------------------------------------------------------------------------------------


@needs_root
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


@needs_root
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


@needs_root
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


@needs_root
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


@needs_root
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


@needs_root
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


@needs_root
def test_php_errors_go_to_the_root_owned_folder_written_as_the_site_user(hosting: Hosting) -> None:
    needs_php(hosting)
    domain = unique_domain("phperr")
    hosting.run("site.create", domain=domain, profile="php").ok()
    hosting.put_page(domain, "warn.php", "<?php trigger_error('boundary-check', E_USER_WARNING); echo 'ok';\n")
    answers(hosting, domain, "/warn.php", 200, "ok")
    log = hosting.site_logs(domain) / "php-error.log"
    wait_until(lambda: "boundary-check" in log.read_text())
    owner = pwd.getpwnam(slug(domain))
    assert (log.stat().st_uid, log.parent.stat().st_uid) == (owner.pw_uid, 0)
    assert hosting.php is not None
    pool = (hosting.php.pool_dir / f"fleetdeck-{slug(domain)}.conf").read_text()
    assert f"php_admin_value[error_log] = {log}" in pool
    shown = hosting.run("logs.list", domain=domain).ok().result["logs"]
    assert str(log) in {entry["path"] for entry in shown}


# --- the handlers --------------------------------------------------------------------------


@pytest.mark.anyio
async def test_site_lifecycle(env: Env) -> None:
    domain = temporary_domain()
    slug = domain.replace(".", "-")
    env.users.append(slug)
    folder = env.home / slug
    async with linked(env) as agent:
        made = await agent.run("site", "create", domain, "--profile", "static", "--json")
        created = made.json()["site"]
        assert (created["domain"], created["slug"], created["home"]) == (domain, slug, str(folder))
        # No web server here: the site is files only, and the job says so, naming the package.
        assert made.json()["served"] is False and made.exit_code == 0
        assert any("(Debian package nginx)" in line and "nothing serves" in line for line in made.stderr)
        unserved = await agent.run("site", "enable", domain)
        assert unserved.exit_code == 69 and "nginx" in unserved.stderr[0]
        st = folder.stat()
        assert stat.S_IMODE(st.st_mode) == 0o750
        assert (folder / "public_html/index.html").read_text().count(domain) >= 1
        assert (folder / "logs").is_dir() and not list((folder / "logs").iterdir())  # the web's logs are root's
        if IS_ROOT:
            user = pwd.getpwnam(slug)
            assert (user.pw_dir, user.pw_shell) == (str(folder), "/usr/sbin/nologin")
            assert st.st_uid == user.pw_uid and (folder / "public_html/index.html").stat().st_uid == user.pw_uid
            assert created["user"] == slug and created["uid"] == user.pw_uid
        # The new site is a file scope at once.
        scopes = await agent.hub.call(SERVER_ID, "fs.scopes", {})
        assert {"domain": domain, "slug": slug} in scopes["sites"]

        again = await agent.run("site", "create", domain, "--json")
        assert again.exit_code == 0 and again.stderr[0] == f"site {domain} already exists on this server"
        other_profile = await agent.run("site", "create", domain, "--profile", "php", "--json")
        assert other_profile.exit_code == 1
        assert other_profile.stderr == [f"site {domain} already exists on this server, with the static profile"]

        inspected = (await agent.run("site", "inspect", domain, "--json")).json()
        assert inspected["profile"] == "static" and inspected["files"] == 1 and inspected["created_at"]  # the index
        assert inspected["size_bytes"] > 0 and inspected["exists"] is True
        listed = (await agent.run("site", "list", "--json")).json()["sites"]
        assert [(s["domain"], s["home"]) for s in listed] == [(domain, str(folder))]
        assert listed[0]["disk_bytes"] > 0 and listed[0]["owner"] == (slug if IS_ROOT else pwd.getpwuid(os.getuid())[0])

        deleted = (await agent.run("site", "delete", domain, "--json")).json()
        assert deleted["files_removed"] is True and not folder.exists()
        if IS_ROOT:
            assert deleted["user_removed"] == slug
            with pytest.raises(KeyError):
                pwd.getpwnam(slug)
        assert (await agent.run("site", "list", "--json")).json() == {"sites": []}
        assert (await agent.hub.call(SERVER_ID, "fs.scopes", {}))["sites"] == []

        # php profile, and delete --keep-files.
        domain2 = temporary_domain("p")
        env.users.append(domain2.replace(".", "-"))
        created = (await agent.run("site", "create", domain2, "--profile", "php", "--json")).json()["site"]
        assert (env.home / created["slug"] / "public_html/index.php").exists()
        deleted = (await agent.run("site", "delete", domain2, "--keep-files", "--json")).json()
        assert deleted["files_removed"] is False and (env.home / created["slug"] / "public_html").is_dir()
    registry = json.loads((env.state / "sites.json").read_text())
    assert registry == {"sites": []}
