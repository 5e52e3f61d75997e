"""``php set|pool-set|opcache-reset``: a site's FPM pool (``<pool_dir>/fleetdeck-<slug>.conf``,
written by `agent.jobs.site_web`), its process manager and the opcache of the FPM serving it."""

from __future__ import annotations

import os

import trio

from agent.jobs.base import JobContext, JobError, Output
from agent.jobs.common import find_site
from agent.jobs.php.fpm import (
    FileTrial,
    PhpPaths,
    change_checked,
    parse_fcgi_json,
    parse_sections,
    php_paths,
    reload_after_change,
    set_directive,
)
from agent.jobs.proc import capture_command, require, tool_env
from agent.sites import Site
from api_client.job_kinds.web import DomainArgs, PhpPool

OPCACHE_TIMEOUT_S = 30.0
# The fixed script the agent runs through a site's pool to reset the opcache; it lives outside
# every docroot (in the agent's folder of the layout's run_dir), owned by root.
_OPCACHE_RESET = """<?php
// fleetdeck: run by the agent through an FPM pool (cgi-fcgi) to empty that FPM's opcache.
header('Content-Type: application/json');
$enabled = function_exists('opcache_reset') && ini_get('opcache.enable');
echo json_encode(['reset' => $enabled ? opcache_reset() : false, 'opcache' => (bool) $enabled]);
"""


def pool_file(paths: PhpPaths, site: Site) -> str:
    return os.path.join(paths.pool_dir, f"fleetdeck-{site.slug}.conf")


def site_version(site: Site) -> str:
    if not site.php:
        raise JobError(f"site {site.domain} runs no PHP (its profile is {site.profile or 'static'})")
    return site.php


async def site_pool(ctx: JobContext, site: Site, paths: PhpPaths | None = None) -> str:
    """The pool file of `site` (under the version it runs); an error when it has none."""
    version = site_version(site)
    if paths is not None and paths.version != version:
        raise JobError(f"site {site.domain} runs PHP {version}, not {paths.version} (php.set switches it)")
    paths = paths or php_paths(ctx, version)
    path = pool_file(paths, site)
    if not await trio.Path(path).exists():
        raise JobError(f"site {site.domain} has no PHP-FPM pool ({path} is missing)")
    return path


async def write_pool_directive(paths: PhpPaths, pool: str, directives: dict[str, str]) -> bool:
    """Set `directives` in the pool file, checked by ``php-fpm -t``; False when all were set already."""
    old = await trio.Path(pool).read_text()
    new = old
    for key, value in directives.items():
        new = set_directive(new, key, value)
    if new == old:
        return False

    def write(trial: FileTrial) -> None:
        trial.write(pool, new, os.stat(pool).st_mode & 0o7777)

    await change_checked(paths, write)
    return True


def pool_directives(args: PhpPool) -> dict[str, str]:
    """The pool lines of a pool-set: a dynamic pool also needs its spare servers within
    max_children (FPM refuses the pool otherwise)."""
    directives = {"pm": args.pm, "pm.max_children": str(args.max_children)}
    if args.pm == "dynamic":
        spare_max = max(1, min(args.max_children, 3))
        directives.update(
            {"pm.start_servers": "1", "pm.min_spare_servers": "1", "pm.max_spare_servers": str(spare_max)}
        )
    if args.max_requests is not None:
        directives["pm.max_requests"] = str(args.max_requests)
    return directives


async def _pool_set(args: PhpPool, ctx: JobContext, out: Output) -> int:
    site = await find_site(ctx, args.domain)
    paths = php_paths(ctx, site_version(site))
    pool = await site_pool(ctx, site, paths)
    directives = pool_directives(args)
    if not await write_pool_directive(paths, pool, directives):
        out.stdout(f"the pool of {site.domain} is already {args.pm} with {args.max_children} children")
        return 0
    out.stdout(f"the pool of {site.domain}: " + ", ".join(f"{k} = {v}" for k, v in directives.items()))
    await reload_after_change(ctx, paths, out)
    return 0


# --- opcache ------------------------------------------------------------------------------------


async def _opcache_reset(args: DomainArgs, ctx: JobContext, out: Output) -> int:
    site = await find_site(ctx, args.domain)
    paths = php_paths(ctx, site_version(site))
    pool = await site_pool(ctx, site, paths)
    listen = _pool_listen(await trio.Path(pool).read_text())
    if listen is None or not listen.startswith("/"):
        where = listen or "nothing"
        raise JobError(f"the pool of {site.domain} listens on {where}, not on a socket the agent can reach")
    tool = require("cgi-fcgi", "send a request to the site's PHP-FPM pool", package="libfcgi-bin")
    script = await trio.to_thread.run_sync(_reset_script, paths)
    env = tool_env(REQUEST_METHOD="GET", SCRIPT_FILENAME=script, SCRIPT_NAME="/" + os.path.basename(script))
    with trio.move_on_after(OPCACHE_TIMEOUT_S):
        code, text, err = await capture_command([tool, "-bind", "-connect", listen], env=env)
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


def _pool_listen(text: str) -> str | None:
    for name, values in parse_sections(text):
        if name and name != "global" and "listen" in values:
            return values["listen"]
    return None


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
