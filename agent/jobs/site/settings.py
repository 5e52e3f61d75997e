"""A site's web settings: ``site enable|disable|alias-add|alias-remove|redirect-set|env-*|limits``
and its logs (``site logs``).

Each change is a registry field (see `agent.jobs.toolkit.site_web` for the list), then the server block
and pool are rendered again from the entry (`apply_site_web`: checked by ``php-fpm -t`` and
``nginx -t`` before anything serves it). A refusal (exit 78) or any failure puts the previous
entry back; the previous files were put back by `apply_site_web`. Asking for what is already so
says so on stdout and exits 0.
"""

from __future__ import annotations

import os
from typing import Any

import trio

from agent.jobs.toolkit.base import JobContext, handler
from agent.jobs.toolkit.common import find_site
from agent.jobs.toolkit.logfiles import open_log, start_of_last_lines
from agent.jobs.toolkit.output import JobError, Output
from agent.jobs.toolkit.site_web import change_site, mapping, settings_of, site_log_dir, tls_files
from agent.sites import Site
from contract.job_kinds.base import DomainArgs
from contract.job_kinds.site import SiteAlias, SiteEnvKey, SiteEnvSet, SiteLimits, SiteLogs, SiteRedirect
from contract.link.protocol import RpcError

MASK = "********"
MAX_LOG_BYTES = 4 * 1024 * 1024  # what `site logs` reads back from the end of one log, at most


async def _settings(ctx: JobContext, site: Site) -> Any:
    entry = await trio.to_thread.run_sync(ctx.sites.entry, site.domain)
    if entry is None:
        raise JobError(f"no site {site.domain} on this server")
    return settings_of(entry, ctx.site_home(site.slug))


# --- enable / disable --------------------------------------------------------------------------


async def _set_enabled(args: DomainArgs, ctx: JobContext, out: Output, enabled: bool) -> int:
    site = await find_site(ctx, args.domain)
    word = "enabled" if enabled else "disabled (its parked page answers with HTTP 503)"
    already = (await _settings(ctx, site)).enabled == enabled
    await change_site(ctx, site, lambda entry: entry.update(enabled=enabled))
    out.stdout(f"site {site.domain} {'was already' if already else 'is now'} {word}")
    return 0


async def _enable(args: DomainArgs, ctx: JobContext, out: Output) -> int:
    return await _set_enabled(args, ctx, out, True)


async def _disable(args: DomainArgs, ctx: JobContext, out: Output) -> int:
    return await _set_enabled(args, ctx, out, False)


# --- aliases -----------------------------------------------------------------------------------


async def _alias_owner(ctx: JobContext, name: str) -> str | None:
    """The site answering on `name` (its domain or one of its aliases), if any."""
    for site in await trio.to_thread.run_sync(ctx.sites.sites):
        entry = await trio.to_thread.run_sync(ctx.sites.entry, site.domain) or {}
        if name == site.domain or name in (entry.get("aliases") or []):
            return site.domain
    return None


async def _alias_add(args: SiteAlias, ctx: JobContext, out: Output) -> int:
    site = await find_site(ctx, args.domain)
    aliases = list((await _settings(ctx, site)).aliases)
    owner = await _alias_owner(ctx, args.alias)
    if owner is not None and owner != site.domain:
        raise JobError(f"{args.alias} is already served by site {owner}")
    if args.alias == site.domain or args.alias in aliases:
        out.stderr(f"site {site.domain} already answers on {args.alias}")
    else:
        aliases.append(args.alias)
    entry = await change_site(ctx, site, lambda e: e.update(aliases=aliases))
    out.result({"domain": site.domain, "aliases": entry.get("aliases", [])}, as_json=ctx.as_json)
    return 0


async def _alias_remove(args: SiteAlias, ctx: JobContext, out: Output) -> int:
    site = await find_site(ctx, args.domain)
    aliases = list((await _settings(ctx, site)).aliases)
    if args.alias not in aliases:
        out.stderr(f"{args.alias} is not an alias of site {site.domain}")
    entry = await change_site(ctx, site, lambda e: e.update(aliases=[a for a in aliases if a != args.alias]))
    out.result({"domain": site.domain, "aliases": entry.get("aliases", [])}, as_json=ctx.as_json)
    return 0


# --- redirects ---------------------------------------------------------------------------------


async def _redirect_set(args: SiteRedirect, ctx: JobContext, out: Output) -> int:
    site = await find_site(ctx, args.domain)
    await change_site(ctx, site, lambda e: e.update(https_redirect=args.https, www_redirect=args.www))
    if args.https and await trio.to_thread.run_sync(tls_files, ctx.state_dir, site.slug) is None:
        out.stderr(f"note: site {site.domain} has no certificate yet: the https redirect starts with one")
    out.stdout(f"site {site.domain}: https redirect {'on' if args.https else 'off'}, www {args.www}")
    return 0


# --- environment -------------------------------------------------------------------------------


def _require_php(s: Any, what: str) -> None:
    if not s.uses_php:
        raise JobError(f"site {s.domain} is a {s.profile} site: it has no PHP to {what}")


async def _env_list(args: DomainArgs, ctx: JobContext, out: Output) -> int:
    site = await find_site(ctx, args.domain)
    entry = await trio.to_thread.run_sync(ctx.sites.entry, site.domain) or {}
    env = mapping(entry.get("env"))
    listed = [
        {"key": key, "value": MASK if item.get("masked") else item.get("value"), "masked": bool(item.get("masked"))}
        for key, item in sorted(env.items())
        if isinstance(item, dict)
    ]
    out.result({"domain": site.domain, "env": listed}, as_json=ctx.as_json)
    return 0


async def _env_set(args: SiteEnvSet, ctx: JobContext, out: Output) -> int:
    site = await find_site(ctx, args.domain)
    _require_php(await _settings(ctx, site), "give an environment to")
    item = {"value": args.value.get_secret_value(), "masked": args.masked}

    def change(entry: dict[str, Any]) -> None:
        entry["env"] = {**mapping(entry.get("env")), args.key: item}

    await change_site(ctx, site, change)
    out.stdout(f"site {site.domain}: {args.key} is set{' (masked)' if args.masked else ''}")
    return 0


async def _env_unset(args: SiteEnvKey, ctx: JobContext, out: Output) -> int:
    site = await find_site(ctx, args.domain)
    entry = await trio.to_thread.run_sync(ctx.sites.entry, site.domain) or {}
    if args.key not in (entry.get("env") or {}):
        out.stdout(f"site {site.domain} has no {args.key} in its environment")
        return 0

    def change(entry: dict[str, Any]) -> None:
        entry["env"] = {k: v for k, v in (entry.get("env") or {}).items() if k != args.key}

    await change_site(ctx, site, change)
    out.stdout(f"site {site.domain}: {args.key} is removed")
    return 0


# --- limits ------------------------------------------------------------------------------------


async def _limits(args: SiteLimits, ctx: JobContext, out: Output) -> int:
    site = await find_site(ctx, args.domain)
    if args.max_children is not None or args.memory_limit is not None:
        _require_php(await _settings(ctx, site), "limit")

    def change(entry: dict[str, Any]) -> None:
        pool = dict(entry.get("pool") or {})
        limits = dict(entry.get("limits") or {})
        if args.max_children is not None:
            pool["max_children"] = args.max_children
        if args.memory_limit is not None:
            limits["memory_limit"] = args.memory_limit
        if args.upload_limit is not None:
            limits["upload_limit"] = args.upload_limit
        entry["pool"], entry["limits"] = pool, limits

    entry = await change_site(ctx, site, change)
    s = settings_of(entry, ctx.site_home(site.slug))
    result = {
        "domain": site.domain,
        "max_children": s.max_children if s.uses_php else None,
        "memory_limit": s.memory_limit,
        "upload_limit": s.upload_limit,
    }
    out.result(result, as_json=ctx.as_json)
    return 0


# --- logs --------------------------------------------------------------------------------------


def _last_lines(folder: str, name: str, count: int) -> list[str]:
    """The last `count` lines of the log `name` in the site's log folder `folder` ([] when none yet)."""
    try:
        fd = open_log(folder, name)
    except RpcError as exc:
        if exc.code == "not_found":
            return []
        raise
    try:
        size = os.fstat(fd).st_size
        start = max(start_of_last_lines(fd, size, count), size - MAX_LOG_BYTES)
        data = os.pread(fd, size - start, start)
    finally:
        os.close(fd)
    return data.decode("utf-8", "replace").splitlines()[-count:]


async def _logs(args: SiteLogs, ctx: JobContext, out: Output) -> int:
    site = await find_site(ctx, args.domain)
    names = ("access", "error") if args.log == "both" else (args.log,)
    result: dict[str, Any] = {"domain": site.domain}
    for name in names:
        folder = site_log_dir(ctx.host, site.slug)
        result[name] = await trio.to_thread.run_sync(_last_lines, folder, f"{name}.log", args.lines)
    out.result(result, as_json=ctx.as_json)
    return 0


KINDS = [
    handler("site.enable", _enable),
    handler("site.disable", _disable),
    handler("site.alias-add", _alias_add),
    handler("site.alias-remove", _alias_remove),
    handler("site.redirect-set", _redirect_set),
    handler("site.env-list", _env_list),
    handler("site.env-set", _env_set),
    handler("site.env-unset", _env_unset),
    handler("site.limits", _limits),
    handler("site.logs", _logs),
]
