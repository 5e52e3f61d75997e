"""``php set|pool-set|opcache-reset`` and the site side of ``ini-set``: a site's PHP-FPM pool.

The pool (``<pool_dir>/fleetdeck-<slug>.conf``) is rendered from the site's registry entry by
`agent.jobs.toolkit.site_web.apply_site_web`, never edited in place: these kinds change the entry (``php``,
``pool``, ``php_ini``) and render it again (`agent.jobs.site.settings.change_site`), which checks
the pool with ``php-fpm -t``, moves it to the version's pool folder, and reloads the FPMs it
touched. A refusal there (78) puts the entry back too, so the entry and the files stay in step.
"""

from __future__ import annotations

import os
from typing import Any

import trio

from agent.jobs.toolkit.base import JobContext, handler
from agent.jobs.toolkit.common import find_site
from agent.jobs.toolkit.output import JobError, Output
from agent.jobs.toolkit.php_fpm import FPM_INSTALLED, PhpPaths, parse_fcgi_json, php_paths
from agent.jobs.toolkit.proc import capture_command, require, tool_env
from agent.jobs.toolkit.site_web import change_site, mapping, pool_path, socket_path
from agent.sites import Site
from contract.job_kinds.base import DomainArgs
from contract.job_kinds.php import PhpPool, PhpSet

OPCACHE_TIMEOUT_S = 30.0
# The fixed script the agent runs through a site's pool to reset the opcache; it lives outside
# every docroot (in the agent's folder of the layout's run_dir), owned by root.
_OPCACHE_RESET = """<?php
// fleetdeck: run by the agent through an FPM pool (cgi-fcgi) to empty that FPM's opcache.
header('Content-Type: application/json');
$enabled = function_exists('opcache_reset') && ini_get('opcache.enable');
echo json_encode(['reset' => $enabled ? opcache_reset() : false, 'opcache' => (bool) $enabled]);
"""


def site_version(site: Site) -> str:
    if not site.php:
        raise JobError(f"site {site.domain} runs no PHP (its profile is {site.profile or 'static'})")
    return site.php


async def site_pool(ctx: JobContext, site: Site, paths: PhpPaths) -> str:
    """The pool file of `site` under `paths`' version; an error when it runs another or has none."""
    version = site_version(site)
    if paths.version != version:
        raise JobError(f"site {site.domain} runs PHP {version}, not {paths.version} (php.set switches it)")
    path = pool_path(ctx.host.php, version, site.slug)
    if not await trio.Path(path).exists():
        raise JobError(f"site {site.domain} has no PHP-FPM pool ({path} is missing)")
    return path


async def _set(args: PhpSet, ctx: JobContext, out: Output) -> int:
    site = await find_site(ctx, args.domain)
    current = site_version(site)
    php_paths(ctx, args.version)  # installed, else exit 69 naming php<version>-fpm
    if current == args.version:
        out.stdout(f"{site.domain} already runs PHP {args.version}")
        return 0
    await change_site(ctx, site, lambda entry: entry.update(php=args.version))
    out.stdout(f"{site.domain} runs PHP {args.version} (was {current})")
    return 0


async def _pool_set(args: PhpPool, ctx: JobContext, out: Output) -> int:
    site = await find_site(ctx, args.domain)
    await site_pool(ctx, site, php_paths(ctx, site_version(site)))
    wanted: dict[str, Any] = {"pm": args.pm, "max_children": args.max_children}
    if args.max_requests is not None:
        wanted["max_requests"] = args.max_requests
    entry = await trio.to_thread.run_sync(ctx.sites.entry, site.domain) or {}
    pool = {key: value for key, value in mapping(entry.get("pool")).items() if key != "max_requests"}
    pool.update(wanted)
    if pool == mapping(entry.get("pool")):
        out.stdout(f"the pool of {site.domain} is already {args.pm} with {args.max_children} children")
        return 0
    await change_site(ctx, site, lambda entry: entry.update(pool=pool))
    out.stdout(f"the pool of {site.domain}: " + ", ".join(f"{key} {value}" for key, value in wanted.items()))
    return 0


# `site.limits` owns these directives of a site's pool (its values win over php_ini's)
_LIMITED = {"memory_limit": "memory_limit", "upload_max_filesize": "upload_limit", "post_max_size": "upload_limit"}


async def set_site_ini(ctx: JobContext, site: Site, key: str, value: str) -> bool:
    """``php_admin_value[key]`` in the site's pool (its entry's ``php_ini``); False when it was."""
    entry = await trio.to_thread.run_sync(ctx.sites.entry, site.domain) or {}
    limits = mapping(entry.get("limits"))
    limit = _LIMITED.get(key)
    if limit is not None and limits.get(limit):
        raise JobError(f"site.limits sets {key} for {site.domain} ({limits[limit]}): change it there")
    ini = mapping(entry.get("php_ini"))
    if ini.get(key) == value:
        return False
    await change_site(ctx, site, lambda entry: entry.update(php_ini={**ini, key: value}))
    return True


# --- opcache ------------------------------------------------------------------------------------


async def _opcache_reset(args: DomainArgs, ctx: JobContext, out: Output) -> int:
    """A request through the site's own pool runs ``opcache_reset()`` in a worker of the FPM
    serving it: the opcache lives in that FPM master's shared memory, so this empties it for
    every pool of the master, without the reload that would restart every worker."""
    site = await find_site(ctx, args.domain)
    paths = php_paths(ctx, site_version(site))
    await site_pool(ctx, site, paths)
    tool = require("cgi-fcgi", "send a request to the site's PHP-FPM pool", package="libfcgi-bin")
    script = await trio.to_thread.run_sync(_reset_script, paths)
    env = tool_env(REQUEST_METHOD="GET", SCRIPT_FILENAME=script, SCRIPT_NAME="/" + os.path.basename(script))
    socket = socket_path(ctx.host.php, site.slug, paths.version)
    with trio.move_on_after(OPCACHE_TIMEOUT_S):
        code, text, err = await capture_command([tool, "-bind", "-connect", socket], env=env)
        answer = parse_fcgi_json(text)
        if code != 0 or not isinstance(answer, dict):
            said = " ".join((err or text).split())[-300:]
            raise JobError(f"the pool of {site.domain} did not run the opcache reset (exit {code}): {said}")
        if not answer.get("opcache"):
            out.stdout(f"the opcache is off in PHP-FPM {paths.version}: nothing to reset")
        else:
            out.stdout(f"the opcache of PHP-FPM {paths.version} is reset (every site of this FPM recompiles)")
        return 0
    raise JobError(f"the pool of {site.domain} did not answer within {OPCACHE_TIMEOUT_S:.0f} s")


def _reset_script(paths: PhpPaths) -> str:
    """The reset script, (re)written when missing or changed: root's, readable by every pool's user."""
    folder = os.path.join(paths.run_dir, "fleetdeck-agent")
    os.makedirs(folder, mode=0o755, exist_ok=True)
    os.chmod(folder, 0o755)
    path = os.path.join(folder, "opcache-reset.php")
    try:
        with open(path, encoding="utf-8") as f:
            current = f.read()
    except FileNotFoundError:
        current = None
    if current != _OPCACHE_RESET:
        temporary = path + ".new"
        with open(temporary, "w", encoding="utf-8") as f:
            f.write(_OPCACHE_RESET)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    return path


KINDS = [
    handler("php.set", _set, needs=FPM_INSTALLED),
    handler("php.pool-set", _pool_set, needs=FPM_INSTALLED),
    handler("php.opcache-reset", _opcache_reset, needs=FPM_INSTALLED),
]
