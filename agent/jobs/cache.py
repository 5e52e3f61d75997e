"""``cache status|flush|enable|disable|config-set``: the server's caches.

- ``redis``: the Redis of the host layout's ``redis`` section. Where it listens (``unixsocket``,
  else the first ``bind`` address and ``port``) and its password (``requirepass``) are read from
  its ``conf``, the file the service starts with; ``redis-cli`` asks it (``PING``, ``INFO``,
  ``FLUSHALL``, ``CONFIG GET``), the password in its environment (``REDISCLI_AUTH``), never in
  its argv.
- ``memcached``: the layout's ``memcached`` section; its options (``-s``, ``-l``, ``-p``, ``-m``,
  ``-M``) are read from its ``conf`` (one a line, as Debian's ``start-memcached`` reads them),
  and the agent speaks memcached's text protocol (``stats``, ``flush_all``) over its socket or port.
- ``opcache``: PHP's, per PHP-FPM version (`agent.jobs.toolkit.php_fpm`). It lives in the FPM
  master's shared memory, so a flush reloads the FPM (the site's version with a ``domain``); its
  usage counters are not read here (only a request through a pool sees them): the status says
  which versions load it, with what memory.
- ``page``: a per-site nginx page cache is not implemented yet: every kind says so (exit 1).

enable/disable start/stop the service and set its start at boot through the layout's service
control (`control_service`: systemd, the Debian init script, or the layout's own commands), then
wait until it answers (or no longer does). config-set rewrites one line of the configuration file
atomically (everything else kept), restarts the service and reads the value back from it; a
service that does not come back with it gets its previous file back and a restart, exit 78.
"""

from __future__ import annotations

import os
import shlex
import stat
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import trio

from agent.jobs.toolkit.base import JobContext, RunFunction, handler
from agent.jobs.toolkit.common import find_site
from agent.jobs.toolkit.host import (
    INIT_D,
    HostLayout,
    InitLayout,
    ServiceControl,
    control_service,
    php_installed,
    sysv_enabled,
)
from agent.jobs.toolkit.output import EXIT_MISSING, EXIT_REFUSED, JobError, Output
from agent.jobs.toolkit.php_fpm import PhpPaths, php_paths, reload_after_change, running_master
from agent.jobs.toolkit.proc import capture_command, require, tool_env, which
from agent.sites import write_atomically
from contract.job_kinds.cache import CacheConfig, CacheStatus, CacheTarget

MIB = 1024 * 1024
ANSWER_WAIT_S = 15.0  # how long a (re)started or stopped server may take to answer, or to stop answering
POLL_S = 0.1
ASK_TIMEOUT_S = 5.0  # one question to a server
# Run by the version's CLI under FPM's ini: "1 128" (loaded and on, opcache.memory_consumption in MB).
OPCACHE_SETTINGS = (
    "echo extension_loaded('Zend OPcache') && ini_get('opcache.enable') ? 1 : 0,"
    " ' ', ini_get('opcache.memory_consumption');"
)
PAGE_NOT_YET = "the nginx page cache (engine page) is not implemented yet in this agent"


# --- configuration files ------------------------------------------------------------------------


def first_word(line: str) -> str | None:
    """The directive of a configuration line (``maxmemory`` of ``maxmemory 64mb``, ``-m`` of
    ``-m 64``); None for a comment or a blank line."""
    words = line.split()
    return None if not words or words[0].startswith("#") else words[0]


def with_line(text: str, key: str, line: str | None, *, ignore_case: bool = False) -> str:
    """`text` with `line` setting `key` where the last line setting it was (the server reads the
    last one), the others setting it dropped, or appended; None removes every line setting it.
    Every other line stays as it was, comments included. Redis' directives are `ignore_case`;
    memcached's options are not (``-m`` is the memory, ``-M`` no eviction)."""
    lines = text.splitlines()

    def sets_key(line: str) -> bool:
        word = first_word(line) or ""
        return word.lower() == key.lower() if ignore_case else word == key

    found = [i for i, old in enumerate(lines) if sets_key(old)]
    if line is not None:
        if found:
            lines[found[-1]] = line
            found = found[:-1]
        else:
            lines.append(line)
    kept = [old for i, old in enumerate(lines) if i not in set(found)]
    return "\n".join(kept) + "\n"


def redis_directives(text: str) -> dict[str, list[str]]:
    """``redis.conf``'s directives (lower case) and the arguments of the last line setting each
    (quoted as Redis quotes them)."""
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        if first_word(line) is None:
            continue
        try:
            words = shlex.split(line)
        except ValueError:
            words = line.split()
        found[words[0].lower()] = words[1:]
    return found


def memcached_options(text: str) -> dict[str, str]:
    """``memcached.conf``'s options: ``-m 64`` -> {"-m": "64"}, ``-M`` -> {"-M": ""}; its other
    lines (``logfile ...``, comments) are not options of the server."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        word = first_word(line)
        if word is not None and word.startswith("-"):
            found[word] = line.split(None, 1)[1].strip() if len(line.split(None, 1)) > 1 else ""
    return found


@dataclass(frozen=True)
class RedisTarget:
    """Where a Redis answers: ``redis-cli``'s ``-s SOCKET`` or ``-h HOST -p PORT``, and its password."""

    where: tuple[str, ...]
    password: str | None


def redis_target(text: str) -> RedisTarget:
    """Where the Redis of the configuration `text` answers.

    Raises:
        JobError: it listens on no socket and no port.
    """
    found = redis_directives(text)
    password = found["requirepass"][0] if found.get("requirepass") else None
    if found.get("unixsocket"):
        return RedisTarget(("-s", found["unixsocket"][0]), password)
    port = (found.get("port") or ["6379"])[0]
    if port == "0":
        raise JobError("Redis listens on no socket and no port (its configuration: no unixsocket, port 0)")
    host = next((address.lstrip("-") for address in found.get("bind", []) if address.lstrip("-")), "127.0.0.1")
    host = {"0.0.0.0": "127.0.0.1", "*": "127.0.0.1", "::": "::1", "::*": "::1"}.get(host, host)
    return RedisTarget(("-h", host, "-p", port), password)


@dataclass(frozen=True)
class MemcachedAddress:
    """Where a memcached answers: its unix socket, else a host and port."""

    socket: str | None = None
    host: str = "127.0.0.1"
    port: int = 11211


def memcached_address(text: str) -> MemcachedAddress:
    """Where the memcached of the configuration `text` answers (``-s``, else ``-l`` and ``-p``)."""
    options = memcached_options(text)
    if options.get("-s"):
        return MemcachedAddress(socket=options["-s"])
    host = (options.get("-l") or "127.0.0.1").split(",")[0].strip()
    host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    port = options.get("-p", "11211")
    return MemcachedAddress(host=host, port=int(port) if port.isdigit() else 11211)


def read_conf(path: str) -> str | None:
    """The configuration file's text; None when there is none.

    A link or anything but a regular file is refused: Debian's ``/etc/redis`` is writable by the
    ``redis`` account, whose link there must not make root read (and rewrite) another file.

    Raises:
        JobError: the path is a link, or not a regular file.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise JobError(f"{path} is not a configuration file the agent reads ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise JobError(f"{path} is not a regular file")
        return f.read().decode("utf-8", "replace")


async def conf_text(path: str, engine: str, package: str) -> str:
    """The configuration file of `engine`.

    Raises:
        JobError: exit 69 naming `package`, the file is missing.
    """
    text = await trio.to_thread.run_sync(read_conf, path)
    if text is None:
        raise JobError(f"{engine} is not installed on this server (no {path}; Debian package {package})", EXIT_MISSING)
    return text


# --- asking the servers -------------------------------------------------------------------------


async def redis_cli(target: RedisTarget, *command: str) -> str:
    """``redis-cli`` `command` against `target`: its answer (``redis-cli`` exits 0 on an error
    reply, so that is read from the answer).

    Raises:
        JobError: Redis did not answer, or answered with an error.
    """
    cli = require("redis-cli", "ask Redis", package="redis-tools")
    env = tool_env(REDISCLI_AUTH=target.password) if target.password else tool_env()
    with trio.move_on_after(ASK_TIMEOUT_S):
        code, text, err = await capture_command([cli, *target.where, *command], env=env)
        answer = text.replace("\r", "").strip()
        if code != 0 or answer.split(" ", 1)[0] in ("ERR", "NOAUTH", "WRONGPASS", "WRONGTYPE", "LOADING"):
            said = " ".join((err or answer).split())[-300:]
            raise JobError(f"redis-cli {command[0]} failed (exit {code}): {said}")
        return answer
    raise JobError(f"Redis did not answer {command[0]} within {ASK_TIMEOUT_S:.0f} s")


async def redis_answers(target: RedisTarget) -> bool:
    try:
        return await redis_cli(target, "PING") == "PONG"
    except JobError:
        return False


def parse_info(text: str) -> dict[str, str]:
    """Redis ``INFO``: ``key:value`` lines (the ``# Section`` headers dropped)."""
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line and not line.startswith("#"))


async def memcached_ask(address: MemcachedAddress, command: bytes, ends: tuple[bytes, ...]) -> bytes:
    """Send one command of memcached's text protocol; its answer, up to one of `ends`.

    Raises:
        OSError: nothing listens there.
        JobError: no whole answer within `ASK_TIMEOUT_S`.
    """
    with trio.move_on_after(ASK_TIMEOUT_S):
        if address.socket is not None:
            stream: trio.abc.Stream = await trio.open_unix_socket(address.socket)
        else:
            stream = await trio.open_tcp_stream(address.host, address.port)
        async with stream:
            await stream.send_all(command)
            answer = b""
            while not answer.endswith(ends):
                chunk = await stream.receive_some(65536)
                if not chunk:
                    break
                answer += chunk
            return answer
    raise JobError(f"memcached did not answer {command.split()[0].decode()} within {ASK_TIMEOUT_S:.0f} s")


def parse_stats(answer: bytes) -> dict[str, str]:
    """memcached's ``stats``: ``STAT name value`` lines."""
    lines = answer.decode("utf-8", "replace").splitlines()
    return {parts[1]: parts[2] for parts in (line.split(None, 2) for line in lines) if len(parts) == 3}


async def memcached_stats(address: MemcachedAddress) -> dict[str, str] | None:
    """memcached's ``stats``; None when it does not answer."""
    try:
        return parse_stats(await memcached_ask(address, b"stats\r\n", (b"END\r\n", b"ERROR\r\n")))
    except OSError:
        return None


async def boot_enabled(control: ServiceControl, init: InitLayout) -> bool | None:
    """The service starts at boot (``systemctl is-enabled``, the init script's rc.d links);
    None when the init system cannot tell."""
    if init.systemd:
        _code, text, _err = await capture_command([init.tool("systemctl", "ask systemd"), "is-enabled", control.unit])
        return {"enabled": True, "disabled": False, "masked": False}.get(text.strip()) if text.strip() else None
    if not await trio.Path(INIT_D, control.unit).exists():
        return None
    return await trio.to_thread.run_sync(sysv_enabled, control.unit)


# --- the engines ----------------------------------------------------------------------------------


def hit_rate(hits: str | None, misses: str | None) -> float | None:
    """hits / (hits + misses); None without any lookup (or counters)."""
    if not (hits and misses and hits.isdigit() and misses.isdigit()) or int(hits) + int(misses) == 0:
        return None
    return round(int(hits) / (int(hits) + int(misses)), 4)


def blank_state(engine: str, installed: bool, note: str | None = None) -> dict[str, Any]:
    return {
        "engine": engine,
        "installed": installed,
        "running": None,
        "enabled": None,
        "memory_used_bytes": None,
        "memory_limit_bytes": None,
        "eviction": None,
        "hit_rate": None,
        "note": note,
    }


async def redis_state(layout: HostLayout) -> dict[str, Any]:
    section = layout.redis
    text = await trio.to_thread.run_sync(read_conf, section.conf)
    if text is None:
        return blank_state("redis", False, f"no {section.conf} (Debian package redis-server)")
    state = blank_state("redis", which("redis-server") is not None)
    state["enabled"] = await boot_enabled(section.control, layout.init)
    target = redis_target(text)
    state["running"] = await redis_answers(target)
    if state["running"]:
        info = parse_info(await redis_cli(target, "INFO"))
        state["memory_used_bytes"] = int(info.get("used_memory", "0"))
        state["memory_limit_bytes"] = int(info.get("maxmemory", "0")) or None  # 0: no limit
        state["eviction"] = info.get("maxmemory_policy")
        state["hit_rate"] = hit_rate(info.get("keyspace_hits"), info.get("keyspace_misses"))
    return state


async def memcached_state(layout: HostLayout) -> dict[str, Any]:
    section = layout.memcached
    text = await trio.to_thread.run_sync(read_conf, section.conf)
    if text is None:
        return blank_state("memcached", False, f"no {section.conf} (Debian package memcached)")
    state = blank_state("memcached", which("memcached") is not None)
    state["enabled"] = await boot_enabled(section.control, layout.init)
    stats = await memcached_stats(memcached_address(text))
    state["running"] = stats is not None
    if stats is not None:
        state["memory_used_bytes"] = int(stats.get("bytes", "0"))
        state["memory_limit_bytes"] = int(stats.get("limit_maxbytes", "0")) or None
        state["eviction"] = "noeviction" if "-M" in memcached_options(text) else "lru"
        state["hit_rate"] = hit_rate(stats.get("get_hits"), stats.get("get_misses"))
    return state


def ini_size(value: str) -> int | None:
    """A php.ini size in MB as opcache.memory_consumption takes it (``128``), in bytes."""
    return int(value) * MIB if value.strip().isdigit() else None


async def opcache_version(ctx: JobContext, version: str) -> dict[str, Any]:
    paths = php_paths(ctx, version)
    installed = await trio.Path(paths.mods_dir, "opcache.ini").exists()
    enabled, memory = False, None
    if installed and which(f"php{version}") is not None:
        argv = paths.cli_argv("fpm", "-r", OPCACHE_SETTINGS)
        code, text, _err = await capture_command(argv, env=paths.env("fpm"))
        words = text.split()
        if code == 0 and words:
            enabled = words[0] == "1"
            memory = ini_size(words[1]) if enabled and len(words) > 1 else None
    return {
        "version": version,
        "installed": installed,
        "enabled": enabled,
        "memory_limit_bytes": memory,
        "fpm_running": await running_master(paths) is not None,
    }


async def opcache_state(ctx: JobContext) -> dict[str, Any]:
    fpms = [version for version, parts in (await trio.to_thread.run_sync(php_installed)).items() if parts["fpm"]]
    versions = [await opcache_version(ctx, version) for version in fpms]
    note = "its hit rate and use live in each FPM's shared memory and are not read here"
    state = blank_state("opcache", any(row["installed"] for row in versions), note if fpms else "no PHP-FPM installed")
    state["enabled"] = any(row["enabled"] for row in versions) if versions else None
    state["versions"] = versions
    return state


async def page_state() -> dict[str, Any]:
    return blank_state("page", False, PAGE_NOT_YET)


async def _status(args: CacheStatus, ctx: JobContext, out: Output) -> int:
    layout = ctx.host
    readers: dict[str, Callable[[], Awaitable[dict[str, Any]]]] = {
        "redis": lambda: redis_state(layout),
        "memcached": lambda: memcached_state(layout),
        "opcache": lambda: opcache_state(ctx),
        "page": page_state,
    }
    engines = [args.engine] if args.engine else list(readers)
    out.result({"caches": [await readers[engine]() for engine in engines]}, as_json=ctx.as_json)
    return 0


# --- flush ----------------------------------------------------------------------------------------


async def flush_redis(layout: HostLayout, out: Output) -> None:
    text = await conf_text(layout.redis.conf, "Redis", "redis-server")
    await redis_cli(redis_target(text), "FLUSHALL")
    out.stdout("Redis is flushed (FLUSHALL: every key of every database)")


async def flush_memcached(layout: HostLayout, out: Output) -> None:
    text = await conf_text(layout.memcached.conf, "memcached", "memcached")
    address = memcached_address(text)
    try:
        answer = await memcached_ask(address, b"flush_all\r\n", (b"\r\n",))
    except OSError as exc:
        raise JobError(f"memcached does not answer ({exc.strerror or exc}): start it first") from None
    if answer.strip() != b"OK":
        raise JobError(f"memcached refused flush_all: {answer.decode('utf-8', 'replace').strip()}")
    out.stdout("memcached is flushed (flush_all: every item)")


async def flush_opcache(ctx: JobContext, domain: str | None, out: Output) -> None:
    """Reload the FPM of each version (of the site's with `domain`): a reload empties the opcache
    of its master's shared memory."""
    if domain is not None:
        site = await find_site(ctx, domain)
        if not site.php:
            raise JobError(f"site {site.domain} runs no PHP (its profile is {site.profile or 'static'}): no opcache")
        versions = [site.php]
    else:
        installed = await trio.to_thread.run_sync(php_installed)
        versions = [version for version, parts in installed.items() if parts["fpm"]]
        if not versions:
            raise JobError("no PHP-FPM is installed on this server (Debian package php-fpm): no opcache", EXIT_MISSING)
    for version in versions:
        paths: PhpPaths = php_paths(ctx, version)
        await reload_after_change(ctx, paths, out)


async def _flush(args: CacheTarget, ctx: JobContext, out: Output) -> int:
    if args.engine == "page":
        raise JobError(PAGE_NOT_YET)
    if args.domain is not None and args.engine != "opcache":
        raise JobError(f"{args.engine} is one cache for the whole server: flush it without a domain")
    if args.engine == "redis":
        await flush_redis(ctx.host, out)
    elif args.engine == "memcached":
        await flush_memcached(ctx.host, out)
    else:
        await flush_opcache(ctx, args.domain, out)
    return 0


# --- the services: enable, disable, config-set --------------------------------------------------


@dataclass(frozen=True)
class CacheService:
    """A cache that is a service of its own: its name, control, configuration and how to ask it."""

    name: str
    package: str
    control: ServiceControl
    conf: str
    answers: Callable[[str], Awaitable[bool]]  # does the server of this configuration text answer


async def _redis_answers_for(text: str) -> bool:
    return await redis_answers(redis_target(text))


async def _memcached_answers_for(text: str) -> bool:
    return await memcached_stats(memcached_address(text)) is not None


def cache_service(layout: HostLayout, engine: str) -> CacheService:
    if engine == "redis":
        section = layout.redis
        return CacheService("Redis", "redis-server", section.control, section.conf, _redis_answers_for)
    return CacheService(
        "memcached", "memcached", layout.memcached.control, layout.memcached.conf, _memcached_answers_for
    )


async def settled(service: CacheService, wanted: bool) -> bool:
    """Whether the service answers, once it does as `wanted` or `ANSWER_WAIT_S` passed (a daemon
    answers a moment after its init script returned)."""
    with trio.move_on_after(ANSWER_WAIT_S):
        while True:
            text = await conf_text(service.conf, service.name, service.package)
            if await service.answers(text) == wanted:
                return wanted
            await trio.sleep(POLL_S)
    return not wanted


def _switch(on: bool) -> RunFunction:
    async def run(args: CacheTarget, ctx: JobContext, out: Output) -> int:
        if args.engine == "page":
            raise JobError(PAGE_NOT_YET)
        if args.engine == "opcache":
            which_kind = "php.module-enable" if on else "php.module-disable"
            raise JobError(f"the opcache is a PHP module: {which_kind} opcache switches it for a PHP version")
        if args.domain is not None:
            raise JobError(f"{args.engine} is one service for the whole server: name no domain")
        layout = ctx.host
        service = cache_service(layout, args.engine)
        text = await conf_text(service.conf, service.name, service.package)
        running, at_boot = await service.answers(text), await boot_enabled(service.control, layout.init)
        words = "running and started at boot" if on else "stopped and not started at boot"
        if running == on and at_boot == on:
            out.stdout(f"{service.name} is already {words}")
            return 0
        if running != on:
            await control_service(service.control, "start" if on else "stop", out, init=layout.init)
        if at_boot != on:
            await control_service(service.control, "enable" if on else "disable", out, init=layout.init)
        if await settled(service, on) != on:
            raise JobError(f"{service.name} {'does not answer' if on else 'still answers'} afterwards")
        out.stdout(f"{service.name} is {words}")
        return 0

    return run


def redis_lines(args: CacheConfig) -> dict[str, str | None]:
    lines: dict[str, str | None] = {"maxmemory": f"maxmemory {args.memory_mb}mb"}
    if args.eviction is not None:
        lines["maxmemory-policy"] = f"maxmemory-policy {args.eviction}"
    return lines


def memcached_lines(args: CacheConfig) -> dict[str, str | None]:
    lines: dict[str, str | None] = {"-m": f"-m {args.memory_mb}"}
    if args.eviction is not None:
        lines["-M"] = "-M" if args.eviction == "noeviction" else None  # -M: an error when full, no eviction
    return lines


async def redis_has(text: str, args: CacheConfig) -> bool:
    target = redis_target(text)
    memory = await redis_cli(target, "CONFIG", "GET", "maxmemory")
    policy = await redis_cli(target, "CONFIG", "GET", "maxmemory-policy")
    return memory.split()[-1:] == [str(args.memory_mb * MIB)] and (
        args.eviction is None or policy.split()[-1:] == [args.eviction]
    )


async def memcached_has(text: str, args: CacheConfig) -> bool:
    stats = await memcached_stats(memcached_address(text))
    return stats is not None and stats.get("limit_maxbytes") == str(args.memory_mb * MIB)


def replace_file(path: str, text: str) -> None:
    """Write `text` over `path` atomically, keeping its mode and owner (Debian's redis.conf is
    redis:redis 0640)."""
    like = os.lstat(path)  # read_conf refused a link there
    write_atomically(path, text.encode("utf-8"), stat.S_IMODE(like.st_mode), (like.st_uid, like.st_gid))


async def _restart_with(service: CacheService, init: InitLayout) -> str:
    """Restart the service; the words of a failure ("" when it came back and answers)."""
    try:
        await control_service(service.control, "restart", init=init)
    except JobError as exc:
        return str(exc)
    return "" if await settled(service, True) else f"{service.name} did not answer within {ANSWER_WAIT_S:.0f} s"


async def _config_set(args: CacheConfig, ctx: JobContext, out: Output) -> int:
    layout = ctx.host
    service = cache_service(layout, args.engine)
    before = await conf_text(service.conf, service.name, service.package)
    after = before
    for key, line in (redis_lines(args) if args.engine == "redis" else memcached_lines(args)).items():
        after = with_line(after, key, line, ignore_case=args.engine == "redis")
    has = redis_has if args.engine == "redis" else memcached_has
    if after == before and await service.answers(before) and await has(before, args):
        out.stdout(f"{service.name} already runs with {args.memory_mb} MB")
        return 0
    await trio.to_thread.run_sync(replace_file, service.conf, after)
    failure = await _restart_with(service, layout.init)
    if not failure and not await has(after, args):
        failure = f"{service.name} came back without the new values"
    if failure:
        await trio.to_thread.run_sync(replace_file, service.conf, before)
        again = await _restart_with(service, layout.init)
        back = "it runs with its previous file" if not again else f"its previous file is back, but: {again}"
        raise JobError(f"{service.name} refused the change ({failure}); {back}", EXIT_REFUSED)
    said = f"{args.memory_mb} MB" + (f", eviction {args.eviction}" if args.eviction else "")
    out.stdout(f"{service.name} restarted with {said} ({service.conf})")
    return 0


KINDS = [
    handler("cache.status", _status),
    handler("cache.flush", _flush),
    handler("cache.enable", _switch(True)),
    handler("cache.disable", _switch(False)),
    handler("cache.config-set", _config_set),
]
