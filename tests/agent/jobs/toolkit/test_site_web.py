"""The web side of a site without services: pool values PHP-FPM reads literally, registry fields
of the wrong type, the www redirect's server blocks, a pool PHP-FPM refuses (78)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import trio

from agent.jobs.toolkit.host import NginxLayout, php_fpm_versions
from agent.jobs.toolkit.output import EXIT_REFUSED, JobError
from agent.jobs.toolkit.site_web import check_pool, docroot_error, ini_quote, render_pool, render_vhost, settings_of


def test_pool_values_are_taken_literally_by_php_fpm(tmp_path: Path) -> None:
    value = 'a "quoted" $HOME ${HOME} back\\slash ;# x'
    ini = tmp_path / "t.ini"
    ini.write_text(f"v = {ini_quote(value)}\n")
    if shutil.which("php") is None:
        pytest.skip("php-cli is not installed")
    read_back = f"echo parse_ini_file('{ini}', false, INI_SCANNER_NORMAL)['v'];"
    assert subprocess.run(["php", "-r", read_back], capture_output=True, text=True).stdout == value
    with pytest.raises(JobError, match="control characters"):
        ini_quote("two\nlines")


def test_settings_of_ignores_fields_of_the_wrong_type() -> None:
    entry = {"domain": "a.test", "slug": "a-test", "enabled": "no", "aliases": ["b.test", 3], "pool": [1]}
    entry |= {"www_redirect": "sideways", "limits": {"memory_limit": 5}, "env": {"K": {"value": 1}}}
    s = settings_of(entry, "/home/a-test")
    assert (s.enabled, s.aliases, s.www_redirect, s.max_children, s.memory_limit, s.env) == (
        True, ("b.test",), "keep", 5, None, {}
    )  # fmt: skip


def test_settings_stored_before_the_allow_lists_are_left_out_of_the_pool() -> None:
    """A registry entry may hold what the API no longer takes (written before the allow-lists):
    the pool is rendered without it, and `left_out` says what went (the agent logs it)."""
    entry = {
        "domain": "a.test", "slug": "a-test", "profile": "php", "php": "8.2",
        "php_ini": {"auto_prepend_file": "/home/a-test/x.php", "opcache.preload": "/x.php",
                    "opcache.memory_consumption": "512", "max_execution_time": "1e9", "max_input_vars": "3000"},
        "limits": {"memory_limit": "999999G", "upload_limit": "8M"},
        "env": {"HOME_COPY": {"value": "$HOME"}, "NAME": {"value": "a$poolb"}, "OK": {"value": "x $HOME"}},
    }  # fmt: skip
    s = settings_of(entry, "/home/a-test")
    assert s.php_ini == {"max_input_vars": "3000"}
    assert (s.memory_limit, s.upload_limit) == (None, "8M")
    assert s.env == {"OK": "x $HOME"}
    assert [line.split(":")[0] for line in s.left_out] == [
        "limits memory_limit", "php_ini auto_prepend_file", "php_ini opcache.preload",
        "php_ini opcache.memory_consumption", "php_ini max_execution_time", "env HOME_COPY", "env NAME",
    ]  # fmt: skip
    pool = render_pool(s, "a-test", "a-test", "/run/a.sock", "www-data", logs="/var/log/fleetdeck/sites/a-test")
    assert "preload" not in pool and "auto_prepend" not in pool and "999999G" not in pool
    assert 'php_admin_value[max_input_vars] = "3000"' in pool and 'env[OK] = "x \\$HOME"' in pool


def test_the_docroot_is_a_plain_folder_of_the_site_whose_links_stay_with_their_owner() -> None:
    served = settings_of({"domain": "a.test", "slug": "a-test", "docroot": "current/public"}, "/home/a-test")
    text = render_vhost(served, NginxLayout(listen="8080"), "/acme", None, None, logs="/logs/a-test")
    assert "root /home/a-test/current/public;" in text
    assert "disable_symlinks if_not_owner from=/home/a-test;" in text
    for bad in ("../b-test", "/etc", "a;b", "a b", "a/./b", ".git", "", "a//b", "$uri"):
        assert docroot_error(bad) is not None, bad
        assert settings_of({"domain": "a.test", "slug": "a-test", "docroot": bad}, "/h").docroot == "public_html"


def test_the_www_redirect_block_names_the_other_host() -> None:
    s = settings_of(
        {"domain": "www.a.test", "slug": "www-a-test", "www_redirect": "remove", "aliases": ["c.test"]}, "/h"
    )
    text = render_vhost(s, NginxLayout(listen="8080"), "/acme", None, None, logs="/logs/www-a-test")
    assert "server_name a.test c.test;" in text and "server_name www.a.test;" in text
    assert "return 301 $scheme://a.test$request_uri;" in text
    assert text.count("location ^~ /.well-known/acme-challenge/") == 2


def test_php_fpm_refuses_a_broken_pool() -> None:
    fpm = shutil.which("php-fpm" + (php_fpm_versions() or ["none"])[-1])
    if fpm is None:
        pytest.skip("PHP-FPM is not installed")
    good = "[p]\nuser = www-data\nlisten = /tmp/never.sock\npm = ondemand\npm.max_children = 2\n"
    trio.run(check_pool, fpm, good)
    with pytest.raises(JobError) as refused:
        trio.run(check_pool, fpm, good.replace("= 2", "= many"))
    assert refused.value.exit_code == EXIT_REFUSED and "pm.max_children" in str(refused.value)
