"""``php module-list|module-enable|module-disable``: extension modules, the way ``phpenmod`` does it.

Debian's packages put one ``<module>.ini`` per extension in ``mods-available`` (its first lines
say ``; priority=NN``); a module is enabled for a SAPI by a link ``NN-<module>.ini`` to it in that
SAPI's ``conf.d``. ``phpenmod`` only knows ``/etc/php``, so the agent makes the same links itself
in the layout's folders, for FPM and the CLI together, checked by ``php-fpm -t`` (a module whose
library is missing or whose dependency is off is refused, and the links are put back).
"""

from __future__ import annotations

import glob
import os
import re
from typing import Any

import trio

from agent.jobs.toolkit.base import JobContext, handler
from agent.jobs.toolkit.output import EXIT_MISSING, JobError, Output
from agent.jobs.toolkit.php_fpm import (
    FPM_INSTALLED,
    SAPIS,
    FileTrial,
    PhpPaths,
    change_checked,
    php_paths,
    reload_after_change,
)
from agent.jobs.toolkit.proc import capture_command
from contract.job_kinds.php import PhpModuleArgs, PhpVersionArgs

DEFAULT_PRIORITY = 20
_PRIORITY = re.compile(r"^\s*;\s*priority\s*=\s*(\d+)", re.MULTILINE)
_LINK = re.compile(r"^\d+-(.+)\.ini$")
# `php -m` names a few modules differently from their ini file
_MODULE_ALIASES = {"zend opcache": "opcache"}


def module_priority(ini_text: str) -> int:
    match = _PRIORITY.search(ini_text)
    return int(match.group(1)) if match else DEFAULT_PRIORITY


def parse_php_m(text: str) -> set[str]:
    """The module names of ``php -m`` (both its PHP and Zend sections), lower-cased as the ini
    files of mods-available name them."""
    names = set()
    for line in text.splitlines():
        name = line.strip().lower()
        if name and not name.startswith("["):
            names.add(_MODULE_ALIASES.get(name, name))
    return names


async def loaded_modules(paths: PhpPaths, sapi: str) -> set[str]:
    code, text, err = await capture_command(paths.cli_argv(sapi, "-m"), env=paths.env(sapi))
    if code != 0:
        raise JobError(f"php{paths.version} -m failed (exit {code}): {' '.join(err.split())[-300:]}")
    return parse_php_m(text)


def available_modules(paths: PhpPaths) -> dict[str, str]:
    """``{module: its ini file}`` in mods-available."""
    found = glob.glob(os.path.join(paths.mods_dir, "*.ini"))
    return {os.path.basename(path)[: -len(".ini")]: path for path in sorted(found)}


def enabled_links(paths: PhpPaths, sapi: str, module: str) -> list[str]:
    """The links (or files) of conf.d that enable `module` for `sapi`."""
    folder = paths.conf_d(sapi)
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    return [os.path.join(folder, name) for name in sorted(names) if (m := _LINK.match(name)) and m.group(1) == module]


async def _module_list(args: PhpVersionArgs, ctx: JobContext, out: Output) -> int:
    paths = php_paths(ctx, args.version)
    fpm, cli = await loaded_modules(paths, "fpm"), await loaded_modules(paths, "cli")
    available = await trio.to_thread.run_sync(available_modules, paths)
    modules: list[dict[str, Any]] = [
        {"name": name, "fpm": name in fpm, "cli": name in cli, "builtin": name not in available}
        for name in sorted(fpm | cli | set(available))
    ]
    out.result({"version": args.version, "modules": modules}, as_json=ctx.as_json)
    return 0


async def _module_enable(args: PhpModuleArgs, ctx: JobContext, out: Output) -> int:
    await enable_module(ctx, php_paths(ctx, args.version), args.module, out)
    return 0


async def enable_module(ctx: JobContext, paths: PhpPaths, module: str, out: Output) -> None:
    """Link `module` into the conf.d of each SAPI that lacks it (checked by ``php-fpm -t``) and
    reload the FPM; says so when every SAPI has it already."""
    ini = os.path.join(paths.mods_dir, f"{module}.ini")
    try:
        priority = module_priority(await trio.Path(ini).read_text())
    except FileNotFoundError:
        package = f"php{paths.version}-{module}"
        said = f"PHP {paths.version} has no module {module} ({ini}; Debian package {package})"
        raise JobError(said, EXIT_MISSING) from None
    missing = [sapi for sapi in paths.sapis() if not enabled_links(paths, sapi, module)]
    if not missing:
        out.stdout(f"{module} is already enabled for PHP {paths.version}")
        return

    def link(trial: FileTrial) -> None:
        for sapi in missing:
            trial.link(os.path.join(paths.conf_d(sapi), f"{priority:02d}-{module}.ini"), ini)

    await change_checked(paths, link)
    out.stdout(f"{module} enabled for PHP {paths.version} ({', '.join(missing)})")
    await reload_after_change(ctx, paths, out)


async def _module_disable(args: PhpModuleArgs, ctx: JobContext, out: Output) -> int:
    paths = php_paths(ctx, args.version)
    links = [path for sapi in SAPIS for path in enabled_links(paths, sapi, args.module)]
    if not links:
        out.stdout(f"{args.module} is not enabled for PHP {args.version}")
        return 0

    def unlink(trial: FileTrial) -> None:
        for path in links:
            trial.remove(path)

    await change_checked(paths, unlink)
    out.stdout(f"{args.module} disabled for PHP {args.version}")
    await reload_after_change(ctx, paths, out)
    return 0


KINDS = [
    handler("php.module-list", _module_list, needs=FPM_INSTALLED),
    handler("php.module-enable", _module_enable, needs=FPM_INSTALLED),
    handler("php.module-disable", _module_disable, needs=FPM_INSTALLED),
]
