"""``deploy init|run|git|rollback|list|inspect|prune|key-show``: git releases of a site.

Everything happens in the site's folder and every command runs as the site's user (git, tar,
mkdir, ln, mv, rm, tee, ssh-keygen; never a shell), so a repository's hooks and configuration
can do nothing its own user could not do anyway. The agent itself only reads there, through the
site's jail (a link out of the site is refused). The folder holds::

    deploy/repo.git                 a mirror of the remote (clone mode) or the repository pushed to
    deploy/releases/<name>.json     what each release is (commit, subject, branch, time)
    deploy/pushes.log               one line per push received (the bare repository's hook)
    deploy/id_ed25519[.pub]         the site's deploy key (ssh), made by ``key-show``
    releases/<name>/                the files of each release (``git archive`` of its commit)
    shared/<folder>/                folders kept across releases, linked into each one
    current -> releases/<name>      switched atomically: a new link renamed over the old one

A token (a private https repository) never reaches a process of the site's user: ``init`` and
``git`` record the repository's URL in the site's registry entry (``deploy_remote``), the one URL
the token may go to (never ``origin`` of the repository's config, the site user's to edit), and
with a token the site's git reads it through the agent's one-job URL (`token_url`,
`agent.jobs.toolkit.git_proxy`), which adds the token on its way.

The branch to deploy, the shared folders and the release's public folder are kept in the
repository's own git config (``fleetdeck.branch``, ``fleetdeck.shared``, ``fleetdeck.public``). A
release is named after its UTC time (``20261123-204500``; ``-2``... when two land in the same
second).

The site serves the live release: once a release is switched in, the site's docroot (its registry
entry's ``docroot``, `agent.jobs.toolkit.site_web`) is ``current/<public folder>`` (or ``current``), and
nginx follows the ``current`` link on every request, so the switches after the first one (and a
rollback) need no reload. nginx follows a link below the site's folder only to what the link's
owner owns (``disable_symlinks if_not_owner``): ``current`` leads into the site's own releases, never
out of them. The public folder is read back from the repository's config, which the site's user
could edit, so it is checked again (`docroot_error`) every time it is used.
"""

from __future__ import annotations

import fcntl
import os
import posixpath
import re
import stat
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import orjson
import trio

from agent.files.jail import Jail
from agent.jobs.toolkit.base import JobContext, handler, rfc3339
from agent.jobs.toolkit.boundary import as_user
from agent.jobs.toolkit.common import Account, find_site, site_account
from agent.jobs.toolkit.git_proxy import one_job_url
from agent.jobs.toolkit.needs import Tool
from agent.jobs.toolkit.output import EXIT_MISSING, JobError, Output
from agent.jobs.toolkit.proc import SYSTEM_PATH, all_of, capture_command, require, stream_command, which
from agent.jobs.toolkit.site_web import change_site, docroot_error
from agent.state import open_lock_file
from contract.job_kinds.base import DomainArgs
from contract.job_kinds.deploy import DeployGit, DeployInit, DeployPrune, DeployRelease, DeployRollback, DeployRun
from contract.link.protocol import RpcError

REPO = "deploy/repo.git"
META = "deploy/releases"
PUSHES = "deploy/pushes.log"
KEY = "deploy/id_ed25519"
RELEASES = "releases"
SHARED = "shared"
CURRENT = "current"
RELEASE_RE = re.compile(r"^\d{8}-\d{6}(?:-\d+)?$")
MAX_META_BYTES = 64 * 1024
ALLOWED_PROTOCOLS = "file:https:ssh"  # git refuses ext::, fd::, ... even in submodules or a changed config
TOKEN_PROTOCOLS = "http"  # with a token, git talks to the agent's one-job URL alone (`agent.jobs.toolkit.git_proxy`)
MIRROR_REFSPEC = "+refs/*:refs/*"  # what `git clone --mirror` fetches
REMOTE_FIELD = "deploy_remote"  # in the site's registry entry: the repository URL a token may go to

# The post-receive hook of a push repository: it records each push, nothing more.
POST_RECEIVE = """#!/bin/sh
# fleetdeck: records each push in deploy/pushes.log; `deploy run` deploys it.
while read old new ref; do
  echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) $ref $old $new" >> ../pushes.log
done
"""

# The hooks a release may run, in this order: (name, the file that asks for it, argv).
HOOKS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("composer", "composer.json", ("composer", "install", "--no-dev", "--no-interaction", "--prefer-dist")),
    ("npm", "package-lock.json", ("npm", "ci", "--no-audit", "--no-fund")),
)


@dataclass(frozen=True)
class SiteGit:
    """Where and as whom a site's deploy commands run."""

    ctx: JobContext
    domain: str
    slug: str
    account: Account
    folder: str

    def path(self, rel: str) -> str:
        return os.path.join(self.folder, rel)

    def env(self, protocols: str = ALLOWED_PROTOCOLS) -> dict[str, str]:
        return {
            "PATH": SYSTEM_PATH,
            "HOME": self.folder,
            "USER": self.account.name,
            "LOGNAME": self.account.name,
            "LANG": "C.UTF-8",
            "GIT_ALLOW_PROTOCOL": protocols,
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_SSH_COMMAND": (
                f"ssh -i {self.path(KEY)} -o IdentitiesOnly=yes -o BatchMode=yes"
                f" -o StrictHostKeyChecking=accept-new -o UserKnownHostsFile={self.path('deploy/known_hosts')}"
            ),
        }

    def options(self) -> dict[str, Any]:
        return as_user(self.account)

    async def stream(
        self, out: Output, argv: Sequence[str], *, cwd: str | None = None, protocols: str = ALLOWED_PROTOCOLS
    ) -> None:
        """Run `argv` as the site user, its lines to the job; a JobError when it fails."""
        code = await stream_command(out, argv, cwd=cwd or self.folder, env=self.env(protocols), **self.options())
        if code != 0:
            raise JobError(f"{' '.join(argv[:3])} failed (exit {code})")

    async def capture(self, argv: Sequence[str], *, stdin: bytes = b"", check: bool = True) -> tuple[int, str]:
        """Run `argv` as the site user in its folder: (exit code, stdout)."""
        code, text, err = await capture_command(argv, stdin=stdin, env=self.env(), cwd=self.folder, **self.options())
        if check and code != 0:
            raise JobError(f"{' '.join(argv[:3])} failed (exit {code}): {' '.join(err.split())[-500:]}")
        return code, text

    async def git(self, *args: str, check: bool = True) -> tuple[int, str]:
        return await self.capture([require("git", "deploy from git"), "--git-dir", self.path(REPO), *args], check=check)

    async def config(self, key: str) -> list[str]:
        return (await self.configs(key))[key]

    async def configs(self, *keys: str) -> dict[str, list[str]]:
        """Each of `keys` (lower-case names) with its values in the repository's config, in their
        order ([] when unset), read by one git run: a job spawns as few as it can."""
        pattern = "^(" + "|".join(re.escape(key) for key in keys) + ")$"
        code, text = await self.git("config", "--null", "--get-regexp", pattern, check=False)
        found: dict[str, list[str]] = {key: [] for key in keys}
        for item in text.split("\0") if code == 0 else ():
            key, _, value = item.partition("\n")
            if key in found:
                found[key].append(value)
        return found

    async def write(self, rel: str, data: bytes) -> None:
        await self.capture(["tee", "--", rel], stdin=data)


async def site_git(ctx: JobContext, domain: str) -> SiteGit:
    site = await find_site(ctx, domain)
    folder = ctx.site_home(site.slug)
    if not await trio.to_thread.run_sync(os.path.isdir, folder):
        raise JobError(f"the folder of site {site.domain} is missing: {folder}")
    return SiteGit(ctx, site.domain, site.slug, site_account(ctx, site), folder)


# --- reading the site's deploy folders (as the agent, through the jail) -------------------


class SiteReader:
    """Blocking reads inside one site's jail; symlinks are never followed out of it."""

    def __init__(self, home: str, slug: str) -> None:
        self.home, self.slug = home, slug

    def _jail(self) -> Jail:
        with Jail(self.home) as home:
            return home.subjail(self.slug)

    def exists(self, rel: str) -> bool:
        with self._jail() as jail:
            try:
                jail.lstat(rel)
            except RpcError:
                return False
            return True

    def folder(self, rel: str) -> bool:
        """`rel` is a folder (a link to one inside the site counts)."""
        with self._jail() as jail:
            try:
                os.close(jail.open(rel, os.O_RDONLY | os.O_DIRECTORY, follow_last=True))
            except (RpcError, OSError):
                return False
            return True

    def current(self) -> str | None:
        """The release ``current`` points to, or None."""
        with self._jail() as jail:
            try:
                target = jail.readlink(CURRENT)
            except RpcError:
                return None
        name = posixpath.basename(posixpath.normpath(target))
        return name if RELEASE_RE.match(name) else None

    def releases(self) -> list[str]:
        """The release folders, oldest first."""
        with self._jail() as jail:
            try:
                fd = jail.open(RELEASES, os.O_RDONLY | os.O_DIRECTORY, follow_last=False)
            except RpcError:
                return []
            try:
                names = [
                    name
                    for name in os.listdir(fd)
                    if RELEASE_RE.match(name) and stat.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
                ]
            finally:
                os.close(fd)
        return sorted(names, key=release_order)

    def text(self, rel: str, limit: int = MAX_META_BYTES) -> str | None:
        """A small regular file's text, or None (also for a hard link to another user's file: it
        may be root's, from outside the site)."""
        with self._jail() as jail:
            try:
                fd = jail.open(rel, os.O_RDONLY | os.O_NONBLOCK, follow_last=False)
            except (RpcError, OSError):
                return None
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode) or st.st_size > limit or jail.is_foreign_link(st, rel):
                    return None
                return os.read(fd, limit).decode("utf-8", "replace")
            finally:
                os.close(fd)

    def meta(self, name: str) -> dict[str, Any]:
        text = self.text(f"{META}/{name}.json")
        try:
            data = orjson.loads(text) if text else {}
        except orjson.JSONDecodeError:
            data = {}
        known = ("commit", "subject", "branch", "created_at")
        data = data if isinstance(data, dict) else {}  # always the same keys: None where not recorded
        return {"name": name, **{key: data.get(key) for key in known}}


def release_order(name: str) -> tuple[str, int]:
    """Oldest first: by time, then by the number a second release of the same second got."""
    extra = name[16:]
    return name[:15], int(extra) if extra.isdigit() else 1


def release_name(taken: Sequence[str], now: float | None = None) -> str:
    base = time.strftime("%Y%m%d-%H%M%S", time.gmtime(time.time() if now is None else now))
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}-{n}"
    return name


async def read(work: SiteGit, method: str, *args: Any) -> Any:
    reader = SiteReader(work.ctx.home, work.slug)
    return await trio.to_thread.run_sync(lambda: getattr(reader, method)(*args))


class SiteLock:
    """One deploy change at a time per site (a second one fails at once rather than waiting)."""

    def __init__(self, ctx: JobContext, work: SiteGit) -> None:
        self.path = os.path.join(ctx.state_dir, f"deploy-{work.slug}.lock")
        self.domain = work.domain

    def __enter__(self) -> None:
        self.file = open_lock_file(self.path)
        try:
            fcntl.flock(self.file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.file.close()
            raise JobError(f"another deploy change of {self.domain} is running") from None

    def __exit__(self, *exc: object) -> None:
        self.file.close()


# --- init ----------------------------------------------------------------------------------


async def initialise(work: SiteGit, args: DeployInit | DeployGit, out: Output) -> dict[str, Any]:
    """Make (or bring up to date) the site's repository and settings; what they are now."""
    git = require("git", "deploy from git")
    repo = getattr(args, "repo", None)
    token = args.token.get_secret_value() if args.token else None
    public = public_folder(args.public)
    existed = await read(work, "exists", REPO)
    await work.capture(["mkdir", "-p", "--", META, RELEASES, SHARED])
    if not existed:
        await record_remote(work, repo)
        if repo:
            out.stdout(f"cloning {repo} into {REPO}")
            await clone(work, repo, token, out)
        else:
            await work.capture([git, "init", "--bare", "--quiet", "--", REPO])
            await work.write(f"{REPO}/hooks/post-receive", POST_RECEIVE.encode())
            await work.capture(["chmod", "0755", "--", f"{REPO}/hooks/post-receive"])
            out.stdout(f"made the repository {work.path(REPO)} to push to (its pushes go to {PUSHES})")
    else:
        origin = await work.config("remote.origin.url")
        if repo and origin != [repo]:
            if not origin:
                raise JobError(f"the deploy of {work.domain} receives pushes; it cannot switch to {repo}")
            await work.git("remote", "set-url", "origin", repo)
            out.stdout(f"the repository now follows {repo}")
        if repo:
            await record_remote(work, repo)
        out.stdout(f"the deploy of {work.domain} was already initialised; its settings are updated")
    await work.git("config", "fleetdeck.branch", args.branch)
    shared = list(getattr(args, "shared", None) or [])
    if isinstance(args, DeployInit) or not existed:
        await work.git("config", "--unset-all", "fleetdeck.shared", check=False)
        for folder in shared:
            await work.git("config", "--add", "fleetdeck.shared", folder)
    shared = await work.config("fleetdeck.shared")
    for folder in shared:
        await work.capture(["mkdir", "-p", "--", f"{SHARED}/{folder}"])
    if isinstance(args, DeployInit) or not existed:
        await work.git("config", "fleetdeck.public", public)
    public = await public_of(work)
    origin = await work.config("remote.origin.url")
    return {
        "domain": work.domain,
        "mode": "clone" if origin else "push",
        "repo": origin[0] if origin else None,
        "push_url": None if origin else f"file://{work.path(REPO)}",
        "branch": args.branch,
        "shared": shared,
        "public": public,
        "created": not existed,
    }


async def clone(work: SiteGit, repo: str, token: str | None, out: Output) -> None:
    """`repo` mirrored into the site's repository, by the site's git; with a token, through the
    agent's one-job URL (`token_url`), then origin is set to `repo` itself."""
    git = require("git", "deploy from git")
    if token is None:
        await work.stream(out, [git, "clone", "--mirror", "--quiet", "--", repo, REPO])
        return
    async with token_url(work, token, out) as url:
        await work.stream(out, [git, "clone", "--mirror", "--quiet", "--", url, REPO], protocols=TOKEN_PROTOCOLS)
    await work.git("remote", "set-url", "origin", repo)


async def record_remote(work: SiteGit, repo: str | None) -> None:
    """Keep `repo` in the site's registry entry (root's, in the agent's state) as the one URL a
    token of this deploy goes to: never the repository's own config, which the site's user edits.
    None: the deploy receives pushes, and no token goes anywhere."""

    def change(entry: dict[str, Any]) -> None:
        if repo is None:
            entry.pop(REMOTE_FIELD, None)
        else:
            entry[REMOTE_FIELD] = repo

    await trio.to_thread.run_sync(work.ctx.sites.update, work.domain, change)


@asynccontextmanager
async def token_url(work: SiteGit, token: str, out: Output) -> AsyncIterator[str]:
    """The URL through which the site's git reads the recorded repository with `token`, valid
    inside the block only; the token stays in the agent (`agent.jobs.toolkit.git_proxy`).

    Raises:
        JobError: no repository is recorded, or it is no https one (exit 2).
    """
    entry = await trio.to_thread.run_sync(work.ctx.sites.entry, work.domain)
    remote = (entry or {}).get(REMOTE_FIELD)
    if not isinstance(remote, str):
        raise JobError(
            f"the deploy of {work.domain} has no repository recorded for a token:"
            " run deploy.init with its https repo first",
            exit_code=2,
        )
    uid = work.account.uid if work.ctx.is_root else os.geteuid()  # whose git runs
    async with one_job_url(remote, token, uid=uid, ca_bundle=work.ctx.host.git.ca_bundle, out=out) as url:
        yield url


def public_folder(public: str) -> str:
    """`public` once it is fit to be served (`current/<public>` a docroot), else a JobError."""
    error = docroot_error(posixpath.join(CURRENT, public)) if public else None
    if error is not None:
        raise JobError(f"the public folder {error}")
    return public


async def public_of(work: SiteGit) -> str:
    """The release's folder the site serves, as the repository's config says ("": the release)."""
    return public_folder(next(iter(await work.config("fleetdeck.public")), ""))


async def _init(args: DeployInit, ctx: JobContext, out: Output) -> int:
    work = await site_git(ctx, args.domain)
    with SiteLock(ctx, work):
        out.result(await initialise(work, args, out), as_json=ctx.as_json)
    return 0


# --- run -----------------------------------------------------------------------------------


async def deploy(work: SiteGit, branch: str | None, token: str | None, out: Output) -> dict[str, Any]:
    """Fetch, unpack the branch's newest commit into a new release, link the shared folders, run
    the hooks, then switch ``current`` to it; a failure before the switch removes the release."""
    git = require("git", "deploy from git")
    if not await read(work, "exists", REPO):
        raise JobError(f"site {work.domain} has no deploy yet: run deploy init first")
    config = await work.configs("fleetdeck.branch", "fleetdeck.public", "fleetdeck.shared", "remote.origin.url")
    branch = branch or next(iter(config["fleetdeck.branch"]), "main")
    public = public_folder(next(iter(config["fleetdeck.public"]), ""))
    if token is not None:
        out.stdout("fetching the recorded repository with the token")
        async with token_url(work, token, out) as url:
            fetch = [git, "--git-dir", work.path(REPO), "fetch", "--prune", "--quiet", url, MIRROR_REFSPEC]
            await work.stream(out, fetch, protocols=TOKEN_PROTOCOLS)
    elif config["remote.origin.url"]:
        out.stdout("fetching origin")
        await work.stream(out, [git, "--git-dir", work.path(REPO), "fetch", "--prune", "--quiet", "origin"])
    code, found = await work.git("log", "-1", "--format=%H%n%s", f"refs/heads/{branch}", "--", check=False)
    if code != 0:
        raise JobError(f"the repository of {work.domain} has no branch {branch}")
    commit, _, subject = found.partition("\n")
    previous = await read(work, "current")
    name = release_name(await read(work, "releases"))
    folder = f"{RELEASES}/{name}"
    out.stdout(f"release {name}: {branch} at {commit[:12]} ({subject.strip()})")
    await work.capture(["mkdir", "--", folder])
    try:
        await unpack(work, commit, folder, out)
        for shared in config["fleetdeck.shared"]:
            await link_shared(work, folder, shared)
        hooks = await run_hooks(work, folder, out)
        await need_public(work, name, public)
        meta = {"commit": commit, "subject": subject.strip(), "branch": branch, "created_at": rfc3339(time.time())}
        await work.write(f"{META}/{name}.json", orjson.dumps(meta) + b"\n")
        await switch_and_serve(work, name, previous, public, out)
    except BaseException:
        with trio.CancelScope(shield=True):
            await work.capture(["rm", "-rf", "--", folder, f"{META}/{name}.json"], check=False)
        raise
    out.stdout(f"current -> {folder}")
    return {"domain": work.domain, "release": name, **meta, "previous": previous, "hooks": hooks}


async def unpack(work: SiteGit, commit: str, folder: str, out: Output) -> None:
    """The tree of `commit` into the release `folder`: ``git archive`` piped into ``tar -x``, both
    as the site user (no archive on disk, and one process fewer than writing one and removing it)."""
    git = require("git", "deploy from git")
    read_end, write_end = os.pipe()
    codes: dict[str, int] = {}
    options = {"cwd": work.folder, "env": work.env(), **work.options()}

    async def archive() -> None:
        try:
            argv = [git, "--git-dir", work.path(REPO), "archive", "--format=tar", commit]
            codes["git archive"] = await stream_command(out, argv, stdout=write_end, **options)
        finally:
            os.close(write_end)  # tar meets the end of the archive once git's copy is closed too

    async def extract() -> None:
        try:
            argv = ["tar", "-x", "-f", "-", "-C", folder]
            codes["tar -x"] = await stream_command(out, argv, stdin=read_end, **options)
        finally:
            os.close(read_end)  # a tar that stopped early: git meets a broken pipe, never a full one

    await all_of(archive, extract)
    for step, code in codes.items():
        if code != 0:
            raise JobError(f"{step} of {commit[:12]} failed (exit {code})")


async def link_shared(work: SiteGit, release: str, shared: str) -> None:
    """``<release>/<shared>`` becomes a relative link to ``shared/<shared>`` (what the repository
    had there is removed: the shared folder wins)."""
    target = f"{release}/{shared}"
    await work.capture(["mkdir", "-p", "--", f"{SHARED}/{shared}", posixpath.dirname(target)])
    await work.capture(["rm", "-rf", "--", target])
    relative = posixpath.relpath(f"{SHARED}/{shared}", posixpath.dirname(target))
    await work.capture(["ln", "-s", "--", relative, target])


async def run_hooks(work: SiteGit, release: str, out: Output) -> list[dict[str, Any]]:
    """The fixed hooks the release asks for (by its files), each only when its tool is installed."""
    ran: list[dict[str, Any]] = []
    for name, manifest, argv in HOOKS:
        if not await read(work, "exists", f"{release}/{manifest}"):
            continue
        tool = which(argv[0])
        if tool is None:
            out.stderr(f"note: {manifest} is there but {argv[0]} is not installed: {name} skipped")
            ran.append({"hook": name, "ran": False})
            continue
        out.stdout(f"hook {name}: {' '.join(argv)}")
        await work.stream(out, [tool, *argv[1:]], cwd=work.path(release))
        ran.append({"hook": name, "ran": True})
    return ran


async def switch(work: SiteGit, name: str) -> None:
    """Point ``current`` at the release `name`: a new link, renamed over the old one (rename(2)
    is atomic, so a request sees the old release or the new one, never none)."""
    if await read(work, "exists", CURRENT) and await read(work, "current") is None:
        raise JobError(f"{work.path(CURRENT)} is not a link to a release: move it away first")
    temporary = f".current-{name}"
    await work.capture(["ln", "-sfn", "--", f"{RELEASES}/{name}", temporary])
    await work.capture(["mv", "-T", "--", temporary, CURRENT])


async def need_public(work: SiteGit, name: str, public: str) -> None:
    """The release `name` has the public folder the site would serve (else nginx answers 404)."""
    if public and not await read(work, "folder", f"{RELEASES}/{name}/{public}"):
        raise JobError(f"release {name} has no folder {public} to serve (the deploy's public folder)")


async def switch_and_serve(work: SiteGit, name: str, previous: str | None, public: str, out: Output) -> None:
    """Switch ``current`` to the release `name` and make the site serve it; when the server block
    cannot follow (nginx refused it), ``current`` goes back to `previous` (or away)."""
    await switch(work, name)
    try:
        await serve_current(work, public, out)
    except BaseException:
        with trio.CancelScope(shield=True):
            if previous is not None:
                await switch(work, previous)
            else:
                await work.capture(["rm", "-f", "--", CURRENT], check=False)
        raise


async def serve_current(work: SiteGit, public: str, out: Output) -> None:
    """The site's docroot becomes ``current[/public]`` (a change of its server block, once: later
    switches of the link need no reload). Without nginx the setting is kept for when it comes."""
    docroot = posixpath.join(CURRENT, public) if public else CURRENT
    entry = await trio.to_thread.run_sync(work.ctx.sites.entry, work.domain)
    if entry is None or entry.get("docroot") == docroot:
        return
    site = await find_site(work.ctx, work.domain)
    try:
        await change_site(work.ctx, site, lambda e: e.update(docroot=docroot))
    except JobError as exc:
        if exc.exit_code != EXIT_MISSING:
            raise
        await trio.to_thread.run_sync(work.ctx.sites.update, work.domain, lambda e: e.update(docroot=docroot))
        out.stderr(f"note: {exc}; the site will serve {docroot} once nginx does")
        return
    out.stdout(f"the site now serves {work.path(docroot)}")


async def _run(args: DeployRun, ctx: JobContext, out: Output) -> int:
    work = await site_git(ctx, args.domain)
    with SiteLock(ctx, work):
        result = await deploy(work, args.branch, args.token.get_secret_value() if args.token else None, out)
    out.result(result, as_json=ctx.as_json)
    return 0


async def _git(args: DeployGit, ctx: JobContext, out: Output) -> int:
    """Initialise (or re-point) the site's deploy at `repo`, then deploy the branch."""
    if args.path:
        raise JobError("a deploy goes into the site's releases/ and current/ folders; path must be empty")
    work = await site_git(ctx, args.domain)
    with SiteLock(ctx, work):
        await initialise(work, args, out)
        result = await deploy(work, args.branch, args.token.get_secret_value() if args.token else None, out)
    out.result(result, as_json=ctx.as_json)
    return 0


# --- rollback, list, inspect, prune --------------------------------------------------------


async def _rollback(args: DeployRollback, ctx: JobContext, out: Output) -> int:
    work = await site_git(ctx, args.domain)
    with SiteLock(ctx, work):
        releases, current = await read(work, "releases"), await read(work, "current")
        if args.release is not None:
            if args.release not in releases:
                raise JobError(f"site {work.domain} has no release {args.release}")
            target = args.release
        else:
            older = releases[: releases.index(current)] if current in releases else []
            if not older:
                raise JobError(f"site {work.domain} has no release before {current or 'the current one'}")
            target = older[-1]
        public = await public_of(work)
        await need_public(work, target, public)
        await switch_and_serve(work, target, current, public, out)
    out.result({"domain": work.domain, "release": target, "previous": current}, as_json=ctx.as_json)
    return 0


async def listing(work: SiteGit) -> dict[str, Any]:
    def work_() -> dict[str, Any]:
        reader = SiteReader(work.ctx.home, work.slug)
        current = reader.current()
        releases = [{**reader.meta(name), "current": name == current} for name in reversed(reader.releases())]
        return {"domain": work.domain, "current": current, "releases": releases}

    return await trio.to_thread.run_sync(work_)


async def _list(args: DomainArgs, ctx: JobContext, out: Output) -> int:
    work = await site_git(ctx, args.domain)
    out.result(await listing(work), as_json=ctx.as_json)
    return 0


async def _inspect(args: DeployRelease, ctx: JobContext, out: Output) -> int:
    work = await site_git(ctx, args.domain)
    found = [r for r in (await listing(work))["releases"] if r["name"] == args.release]
    if not found:
        raise JobError(f"site {work.domain} has no release {args.release}")
    out.result(
        {"domain": work.domain, "path": work.path(f"{RELEASES}/{args.release}"), **found[0]}, as_json=ctx.as_json
    )
    return 0


async def _prune(args: DeployPrune, ctx: JobContext, out: Output) -> int:
    work = await site_git(ctx, args.domain)
    with SiteLock(ctx, work):
        releases, current = await read(work, "releases"), await read(work, "current")
        doomed = [name for name in releases[: max(0, len(releases) - args.keep)] if name != current]
        for name in doomed:
            await work.capture(["rm", "-rf", "--", f"{RELEASES}/{name}", f"{META}/{name}.json"])
    out.result(
        {"domain": work.domain, "deleted": doomed, "kept": [r for r in releases if r not in doomed]},
        as_json=ctx.as_json,
    )
    return 0


# --- the deploy key ------------------------------------------------------------------------


async def _key_show(args: DomainArgs, ctx: JobContext, out: Output) -> int:
    """The site's ssh deploy key (made on first use, as the site user, without a passphrase:
    git uses it unattended); only the public half is shown."""
    work = await site_git(ctx, args.domain)
    keygen = require("ssh-keygen", "make the site's deploy key")
    made = False
    if not await read(work, "exists", f"{KEY}.pub"):
        await work.capture(["mkdir", "-p", "--", "deploy"])
        await work.capture([keygen, "-q", "-t", "ed25519", "-N", "", "-C", f"deploy@{work.domain}", "-f", KEY])
        made = True
    public = await read(work, "text", f"{KEY}.pub")
    if public is None:
        raise JobError(f"{work.path(KEY)}.pub is not a readable key file")
    _, fingerprint = await work.capture([keygen, "-l", "-f", f"{KEY}.pub"])
    result = {
        "domain": work.domain,
        "public_key": public.strip(),
        "fingerprint": fingerprint.split()[1] if len(fingerprint.split()) > 1 else None,
        "created": made,
    }
    out.result(result, as_json=ctx.as_json)
    return 0


GIT = (Tool("git"),)  # the kinds that fetch or check out the site's code

KINDS = [
    handler("deploy.init", _init, needs=GIT),
    handler("deploy.run", _run, needs=GIT),
    handler("deploy.git", _git, needs=GIT),
    handler("deploy.rollback", _rollback, needs=GIT),
    handler("deploy.list", _list),
    handler("deploy.inspect", _inspect),
    handler("deploy.prune", _prune),
    handler("deploy.key-show", _key_show),
]
