"""``updates.*``: the OS packages through apt.

``list`` and ``security`` read apt's cache as it is (no ``apt update``): the answer is as fresh as
the last refresh. ``apply`` and ``security`` stream ``apt-get`` (non-interactive, configuration
files kept as they are, waiting for apt's lock rather than failing); ``--simulate`` shows what
would happen and changes nothing. ``history`` reads apt's own log (``system.apt_history``) and its
rotated copies (``history.log.1.gz``, ...). ``hold``/``unhold`` are ``apt-mark``'s.

``auto-set`` writes two files of apt's configuration folder (``system.apt_conf_dir``):
``20auto-upgrades`` (the periodic switches Debian's ``unattended-upgrades`` package reads, the file
``dpkg-reconfigure unattended-upgrades`` writes) and ``52fleetdeck-unattended-upgrades``, read
after the package's ``50unattended-upgrades``, which replaces its origins with the security
pockets only, or with the whole release. Each candidate is checked by ``apt-config`` first.

``subscribe``/``unsubscribe`` have no handler: the vendors they name (Ubuntu Pro, RHEL, SUSE)
attach with their own tools (``pro``, ``subscription-manager``, ``SUSEConnect``), none of which
exists on Debian, where updates need no subscription.
"""

from __future__ import annotations

import contextlib
import glob
import gzip
import os
import re
from typing import Any

import trio

from agent.jobs.toolkit.base import JobContext, handler, rfc3339
from agent.jobs.toolkit.needs import Tool
from agent.jobs.toolkit.output import EXIT_REFUSED, JobError, Output
from agent.jobs.toolkit.proc import APT_WAITS_FOR_ITS_LOCK, apt_env, capture_command, require, stream_command, which
from agent.sites import write_atomically
from contract.job_kinds.base import NoArgs
from contract.job_kinds.updates import Package, UpdatesApply, UpdatesAuto, UpdatesHistory, UpdatesSecurity

REBOOT_REQUIRED = "/run/reboot-required"
AUTO_FILE = "20auto-upgrades"
ORIGINS_FILE = "52fleetdeck-unattended-upgrades"
SECURITY_ORIGINS = (
    "origin=${distro_id},codename=${distro_codename}-security",
    "origin=${distro_id},codename=${distro_codename},label=${distro_id}-Security",
)
RELEASE_ORIGINS = (
    "origin=${distro_id},codename=${distro_codename}",
    "origin=${distro_id},codename=${distro_codename}-updates",
)

# name/suite[,suite..] version arch [upgradable from: old]
_LINE = re.compile(
    r"^(?P<name>[^/\s]+)/(?P<suites>\S+) (?P<version>\S+) (?P<arch>\S+)(?: \[upgradable from: (?P<old>[^\]]+)\])?"
)


def parse_upgradable(text: str) -> list[dict[str, Any]]:
    updates = []
    for line in text.splitlines():
        match = _LINE.match(line.strip())
        if match is None:
            continue  # "Listing...", notices
        suites = match["suites"].split(",")
        updates.append(
            {
                "name": match["name"],
                "version": match["version"],
                "current_version": match["old"],
                "arch": match["arch"],
                "suites": suites,
                "security": any("security" in s for s in suites),
            }
        )
    return updates


async def upgradable() -> list[dict[str, Any]]:
    apt = require("apt", "list the available updates (only apt-based systems are supported)")
    code, text, err = await capture_command([apt, "list", "--upgradable"])
    if code != 0:
        raise JobError(f"apt list --upgradable failed (exit {code}): {' '.join(err.split())}")
    return parse_upgradable(text)


async def _list(args: NoArgs, ctx: JobContext, out: Output) -> int:
    updates = await upgradable()
    out.result(
        {"updates": updates, "count": len(updates), "security_count": sum(u["security"] for u in updates)},
        as_json=ctx.as_json,
    )
    return 0


# --- history -------------------------------------------------------------------------------

HISTORY_ACTIONS = {
    "Install": "install",
    "Upgrade": "upgrade",
    "Downgrade": "downgrade",
    "Reinstall": "reinstall",
    "Remove": "remove",
    "Purge": "purge",
}
_PACKAGE = re.compile(r"(?P<name>[^\s,:()]+)(?::(?P<arch>[^\s,()]+))? \((?P<detail>[^)]*)\)")


def _history_packages(action: str, text: str) -> list[dict[str, Any]]:
    packages = []
    for match in _PACKAGE.finditer(text):
        detail = [part.strip() for part in match["detail"].split(",")]
        automatic = "automatic" in detail
        versions = [part for part in detail if part != "automatic"]
        package: dict[str, Any] = {
            "name": match["name"],
            "arch": match["arch"],
            "version": versions[-1] if versions else None,
        }
        if action in ("upgrade", "downgrade") and len(versions) == 2:
            package["from_version"] = versions[0]
        if automatic:
            package["automatic"] = True
        packages.append(package)
    return packages


def _history_time(value: str) -> str:
    """``2025-06-24  14:36:25`` (apt writes local time, two spaces) as ``2025-06-24T14:36:25``."""
    return "T".join(value.split())


def parse_history(text: str) -> list[dict[str, Any]]:
    """apt's history log: one entry per transaction, oldest first."""
    entries: list[dict[str, Any]] = []
    entry: dict[str, Any] | None = None
    for line in text.splitlines():
        key, sep, value = line.partition(": ")
        if not sep:
            continue
        value = value.strip()
        if key == "Start-Date":
            entry = {"start": _history_time(value), "end": None, "command": None, "requested_by": None, "error": None}
            entry["packages"] = {}
            entries.append(entry)
        elif entry is None:
            continue
        elif key == "End-Date":
            entry["end"] = _history_time(value)
        elif key == "Commandline":
            entry["command"] = value
        elif key == "Requested-By":
            entry["requested_by"] = value
        elif key == "Error":
            entry["error"] = value
        elif key in HISTORY_ACTIONS:
            action = HISTORY_ACTIONS[key]
            entry["packages"][action] = _history_packages(action, value)
    for entry in entries:
        entry["count"] = sum(len(p) for p in entry["packages"].values())
    return entries


def history_files(path: str) -> list[str]:
    """The log and its rotated copies, newest first (``history.log``, ``.1`` or ``.1.gz``, ``.2.gz``...)."""

    def age(rotated: str) -> int:
        number = rotated[len(path) + 1 :].removesuffix(".gz")
        return int(number) if number.isdigit() else -1

    rotated = [p for p in glob.glob(glob.escape(path) + ".*") if age(p) >= 0]
    return [p for p in [path, *sorted(rotated, key=age)] if os.path.isfile(p)]


def read_history(path: str, limit: int) -> list[dict[str, Any]]:
    """The newest `limit` transactions, newest first."""
    newest: list[dict[str, Any]] = []
    for file in history_files(path):
        opener = gzip.open if file.endswith(".gz") else open
        with opener(file, "rt", encoding="utf-8", errors="replace") as f:
            newest.extend(reversed(parse_history(f.read())))
        if len(newest) >= limit:
            break
    return newest[:limit]


async def _history(args: UpdatesHistory, ctx: JobContext, out: Output) -> int:
    path = ctx.host.system.apt_history
    entries = await trio.to_thread.run_sync(read_history, path, args.limit)
    out.result({"entries": entries, "count": len(entries), "log": path}, as_json=ctx.as_json)
    return 0


# --- installing ----------------------------------------------------------------------------


async def apt_get(out: Output, command: list[str], *, simulate: bool) -> None:
    """Stream ``apt-get -y <command>``: configuration files kept as they are, apt's lock waited for."""
    tool = require("apt-get", "install updates (only apt-based systems are supported)")
    options = [*APT_WAITS_FOR_ITS_LOCK, "-o", "Dpkg::Options::=--force-confdef"]
    options += ["-o", "Dpkg::Options::=--force-confold"]
    argv = [tool, "-y", *options, *(["--simulate"] if simulate else []), *command]
    code = await stream_command(out, argv, env=apt_env())
    if code != 0:
        raise JobError(f"apt-get {' '.join(command[:1])} failed (exit {code})")


async def after_install(out: Output, *, reboot: bool, simulate: bool) -> None:
    """Say whether the system needs a reboot, and with `reboot` schedule it (a minute from now)."""
    if simulate or not reboot_state()["reboot_required"]:
        out.stdout("no reboot needed" if not simulate else "simulated: nothing was installed")
        return
    if not reboot:
        out.stdout(f"a reboot is needed ({REBOOT_REQUIRED}); run updates.apply with reboot, or reboot the server")
        return
    shutdown = require("shutdown", "reboot after the updates")
    code, text, err = await capture_command([shutdown, "-r", "+1", "fleetdeck: rebooting after updates"])
    if code != 0:
        raise JobError(f"shutdown -r failed (exit {code}): {' '.join((err or text).split())}")
    out.stdout("the updates need a reboot: the server reboots in one minute")


async def _apply(args: UpdatesApply, ctx: JobContext, out: Output) -> int:
    command = ["install", "--only-upgrade", *args.packages] if args.packages else ["upgrade"]
    await apt_get(out, command, simulate=args.simulate)
    await after_install(out, reboot=args.reboot, simulate=args.simulate)
    return 0


async def _security(args: UpdatesSecurity, ctx: JobContext, out: Output) -> int:
    pending = sorted({u["name"] for u in await upgradable() if u["security"]})
    if not pending:
        out.stdout("no security updates pending")
        return 0
    out.stdout(f"{len(pending)} security updates: {' '.join(pending)}")
    await apt_get(out, ["install", "--only-upgrade", *pending], simulate=args.simulate)
    await after_install(out, reboot=args.reboot, simulate=args.simulate)
    return 0


# --- holds ---------------------------------------------------------------------------------


async def held() -> list[str]:
    tool = require("apt-mark", "list the held packages")
    code, text, err = await capture_command([tool, "showhold"])
    if code != 0:
        raise JobError(f"apt-mark showhold failed (exit {code}): {' '.join(err.split())}")
    return text.split()


async def _mark(action: str, args: Package, out: Output) -> int:
    tool = require("apt-mark", f"{action} a package")
    code, text, err = await capture_command([tool, action, args.package])
    said = " ".join((text + err).split())
    if code != 0:
        raise JobError(f"apt-mark {action} {args.package} failed (exit {code}): {said}")
    out.stdout(said)
    return 0


async def _hold(args: Package, ctx: JobContext, out: Output) -> int:
    return await _mark("hold", args, out)


async def _unhold(args: Package, ctx: JobContext, out: Output) -> int:
    return await _mark("unhold", args, out)


# --- unattended upgrades -------------------------------------------------------------------


def auto_files(mode: str) -> dict[str, str]:
    """The content of the two configuration files for `mode` (off, security, all)."""
    on = "0" if mode == "off" else "1"
    periodic = (
        "// written by the fleetdeck agent (updates.auto-set)\n"
        f'APT::Periodic::Update-Package-Lists "{on}";\n'
        f'APT::Periodic::Unattended-Upgrade "{on}";\n'
    )
    origins = SECURITY_ORIGINS if mode != "all" else (*RELEASE_ORIGINS, *SECURITY_ORIGINS)
    patterns = "".join(f'    "{origin}";\n' for origin in origins)
    restriction = (
        f"// written by the fleetdeck agent (updates.auto-set): mode {'all' if mode == 'all' else 'security'}\n"
        "#clear Unattended-Upgrade::Origins-Pattern;\n"
        f"Unattended-Upgrade::Origins-Pattern {{\n{patterns}}};\n"
    )
    return {AUTO_FILE: periodic, ORIGINS_FILE: restriction}


_SETTING = re.compile(r'^\s*(?P<key>[A-Za-z0-9:_-]+)\s+"(?P<value>[^"]*)"\s*;')


def auto_mode(conf_dir: str) -> str:
    """off, security, all, or "distribution" (on, with the origins of the unattended-upgrades package)."""
    settings = {}
    with contextlib.suppress(FileNotFoundError), open(os.path.join(conf_dir, AUTO_FILE)) as f:
        settings = {m["key"]: m["value"] for m in map(_SETTING.match, f) if m}
    if settings.get("APT::Periodic::Unattended-Upgrade", "0") in ("0", ""):
        return "off"
    try:
        with open(os.path.join(conf_dir, ORIGINS_FILE)) as f:
            first = f.readline()
    except FileNotFoundError:
        return "distribution"
    return "all" if first.rstrip().endswith("mode all") else "security"


async def check_apt_conf(path: str) -> None:
    tool = require("apt-config", "check apt's configuration")
    code, text, err = await capture_command([tool, "-c", path, "dump"])
    if code != 0:
        raise JobError(f"apt-config refused {path}: {' '.join((err or text).split())}", EXIT_REFUSED)


async def _auto_set(args: UpdatesAuto, ctx: JobContext, out: Output) -> int:
    conf_dir = ctx.host.system.apt_conf_dir
    if await trio.to_thread.run_sync(auto_mode, conf_dir) == args.mode:
        out.stdout(f"automatic updates are {args.mode} already")
        return 0
    if args.mode != "off":
        require("unattended-upgrade", "install updates automatically")
    files = auto_files(args.mode)
    candidates = {name: os.path.join(conf_dir, f".{name}.candidate") for name in files}
    try:
        for name, text in files.items():
            write_atomically(candidates[name], text.encode(), 0o644)
            await check_apt_conf(candidates[name])
        for name, candidate in candidates.items():
            os.replace(candidate, os.path.join(conf_dir, name))
    finally:
        for candidate in candidates.values():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(candidate)
    out.stdout(f"automatic updates: {args.mode}")
    return 0


# --- status --------------------------------------------------------------------------------


def reboot_state() -> dict[str, Any]:
    packages: list[str] = []
    with contextlib.suppress(FileNotFoundError), open(REBOOT_REQUIRED + ".pkgs") as f:
        packages = sorted(set(f.read().split()))
    return {"reboot_required": os.path.exists(REBOOT_REQUIRED), "reboot_packages": packages}


def last_refresh() -> float | None:
    """When apt's package lists were last refreshed (the newest list file)."""
    lists = glob.glob("/var/lib/apt/lists/*_Packages*") + glob.glob("/var/lib/apt/lists/*Release")
    return max((os.path.getmtime(p) for p in lists), default=None)


async def _status(args: NoArgs, ctx: JobContext, out: Output) -> int:
    updates = await upgradable()
    refreshed = await trio.to_thread.run_sync(last_refresh)
    result = {
        "pending": len(updates),
        "security_pending": sum(u["security"] for u in updates),
        "held": await held(),
        "auto": await trio.to_thread.run_sync(auto_mode, ctx.host.system.apt_conf_dir),
        "unattended_upgrades_installed": which("unattended-upgrade") is not None,
        "lists_refreshed_at": rfc3339(refreshed) if refreshed is not None else None,
        "subscription": None,  # Debian's updates need none
        **reboot_state(),
    }
    out.result(result, as_json=ctx.as_json)
    return 0


NEEDS = (Tool("apt-get"),)  # apt-based systems only

KINDS = [
    handler("updates.list", _list),
    handler("updates.status", _status),
    handler("updates.history", _history),
    handler("updates.apply", _apply),
    handler("updates.security", _security),
    handler("updates.hold", _hold),
    handler("updates.unhold", _unhold),
    handler("updates.auto-set", _auto_set),
]
