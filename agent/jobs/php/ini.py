"""``php ini-get|ini-set|ini-global-set``: php.ini directives, for one site or a whole version.

Only directives of the allow-list (`contract.job_kinds.allowlists.PHP_INI`) with values in their
bounds: the job's argv is parsed into the catalog's model, which refuses anything else (exit 2).
For a site (``ini-set``) a directive is a ``php_admin_value[KEY]`` line of the site's FPM pool (the
site's code cannot override it), kept in its registry entry (``php_ini``) from which
`agent.jobs.toolkit.site_web` renders the pool. For a whole version (``ini-global-set``, sysadmin) it goes to
``99-fleetdeck.ini`` in the conf.d of FPM and of the CLI (read after Debian's files, so it wins, and
``php.ini`` itself stays the package's); that file is rewritten with allowed directives only, so
one written before the allow-list (``opcache.preload``...) goes with the next change, and at the
agent's start (`sweep_global_ini`). Before
anything is written the key must be one this PHP knows (``ini_get`` answers false for any other:
``opcache.jit`` on PHP 7) and the value must not make PHP warn (``php -d KEY=VALUE``); then the
whole configuration goes through ``php-fpm -t`` (see `change_checked`): a refusal exits 78 and
leaves the files as they were.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

import trio

from agent.jobs.php.pools import set_site_ini, site_pool
from agent.jobs.toolkit.base import JobContext, handler
from agent.jobs.toolkit.common import find_site
from agent.jobs.toolkit.host import php_fpm_versions
from agent.jobs.toolkit.output import EXIT_REFUSED, JobError, Output
from agent.jobs.toolkit.php_fpm import (
    FPM_INSTALLED,
    FileTrial,
    PhpPaths,
    change_checked,
    control_fpm,
    directive_key,
    parse_sections,
    php_paths,
    problem_lines,
    reload_after_change,
    running_master,
    set_directive,
    unquoted,
)
from agent.jobs.toolkit.proc import capture_command
from contract.job_kinds.allowlists import PHP_INI, setting_problem
from contract.job_kinds.php import PhpIniGet, PhpIniGlobalSet, PhpIniSet

log = logging.getLogger("fleetdeck.agent.jobs")

GLOBAL_INI_FILE = "99-fleetdeck.ini"
_HEADER = "; written by fleetdeck (php.ini-global-set): these directives override php.ini\n"
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
    site = await find_site(ctx, args.domain)
    await site_pool(ctx, site, paths)
    if not await set_site_ini(ctx, site, args.key, args.value):
        out.stdout(f"{args.key} is already {args.value} in the pool of {site.domain}")
        return 0
    out.stdout(f"{args.key} = {args.value} in the pool of {site.domain} (PHP-FPM {args.version} reloaded)")
    return 0


async def _ini_global_set(args: PhpIniGlobalSet, ctx: JobContext, out: Output) -> int:
    paths = php_paths(ctx, args.version)
    await check_ini(paths, args.key, args.value)
    changed = await _write_global(paths, args.key, args.value, out)
    where = f"PHP {args.version} ({GLOBAL_INI_FILE})"
    if not changed:
        out.stdout(f"{args.key} is already {args.value} in {where}")
        return 0
    out.stdout(f"{args.key} = {args.value} in {where}")
    await reload_after_change(ctx, paths, out)
    return 0


def allowed_lines(text: str) -> tuple[str, list[str]]:
    """The fleetdeck ini `text` without the directives the allow-list does not take (written
    before it, or by hand), and those directives' lines (comments and blank lines stay)."""
    kept: list[str] = []
    dropped: list[str] = []
    for line in text.splitlines():
        key = directive_key(line)
        if key is not None:
            value = unquoted(line.split("=", 1)[1].strip())
            if setting_problem(PHP_INI, key, value) is not None:
                dropped.append(line.strip())
                continue
        kept.append(line)
    return "\n".join(kept) + "\n", dropped


async def _write_global(paths: PhpPaths, key: str, value: str, out: Output) -> bool:
    """Set the directive in the fleetdeck ini of FPM and CLI, dropping those the allow-list does
    not take (said on stderr); False when both files had it already and nothing was dropped."""
    files = [os.path.join(paths.conf_d(sapi), GLOBAL_INI_FILE) for sapi in paths.sapis()]
    texts: dict[str, str] = {}
    for file in files:
        try:
            old = await trio.Path(file).read_text()
        except FileNotFoundError:
            old = _HEADER
        allowed, dropped = allowed_lines(old)
        for line in dropped:
            out.stderr(f"{file}: {line!r} removed: not on the allow-list of php.ini directives")
        new = set_directive(allowed, key, value)
        if new != old:
            texts[file] = new
    if not texts:
        return False

    def write(trial: FileTrial) -> None:
        for file, text in texts.items():
            trial.write(file, text)

    await change_checked(paths, write)
    return True


async def sweep_global_ini(ctx: JobContext) -> None:
    """At the agent's start: the directives of each installed version's fleetdeck ini that the
    allow-list does not take (written before it: ``opcache.preload``...) are removed, checked by
    ``php-fpm -t``, and a running FPM reloads, so none waits for the next ``php.ini-global-set``.
    Never fails the agent: a version it cannot clean is one line in its log."""
    for version in await trio.to_thread.run_sync(php_fpm_versions):
        paths = PhpPaths(version, ctx.host.php)
        try:
            removed = await _sweep(paths)
            if removed and await running_master(paths) is not None:
                await control_fpm(ctx, paths, "reload")
        except Exception as exc:  # one version's trouble is no reason to stop the agent
            log.warning("PHP %s: the fleetdeck ini was not cleaned of directives off the allow-list: %s", version, exc)
            continue
        for line in removed:
            log.warning(
                "PHP %s: %r removed from %s: not on the allow-list of php.ini directives",
                version,
                line,
                GLOBAL_INI_FILE,
            )


async def _sweep(paths: PhpPaths) -> list[str]:
    texts: dict[str, str] = {}
    removed: list[str] = []
    for sapi in paths.sapis():
        file = os.path.join(paths.conf_d(sapi), GLOBAL_INI_FILE)
        try:
            old = await trio.Path(file).read_text()
        except FileNotFoundError:
            continue
        allowed, dropped = allowed_lines(old)
        if dropped:
            texts[file] = allowed
            removed += dropped
    if texts:

        def write(trial: FileTrial) -> None:
            for file, text in texts.items():
                trial.write(file, text)

        await change_checked(paths, write)
    return removed


KINDS = [
    handler("php.ini-get", _ini_get, needs=FPM_INSTALLED),
    handler("php.ini-set", _ini_set, needs=FPM_INSTALLED),
    handler("php.ini-global-set", _ini_global_set, needs=FPM_INSTALLED),
]
