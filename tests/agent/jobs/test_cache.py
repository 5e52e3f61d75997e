"""The cache kinds through the API against the hosting server's real root agent.

Redis and memcached are the tests' own: each runs from a configuration file in the module's
folder (Redis on a unix socket only, memcached on a unix socket in a folder of its user's), and
the host layout's ``redis`` and ``memcached`` sections name those files and the commands that
start, stop and restart them (as Debian's init scripts do: ``start-stop-daemon``, and
``start-memcached`` reading the file). enable/disable act on the system's own memcached through
its init script, whose state and rc.d links are put back afterwards. The opcache is the session's
PHP-FPM's (`tests.helpers.web_services`).
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agent.jobs.cache import memcached_address, redis_target, with_line
from agent.jobs.toolkit.host import rc_links, systemd_running
from tests.helpers import wait_until
from tests.helpers.hosting import Hosting

MIB = 1024 * 1024
REDIS_SERVER = shutil.which("redis-server")
MEMCACHED_START = Path("/usr/share/memcached/scripts/start-memcached")
needs_redis = pytest.mark.skipif(
    REDIS_SERVER is None or shutil.which("redis-cli") is None, reason="needs Redis (Debian package redis-server)"
)
needs_memcached = pytest.mark.skipif(not MEMCACHED_START.exists(), reason="needs memcached (Debian package memcached)")

REDIS_CONF = """# the tests' Redis: a unix socket only
port 0
unixsocket {folder}/redis.sock
unixsocketperm 700
daemonize yes
pidfile {folder}/server.pid
logfile {folder}/redis.log
dir {folder}
save ""
maxmemory 64mb
"""

MEMCACHED_CONF = """# the tests' memcached
logfile {folder}/memcached.log
-m 64
-s {folder}/sock/memcached.sock
-a 0700
-u memcache
"""


@dataclass
class CacheServer:
    """A cache server of the tests': its folder, configuration file and control script."""

    folder: Path
    conf: Path
    ctl: Path
    pid_file: Path

    def control(self, action: str) -> None:
        subprocess.run([str(self.ctl), action], check=True, capture_output=True)

    def layout(self, unit: str) -> dict[str, Any]:
        """The host layout's section: the file, and the commands that act on this server."""
        commands = {action: [str(self.ctl), action] for action in ("start", "stop", "restart")}
        return {"conf": str(self.conf), "control": {"unit": unit, "commands": commands}}

    def pid(self) -> int:
        return int(self.pid_file.read_text().strip())


CTL = """#!/bin/sh
# {what}: start | stop | restart, as its Debian init script does
case "$1" in
  start) {start} ;;
  stop) start-stop-daemon --stop --quiet --oknodo --retry 5 --pidfile {pid} ;;
  restart) "$0" stop && "$0" start ;;
  *) exit 3 ;;
esac
"""


def make_server(folder: Path, conf: str, start: str, what: str) -> CacheServer:
    folder.mkdir(parents=True)
    server = CacheServer(folder, folder / "cache.conf", folder / "ctl", folder / "server.pid")
    server.conf.write_text(conf.format(folder=folder))
    server.ctl.write_text(CTL.format(what=what, start=start, pid=server.pid_file))
    server.ctl.chmod(0o755)
    return server


def redis(server: CacheServer, *command: str) -> str:
    done = subprocess.run(
        ["redis-cli", "-s", str(server.folder / "redis.sock"), *command], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def memcached(server: CacheServer, command: str) -> str:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(str(server.folder / "sock" / "memcached.sock"))
        sock.sendall(command.encode() + b"\r\n")
        answer = b""
        while not answer.endswith((b"END\r\n", b"STORED\r\n", b"OK\r\n", b"RESET\r\n")):
            answer += sock.recv(65536)
    return answer.decode()


def memcached_stats(server: CacheServer) -> dict[str, str]:
    return {p[1]: p[2] for p in (line.split() for line in memcached(server, "stats").splitlines()) if len(p) == 3}


def answers(check: Any) -> bool:
    try:
        check()
    except (OSError, subprocess.CalledProcessError):
        return False
    return True


@pytest.fixture(scope="module")
def redis_server(hosting: Hosting) -> Iterator[CacheServer]:
    if REDIS_SERVER is None:
        pytest.skip("needs Redis (Debian package redis-server)")
    folder = hosting.folder / f"redis-{secrets.token_hex(3)}"
    server = make_server(folder, REDIS_CONF, f"{REDIS_SERVER} {folder}/cache.conf", "the tests' Redis")
    server.control("start")
    wait_until(lambda: answers(lambda: redis(server, "PING")))
    hosting.configure("redis", server.layout("redis-server"))
    yield server
    server.control("stop")


@pytest.fixture(scope="module")
def memcached_server(hosting: Hosting) -> Iterator[CacheServer]:
    if not MEMCACHED_START.exists():
        pytest.skip("needs memcached (Debian package memcached)")
    folder = hosting.folder / f"memcached-{secrets.token_hex(3)}"
    start = f"start-stop-daemon --start --quiet --exec {MEMCACHED_START} -- {folder}/cache.conf {folder}/server.pid"
    server = make_server(folder, MEMCACHED_CONF, start, "the tests' memcached")
    (folder / "sock").mkdir()  # memcached binds its socket as its user, after dropping root
    memcache = pwd.getpwnam("memcache")
    os.chown(folder / "sock", memcache.pw_uid, memcache.pw_gid)
    server.control("start")
    wait_until(lambda: answers(lambda: memcached(server, "stats")))
    hosting.configure("memcached", server.layout("memcached"))
    yield server
    server.control("stop")


# --- reading the configuration files ----------------------------------------------------------------


def test_one_line_is_set_where_the_server_reads_it_and_every_other_line_stays() -> None:
    text = "# maxmemory 1gb is a comment\nmaxmemory 1gb\nport 0\nMAXMEMORY 2gb\nsave ''\n"
    assert with_line(text, "maxmemory", "maxmemory 32mb", ignore_case=True) == (
        "# maxmemory 1gb is a comment\nport 0\nmaxmemory 32mb\nsave ''\n"
    )
    assert with_line("-m 64\n-M\n", "-M", None) == "-m 64\n"
    assert with_line("-m 64", "-M", "-M") == "-m 64\n-M\n"


def test_where_redis_and_memcached_answer_comes_from_their_files() -> None:
    assert redis_target("unixsocket /run/r.sock\nport 6379\nrequirepass 's3 cret'\n").where == ("-s", "/run/r.sock")
    assert redis_target("unixsocket /run/r.sock\nrequirepass 's3 cret'\n").password == "s3 cret"
    assert redis_target("bind 127.0.0.2 -::1\nport 6380\n").where == ("-h", "127.0.0.2", "-p", "6380")
    assert redis_target("# Debian's\n").where == ("-h", "127.0.0.1", "-p", "6379")
    assert memcached_address("-p 11311\n-l 127.0.0.3,::1\n") == memcached_address("-l 127.0.0.3\n-p 11311")
    assert memcached_address("-s /run/m.sock\n-p 11311\n").socket == "/run/m.sock"


# --- status -------------------------------------------------------------------------------------------


@needs_redis
@needs_memcached
def test_status_reads_memory_limit_and_hit_rate_from_each_server(
    hosting: Hosting, redis_server: CacheServer, memcached_server: CacheServer
) -> None:
    redis(redis_server, "CONFIG", "RESETSTAT")
    redis(redis_server, "SET", "k", "v" * 100_000)
    for key in ("k", "k", "k", "missing"):
        redis(redis_server, "GET", key)
    memcached(memcached_server, "stats reset")
    memcached(memcached_server, "set k 0 0 1\r\nv")
    for key in ("k", "missing", "missing", "missing"):
        memcached(memcached_server, f"get {key}")

    caches = {c["engine"]: c for c in hosting.run("cache.status").ok().result["caches"]}
    assert list(caches) == ["redis", "memcached", "opcache", "page"]
    mine = caches["redis"]
    assert (mine["installed"], mine["running"], mine["hit_rate"]) == (True, True, 0.75)
    assert mine["memory_limit_bytes"] == 64 * MIB and mine["eviction"] == "noeviction"
    used_now = int(redis(redis_server, "INFO", "memory").split("used_memory:")[1].split()[0])
    assert mine["memory_used_bytes"] > 100_000 and abs(mine["memory_used_bytes"] - used_now) < 256 * 1024
    mine = caches["memcached"]
    assert (mine["installed"], mine["running"], mine["hit_rate"]) == (True, True, 0.25)
    assert mine["memory_limit_bytes"] == 64 * MIB and mine["eviction"] == "lru"
    assert mine["memory_used_bytes"] == int(memcached_stats(memcached_server)["bytes"])
    assert caches["page"]["note"] == "the nginx page cache (engine page) is not implemented yet in this agent"
    versions = {row["version"]: row for row in caches["opcache"]["versions"]}
    assert hosting.php is not None and versions[hosting.php.version]["fpm_running"] is True

    redis_server.control("stop")
    try:
        stopped = hosting.run("cache.status", engine="redis").ok().result["caches"]
        assert [(c["engine"], c["running"], c["memory_used_bytes"]) for c in stopped] == [("redis", False, None)]
    finally:
        redis_server.control("start")
        wait_until(lambda: answers(lambda: redis(redis_server, "PING")))


# --- flush --------------------------------------------------------------------------------------------


@needs_redis
@needs_memcached
def test_flush_empties_redis_and_memcached(
    hosting: Hosting, redis_server: CacheServer, memcached_server: CacheServer
) -> None:
    redis(redis_server, "SET", "a", "1")
    redis(redis_server, "-n", "3", "SET", "b", "2")
    memcached(memcached_server, "set k 0 0 1\r\nv")

    assert "Redis is flushed" in hosting.run("cache.flush", engine="redis").ok().text
    assert redis(redis_server, "DBSIZE") == "0" and redis(redis_server, "-n", "3", "DBSIZE") == "0"
    assert "memcached is flushed" in hosting.run("cache.flush", engine="memcached").ok().text
    assert memcached(memcached_server, "get k") == "END\r\n"

    run = hosting.run("cache.flush", engine="redis", domain="example.com")
    assert (run.exit_code, run.stderr) == (1, ["redis is one cache for the whole server: flush it without a domain"])


def fpm_reloads(hosting: Hosting, version: str) -> int:
    """How often the session's FPM of `version` says it reloaded (its log)."""
    log = hosting.php_versions[version].folder / "php-fpm.log"
    return log.read_text().count("Reloading in progress")


def test_flushing_the_opcache_of_a_site_reloads_the_fpm_of_its_version_only(hosting: Hosting) -> None:
    if hosting.php is None:
        pytest.skip("needs PHP-FPM (Debian package php-fpm)")
    domain = f"oc{secrets.token_hex(3)}.example.test"
    hosting.run("site.create", domain=domain, profile="php").ok()
    static = f"st{secrets.token_hex(3)}.example.test"
    hosting.run("site.create", domain=static, profile="static").ok()
    try:
        before = {version: fpm_reloads(hosting, version) for version in hosting.php_versions}
        run = hosting.run("cache.flush", engine="opcache", domain=domain).ok()
        assert f"PHP-FPM {hosting.php.version} reloaded" in run.text
        version = hosting.php.version
        wait_until(lambda: fpm_reloads(hosting, version) == before[version] + 1)
        others = {v: fpm_reloads(hosting, v) for v in hosting.php_versions if v != version}
        assert others == {v: n for v, n in before.items() if v != version}

        run = hosting.run("cache.flush", engine="opcache", domain=static)
        assert (run.exit_code, run.stderr) == (1, [f"site {static} runs no PHP (its profile is static): no opcache"])
        run = hosting.run("cache.flush", engine="opcache", domain="nowhere.example.test")
        assert (run.exit_code, run.stderr) == (1, ["no site nowhere.example.test on this server"])
    finally:
        hosting.run("site.delete", domain=domain).ok()
        hosting.run("site.delete", domain=static).ok()


def test_the_page_cache_says_it_is_not_implemented_yet(hosting: Hosting) -> None:
    for kind in ("cache.flush", "cache.enable", "cache.disable"):
        run = hosting.run(kind, engine="page", domain="example.com")
        assert (run.exit_code, run.stderr) == (
            1,
            ["the nginx page cache (engine page) is not implemented yet in this agent"],
        )


# --- config-set ---------------------------------------------------------------------------------------


@needs_redis
def test_sizing_redis_rewrites_its_lines_keeps_the_rest_and_restarts_it(
    hosting: Hosting, redis_server: CacheServer
) -> None:
    before = redis_server.conf.read_text()
    pid = redis_server.pid()

    run = hosting.run("cache.config-set", engine="redis", memory_mb=32, eviction="allkeys-lru").ok()
    assert f"Redis restarted with 32 MB, eviction allkeys-lru ({redis_server.conf})" in run.text
    assert redis_server.conf.read_text() == (
        before.replace("maxmemory 64mb\n", "maxmemory 32mb\n") + "maxmemory-policy allkeys-lru\n"
    )
    assert redis_server.pid() != pid
    assert redis(redis_server, "CONFIG", "GET", "maxmemory").split() == ["maxmemory", str(32 * MIB)]
    assert redis(redis_server, "CONFIG", "GET", "maxmemory-policy").split() == ["maxmemory-policy", "allkeys-lru"]

    pid = redis_server.pid()
    again = hosting.run("cache.config-set", engine="redis", memory_mb=32, eviction="allkeys-lru").ok()
    assert "Redis already runs with 32 MB" in again.text and redis_server.pid() == pid


@needs_redis
def test_a_file_redis_refuses_is_put_back_and_the_job_ends_78(hosting: Hosting, redis_server: CacheServer) -> None:
    broken = redis_server.conf.read_text() + "no-such-directive yes\n"  # the running server read the file before
    redis_server.conf.write_text(broken)
    try:
        run = hosting.run("cache.config-set", engine="redis", memory_mb=48)
        assert run.exit_code == 78 and len(run.stderr) == 1, run.text
        assert run.stderr[0].startswith("Redis refused the change (")
        assert redis_server.conf.read_text() == broken
    finally:
        redis_server.conf.write_text(broken.replace("no-such-directive yes\n", ""))
        redis_server.control("restart")
        wait_until(lambda: answers(lambda: redis(redis_server, "PING")))


@needs_memcached
def test_sizing_memcached_sets_its_memory_and_eviction(hosting: Hosting, memcached_server: CacheServer) -> None:
    before = memcached_server.conf.read_text()
    run = hosting.run("cache.config-set", engine="memcached", memory_mb=96, eviction="noeviction").ok()
    assert "memcached restarted with 96 MB, eviction noeviction" in run.text
    assert memcached_server.conf.read_text() == before.replace("-m 64\n", "-m 96\n") + "-M\n"
    stats = memcached_stats(memcached_server)
    assert stats["limit_maxbytes"] == str(96 * MIB)
    assert "-M" in Path(f"/proc/{memcached_server.pid()}/cmdline").read_bytes().decode().split("\0")

    hosting.run("cache.config-set", engine="memcached", memory_mb=64, eviction="allkeys-lru").ok()
    assert memcached_server.conf.read_text() == before


def test_memcached_takes_lru_or_no_eviction_only(hosting: Hosting) -> None:
    answer = hosting.post("cache.config-set", engine="memcached", memory_mb=64, eviction="volatile-lfu")
    assert answer.status_code == 422, answer.text
    assert "memcached evicts by LRU (allkeys-lru) or not at all (noeviction)" in answer.text


# --- enable and disable: the system's memcached -------------------------------------------------------

needs_memcached_script = pytest.mark.skipif(
    systemd_running() or not Path("/etc/init.d/memcached").exists(),
    reason="drives memcached's init script: needs it (Debian package memcached) and no systemd",
)
SYSTEM_MEMCACHED_PID = Path("/var/run/memcached/memcached.pid")


def system_memcached_answers() -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", 11211)) == 0


@pytest.fixture
def system_memcached(hosting: Hosting, memcached_server: CacheServer) -> Iterator[None]:
    """The layout's memcached is the system's (Debian's defaults) during the test; afterwards the
    system's is as the test found it (running or not, its rc.d links) and the layout names the
    tests' own again."""
    was_running = system_memcached_answers()
    links = {link: os.readlink(link) for link in rc_links("memcached")}
    hosting.configure("memcached", {})
    yield
    hosting.configure("memcached", memcached_server.layout("memcached"))
    if system_memcached_answers() != was_running:
        subprocess.run(["service", "memcached", "start" if was_running else "stop"], check=True, capture_output=True)
    for link in rc_links("memcached"):
        os.unlink(link)
    for link, target in links.items():
        os.symlink(target, link)


def boot_links(unit: str) -> set[str]:
    """``S2``, ``K1``...: the kind and runlevel of each rc.d link."""
    return {os.path.basename(link)[0] + os.path.basename(os.path.dirname(link))[2] for link in rc_links(unit)}


@needs_memcached_script
def test_disable_stops_memcached_and_its_start_at_boot_and_enable_brings_both_back(
    hosting: Hosting, system_memcached: None
) -> None:
    hosting.run("cache.disable", engine="memcached").ok()
    assert not system_memcached_answers()
    assert not {link for link in boot_links("memcached") if link.startswith("S")}
    assert (
        "memcached is already stopped and not started at boot"
        in hosting.run("cache.disable", engine="memcached").ok().text
    )
    state = hosting.run("cache.status", engine="memcached").ok().result["caches"][0]
    assert (state["running"], state["enabled"]) == (False, False)

    run = hosting.run("cache.enable", engine="memcached").ok()
    assert "memcached is running and started at boot" in run.text
    assert system_memcached_answers()
    assert {"S2", "S3", "S4", "S5"} <= boot_links("memcached")
    state = hosting.run("cache.status", engine="memcached").ok().result["caches"][0]
    assert (state["running"], state["enabled"], state["memory_limit_bytes"]) == (True, True, 64 * MIB)
    assert (
        "memcached is already running and started at boot" in hosting.run("cache.enable", engine="memcached").ok().text
    )


def test_the_opcache_is_switched_by_the_php_kinds(hosting: Hosting) -> None:
    run = hosting.run("cache.enable", engine="opcache")
    assert (run.exit_code, run.stderr) == (
        1,
        ["the opcache is a PHP module: php.module-enable opcache switches it for a PHP version"],
    )


@needs_redis
def test_a_link_in_place_of_the_configuration_is_neither_read_nor_rewritten(
    hosting: Hosting, redis_server: CacheServer
) -> None:
    """Debian's /etc/redis is the redis account's to write: its link must not lead root elsewhere."""
    target = redis_server.folder / "elsewhere.conf"
    target.write_text("maxmemory 1gb\n")
    link = redis_server.folder / "link.conf"
    link.symlink_to(target)
    hosting.configure("redis", {**redis_server.layout("redis-server"), "conf": str(link)})
    try:
        run = hosting.run("cache.config-set", engine="redis", memory_mb=32)
        assert run.exit_code == 1 and run.stderr[0].startswith(f"{link} is not a configuration file the agent reads")
        assert target.read_text() == "maxmemory 1gb\n" and link.is_symlink()
    finally:
        hosting.configure("redis", redis_server.layout("redis-server"))
