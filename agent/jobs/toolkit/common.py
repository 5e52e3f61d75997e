"""Sites as the job handlers see them: the registry entry and the system account that runs it."""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass

import trio

from agent.jobs.toolkit.base import JobContext
from agent.jobs.toolkit.output import JobError
from agent.sites import Site


@dataclass(frozen=True)
class Account:
    name: str
    uid: int
    gid: int
    home: str


async def find_site(ctx: JobContext, domain: str) -> Site:
    """The site `domain` of this server's registry.

    Why: every handler that acts on a site starts here, so "no such site" reads the same everywhere.

    Args:
        ctx: the job's context (its site registry).
        domain: the site's domain, as the catalog validated it.

    Raises:
        JobError: no site of that domain on this server.
    """
    site = await trio.to_thread.run_sync(ctx.sites.get, domain)
    if site is None:
        raise JobError(f"no site {domain} on this server")
    return site


def account_by_name(name: str) -> Account | None:
    """The system account `name` (passwd), or None when there is none."""
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        return None
    return Account(pw.pw_name, pw.pw_uid, pw.pw_gid, pw.pw_dir)


def account_by_uid(uid: int) -> Account | None:
    """The system account of `uid` (passwd), or None when there is none."""
    try:
        pw = pwd.getpwuid(uid)
    except KeyError:
        return None
    return Account(pw.pw_name, pw.pw_uid, pw.pw_gid, pw.pw_dir)


def current_account() -> Account:
    """The account the agent runs as (from passwd, else its uid, gid and $HOME)."""
    uid = os.geteuid()
    return account_by_uid(uid) or Account(str(uid), uid, os.getegid(), os.environ.get("HOME", "/"))


def user_name_of(uid: int) -> str:
    """The user name of `uid` now (not cached: site users come and go)."""
    account = account_by_uid(uid)
    return account.name if account is not None else str(uid)


def site_account(ctx: JobContext, site: Site) -> Account:
    """The account a site's commands run as: its own system user when the agent runs as root
    (the registry's ``user``, else the owner of its folder, never root), else the agent's own.

    Why: whatever runs for a site runs as its user, so the kernel grants it what it grants the user
    and nothing of root's.

    Args:
        ctx: the job's context.
        site: the site.

    Raises:
        JobError: the site's folder is missing and it has no system user, or its user is root.
    """
    if not ctx.is_root:
        return current_account()
    account = account_by_name(site.user) if site.user else None
    if account is None:
        try:
            owner = os.stat(ctx.site_home(site.slug)).st_uid
        except OSError:
            raise JobError(f"the folder of site {site.domain} is missing and it has no system user") from None
        account = account_by_uid(owner) or Account(str(owner), owner, owner, ctx.site_home(site.slug))
    if account.uid == 0:
        raise JobError(f"site {site.domain} has no system user of its own: its commands will not run as root")
    return account
