"""``php versions|install|uninstall|extension-install|restart|reload|fpm-status``: the PHP versions
of the server, their Debian packages (apt-get) and their FPM services."""

from __future__ import annotations

import os
from typing import Any

import trio

from agent.jobs.php.modules import enable_module
from agent.jobs.toolkit.base import JobContext, handler
from agent.jobs.toolkit.common import user_name_of
from agent.jobs.toolkit.host import php_installed
from agent.jobs.toolkit.needs import Tool
from agent.jobs.toolkit.output import JobError, Output
from agent.jobs.toolkit.php_fpm import (
    FPM_INSTALLED,
    PhpPaths,
    control_fpm,
    default_version,
    fpm_pools,
    fpm_processes,
    master_pid,
    parse_fcgi_json,
    php_paths,
    workers,
)
from agent.jobs.toolkit.proc import APT_WAITS_FOR_ITS_LOCK, capture_command, require, stream_command, tool_env, which
from contract.job_kinds.base import NoArgs
from contract.job_kinds.php import PhpModuleArgs, PhpVersionArgs

STATUS_TIMEOUT_S = 5.0


async def _versions(args: NoArgs, ctx: JobContext, out: Output) -> int:
    found = await trio.to_thread.run_sync(php_installed)
    default = await default_version()
    processes = await trio.to_thread.run_sync(fpm_processes)
    result = []
    for version, parts in found.items():
        master = master_pid(processes, PhpPaths(version, ctx.host.php).fpm_conf)
        result.append(
            {
                "version": version,
                "default": version == default,
                "cli": parts["cli"],
                "fpm": parts["fpm"],
                "fpm_running": master is not None,
                "fpm_pid": master,
            }
        )
    out.result({"default": default, "versions": result}, as_json=ctx.as_json)
    return 0


# --- packages -----------------------------------------------------------------------------------


def _apt_env() -> dict[str, str]:
    return tool_env(DEBIAN_FRONTEND="noninteractive")


async def _known_packages(packages: list[str]) -> None:
    """Refuse (exit 1) before apt-get runs when the archive has no such package."""
    apt_cache = require("apt-cache", "look the package up", package="apt")
    for package in packages:
        code, _text, _err = await capture_command([apt_cache, "show", "--no-all-versions", package], env=_apt_env())
        if code != 0:
            raise JobError(f"no Debian package {package} in this server's apt sources (apt-get update may help)")


async def _apt(out: Output, action: str, packages: list[str]) -> int:
    apt_get = require("apt-get", f"{action} {' '.join(packages)}")
    recommends = ["--no-install-recommends"] if action == "install" else []
    argv = [apt_get, action, "-y", "-q", *APT_WAITS_FOR_ITS_LOCK, *recommends, *packages]
    return await stream_command(out, argv, env=_apt_env())


def _version_packages(version: str) -> list[str]:
    return [f"php{version}-fpm", f"php{version}-cli"]


async def _install(args: PhpVersionArgs, ctx: JobContext, out: Output) -> int:
    parts = (await trio.to_thread.run_sync(php_installed)).get(args.version, {})
    if parts.get("fpm") and parts.get("cli"):
        out.stdout(f"PHP {args.version} is already installed (php{args.version}-fpm, php{args.version}-cli)")
        return 0
    packages = _version_packages(args.version)
    await _known_packages(packages)
    return await _apt(out, "install", packages)


async def _uninstall(args: PhpVersionArgs, ctx: JobContext, out: Output) -> int:
    parts = (await trio.to_thread.run_sync(php_installed)).get(args.version, {})
    if not parts:
        out.stdout(f"PHP {args.version} is not installed")
        return 0
    users = [site.domain for site in await trio.to_thread.run_sync(ctx.sites.sites) if site.php == args.version]
    if users:
        raise JobError(f"PHP {args.version} serves {', '.join(sorted(users))}: switch them first (php.set)")
    return await _apt(out, "remove", _version_packages(args.version))


async def _extension_install(args: PhpModuleArgs, ctx: JobContext, out: Output) -> int:
    paths = php_paths(ctx, args.version)
    package = f"php{args.version}-{args.module}"
    if await trio.to_thread.run_sync(os.path.exists, os.path.join(paths.mods_dir, f"{args.module}.ini")):
        out.stdout(f"{args.module} is already installed for PHP {args.version} (php.module-enable turns it on)")
        return 0
    await _known_packages([package])
    code = await _apt(out, "install", [package])
    if code != 0:
        return code
    # Debian's package enables it in /etc/php's conf.d; the FPM serving the sites reads it only
    # once reloaded, and a layout whose ini folders are elsewhere has it enabled here
    await enable_module(ctx, paths, args.module, out)
    return 0


# --- the FPM service ----------------------------------------------------------------------------


async def _restart(args: PhpVersionArgs, ctx: JobContext, out: Output) -> int:
    await control_fpm(ctx, php_paths(ctx, args.version), "restart", out)
    out.stdout(f"PHP-FPM {args.version} restarted")
    return 0


async def _reload(args: PhpVersionArgs, ctx: JobContext, out: Output) -> int:
    await control_fpm(ctx, php_paths(ctx, args.version), "reload", out)
    out.stdout(f"PHP-FPM {args.version} reloaded")
    return 0


async def _fpm_status(args: PhpVersionArgs, ctx: JobContext, out: Output) -> int:
    paths = php_paths(ctx, args.version)
    pools = await trio.to_thread.run_sync(fpm_pools, paths)
    processes = await trio.to_thread.run_sync(fpm_processes)
    master = master_pid(processes, paths.fpm_conf)
    running = workers(processes, master) if master is not None else {}
    result: list[dict[str, Any]] = []
    for pool in pools:
        values = pool["values"]
        procs = running.get(pool["name"], [])
        status = await _status_page(values) if master is not None else None
        result.append(
            {
                "name": pool["name"],
                "file": pool["file"],
                "user": values.get("user"),
                "group": values.get("group"),
                "listen": values.get("listen"),
                "pm": values.get("pm"),
                "max_children": _int(values.get("pm.max_children")),
                "processes": [{"pid": p.pid, "user": user_name_of(p.uid)} for p in sorted(procs, key=lambda p: p.pid)],
                "status": status,
            }
        )
    out.result(
        {"version": args.version, "running": master is not None, "master_pid": master, "pools": result},
        as_json=ctx.as_json,
    )
    return 0


def _int(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() else None


async def _status_page(values: dict[str, str]) -> dict[str, Any] | None:
    """The pool's own status page (``pm.status_path``, as JSON) asked over its socket with
    ``cgi-fcgi`` (Debian package libfcgi-bin); None when the pool has none or it does not answer."""
    path, listen, tool = values.get("pm.status_path"), values.get("listen", ""), which("cgi-fcgi")
    if not path or not listen.startswith("/") or tool is None:
        return None
    env = tool_env(REQUEST_METHOD="GET", SCRIPT_NAME=path, SCRIPT_FILENAME=path, QUERY_STRING="json")
    with trio.move_on_after(STATUS_TIMEOUT_S):
        code, text, _err = await capture_command([tool, "-bind", "-connect", listen], env=env)
        answer = parse_fcgi_json(text) if code == 0 else None
        return answer if isinstance(answer, dict) else None
    return None


APT = (Tool("apt-get"), Tool("apt-cache", "apt"))  # the kinds that install or remove PHP's packages

KINDS = [
    handler("php.versions", _versions),
    handler("php.install", _install, needs=APT),
    handler("php.uninstall", _uninstall, needs=APT),
    handler("php.extension-install", _extension_install, needs=APT),
    handler("php.restart", _restart, needs=FPM_INSTALLED),
    handler("php.reload", _reload, needs=FPM_INSTALLED),
    handler("php.fpm-status", _fpm_status, needs=FPM_INSTALLED),
]
