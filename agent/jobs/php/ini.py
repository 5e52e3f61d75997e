"""``php ini-get|ini-set``: php.ini directives, for the whole version or for one site.

Globally a directive goes to ``99-fleetdeck.ini`` in the conf.d of FPM and of the CLI (read
after Debian's files, so it wins, and ``php.ini`` itself stays the package's); for a site it is a
``php_admin_value[KEY]`` line of the site's FPM pool (the site's code cannot override it), kept
in its registry entry (``php_ini``) from which `agent.jobs.site_web` renders the pool. Before
anything is written the key must be one PHP knows (``ini_get`` answers false for any other) and
the value must not make PHP warn (``php -d KEY=VALUE``: "Invalid quantity", ...); then the whole
configuration goes through ``php-fpm -t`` (see `change_checked`): a refusal exits 78 and leaves
the files as they were.
"""

from __future__ import annotations

import json
import os
from typing import Any

import trio

from agent.jobs.base import EXIT_REFUSED, JobContext, JobError, Output, handler
from agent.jobs.common import find_site
from agent.jobs.php.fpm import (
    FileTrial,
    PhpPaths,
    change_checked,
    parse_sections,
    php_paths,
    problem_lines,
    reload_after_change,
    set_directive,
)
from agent.jobs.php.pools import set_site_ini, site_pool
from agent.jobs.proc import capture_command
from api_client.job_kinds.web import PhpIniGet, PhpIniSet

GLOBAL_INI_FILE = "99-fleetdeck.ini"
_HEADER = "; written by fleetdeck (php.ini-set): these directives override php.ini\n"
# A fixed script; the key is its argument, never part of the code.
_INI_GET = "echo json_encode(ini_get($argv[1]));"


async def php_ini_value(paths: PhpPaths, key: str, *settings: str) -> tuple[Any, list[str]]:
    """What ``ini_get(key)`` answers under the FPM's ini (false: PHP knows no such directive),
    with `settings` (``-d KEY=VALUE``) applied, and the warnings PHP printed for them."""
    argv = paths.cli_argv("fpm", *[f"-d{setting}" for setting in settings], "-r", _INI_GET, "--", key)
    code, text, err = await capture_command(argv, env=paths.env("fpm"))
    if code != 0:
        raise JobError(f"php{paths.version} could not read {key} (exit {code}): {' '.join(err.split())[-300:]}")
    return json.loads(text.strip() or "false"), problem_lines(err)


async def check_ini(paths: PhpPaths, key: str, value: str) -> None:
    """Refuse (78) a key PHP does not know or a value it warns about."""
    current, _warnings = await php_ini_value(paths, key)
    if current is False:
        raise JobError(f"PHP {paths.version} knows no directive {key}: nothing changed", EXIT_REFUSED)
    _value, warnings = await php_ini_value(paths, key, f"{key}={value}")
    if warnings:
        said = "; ".join(warnings)[:500]
        raise JobError(f"PHP {paths.version} refused {key}={value}, nothing changed: {said}", EXIT_REFUSED)


async def _ini_get(args: PhpIniGet, ctx: JobContext, out: Output) -> int:
    paths = php_paths(ctx, args.version)
    value, _warnings = await php_ini_value(paths, args.key)
    if value is False:
        raise JobError(f"PHP {args.version} knows no directive {args.key}")
    result: dict[str, Any] = {"version": args.version, "key": args.key, "value": value, "scope": "global"}
    if args.domain is not None:
        site = await find_site(ctx, args.domain)
        pool = await site_pool(ctx, site, paths)
        text = await trio.Path(pool).read_text()
        own = _pool_ini(text, args.key)
        result.update(domain=site.domain, global_value=value)
        if own is not None:
            result.update(value=own, scope="site")
    out.result(result, as_json=ctx.as_json)
    return 0


def _pool_ini(text: str, key: str) -> str | None:
    """The site pool's own value of `key` (php_admin_value/php_value/..._flag), if it sets one."""
    found = None
    for _name, values in parse_sections(text):
        for prefix in ("php_value", "php_flag", "php_admin_value", "php_admin_flag"):
            found = values.get(f"{prefix}[{key}]", found)
    return found


async def _ini_set(args: PhpIniSet, ctx: JobContext, out: Output) -> int:
    paths = php_paths(ctx, args.version)
    await check_ini(paths, args.key, args.value)
    if args.domain is not None:
        site = await find_site(ctx, args.domain)
        await site_pool(ctx, site, paths)
        if not await set_site_ini(ctx, site, args.key, args.value):
            out.stdout(f"{args.key} is already {args.value} in the pool of {site.domain}")
            return 0
        out.stdout(f"{args.key} = {args.value} in the pool of {site.domain} (PHP-FPM {args.version} reloaded)")
        return 0
    changed = await _write_global(paths, args.key, args.value)
    where = f"PHP {args.version} ({GLOBAL_INI_FILE})"
    if not changed:
        out.stdout(f"{args.key} is already {args.value} in {where}")
        return 0
    out.stdout(f"{args.key} = {args.value} in {where}")
    await reload_after_change(ctx, paths, out)
    return 0


async def _write_global(paths: PhpPaths, key: str, value: str) -> bool:
    """Set the directive in the fleetdeck ini of FPM and CLI; False when both had it already."""
    files = [os.path.join(paths.conf_d(sapi), GLOBAL_INI_FILE) for sapi in paths.sapis()]
    texts: dict[str, str] = {}
    for file in files:
        try:
            old = await trio.Path(file).read_text()
        except FileNotFoundError:
            old = _HEADER
        new = set_directive(old, key, value)
        if new != old:
            texts[file] = new
    if not texts:
        return False

    def write(trial: FileTrial) -> None:
        for file, text in texts.items():
            trial.write(file, text)

    await change_checked(paths, write)
    return True


KINDS = [
    handler("php.ini-get", _ini_get),
    handler("php.ini-set", _ini_set),
]
