"""``system info|processes|timezone-set|hostname-set|locale-set|swap-set|ntp-sync|cache-drop|reboot``.

Under systemd (the host layout's ``init``) the settings go through its tools (timedatectl,
hostnamectl, localectl); otherwise the agent writes what they would (``/etc/timezone`` and the
``/etc/localtime`` link, ``/etc/hostname`` and the kernel's name through ``hostname``,
``/etc/default/locale``), each file replaced by a rename. Where those files are is the host layout's ``system`` section.
A reboot needs ``--confirm`` equal to the server's host name.
"""

from __future__ import annotations

import os
import platform
import socket
from typing import Any

import trio

from agent.files.jail import kernel_protections
from agent.jobs.toolkit.base import JobContext, handler
from agent.jobs.toolkit.host import SystemLayout
from agent.jobs.toolkit.machine import meminfo, uptime_s
from agent.jobs.toolkit.output import JobError, Output
from agent.jobs.toolkit.proc import capture_command, require, stream_command, which
from agent.sites import write_atomically
from contract.job_kinds.base import NoArgs
from contract.job_kinds.system import HostnameSet, LocaleSet, Processes, Reboot, SwapSet, TimezoneSet


def os_release(path: str = "/etc/os-release") -> dict[str, str]:
    fields: dict[str, str] = {}
    try:
        with open(path) as f:
            for line in f:
                key, sep, value = line.strip().partition("=")
                if sep and key and not key.startswith("#"):
                    fields[key] = value.strip().strip("\"'")
    except OSError:
        pass
    return fields


def cpu_model(path: str = "/proc/cpuinfo") -> str | None:
    try:
        with open(path) as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "cpu model", "Processor"):
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or None


def info(version: str) -> dict[str, Any]:
    release, uname = os_release(), os.uname()
    return {
        "hostname": socket.gethostname(),
        "os": {
            "name": release.get("PRETTY_NAME") or release.get("NAME") or uname.sysname,
            "id": release.get("ID"),
            "version_id": release.get("VERSION_ID"),
            "codename": release.get("VERSION_CODENAME"),
        },
        "kernel": {"name": uname.sysname, "release": uname.release, "version": uname.version, "machine": uname.machine},
        "cpu": {"model": cpu_model(), "count": os.cpu_count()},
        "memory_bytes": meminfo().get("total"),
        "uptime_s": uptime_s(),
        "python": platform.python_version(),
        "agent_version": version,
        "kernel_protections": kernel_protections(),
    }


async def _info(args: NoArgs, ctx: JobContext, out: Output) -> int:
    out.result(await trio.to_thread.run_sync(info, ctx.version), as_json=ctx.as_json)
    return 0


# --- processes -----------------------------------------------------------------------------

PS_FIELDS = ("pid", "user", "pcpu", "pmem", "rss", "etimes", "comm", "args")


def parse_ps(text: str) -> list[dict[str, Any]]:
    """``ps -eo pid,user:32,pcpu,pmem,rss,etimes,comm:32,args --no-headers`` as records (the command
    line is the rest of the line, spaces and all)."""
    found = []
    for line in text.splitlines():
        parts = line.split(None, len(PS_FIELDS) - 1)
        if len(parts) < len(PS_FIELDS) - 1 or not parts[0].isdigit():
            continue
        pid, user, cpu, mem, rss, elapsed, name, *args = parts
        found.append(
            {
                "pid": int(pid),
                "user": user,
                "cpu_percent": float(cpu),
                "memory_percent": float(mem),
                "rss_bytes": int(rss) * 1024,
                "elapsed_s": int(elapsed),
                "name": name,
                "command": args[0] if args else name,
            }
        )
    return found


async def _processes(args: Processes, ctx: JobContext, out: Output) -> int:
    ps = require("ps", "list the processes")
    code, text, err = await capture_command(
        [ps, "-eo", "pid,user:32,pcpu,pmem,rss,etimes,comm:32,args", "--no-headers"]
    )
    if code != 0:
        raise JobError(f"ps failed (exit {code}): {' '.join(err.split())}")
    key = "cpu_percent" if args.sort == "cpu" else "rss_bytes"
    processes = sorted(parse_ps(text), key=lambda p: (-p[key], p["pid"]))
    out.result({"sort": args.sort, "processes": processes[: args.limit]}, as_json=ctx.as_json)
    return 0


# --- settings ------------------------------------------------------------------------------


async def _run_tool(argv: list[str]) -> None:
    code, text, err = await capture_command(argv)
    if code != 0:
        raise JobError(f"{' '.join(argv[:2])} failed (exit {code}): {' '.join((err or text).split())}")


def current_timezone(layout: SystemLayout) -> str | None:
    try:
        target = os.readlink(layout.localtime)
    except OSError:
        target = None
    prefix = layout.zoneinfo_dir.rstrip("/") + "/"
    if target and target.startswith(prefix):
        return target[len(prefix) :]
    try:
        with open(layout.timezone_file) as f:
            return f.read().strip() or None
    except OSError:
        return None


def replace_link(path: str, target: str) -> None:
    """`path` becomes a link to `target`, by renaming a new link over it."""
    temporary = f"{path}.fleetdeck-new"
    try:
        os.unlink(temporary)
    except FileNotFoundError:
        pass
    os.symlink(target, temporary)
    os.replace(temporary, path)


async def _timezone_set(args: TimezoneSet, ctx: JobContext, out: Output) -> int:
    host = ctx.host
    layout = host.system
    zone = os.path.join(layout.zoneinfo_dir, args.timezone)
    if not await trio.to_thread.run_sync(os.path.isfile, zone):
        raise JobError(f"unknown time zone {args.timezone} (no {zone}; is tzdata installed?)")
    previous = await trio.to_thread.run_sync(current_timezone, layout)
    if previous == args.timezone:
        out.stdout(f"the time zone is already {args.timezone}")
        return 0
    if host.init.systemd:
        await _run_tool([host.init.tool("timedatectl", "set the time zone"), "set-timezone", args.timezone])
    else:

        def write() -> None:
            write_atomically(layout.timezone_file, f"{args.timezone}\n".encode(), 0o644)
            replace_link(layout.localtime, zone)

        await trio.to_thread.run_sync(write)
    out.stdout(f"time zone {args.timezone} (was {previous or 'unknown'})")
    return 0


async def _hostname_set(args: HostnameSet, ctx: JobContext, out: Output) -> int:
    previous, init = socket.gethostname(), ctx.host.init
    if init.systemd:
        await _run_tool([init.tool("hostnamectl", "set the host name"), "set-hostname", args.hostname])
    else:
        if previous != args.hostname:
            await _run_tool([require("hostname", "set the host name"), args.hostname])
        path = ctx.host.system.hostname_file
        await trio.to_thread.run_sync(write_atomically, path, f"{args.hostname}\n".encode(), 0o644)
    if previous == args.hostname:
        out.stdout(f"the host name is already {args.hostname}")
    else:
        out.stdout(f"host name {args.hostname} (was {previous})")
    return 0


def available_locales(text: str) -> set[str]:
    """``locale -a`` names, normalised as the catalog writes them (``en_US.utf8`` -> ``en_US.UTF-8``)."""
    return {name.replace(".utf8", ".UTF-8") for name in text.split()}


async def _locale_set(args: LocaleSet, ctx: JobContext, out: Output) -> int:
    code, text, _ = await capture_command([require("locale", "list the locales"), "-a"])
    if code != 0 or args.locale not in available_locales(text):
        raise JobError(
            f"the locale {args.locale} is not generated on this server (add it to /etc/locale.gen, then locale-gen)"
        )
    init = ctx.host.init
    if init.systemd:
        await _run_tool([init.tool("localectl", "set the locale"), "set-locale", f"LANG={args.locale}"])
    else:
        path = ctx.host.system.locale_file
        await trio.to_thread.run_sync(write_atomically, path, f"LANG={args.locale}\n".encode(), 0o644)
    out.stdout(f"locale {args.locale}")
    return 0


async def _ntp_sync(args: NoArgs, ctx: JobContext, out: Output) -> int:
    if which("chronyc"):
        return await stream_command(out, [require("chronyc", "step the clock"), "-a", "makestep"])
    init = ctx.host.init
    if init.systemd:
        await _run_tool([init.tool("timedatectl", "turn on time synchronisation"), "set-ntp", "true"])
        out.stdout("systemd-timesyncd synchronises the clock")
        return 0
    require("chronyc", "synchronise the clock")
    return 1


async def _cache_drop(args: NoArgs, ctx: JobContext, out: Output) -> int:
    """``sync``, then 3 into drop_caches (page cache, dentries and inodes: only clean, reclaimable
    memory goes; nothing is lost)."""
    await _run_tool([require("sync", "write dirty pages first")])
    path = ctx.host.system.drop_caches
    before = meminfo().get("cached")

    def drop() -> None:
        with open(path, "w") as f:
            f.write("3\n")

    try:
        await trio.to_thread.run_sync(drop)
    except OSError as exc:
        raise JobError(f"cannot write {path}: {exc.strerror} (a container may not drop the host's caches)") from None
    after = meminfo().get("cached")
    message = f"dropped the caches (cached memory was {before} bytes, now {after})"
    out.result({"message": message, "cached_before_bytes": before, "cached_after_bytes": after}, as_json=ctx.as_json)
    return 0


# --- swap ----------------------------------------------------------------------------------

MIB = 1024 * 1024


def active_swaps(text: str) -> list[str]:
    """The swap areas in use, from /proc/swaps (its names escape a space as ``\\040``)."""
    return [line.split()[0].replace("\\040", " ") for line in text.splitlines()[1:] if line.split()]


def fstab_with_swap(text: str, path: str, listed: bool) -> str:
    """fstab without any line for `path`, plus one when `listed`."""
    lines = [line for line in text.splitlines() if line.split()[:1] != [path]]
    if listed:
        lines.append(f"{path} none swap sw 0 0")
    return "\n".join(lines) + "\n"


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def _file_size(path: str) -> int:
    return os.path.getsize(path) if os.path.isfile(path) else 0


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


async def _swap_set(args: SwapSet, ctx: JobContext, out: Output) -> int:
    """Size the swap file: a new file is made beside it (fallocate, mode 0600, mkswap), renamed
    into place and turned on; 0 turns it off and removes it. fstab follows."""
    layout = ctx.host.system
    path, size = layout.swap_file, args.size_mb * MIB
    active = path in active_swaps(await trio.to_thread.run_sync(_read, "/proc/swaps"))
    current = await trio.to_thread.run_sync(_file_size, path)
    if (active and current == size) or (size == 0 and not active and not current):
        out.stdout(f"the swap file is already {args.size_mb} MiB" if size else "there is no swap file already")
        return 0
    if active:
        await _run_tool([require("swapoff", "turn the swap file off"), path])
    if size:
        candidate = f"{path}.fleetdeck-new"
        try:
            await _run_tool([require("fallocate", "make the swap file"), "--length", str(size), candidate])
            await trio.to_thread.run_sync(os.chmod, candidate, 0o600)
            await _run_tool([require("mkswap", "format the swap file"), candidate])
            await trio.to_thread.run_sync(os.replace, candidate, path)
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(_remove, candidate)
        await _run_tool([require("swapon", "turn the swap file on"), path])
    else:
        await trio.to_thread.run_sync(_remove, path)
    fstab = await trio.to_thread.run_sync(_read, layout.fstab)
    await trio.to_thread.run_sync(
        write_atomically, layout.fstab, fstab_with_swap(fstab, path, bool(size)).encode(), 0o644
    )
    out.stdout(f"swap file {path}: {args.size_mb} MiB" if size else f"swap file {path} removed")
    return 0


# --- reboot --------------------------------------------------------------------------------


def reboot_argv(delay_min: int, systemd: bool) -> list[str]:
    """The command that reboots: at once through systemd, else (or later) through shutdown."""
    if delay_min == 0 and systemd:
        return ["systemctl", "reboot"]
    return ["shutdown", "-r", f"+{delay_min}" if delay_min else "now"]


async def _reboot(args: Reboot, ctx: JobContext, out: Output) -> int:
    name = socket.gethostname()
    if args.confirm != name:
        raise JobError(f"a reboot needs --confirm {name} (this server's host name): nothing done", 2)
    init = ctx.host.init
    argv = reboot_argv(args.delay_min, init.systemd)
    argv[0] = init.tool(argv[0], "reboot the server")
    out.stdout(f"rebooting {name}" + (f" in {args.delay_min} min" if args.delay_min else " now"))
    return await stream_command(out, argv)


KINDS = [
    handler("system.info", _info),
    handler("system.processes", _processes),
    handler("system.timezone-set", _timezone_set),
    handler("system.hostname-set", _hostname_set),
    handler("system.locale-set", _locale_set),
    handler("system.ntp-sync", _ntp_sync),
    handler("system.cache-drop", _cache_drop),
    handler("system.swap-set", _swap_set),
    handler("system.reboot", _reboot),
]
