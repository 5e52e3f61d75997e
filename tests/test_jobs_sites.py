"""The site kinds through the API against the hosting server's real root agent, checked on the
session's own nginx and PHP-FPM: the site answers over HTTP, its PHP runs as its own user."""

from __future__ import annotations

import json
import os
import pwd
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers import wait_until
from tests.helpers.hosting import Hosting, JobRun

PHP_USER_PAGE = "<?php echo posix_getpwuid(posix_geteuid())['name'];\n"


def reported(run: JobRun) -> Any:
    """What a mutation printed with ``--json`` (only read kinds have a stored `result`)."""
    return json.loads(run.ok().stdout[-1])


CREATED: list[str] = []  # the module's sites, deleted (users and all) at its end


def unique_domain(prefix: str = "s") -> str:
    domain = f"{prefix}{secrets.token_hex(4)}.example.test"
    CREATED.append(domain)
    return domain


@pytest.fixture(scope="module", autouse=True)
def no_site_left_behind(hosting: Hosting) -> Iterator[None]:
    yield
    left = {site["domain"] for site in hosting.run("site.list").ok().result["sites"]}
    for domain in CREATED:
        if domain in left:
            hosting.run("site.delete", domain=domain).ok()
        subprocess.run(["userdel", domain.replace(".", "-")], capture_output=True, check=False)


def get(hosting: Hosting, host: str, path: str = "/") -> httpx.Response:
    assert hosting.nginx is not None
    return httpx.get(hosting.nginx.url(path), headers={"Host": host}, follow_redirects=False, timeout=10)


def answers(hosting: Hosting, host: str, path: str, status: int, text: str) -> httpx.Response:
    """The response once nginx (reloaded in the background) answers `status` with `text` in it."""
    found: list[httpx.Response] = []

    def check() -> bool:
        found[:] = [get(hosting, host, path)]
        return found[0].status_code == status and text in found[0].text

    wait_until(check, timeout=20)
    return found[0]


def home_of(hosting: Hosting, domain: str) -> Path:
    return hosting.home / domain.replace(".", "-")


def put_page(hosting: Hosting, domain: str, name: str, text: str) -> None:
    """A file in the site's public_html, owned by the site's user (as its own upload would be)."""
    path = home_of(hosting, domain) / "public_html" / name
    path.write_text(text)
    owner = pwd.getpwnam(domain.replace(".", "-"))
    os.chown(path, owner.pw_uid, owner.pw_gid)


@pytest.fixture(scope="module")
def php_site(hosting: Hosting) -> str:
    if hosting.php is None:
        pytest.skip("PHP-FPM is not installed (Debian package php-fpm)")
    domain = unique_domain("php")
    hosting.run("site.create", domain=domain, profile="php").ok()
    put_page(hosting, domain, "whoami.php", PHP_USER_PAGE)
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
    assert get(hosting, "other.example.test").status_code == 404  # the default server: not this site
    access_log = home_of(hosting, domain) / "logs" / "access.log"
    wait_until(lambda: "GET / HTTP/1.1" in access_log.read_text())


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
