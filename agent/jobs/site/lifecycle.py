"""``site list|inspect|create|delete``: the sites of this server, in the registry and on disk.

A site ``example.com`` lives in ``<home>/example-com`` (dots become dashes). As root, each site
gets a system user named after its folder (``useradd --system``, no login shell), owning the
folder with ``public_html/`` (the profile's index file) and ``logs/`` (its own: cron's run
histories, written as the site's user) inside. Its web server's and PHP's logs are not in its
folder: they are in a folder of root's (`agent.jobs.toolkit.site_web.site_log_dir`). The registry entry
is written before the web server's files (`agent.jobs.toolkit.site_web` renders them from it), and a
create (or a clone) that fails half-way undoes what it made, its files removed through the
boundary (`agent.jobs.toolkit.boundary`).

Who reaches a site's files: its folder is ``<site user>:<group of nginx's user>`` (www-data),
mode 0750. nginx's workers are in that group, so they enter and read ``public_html`` (0755); no
other site's user is (their PHP runs as themselves), so they cannot even enter it. No ACL, no
change to www-data's groups, and the site's user stays free to ``chmod`` its own files.
Sites made before the web logs moved out keep the old ``access.log`` and ``error.log`` in their
``logs/`` folder, as their own files (nginx writes to the new folder once the site's web files are
written again).

``site.delete`` works so that a site's user cannot stop it: it locks the account (no new login,
cron job or su), removes its cron entries, daemons, server block and pool, kills every process of
the user (`agent.jobs.toolkit.boundary.stop_user_processes`), removes the files through descriptors
(`agent.jobs.toolkit.boundary.remove_tree`: a folder exchanged with a link is never followed), then the
user, and only then the registry entry: a delete that stopped half-way (cancelled, or a step that
failed) is finished by running it again.

Without nginx (not installed, or no sites folder), ``site.create`` still makes the site's user,
files and registry entry, says on stderr that nothing serves it and why (naming the Debian
package), reports ``served: false`` and exits 0: ``site.enable`` writes the server block once
nginx is there. The same goes for a php or wordpress site without its PHP-FPM.
"""

from __future__ import annotations

import hashlib
import html
import logging
import os
import re
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, get_args

import trio

from agent.files.fdops import CancelToken
from agent.jobs.toolkit.base import JobContext, handler, rfc3339
from agent.jobs.toolkit.boundary import (
    copy_tree,
    home_jail,
    in_thread,
    remove_root_folder,
    remove_site_tree,
    stop_user_processes,
)
from agent.jobs.toolkit.common import Account, account_by_name, account_by_uid, current_account, find_site, user_name_of
from agent.jobs.toolkit.disk_usage import measure_path
from agent.jobs.toolkit.output import EXIT_MISSING, JobError, Output
from agent.jobs.toolkit.php_fpm import php_paths, version_for_new_site
from agent.jobs.toolkit.proc import capture_command, require, which
from agent.jobs.toolkit.site_teardown import forget_site_in
from agent.jobs.toolkit.site_web import apply_site_web, remove_site_web, settings_of, vhost_path
from agent.sites import SLUG_RE, Site
from contract.job_kinds.base import DomainArgs, NoArgs
from contract.job_kinds.site import SiteClone, SiteCreate, SiteDelete, SiteProfile
from contract.link.protocol import RpcError

_O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW
_O_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
MAX_USER_NAME = 32
log = logging.getLogger("fleetdeck.agent.jobs")

_STATIC_INDEX = """<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>{domain}</title></head>
<body>
<h1>{domain}</h1>
<p>This site is ready. Replace this file with your own content.</p>
</body>
</html>
"""
_PHP_INDEX = """<?php
// {domain}: replace this file with your application.
echo "<h1>{domain}</h1><p>PHP " . PHP_VERSION . " is serving this site.</p>";
"""
_WORDPRESS_INDEX = """<?php
// {domain}: placeholder. WordPress has not been installed into public_html yet.
echo "<h1>{domain}</h1><p>WordPress will be installed here.</p>";
"""
PROFILES = {
    "static": ("index.html", _STATIC_INDEX),
    "php": ("index.php", _PHP_INDEX),
    "wordpress": ("index.php", _WORDPRESS_INDEX),
}
if set(PROFILES) != set(get_args(SiteProfile)):  # the catalog's list is the truth: one template each
    raise ImportError(f"site profiles: the agent has {sorted(PROFILES)}, the catalog {get_args(SiteProfile)}")


def slug_of(domain: str) -> str:
    return domain.replace(".", "-")


def user_name_for(slug: str) -> str:
    """A valid system user name for a site folder: the slug itself when it fits (32 characters,
    starting with a letter), else a prefixed or shortened form with a hash."""
    name = slug if re.match(r"^[a-z_]", slug) else f"site-{slug}"
    if len(name) > MAX_USER_NAME:
        name = f"{name[:23]}-{hashlib.sha256(slug.encode()).hexdigest()[:8]}"
    return name


# --- reading -------------------------------------------------------------------------------


def describe(ctx: JobContext, site: Site, *, full: bool) -> dict[str, Any]:
    """A site's registry facts and what its folder holds (blocking)."""
    home = ctx.site_home(site.slug)
    info: dict[str, Any] = {"domain": site.domain, "slug": site.slug, "home": home}
    try:
        st = os.lstat(home)
    except OSError:
        st = None
    info["exists"] = st is not None
    info["owner"] = user_name_of(st.st_uid) if st is not None else None
    totals = None
    if st is not None:
        try:
            totals, _ = measure_path(ctx.home, site.slug)
        except Exception as exc:  # a folder symlinked out of the home, unreadable, ...
            info["error"] = str(getattr(exc, "message", exc))
    info["disk_bytes"] = totals.disk_bytes if totals else None
    if full:
        account = account_by_name(site.user) if site.user else None
        info.update(
            user=site.user or info["owner"],
            uid=account.uid if account else (st.st_uid if st else None),
            gid=account.gid if account else (st.st_gid if st else None),
            size_bytes=totals.bytes if totals else None,
            files=totals.files if totals else None,
            dirs=totals.dirs if totals else None,
            profile=site.profile,
            php=site.php,
            created_at=site.created_at,
        )
        entry = ctx.sites.entry(site.domain) or {}
        web = settings_of(entry, home) if entry else None
        info.update(
            docroot=web.docroot if web else None,
            enabled=web.enabled if web else None,
            aliases=list(web.aliases) if web else [],
            https_redirect=web.https_redirect if web else None,
            www_redirect=web.www_redirect if web else None,
            served=os.path.exists(vhost_path(ctx.host.nginx, site.slug)),
        )
    return info


async def _list(args: NoArgs, ctx: JobContext, out: Output) -> int:
    def work() -> list[dict[str, Any]]:
        return [describe(ctx, site, full=False) for site in ctx.sites.sites()]

    out.result({"sites": await trio.to_thread.run_sync(work)}, as_json=ctx.as_json)
    return 0


async def _inspect(args: DomainArgs, ctx: JobContext, out: Output) -> int:
    site = await find_site(ctx, args.domain)
    out.result(await trio.to_thread.run_sync(lambda: describe(ctx, site, full=True)), as_json=ctx.as_json)
    return 0


# --- create --------------------------------------------------------------------------------


def _make_tree(home: str, slug: str, domain: str, profile: str, uid: int, gid: int, web_gid: int) -> None:
    """``<home>/<slug>`` and its contents, owned by uid:gid (the folder itself by uid:web_gid, the
    group nginx's workers enter it by); the folder must not exist."""
    index_name, template = PROFILES[profile]
    home_fd = os.open(home, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.mkdir(slug, 0o700, dir_fd=home_fd)  # nobody else gets in while it is built
        site_fd = os.open(slug, _O_DIR, dir_fd=home_fd)
    finally:
        os.close(home_fd)
    try:
        folders = (("public_html", 0o755), ("logs", 0o750))  # logs/: the site's own (cron's run histories)
        for folder, mode in folders:
            os.mkdir(folder, mode, dir_fd=site_fd)
        files = [("public_html", index_name, template.format(domain=html.escape(domain)), 0o644)]
        for folder, name, text, mode in files:
            dir_fd = os.open(folder, _O_DIR, dir_fd=site_fd)
            try:
                fd = os.open(name, _O_NEW_FILE, mode, dir_fd=dir_fd)
                try:
                    os.write(fd, text.encode())
                    os.fchmod(fd, mode)
                    os.fchown(fd, uid, gid)
                finally:
                    os.close(fd)
            finally:
                os.close(dir_fd)
        for folder, mode in folders:
            sub = os.open(folder, _O_DIR, dir_fd=site_fd)
            try:
                os.fchmod(sub, mode)  # whatever the umask
                os.fchown(sub, uid, gid)
            finally:
                os.close(sub)
        os.fchown(site_fd, uid, web_gid)
        os.fchmod(site_fd, 0o750)
    finally:
        os.close(site_fd)


def same_path(a: str, b: str) -> bool:
    return os.path.normpath(a) == os.path.normpath(b)


def _check_free(sites_folder: str, home: str) -> None:
    if not os.path.isdir(sites_folder):
        raise JobError(f"the sites folder {sites_folder} does not exist")
    if os.path.lexists(home):
        raise JobError(f"{home} already exists: move it away or choose another domain")


async def _remove_site_files(ctx: JobContext, slug: str) -> bool:
    """The site's folder and its log folder removed through the boundary; whether its folder was there."""
    removed = await in_thread(lambda token: remove_site_tree(ctx, slug, token))
    await in_thread(lambda token: remove_root_folder(ctx.host.system.sites_log_dir, slug, token))
    return removed


async def _site_user(ctx: JobContext, slug: str, domain: str) -> tuple[Account, bool]:
    """The system user of a new site (made now unless it is already this site's): (account, made)."""
    if not ctx.is_root:
        return current_account(), False
    name = user_name_for(slug)
    home = ctx.site_home(slug)
    account = account_by_name(name)
    if account is not None:
        if not same_path(account.home, home):
            raise JobError(f"a system user {name} already exists and is not this site's (its home is {account.home})")
        return account, False
    useradd = require("useradd", "create the site's system user")
    shell = which("nologin") or "/bin/false"
    argv = [useradd, "--system", "--home-dir", home, "--shell", shell, "--user-group", "--no-create-home"]
    code, _, err = await capture_command([*argv, "--comment", f"fleetdeck site {domain}", name])
    if code != 0:
        raise JobError(f"useradd {name} failed (exit {code}): {' '.join(err.split())}")
    account = account_by_name(name)
    if account is None:
        raise JobError(f"useradd {name} succeeded but the user cannot be found")
    return account, True


async def _lock(account: Account) -> None:
    """Lock the account and make it expired: no new login, cron job or su for it from now on."""
    usermod = require("usermod", "lock the site's system user")
    code, _, err = await capture_command([usermod, "--lock", "--expiredate", "1", account.name])
    if code != 0:
        raise JobError(f"usermod --lock {account.name} failed (exit {code}): {' '.join(err.split())}")


async def _delete_user(name: str) -> str | None:
    """Remove a site's system user; the error text, or None."""
    userdel = which("userdel")
    if userdel is None:
        return "userdel is not installed"
    crontab = which("crontab")
    if crontab is not None:  # userdel leaves the user's crontab behind
        await capture_command([crontab, "-u", name, "-r"])
    code, _, err = await capture_command([userdel, name])
    return None if code == 0 else f"userdel {name} failed (exit {code}): {' '.join(err.split())}"


def _web_gid(ctx: JobContext, account: Account) -> int:
    """The group a new site's folder grants: nginx's workers' (the site's own when not root or
    when that account does not exist)."""
    if not ctx.is_root:
        return account.gid
    workers = account_by_name(ctx.host.nginx.user)
    return workers.gid if workers is not None else account.gid


async def serve(ctx: JobContext, site: Site, out: Output) -> bool:
    """Write the site's server block (and pool) and reload; False, with a note on stderr, when
    the software is missing (the site's files stay ready)."""
    try:
        await apply_site_web(ctx, site)
    except JobError as exc:
        if exc.exit_code != EXIT_MISSING:
            raise
        out.stderr(f"note: {exc}; the site's files are ready but nothing serves them yet")
        return False
    return True


async def _new_slug(ctx: JobContext, domain: str) -> str:
    """The folder name of a new site `domain`, once nothing on the server has it already."""
    slug = slug_of(domain)
    if not SLUG_RE.match(slug):
        raise JobError(f"the domain {domain} is too long for a site folder name (at most 63 characters)")
    sites = await trio.to_thread.run_sync(ctx.sites.sites)
    for other in sites:
        if other.domain == domain:
            raise JobError(f"site {domain} already exists on this server")
        if other.slug == slug:
            raise JobError(f"the folder name {slug} is already used by site {other.domain}")
        aliases = (await trio.to_thread.run_sync(ctx.sites.entry, other.domain) or {}).get("aliases") or []
        if domain in aliases:
            raise JobError(f"{domain} is an alias of site {other.domain}: remove it there first")
    await trio.to_thread.run_sync(_check_free, ctx.home, ctx.site_home(slug))
    return slug


async def _create(args: SiteCreate, ctx: JobContext, out: Output) -> int:
    domain, profile = args.domain, args.profile
    existing = await trio.to_thread.run_sync(ctx.sites.get, domain)
    if existing is not None:
        return await _exists(ctx, existing, profile, out)
    php = await _php_for(ctx, args)
    slug = await _new_slug(ctx, domain)
    entry = {
        "domain": domain,
        "slug": slug,
        "profile": profile,
        "php": php,
        "created_at": rfc3339(time.time()),
    }
    site, served = await _provision(ctx, entry, out, partial(_make_tree_for, ctx, entry))
    out.result(
        {"site": await trio.to_thread.run_sync(lambda: describe(ctx, site, full=True)), "served": served},
        as_json=ctx.as_json,
    )
    return 0


async def _exists(ctx: JobContext, site: Site, profile: str, out: Output) -> int:
    """Creating a site that is there: said on stderr (stdout is the result alone, so the job
    keeps it), its web files written again, exit 0; the same domain with another profile is a
    conflict."""
    if (site.profile or "static") != profile:
        raise JobError(f"site {site.domain} already exists on this server, with the {site.profile or 'static'} profile")
    out.stderr(f"site {site.domain} already exists on this server")
    served = await serve(ctx, site, out)
    described = await trio.to_thread.run_sync(lambda: describe(ctx, site, full=True))
    out.result({"site": described, "served": served}, as_json=ctx.as_json)
    return 0


async def _quietly(step: Awaitable[Any]) -> None:
    """An undo step whose own failure must not hide the error being undone (it is logged)."""
    try:
        await step
    except Exception:
        log.exception("undoing a failed site job")


def _make_tree_for(ctx: JobContext, entry: dict[str, Any], account: Account, _token: CancelToken) -> None:
    profile = entry["profile"]
    web_gid = _web_gid(ctx, account)
    _make_tree(ctx.home, entry["slug"], entry["domain"], profile, account.uid, account.gid, web_gid)


async def _php_for(ctx: JobContext, args: SiteCreate) -> str | None:
    """The PHP version of the new site: the one asked for, installed (else exit 69 before anything
    is made), or the server's default."""
    if args.profile == "static":
        return None
    if args.php is not None:
        return php_paths(ctx, args.php).version
    return await version_for_new_site()


async def _provision(
    ctx: JobContext, entry: dict[str, Any], out: Output, make_tree: Callable[[Account, CancelToken], None]
) -> tuple[Site, bool]:
    """A new site from its registry `entry`: its user, its folder (`make_tree(account, token)`, in a
    thread that a cancellation stops), the entry, its server block and pool. Whatever fails (or a
    cancellation) undoes what was made: no folder, user, entry or web file is left."""
    domain, slug = entry["domain"], entry["slug"]
    account, made_user = await _site_user(ctx, slug, domain)
    made_tree = added = False
    try:
        await in_thread(lambda token: make_tree(account, token))
        made_tree = True
        site = await trio.to_thread.run_sync(ctx.sites.add, {**entry, "user": account.name if ctx.is_root else None})
        added = True
        served = await serve(ctx, site, out)
    except BaseException:
        with trio.CancelScope(shield=True):
            if added:
                await _quietly(remove_site_web(ctx, site))
                await trio.to_thread.run_sync(ctx.sites.remove, domain)
            if made_tree or added:
                await _quietly(_remove_site_files(ctx, slug))
            if made_user:
                await _delete_user(account.name)
        raise
    return site, served


# --- clone -------------------------------------------------------------------------------------

CLONED_FIELDS = (
    "profile",
    "php",
    "docroot",
    "enabled",
    "https_redirect",
    "www_redirect",
    "pool",
    "limits",
    "php_ini",
    "env",
)
"""What a clone takes from its source's entry (not its aliases: those names belong to the source)."""


def _copy_tree(ctx: JobContext, source: str, target: str, account: Account, token: CancelToken) -> list[str]:
    """``<home>/<source>`` copied to ``<home>/<target>`` through the boundary
    (`agent.jobs.toolkit.boundary.copy_tree`: links as links, modes kept; FIFOs, sockets, devices and hard
    links to other users' files left out): what the source's user (and its group) owned is the new
    user's, the rest keeps its owner (a file of root's stays root's). What was left out."""
    with home_jail(ctx) as home, home.subjail(source) as tree:
        top = os.fstat(tree.fileno())
        own_gid = _own_gid(top.st_uid)

        def owner_of(st: os.stat_result) -> tuple[int, int]:
            uid = account.uid if st.st_uid == top.st_uid else st.st_uid
            gid = account.gid if st.st_gid in (top.st_gid, own_gid) else st.st_gid
            return uid, gid

        def finish(folder: int) -> None:
            os.fchown(folder, account.uid, _web_gid(ctx, account))
            os.fchmod(folder, 0o750)

        return copy_tree(tree, home.fileno(), target, owner_of, token, finish=finish)


def _own_gid(uid: int) -> int | None:
    account = account_by_uid(uid)
    return account.gid if account is not None else None


async def _clone(args: SiteClone, ctx: JobContext, out: Output) -> int:
    source = await find_site(ctx, args.domain)
    slug = await _new_slug(ctx, args.target)
    entry = await trio.to_thread.run_sync(ctx.sites.entry, source.domain) or {}
    cloned = {
        "domain": args.target,
        "slug": slug,
        **{name: entry[name] for name in CLONED_FIELDS if name in entry},
        "created_at": rfc3339(time.time()),
        "cloned_from": source.domain,
    }
    skipped: list[str] = []

    def make_tree(account: Account, token: CancelToken) -> None:
        skipped.extend(_copy_tree(ctx, source.slug, slug, account, token))

    site, served = await _provision(ctx, cloned, out, make_tree)
    if skipped:
        shown = ", ".join(skipped[:20]) + (f" and {len(skipped) - 20} more" if len(skipped) > 20 else "")
        out.stderr(f"note: not copied (FIFOs, sockets, devices, hard links to other users' files): {shown}")
    described = await trio.to_thread.run_sync(lambda: describe(ctx, site, full=True))
    out.result({"site": described, "cloned_from": source.domain, "served": served}, as_json=ctx.as_json)
    return 0


# --- delete --------------------------------------------------------------------------------


async def _own_account(ctx: JobContext, site: Site) -> Account | None:
    """The site's own system user, when the agent runs as root and no other site shares it."""
    if not ctx.is_root or not site.user:
        return None
    account = account_by_name(site.user)
    if account is None or not same_path(account.home, ctx.site_home(site.slug)):
        return None
    sites = await trio.to_thread.run_sync(ctx.sites.sites)
    if any(other.user == site.user and other.domain != site.domain for other in sites):
        return None
    return account


AGAIN = "the site stays listed: run site.delete again to finish"


async def _delete(args: SiteDelete, ctx: JobContext, out: Output) -> int:
    site = await find_site(ctx, args.domain)
    try:
        result = await _take_down(ctx, site, keep_files=args.keep_files, out=out)
    except JobError as exc:
        raise JobError(f"{exc}; {AGAIN}", exc.exit_code) from None
    except RpcError as exc:  # the files kept changing while they were removed
        raise JobError(f"{exc.message}; {AGAIN}") from None
    except OSError as exc:  # a file that cannot be removed (read-only, immutable...)
        raise JobError(f"{exc.filename or 'a file'}: {exc.strerror}; {AGAIN}") from None
    out.result(result, as_json=ctx.as_json)
    return 0


async def _take_down(ctx: JobContext, site: Site, *, keep_files: bool, out: Output) -> dict[str, Any]:
    """Each step of a delete, in the order that leaves the site's user no way to stop it; every
    step does nothing when it is done already, and the registry entry goes last."""
    account = await _own_account(ctx, site)
    if account is not None:
        await _lock(account)  # first: nothing of the user's starts again while the rest goes
    cron_removed = await forget_site_in("cron", ctx, site, out)
    daemons_removed = await forget_site_in("daemon", ctx, site, out)
    web_removed = await remove_site_web(ctx, site)  # its pool: PHP-FPM starts no more workers as the user
    if account is not None:
        await stop_user_processes(account)
    certificates_removed = await forget_site_in("ssl", ctx, site, out)
    files_removed = False if keep_files else await _remove_site_files(ctx, site.slug)
    user_removed = None
    if account is not None:
        error = await _delete_user(account.name)
        if error:
            raise JobError(error)
        user_removed = account.name
    await trio.to_thread.run_sync(ctx.sites.remove, site.domain)  # last: a half-done delete is run again
    return {
        "deleted": site.domain,
        "home": ctx.site_home(site.slug),
        "files_removed": files_removed,
        "user_removed": user_removed,
        "cron_entries_removed": cron_removed,
        "daemons_removed": daemons_removed,
        "web_files_removed": web_removed,
        "certificates_removed": certificates_removed,
    }


KINDS = [
    handler("site.list", _list),
    handler("site.inspect", _inspect),
    handler("site.create", _create),
    handler("site.delete", _delete),
    handler("site.clone", _clone),
]
