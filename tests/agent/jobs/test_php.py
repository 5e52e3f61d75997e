"""``php.*`` jobs through the API on the hosting server's own PHP-FPM (tests.helpers.web_services).

The effects are read back from PHP itself: a fixed probe script run through an FPM pool with
``cgi-fcgi`` (the values and modules the FPM's workers see, and their pid), the CLI with the
layout's ini, the files of the layout's conf.d, and the FPM's processes in /proc.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agent.jobs.php.modules import module_priority, parse_php_m
from agent.jobs.toolkit.php_fpm import FileTrial, parse_alternatives, parse_sections, problem_lines, set_directive
from tests.helpers import wait_until
from tests.helpers.hosting import Hosting
from tests.helpers.web_services import PhpFpm

CGI_FCGI = shutil.which("cgi-fcgi")
PROBE = """<?php
header('Content-Type: application/json');
$keys = array_filter(explode(',', $_SERVER['QUERY_STRING'] ?? ''));
echo json_encode([
    'pid' => getmypid(),
    'user' => posix_getpwuid(posix_geteuid())['name'],
    'ini' => array_combine($keys, array_map('ini_get', $keys)),
    'modules' => array_map('strtolower', get_loaded_extensions()),
    'opcache' => function_exists('opcache_get_status') ? opcache_get_status(false) : null,
]);
"""


@dataclass(frozen=True)
class ProbePool:
    """A static pool of one worker added to the session's FPM, with a status page, and a probe
    script outside any docroot."""

    fpm: PhpFpm
    name: str
    socket: Path
    probe: Path

    def ask(self, *keys: str, socket: Path | None = None) -> dict[str, Any]:
        """What a worker of the pool (or of the pool at `socket`) says: pid, ini values, modules."""
        return fcgi(socket or self.socket, self.probe, ",".join(keys))

    def ini_now(self, key: str, socket: Path | None = None) -> str | None:
        """The value a worker of the pool (or of the pool at `socket`) gives for `key`, or None while
        no worker answers (a reload makes FPM's sockets again)."""
        try:
            value: str = self.ask(key, socket=socket)["ini"][key]
        except PoolSilent:
            return None
        return value

    def worker_pids(self) -> set[int]:
        return worker_pids(self.fpm, self.name)


class PoolSilent(Exception):
    """cgi-fcgi could not ask the pool (no socket, refused, no answer)."""


def fcgi(socket: Path, script: Path, query: str = "") -> Any:
    assert CGI_FCGI is not None
    env = {"REQUEST_METHOD": "GET", "SCRIPT_FILENAME": str(script), "SCRIPT_NAME": "/probe.php"}
    env["QUERY_STRING"] = query
    done = subprocess.run([CGI_FCGI, "-bind", "-connect", str(socket)], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise PoolSilent(f"cgi-fcgi exited {done.returncode} at {socket}: {done.stderr}")
    body = done.stdout.replace("\r\n", "\n").split("\n\n", 1)[1]
    return json.loads(body)


def master_pid(fpm: PhpFpm) -> int:
    return int(fpm.pid_file.read_text().strip())


def worker_pids(fpm: PhpFpm, pool: str) -> set[int]:
    master = master_pid(fpm)
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            title = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")[0].decode()
            ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if title.strip() == f"php-fpm: pool {pool}" and ppid == master:
            found.add(int(entry))
    return found


def reload_fpm(fpm: PhpFpm) -> None:
    os.kill(master_pid(fpm), signal.SIGUSR2)


def reloaded(pool: ProbePool, before: set[int]) -> None:
    """Wait until the reload of the FPM has replaced the pool's workers `before`: while its master
    re-executes itself, a request to the pool is cut (cgi-fcgi's exit 104, connection reset)."""
    wait_until(lambda: bool(pool.worker_pids()) and not pool.worker_pids() & before)


def cli_ini(fpm: PhpFpm, sapi: str, *args: str) -> str:
    env = {"PATH": "/usr/bin:/bin", "PHP_INI_SCAN_DIR": str(fpm.ini_dir / sapi / "conf.d")}
    argv = [f"/usr/bin/php{fpm.version}", "-c", str(fpm.ini_dir / sapi / "php.ini"), *args]
    return subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="module")
def pool(hosting: Hosting) -> Iterator[ProbePool]:
    if hosting.php is None or CGI_FCGI is None:
        pytest.skip("needs PHP-FPM and cgi-fcgi (libfcgi-bin)")
    fpm = hosting.php
    folder = hosting.folder / "php-test"
    folder.mkdir(mode=0o755)
    probe = folder / "probe.php"
    probe.write_text(PROBE)
    probe.chmod(0o644)
    test_pool = ProbePool(fpm, "phptest", fpm.run_dir / "phptest.sock", probe)
    conf = fpm.pool_dir / "phptest.conf"
    conf.write_text(
        f"""[phptest]
user = www-data
group = www-data
listen = {test_pool.socket}
listen.owner = www-data
pm = static
pm.max_children = 1
pm.status_path = /fpm-status
"""
    )
    reload_fpm(fpm)
    wait_until(lambda: len(test_pool.worker_pids()) == 1 and test_pool.socket.exists())
    yield test_pool
    conf.unlink()
    for sapi in ("fpm", "cli"):
        (fpm.ini_dir / sapi / "conf.d" / "99-fleetdeck.ini").unlink(missing_ok=True)
    reload_fpm(fpm)
    wait_until(lambda: not test_pool.worker_pids())


# --- versions, packages, the service ------------------------------------------------------------


def test_versions_lists_the_installed_php_with_its_running_fpm(hosting: Hosting, pool: ProbePool) -> None:
    result = hosting.run("php.versions").ok().result
    mine = next(v for v in result["versions"] if v["version"] == pool.fpm.version)
    assert mine["fpm"] and mine["cli"]
    assert mine["fpm_running"] and mine["fpm_pid"] == master_pid(pool.fpm)
    query = subprocess.run(["update-alternatives", "--query", "php"], capture_output=True, text=True)
    assert result["default"] == parse_alternatives(query.stdout)


def test_the_default_version_comes_from_the_php_alternative() -> None:
    text = "Name: php\nLink: /usr/bin/php\nStatus: auto\nBest: /usr/bin/php8.3\nValue: /usr/bin/php8.3\n"
    assert parse_alternatives(text) == "8.3"
    assert parse_alternatives("Name: php\nLink: /usr/bin/php\n") is None


def test_installing_the_installed_version_says_so(hosting: Hosting, pool: ProbePool) -> None:
    run = hosting.run("php.install", version=pool.fpm.version).ok()
    assert "already installed" in run.text


def test_installing_a_version_debian_does_not_have_is_refused_before_apt_get(hosting: Hosting) -> None:
    run = hosting.run("php.install", version="5.1")
    assert run.exit_code == 1
    assert "no Debian package php5.1-fpm" in run.text


def test_uninstalling_what_is_not_installed_says_so(hosting: Hosting) -> None:
    run = hosting.run("php.uninstall", version="5.1").ok()
    assert "not installed" in run.text


def test_a_version_serving_a_site_is_not_uninstalled(hosting: Hosting, pool: ProbePool) -> None:
    hosting.run("site.create", domain="php-keep.example.com", profile="php").ok()
    try:
        run = hosting.run("php.uninstall", version=pool.fpm.version)
        assert run.exit_code == 1
        assert "php-keep.example.com" in run.text
        assert Path(pool.fpm.binary).exists()
    finally:
        hosting.run("site.delete", domain="php-keep.example.com").ok()


def test_a_version_not_installed_is_missing_software(hosting: Hosting) -> None:
    run = hosting.run("php.reload", version="5.1")
    assert run.exit_code == 69
    assert "php5.1-fpm" in run.text


@pytest.mark.parametrize("action", ["reload", "restart"])
def test_reload_and_restart_start_new_workers(hosting: Hosting, pool: ProbePool, action: str) -> None:
    before = pool.ask()["pid"]
    hosting.run(f"php.{action}", version=pool.fpm.version).ok()
    reloaded(pool, {before})
    assert pool.ask()["pid"] != before


def test_fpm_status_shows_the_pools_their_workers_and_status_page(hosting: Hosting, pool: ProbePool) -> None:
    result = hosting.run("php.fpm-status", version=pool.fpm.version).ok().result
    assert result["running"] and result["master_pid"] == master_pid(pool.fpm)
    pools = {p["name"]: p for p in result["pools"]}
    idle = pools["fleetdeck-idle"]
    assert idle["pm"] == "ondemand" and idle["processes"] == [] and idle["status"] is None
    mine = pools["phptest"]
    assert mine["user"] == "www-data" and mine["pm"] == "static" and mine["max_children"] == 1
    assert [p["pid"] for p in mine["processes"]] == sorted(pool.worker_pids())
    assert mine["processes"][0]["user"] == "www-data"
    assert mine["status"]["pool"] == "phptest" and mine["status"]["process manager"] == "static"


# --- ini ----------------------------------------------------------------------------------------


def test_a_global_ini_value_reaches_fpm_workers_and_the_cli(hosting: Hosting, pool: ProbePool) -> None:
    version = pool.fpm.version
    hosting.run("php.ini-global-set", version=version, key="max_input_vars", value="2345").ok()
    wait_until(lambda: pool.ask("max_input_vars")["ini"]["max_input_vars"] == "2345")
    assert cli_ini(pool.fpm, "cli", "-r", "echo ini_get('max_input_vars');") == "2345"
    assert hosting.run("php.ini-get", version=version, key="max_input_vars").ok().result["value"] == "2345"
    again = hosting.run("php.ini-global-set", version=version, key="max_input_vars", value="2345").ok()
    assert "already" in again.text


# Each with what the API's 422 says about it: the key is not on the allow-list, or the value is
# not of its directive's type and bounds. The first five are how an operator became root: a
# version-wide preload runs a site's file as uid 0 in the FPM master (and in the agent's own php).
HOSTILE_INI = [
    ("opcache.preload", "/home/example-com/public_html/x.php", "key", "allow-list"),
    ("opcache.preload_user", "root", "key", "allow-list"),
    ("auto_prepend_file", "/home/example-com/public_html/x.php", "key", "allow-list"),
    ("sendmail_path", "/home/example-com/x", "key", "allow-list"),
    ("user_ini.filename", "x.ini", "key", "allow-list"),
    ("open_basedir", "/", "key", "allow-list"),
    ("disable_functions", "x", "key", "allow-list"),
    ("allow_url_include", "On", "key", "allow-list"),
    ("error_log", "/etc/cron.d/x", "key", "allow-list"),
    ("include_path", "/tmp", "key", "allow-list"),
    ("extension", "/tmp/x.so", "key", "allow-list"),
    ("post_max_size", "banana", "value", "post_max_size takes a size"),
    ("memory_limit", "99999G", "value", "memory_limit takes a size from 16M to 16G"),
    ("max_execution_time", "1e9", "value", "max_execution_time takes a whole number"),
    ("display_errors", "1", "value", "display_errors takes one of On, Off"),
    ("date.timezone", "Mars/Olympus", "value", "date.timezone takes a time zone"),
]


def test_directives_off_the_allow_list_are_refused_before_a_job_exists(hosting: Hosting, pool: ProbePool) -> None:
    version = pool.fpm.version
    hosting.run("php.ini-global-set", version=version, key="post_max_size", value="16M").ok()
    ini = pool.fpm.ini_dir / "fpm" / "conf.d" / "99-fleetdeck.ini"
    before = ini.read_text()
    for kind, extra in (("php.ini-global-set", {}), ("php.ini-set", {"domain": "example.com"})):
        for key, value, where, said in HOSTILE_INI:
            answer = hosting.post(kind, version=version, key=key, value=value, **extra)
            assert answer.status_code == 422, (kind, key, answer.text)
            error = answer.json()["error"]
            assert error["code"] == "validation_error" and error["message"].startswith(f"body.args.{where}: ")
            assert said in error["message"], (kind, key, error["message"])
    assert ini.read_text() == before
    assert pool.ask("post_max_size")["ini"]["post_max_size"] == "16M"


def test_the_allow_list_is_shown_in_the_catalog(hosting: Hosting) -> None:
    with hosting.http() as http:
        kinds = {k["kind"]: k for k in http.get("/v1/job-kinds").json()["kinds"]}
    site, version = kinds["php.ini-set"]["args_schema"], kinds["php.ini-global-set"]["args_schema"]
    assert (kinds["php.ini-set"]["group"], kinds["php.ini-global-set"]["group"]) == ("infra", "sysadmin")
    assert "memory_limit" in site["properties"]["key"]["enum"]
    assert "opcache.memory_consumption" not in site["properties"]["key"]["enum"]  # the master's, not a pool's
    assert "opcache.memory_consumption" in version["properties"]["key"]["enum"]
    assert "opcache.preload" not in version["properties"]["key"]["enum"]
    allowed = version["properties"]["value"]["x-allowed"]
    assert set(allowed) == set(version["properties"]["key"]["enum"])
    assert allowed["memory_limit"] == {
        "type": "size", "minimum": "16M", "maximum": "16G", "pattern": allowed["memory_limit"]["pattern"],
        "description": "the most memory one script may use",
    }  # fmt: skip
    assert allowed["display_errors"]["enum"] == ["On", "Off"]
    assert kinds["php.ini-get"]["args_schema"]["properties"]["key"]["enum"] == version["properties"]["key"]["enum"]


def test_only_a_sysadmin_sets_a_directive_for_a_whole_version(hosting: Hosting, pool: ProbePool) -> None:
    with hosting.http() as http:
        org = http.get("/v1/me").json()["org"]["name"]
    email = f"operator-{secrets.token_hex(4)}@{org}.test"
    hosting.stack.admin("create-user", email, "--org", org, "--role", "operator", "--password", "pw-123456")
    args = {"version": pool.fpm.version, "key": "max_input_vars", "value": "2346"}
    with hosting.stack.http(hosting.stack.login(email, "pw-123456")) as operator:
        url = f"/v1/servers/{hosting.server_id}/jobs"
        refused = operator.post(url, json={"kind": "php.ini-global-set", "args": args})
        assert refused.status_code == 403 and refused.json()["error"]["details"] == {"capability": "sysadmin"}
        per_site = operator.post(url, json={"kind": "php.ini-set", "args": {**args, "domain": "nosite.example"}})
        assert per_site.status_code == 201, per_site.text  # the operator's own: it ends "no such site"
    assert hosting.wait(per_site.json()["id"]).exit_code == 1


def test_directives_written_before_the_allow_list_go_with_the_next_change(hosting: Hosting, pool: ProbePool) -> None:
    version = pool.fpm.version
    ini = pool.fpm.ini_dir / "fpm" / "conf.d" / "99-fleetdeck.ini"
    ini.write_text(
        "; written by fleetdeck (php.ini-set): these directives override php.ini\n"
        "opcache.preload_user = root\nsendmail_path = /bin/true\nmemory_limit = 99999G\nmax_input_vars = 2001\n"
    )
    run = hosting.run("php.ini-global-set", version=version, key="max_input_time", value="61").ok()
    assert ini.read_text() == (
        "; written by fleetdeck (php.ini-set): these directives override php.ini\n"
        "max_input_vars = 2001\nmax_input_time = 61\n"
    )
    for line in ("opcache.preload_user = root", "sendmail_path = /bin/true", "memory_limit = 99999G"):
        assert f"{ini}: {line!r} removed: not on the allow-list of php.ini directives" in run.stderr
    wait_until(lambda: pool.ask("max_input_time")["ini"]["max_input_time"] == "61")
    assert pool.ask("sendmail_path")["ini"]["sendmail_path"] != "/bin/true"


def test_directives_written_before_the_allow_list_go_when_the_agent_starts(hosting: Hosting, pool: ProbePool) -> None:
    """An agent upgraded onto a server whose fleetdeck ini holds what the allow-list refuses (a
    version-wide preload, written by an older agent) removes it at once: it does not wait for a
    sysadmin's next php.ini-global-set."""
    cli = pool.fpm.ini_dir / "cli" / "conf.d" / "99-fleetdeck.ini"
    fpm = pool.fpm.ini_dir / "fpm" / "conf.d" / "99-fleetdeck.ini"
    for ini in (cli, fpm):
        ini.write_text("; fleetdeck\nsendmail_path = /bin/true\nmax_input_vars = 2002\nopcache.preload_user = root\n")
    before = pool.worker_pids()
    hosting.agent.kill()
    hosting.agent.restart()
    wait_until(lambda: fpm.read_text() == cli.read_text() == "; fleetdeck\nmax_input_vars = 2002\n")
    reloaded(pool, before)
    assert pool.ask("sendmail_path")["ini"]["sendmail_path"] != "/bin/true"
    assert pool.ask("max_input_vars")["ini"]["max_input_vars"] == "2002"
    assert "'sendmail_path = /bin/true' removed from 99-fleetdeck.ini" in Path(hosting.agent.log_file).read_text()


def test_a_directive_this_php_does_not_know_changes_nothing(hosting: Hosting) -> None:
    older = next((fpm for version, fpm in hosting.php_versions.items() if version.startswith("7.")), None)
    if older is None:
        pytest.skip("needs PHP 7 (scripts/test installs 7.4), which has no opcache.jit")
    ini = older.ini_dir / "fpm" / "conf.d" / "99-fleetdeck.ini"
    before = ini.read_text() if ini.exists() else None
    unknown = hosting.run("php.ini-global-set", version=older.version, key="opcache.jit", value="tracing")
    assert unknown.exit_code == 78 and f"PHP {older.version} knows no directive opcache.jit" in unknown.text
    assert (ini.read_text() if ini.exists() else None) == before


def test_ini_get_reads_only_directives_of_the_allow_list(hosting: Hosting, pool: ProbePool) -> None:
    for key in ("mysqli.default_pw", "opcache.preload", "no_such_directive"):
        answer = hosting.post("php.ini-get", version=pool.fpm.version, key=key)
        assert answer.status_code == 422 and "allow-list" in answer.json()["error"]["message"], answer.text


# --- modules ------------------------------------------------------------------------------------


def test_module_list_says_what_fpm_and_the_cli_load(hosting: Hosting, pool: ProbePool) -> None:
    modules = {m["name"]: m for m in hosting.run("php.module-list", version=pool.fpm.version).ok().result["modules"]}
    assert modules["calendar"] == {"name": "calendar", "fpm": True, "cli": True, "builtin": False}
    assert modules["opcache"]["fpm"]
    assert modules["core"]["builtin"]


def test_a_module_is_disabled_and_enabled_for_fpm_and_cli(hosting: Hosting, pool: ProbePool) -> None:
    version, conf_d = pool.fpm.version, pool.fpm.ini_dir / "fpm" / "conf.d"
    hosting.run("php.module-disable", version=version, module="calendar").ok()
    assert not list(conf_d.glob("*-calendar.ini"))
    wait_until(lambda: "calendar" not in pool.ask()["modules"])
    assert "calendar" not in parse_php_m(cli_ini(pool.fpm, "cli", "-m"))
    assert "not enabled" in hosting.run("php.module-disable", version=version, module="calendar").ok().text

    hosting.run("php.module-enable", version=version, module="calendar").ok()
    assert os.readlink(conf_d / "20-calendar.ini") == f"/etc/php/{version}/mods-available/calendar.ini"
    wait_until(lambda: "calendar" in pool.ask()["modules"])
    assert "calendar" in parse_php_m(cli_ini(pool.fpm, "cli", "-m"))
    assert "already enabled" in hosting.run("php.module-enable", version=version, module="calendar").ok().text


def test_disabling_a_module_others_need_is_refused(hosting: Hosting, pool: ProbePool) -> None:
    conf_d = pool.fpm.ini_dir / "fpm" / "conf.d"
    before = sorted(p.name for p in conf_d.iterdir())
    run = hosting.run("php.module-disable", version=pool.fpm.version, module="pdo")
    assert run.exit_code == 78, run.text
    assert "pdo_mysql" in run.text
    assert sorted(p.name for p in conf_d.iterdir()) == before


def test_enabling_a_module_that_is_not_there_names_its_package(hosting: Hosting, pool: ProbePool) -> None:
    run = hosting.run("php.module-enable", version=pool.fpm.version, module="nosuchmod")
    assert run.exit_code == 69
    assert f"php{pool.fpm.version}-nosuchmod" in run.text


def test_extension_install_of_an_installed_or_unknown_extension(hosting: Hosting, pool: ProbePool) -> None:
    version = pool.fpm.version
    assert "already installed" in hosting.run("php.extension-install", version=version, module="calendar").ok().text
    run = hosting.run("php.extension-install", version=version, module="nosuchext")
    assert run.exit_code == 1
    assert f"no Debian package php{version}-nosuchext" in run.text


def test_extension_install_installs_from_debian_and_the_fpm_loads_it(hosting: Hosting, pool: ProbePool) -> None:
    version, module = pool.fpm.version, "bcmath"
    package = f"php{version}-{module}"
    if Path(f"/etc/php/{version}/mods-available/{module}.ini").exists():
        pytest.skip(f"{package} is installed on this machine already")
    if subprocess.run(["apt-cache", "show", "--no-all-versions", package], capture_output=True).returncode != 0:
        pytest.skip(f"apt does not know {package} here (no package lists)")
    assert module not in pool.ask()["modules"]
    before = pool.worker_pids()
    try:
        run = hosting.run("php.extension-install", version=version, module=module).ok()
        assert f"Setting up {package}" in run.text and f"PHP-FPM {version} reloaded" in run.text
        reloaded(pool, before)
        assert module in pool.ask()["modules"]
        assert pool.fpm.ini_dir.joinpath("fpm", "conf.d", f"20-{module}.ini").is_symlink()
        listed = hosting.run("php.module-list", version=version).ok().result["modules"]
        assert {"name": module, "fpm": True, "cli": True, "builtin": False} in listed
    finally:
        subprocess.run(
            ["apt-get", "purge", "-y", "-q", package],
            capture_output=True,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        )
        for sapi in ("fpm", "cli"):
            pool.fpm.ini_dir.joinpath(sapi, "conf.d", f"20-{module}.ini").unlink(missing_ok=True)
        before = pool.worker_pids()
        reload_fpm(pool.fpm)
        reloaded(pool, before)
    assert module not in pool.ask()["modules"]


# --- a site's pool -----------------------------------------------------------------------------


@dataclass(frozen=True)
class PhpSite:
    domain: str
    slug: str
    socket: Path
    pool_file: Path


@pytest.fixture(scope="module")
def site(hosting: Hosting, pool: ProbePool) -> Iterator[PhpSite]:
    domain = f"php{secrets.token_hex(4)}.example.test"
    hosting.run("site.create", domain=domain, profile="php").ok()
    slug = domain.replace(".", "-")
    fpm = pool.fpm
    yield PhpSite(domain, slug, fpm.run_dir / f"fleetdeck-{slug}.sock", fpm.pool_dir / f"fleetdeck-{slug}.conf")
    hosting.run("site.delete", domain=domain).ok()
    subprocess.run(["userdel", slug], capture_output=True, check=False)


def test_a_site_ini_value_is_in_its_own_pool_only(hosting: Hosting, pool: ProbePool, site: PhpSite) -> None:
    version = pool.fpm.version
    run = hosting.run("php.ini-set", version=version, key="max_execution_time", value="77", domain=site.domain).ok()
    assert "php_admin_value[max_execution_time]" in site.pool_file.read_text(), run.text
    wait_until(lambda: pool.ini_now("max_execution_time", socket=site.socket) == "77")
    assert pool.ask("max_execution_time", socket=site.socket)["user"] == site.slug
    assert pool.ask("max_execution_time")["ini"]["max_execution_time"] != "77"  # another pool: the global value
    got = hosting.run("php.ini-get", version=version, key="max_execution_time", domain=site.domain).ok().result
    assert got["value"] == "77" and got["scope"] == "site" and got["global_value"] != "77"
    again = hosting.run("php.ini-set", version=version, key="max_execution_time", value="77", domain=site.domain)
    assert "already" in again.ok().text


def test_a_refused_site_ini_value_leaves_the_pool_as_it_was(hosting: Hosting, pool: ProbePool, site: PhpSite) -> None:
    before = site.pool_file.read_text()
    version = pool.fpm.version
    answer = hosting.post("php.ini-set", version=version, key="memory_limit", value="12Q", domain=site.domain)
    assert answer.status_code == 422, answer.text
    version_only = hosting.post(
        "php.ini-set", version=version, key="realpath_cache_size", value="4M", domain=site.domain
    )
    assert version_only.status_code == 422
    assert "applies to every site of a PHP version: php.ini-global-set" in version_only.json()["error"]["message"]
    assert site.pool_file.read_text() == before


def test_a_site_limit_is_changed_by_site_limits_only(hosting: Hosting, pool: ProbePool, site: PhpSite) -> None:
    hosting.run("site.limits", domain=site.domain, memory_limit="96M").ok()
    before = site.pool_file.read_text()
    run = hosting.run("php.ini-set", version=pool.fpm.version, key="memory_limit", value="64M", domain=site.domain)
    assert run.exit_code == 1 and "site.limits sets memory_limit" in run.text
    assert site.pool_file.read_text() == before
    wait_until(lambda: pool.ini_now("memory_limit", socket=site.socket) == "96M")


def test_pool_set_sizes_the_site_pool(hosting: Hosting, pool: ProbePool, site: PhpSite) -> None:
    hosting.run("php.pool-set", domain=site.domain, pm="static", max_children=2, max_requests=100).ok()
    text = site.pool_file.read_text()
    assert "pm = static" in text and "pm.max_children = 2" in text and "pm.max_requests = 100" in text
    name = f"fleetdeck-{site.slug}"
    wait_until(lambda: len(worker_pids(pool.fpm, name)) == 2)
    status = hosting.run("php.fpm-status", version=pool.fpm.version).ok().result
    mine = next(p for p in status["pools"] if p["name"] == name)
    assert mine["pm"] == "static" and {p["user"] for p in mine["processes"]} == {site.slug}
    again = hosting.run("php.pool-set", domain=site.domain, pm="static", max_children=2, max_requests=100)
    assert "already" in again.ok().text
    hosting.run("php.pool-set", domain=site.domain, pm="ondemand", max_children=3).ok()
    assert "pm = ondemand" in site.pool_file.read_text() and "max_requests" not in site.pool_file.read_text()
    wait_until(lambda: not worker_pids(pool.fpm, name))


def test_php_set_keeps_a_site_on_an_installed_version(hosting: Hosting, pool: ProbePool, site: PhpSite) -> None:
    before = site.pool_file.read_text()
    same = hosting.run("php.set", domain=site.domain, version=pool.fpm.version).ok()
    assert f"already runs PHP {pool.fpm.version}" in same.text
    missing = hosting.run("php.set", domain=site.domain, version="5.1")
    assert missing.exit_code == 69 and "php5.1-fpm" in missing.text
    assert site.pool_file.read_text() == before
    assert hosting.run("site.inspect", domain=site.domain).ok().result["php"] == pool.fpm.version


VERSION_PAGE = (
    "<?php echo PHP_VERSION, ' as ', posix_getpwuid(posix_geteuid())['name'], ' ', ini_get('max_input_vars');\n"
)


@pytest.fixture
def two_fpms(hosting: Hosting) -> tuple[PhpFpm, PhpFpm]:
    """An older version's FPM and the newest (the sites' default) one, both of the session's."""
    if len(hosting.php_versions) < 2:
        pytest.skip("needs two PHP-FPM versions (scripts/test installs php7.4-fpm from Debian 11)")
    older, newest = list(hosting.php_versions.values())[-2:]
    return older, newest


def test_php_set_moves_a_site_between_two_real_fpms(hosting: Hosting, two_fpms: tuple[PhpFpm, PhpFpm]) -> None:
    older, newest = two_fpms
    domain = f"phpset{secrets.token_hex(4)}.example.test"
    slug = domain.replace(".", "-")
    pool_name = f"fleetdeck-{slug}.conf"
    hosting.run("site.create", domain=domain, profile="php").ok()
    try:
        hosting.put_page(domain, "version.php", VERSION_PAGE)
        assert hosting.get(domain, "/version.php").text.startswith(f"{newest.version}.")
        versions = {v["version"]: v for v in hosting.run("php.versions").ok().result["versions"]}
        assert versions[older.version]["fpm_running"] and versions[newest.version]["fpm_running"]

        run = hosting.run("php.set", domain=domain, version=older.version).ok()
        assert f"runs PHP {older.version} (was {newest.version})" in run.text
        # the job ends once nginx's new workers serve and the pool's socket is there: no waiting
        page = hosting.get(domain, "/version.php")
        assert page.status_code == 200 and page.text.startswith(f"{older.version}.") and f" as {slug} " in page.text
        assert (older.pool_dir / pool_name).exists() and not (newest.pool_dir / pool_name).exists()
        wait_until(lambda: not (newest.run_dir / f"fleetdeck-{slug}.sock").exists())  # that FPM reloads on its own
        assert hosting.run("site.inspect", domain=domain).ok().result["php"] == older.version
        pools = hosting.run("php.fpm-status", version=older.version).ok().result["pools"]
        assert f"fleetdeck-{slug}" in {p["name"] for p in pools}

        # the site's settings follow it: ini for its version only, and its version is kept installed
        wrong = hosting.run("php.ini-set", version=newest.version, key="max_input_vars", value="3000", domain=domain)
        assert wrong.exit_code == 1 and f"runs PHP {older.version}, not {newest.version}" in wrong.text
        hosting.run("php.ini-set", version=older.version, key="max_input_vars", value="3000", domain=domain).ok()
        wait_until(lambda: hosting.get(domain, "/version.php").text.endswith(f" as {slug} 3000"))  # FPM's reload
        kept = hosting.run("php.uninstall", version=older.version)
        assert kept.exit_code == 1 and domain in kept.text and Path(older.binary).exists()

        hosting.run("php.set", domain=domain, version=newest.version).ok()
        page = hosting.get(domain, "/version.php")
        assert page.text.startswith(f"{newest.version}.") and page.text.endswith(f" as {slug} 3000")
        assert not (older.pool_dir / pool_name).exists()
    finally:
        hosting.run("site.delete", domain=domain).ok()
        subprocess.run(["userdel", slug], capture_output=True, check=False)


def test_a_site_is_made_on_the_version_asked_for(hosting: Hosting, two_fpms: tuple[PhpFpm, PhpFpm]) -> None:
    older, newest = two_fpms
    domain = f"phpnew{secrets.token_hex(4)}.example.test"
    slug = domain.replace(".", "-")
    hosting.run("site.create", domain=domain, profile="php", php=older.version).ok()
    try:
        assert hosting.run("site.inspect", domain=domain).ok().result["php"] == older.version
        hosting.put_page(domain, "version.php", VERSION_PAGE)
        assert hosting.get(domain, "/version.php").text.startswith(f"{older.version}.")
        assert (older.pool_dir / f"fleetdeck-{slug}.conf").exists()
        assert not (newest.pool_dir / f"fleetdeck-{slug}.conf").exists()
    finally:
        hosting.run("site.delete", domain=domain).ok()
        subprocess.run(["userdel", slug], capture_output=True, check=False)


def test_a_site_on_a_version_not_installed_is_not_made(hosting: Hosting, pool: ProbePool) -> None:
    domain = f"phpnone{secrets.token_hex(4)}.example.test"
    run = hosting.run("site.create", domain=domain, profile="php", php="5.6")
    assert run.exit_code == 69 and "php5.6-fpm" in run.text
    assert domain not in {site["domain"] for site in hosting.run("site.list").ok().result["sites"]}
    assert not (hosting.home / domain.replace(".", "-")).exists()
    static = hosting.post("site.create", domain=domain, php=pool.fpm.version)
    assert static.status_code == 422 and "a static site runs no PHP" in static.text


def test_opcache_reset_goes_through_the_site_pool(hosting: Hosting, pool: ProbePool, site: PhpSite) -> None:
    def restarts() -> int:
        status = pool.ask(socket=site.socket)["opcache"]
        assert status, "the FPM's opcache is off"
        count: int = status["opcache_statistics"]["manual_restarts"]
        return count

    before = restarts()
    run = hosting.run("php.opcache-reset", domain=site.domain).ok()
    assert "is reset" in run.text
    wait_until(lambda: restarts() > before)


def test_a_static_site_has_no_php_to_reset(hosting: Hosting) -> None:
    domain = f"static{secrets.token_hex(4)}.example.test"
    hosting.run("site.create", domain=domain).ok()
    try:
        run = hosting.run("php.opcache-reset", domain=domain)
        assert run.exit_code == 1 and "runs no PHP" in run.text
    finally:
        hosting.run("site.delete", domain=domain).ok()
        subprocess.run(["userdel", domain.replace(".", "-")], capture_output=True, check=False)


# --- parsers ------------------------------------------------------------------------------------


def test_set_directive_replaces_the_last_setting_or_appends() -> None:
    text = "[www]\nuser = a\n; pm = x\npm = static\npm=dynamic\n"
    assert set_directive(text, "pm", "ondemand") == "[www]\nuser = a\n; pm = x\npm = ondemand\n"
    assert set_directive("[www]\n", "php_admin_value[memory_limit]", "64M").endswith(
        "php_admin_value[memory_limit] = 64M\n"
    )


def test_parse_sections_reads_pools_and_quotes() -> None:
    text = '[global]\npid = /run/x.pid\n\n[site]\nlisten = "/run/php/a.sock"\n; user = no\nuser = site\n'
    assert parse_sections(text) == [
        ("global", {"pid": "/run/x.pid"}),
        ("site", {"listen": "/run/php/a.sock", "user": "site"}),
    ]


def test_problem_lines_drop_time_stamps_and_notices() -> None:
    text = (
        "[23-Nov-2026 20:47:47] NOTICE: PHP message: PHP Warning:  Invalid quantity in Unknown on line 0\n"
        "[23-Nov-2026 20:47:47] NOTICE: configuration file x test is successful\n"
        "[23-Nov-2026 20:47:54] ERROR: [x:7] unable to parse value for entry 'pm'\n"
    )
    assert problem_lines(text) == [
        "PHP Warning:  Invalid quantity in Unknown on line 0",
        "ERROR: [x:7] unable to parse value for entry 'pm'",
    ]


def test_module_priority_and_php_m_names() -> None:
    assert module_priority("; configuration for php opcache module\n; priority=10\nzend_extension=opcache.so\n") == 10
    assert module_priority("extension=foo.so\n") == 20
    assert parse_php_m("[PHP Modules]\nCore\nPDO\nZend OPcache\n\n[Zend Modules]\nZend OPcache\n") == {
        "core",
        "pdo",
        "opcache",
    }


def test_a_file_trial_puts_files_links_and_absences_back(tmp_path: Path) -> None:
    (tmp_path / "kept.ini").write_text("a = 1\n")
    (tmp_path / "link.ini").symlink_to("/etc/target.ini")
    trial = FileTrial()
    trial.write(str(tmp_path / "kept.ini"), "a = 2\n")
    trial.write(str(tmp_path / "new.ini"), "b = 1\n")
    trial.remove(str(tmp_path / "link.ini"))
    trial.link(str(tmp_path / "20-x.ini"), "/etc/x.ini")
    trial.undo()
    assert (tmp_path / "kept.ini").read_text() == "a = 1\n"
    assert os.readlink(tmp_path / "link.ini") == "/etc/target.ini"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.ini", "link.ini"]


def test_site_settings_written_before_the_allow_lists_go_when_the_agent_starts(
    hosting: Hosting, pool: ProbePool, site: PhpSite
) -> None:
    """A site whose registry entry (and pool, rendered by an older agent) holds what the
    allow-lists refuse loses it when the agent starts: it does not wait for the site's next change."""
    registry = hosting.state / "sites.json"
    hosting.agent.kill()
    sites = json.loads(registry.read_text())
    entry = next(entry for entry in sites["sites"] if entry["domain"] == site.domain)
    entry["php_ini"] = {"auto_prepend_file": "/etc/passwd", "max_input_vars": "2003"}
    entry["env"] = {"HOME_OF_THE_MASTER": {"value": "$HOME", "secret": False}}
    registry.write_text(json.dumps(sites))
    site.pool_file.write_text(site.pool_file.read_text() + "php_admin_value[auto_prepend_file] = /etc/passwd\n")
    hosting.agent.restart()
    wait_until(lambda: "auto_prepend_file" not in site.pool_file.read_text())
    assert 'php_admin_value[max_input_vars] = "2003"' in site.pool_file.read_text()
    assert "HOME_OF_THE_MASTER" not in site.pool_file.read_text()
    wait_until(lambda: pool.ini_now("max_input_vars", socket=site.socket) == "2003")
    log = Path(hosting.agent.log_file).read_text()
    assert f"site {site.domain}: left out of its pool (not on the allow-list): php_ini auto_prepend_file" in log
