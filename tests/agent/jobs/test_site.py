"""The site kinds through the API against the hosting server's real root agent, checked on the
session's own nginx and PHP-FPM: the site answers over HTTP, its PHP runs as its own user."""

from __future__ import annotations

import json
import os
import pwd
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

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
        found[:] = [hosting.get(host, path)]
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
