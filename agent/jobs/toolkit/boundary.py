"""The agent's privilege boundary: the one way a job handler reaches a tree a less privileged user
can write (a site's folder; a user's home).

The agent runs as root, and such a tree is its user's: any folder in it may become a symbolic link
(or be exchanged with one, ``renameat2(RENAME_EXCHANGE)``) between the moment root looks at a path
and the moment it uses it, and the kernel follows that link, as root, wherever it leads. So root
code never opens, copies, moves, chmods, lists or deletes a path inside such a tree by its name. It
goes through descriptors held beneath the tree's root (`agent.files.jail`: ``openat2`` with
``RESOLVE_BENEATH``, or an ``O_NOFOLLOW`` walk; `agent.files.fdops`: ``*at`` calls on
``(folder descriptor, name)``), or it runs a child that *is* the user (its uid, its gid, its own
groups only), which the kernel checks like any of the user's processes. The tree's root itself
(the site's folder, an entry of the root-owned home) is an anchor that may be named.

One helper per operation (docs/security.md lists them with their tests):

- read a file: `agent.jobs.toolkit.site_files.open_site_input`; write one: `agent.jobs.toolkit.site_files.SiteOutput`;
- list or measure a tree: `site_jail` and `agent.files.fdops.walk`;
- copy a tree: `copy_tree` (``site.clone``);
- move a file out of a tree into root's: `move_out` (``security.scan`` quarantine);
- remove a tree: `remove_tree` (``site.delete``, a failed ``site.create`` or ``site.clone``);
- run a command as the tree's user: `as_user` (the options of `stream_command` and
  `capture_command`), and `stop_user_processes` (every process of a user, for good).

``tests/test_boundary_rule.py`` reads every module of ``agent/jobs`` and fails when a handler calls
one of the path-taking functions (``shutil.*``, ``open``, ``os.rename``, ``os.chmod``...) on a
path built from a home.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Callable
from typing import Any, TypeVar

import trio

from agent.files.fdops import (
    O_NEW_FILE,
    O_READ_FILE,
    CancelToken,
    OperationCancelled,
    copy_data,
    fsync_dir,
    identity,
    lstat_at,
    open_dir_at,
    remove_entry,
    rename_noreplace,
    temp_name,
)
from agent.files.jail import Jail, split_path
from agent.files.transfer import Copier
from agent.jobs.toolkit.base import JobContext
from agent.jobs.toolkit.common import Account
from agent.jobs.toolkit.output import JobError
from agent.jobs.toolkit.proc import capture_command, require

T = TypeVar("T")

OwnerMap = Callable[[os.stat_result], tuple[int, int]]
_O_PATH_DIR = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
STOP_WAIT_S = 15.0  # how long `stop_user_processes` keeps killing before it gives up
QUIET_S = 0.5  # how long no process of the user may be seen before they count as stopped
_POLL_S = 0.05


# --- the trees ------------------------------------------------------------------------------------


def home_jail(ctx: JobContext) -> Jail:
    """The jail of the agent's home (where the sites' folders are)."""
    return Jail(ctx.home)


def site_jail(ctx: JobContext, slug: str) -> Jail:
    """The jail of a site's folder, resolved in the home's jail. Blocking; the caller closes it.

    Why: a site folder that is a link cannot lead out of the home (`scope_jail`).

    Args:
        ctx: the job's context (its home).
        slug: the site's folder name.

    Raises:
        RpcError: the site's folder is missing (``not_found``) or leads out of the home.
    """
    return scope_jail(ctx.home, slug)


async def in_thread(work: Callable[[CancelToken], T]) -> T:
    """`work(token)` in a worker thread; a cancellation of the job sets `token`, which `work`
    checks between files (``OperationCancelled``): it stops promptly, its cleanup runs, and the
    cancellation goes on once the thread is done."""
    token = CancelToken()
    outcome: list[T] = []
    failure: list[BaseException] = []

    async def watch(scope: trio.CancelScope) -> None:
        with scope:
            try:
                await trio.sleep_forever()
            finally:
                token.cancel()

    watcher = trio.CancelScope()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch, watcher)
        try:
            outcome.append(await trio.to_thread.run_sync(work, token, abandon_on_cancel=False))
        except Exception as exc:
            failure.append(exc)
        watcher.cancel()
    if failure:
        if isinstance(failure[0], OperationCancelled):
            await trio.lowlevel.checkpoint()  # raises Cancelled: only a cancellation sets the token
            raise JobError("cancelled")
        raise failure[0]
    return outcome[0]


# --- copy a tree ----------------------------------------------------------------------------------


def copy_tree(
    source: Jail,
    parent: int,
    name: str,
    owner_of: OwnerMap,
    token: CancelToken,
    *,
    finish: Callable[[int], None] | None = None,
) -> list[str]:
    """Copy the whole tree of `source` into a new folder `name` of the folder `parent` (a
    descriptor); what was left out (paths relative to the tree).

    The copy is `agent.files.transfer.Copier`'s (the file workspace's): through descriptors, links
    copied as links and never followed, FIFOs, sockets and devices skipped, and a file with several
    hard links skipped unless it is the tree user's (it may be a link to a file outside the tree).
    Each copy is given ``owner_of(source's lstat)``. The tree is built under a temporary name (a
    folder of mode 0700, root's until the end), given to ``finish(its descriptor)`` (its own owner
    and mode), and renamed to `name` once complete; a failure or a cancellation removes it, so
    nothing half made is left. `name` already taken is a JobError.

    Raises:
        JobError: `name` is taken, or the source is not a folder.
        OperationCancelled: `token` was set.
    """
    copier = Copier(token, None, True, source=source, owner_of=owner_of)
    temp = temp_name(name)
    try:
        copier.copy(source.fileno(), ".", parent, temp, "", top=True)
        if finish is not None:
            folder = open_dir_at(parent, temp)
            try:
                finish(folder)
            finally:
                os.close(folder)
        try:
            rename_noreplace(parent, temp, parent, name)
        except FileExistsError:
            raise JobError(f"{name} already exists: move it away or choose another name") from None
    except BaseException:
        remove_entry(parent, temp, _never_cancelled())
        raise
    fsync_dir(parent)
    return copier.skipped


def _never_cancelled() -> CancelToken:
    return CancelToken()


# --- move a file out ------------------------------------------------------------------------------


def open_folder_beneath(jail: Jail, parts: tuple[str, ...]) -> int:
    """A readable descriptor of the folder `parts` beneath the jail's root, reached one component
    at a time with ``O_NOFOLLOW``: a link anywhere on the way (even one leading inside) is refused
    with OSError ELOOP or ENOTDIR. For a path an earlier walk found without following links: a
    link there now means the tree changed since."""
    fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=jail.fileno())
    try:
        for part in parts:
            sub = open_dir_at(fd, part)
            os.close(fd)
            fd = sub
    except BaseException:
        os.close(fd)
        raise
    return fd


def make_folders(parent: int, parts: tuple[str, ...], mode: int = 0o700) -> int:
    """A readable descriptor of the folder `parts` beneath the descriptor `parent` (a tree of
    root's own), each missing folder made with `mode`, none entered through a link."""
    fd = os.dup(parent)
    try:
        for part in parts:
            try:
                os.mkdir(part, mode, dir_fd=fd)
            except FileExistsError:
                pass
            sub = open_dir_at(fd, part)
            os.close(fd)
            fd = sub
    except BaseException:
        os.close(fd)
        raise
    return fd


def move_out(jail: Jail, path: str, into: int, name: str) -> os.stat_result | None:
    """Move the regular file `path` of the jail's tree to `name` in the folder `into` (a descriptor
    of root's own tree, e.g. the quarantine), then make it root's, mode 0600: the lstat of the
    file as it was, or None when it is not moved.

    The file's folder is opened beneath the jail with no link followed (`open_folder_beneath`); the
    entry must be a regular file, and not a hard link to another user's file; it is renamed from
    that folder's descriptor (across file systems: copied through descriptors, then unlinked), and
    what arrived must be that very file (device and inode), else it goes back. Not moved (None):
    the path is gone, a link or anything but a regular file, a foreign hard link, or the tree
    changed on the way (a folder swapped for a link).

    Raises:
        RpcError: the path is not a plain relative path.
    """
    parts = split_path(path)
    if not parts:
        return None
    try:
        folder = open_folder_beneath(jail, parts[:-1])
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
            return None
        raise
    try:
        return _move_entry(jail, folder, parts[-1], into, name, "/".join(parts))
    finally:
        os.close(folder)


def _move_entry(jail: Jail, folder: int, entry: str, into: int, name: str, rel: str) -> os.stat_result | None:
    before = lstat_at(folder, entry)
    if before is None or not stat.S_ISREG(before.st_mode) or jail.is_foreign_link(before, rel):
        return None
    try:
        rename_noreplace(folder, entry, into, name)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        return before if _copy_out(folder, entry, before, into, name) else None
    arrived = lstat_at(into, name)
    if arrived is None or identity(arrived) != identity(before) or arrived.st_nlink != before.st_nlink:
        # swapped between the look and the rename: what came is not what was checked; it goes back
        if arrived is not None:
            try:
                rename_noreplace(into, name, folder, entry)
            except OSError:
                remove_entry(into, name, _never_cancelled())
        return None
    _make_private(into, name)
    return before


def _copy_out(folder: int, entry: str, before: os.stat_result, into: int, name: str) -> bool:
    """The file copied into root's folder through descriptors, then unlinked from the tree
    (only while the name still holds that very file)."""
    source = os.open(entry, O_READ_FILE, dir_fd=folder)
    try:
        if identity(os.fstat(source)) != identity(before):
            return False
        target = os.open(name, O_NEW_FILE, 0o600, dir_fd=into)
        try:
            copy_data(source, target, _never_cancelled())
            os.fsync(target)
        finally:
            os.close(target)
    finally:
        os.close(source)
    now = lstat_at(folder, entry)
    if now is not None and identity(now) == identity(before):
        os.unlink(entry, dir_fd=folder)
    _make_private(into, name)
    return True


def _make_private(into: int, name: str) -> None:
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=into)
    try:
        os.fchown(fd, 0, 0)
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


# --- remove a tree --------------------------------------------------------------------------------


def remove_tree(parent: int, name: str, token: CancelToken) -> bool:
    """Remove `name` of the folder `parent` (a descriptor) and all it holds, through descriptors
    (`agent.files.fdops.remove_entry`): a link is removed, never followed, and a folder exchanged
    with a link meanwhile is looked at again. Whether there was anything to remove.

    Raises:
        RpcError: ``conflict`` when the tree kept changing (16 times at one entry).
        OperationCancelled: `token` was set.
    """
    if lstat_at(parent, name) is None:
        return False
    remove_entry(parent, name, token)
    return True


def remove_site_tree(ctx: JobContext, slug: str, token: CancelToken) -> bool:
    """`remove_tree` of a site's folder in the home (blocking)."""
    with home_jail(ctx) as home:
        return remove_tree(home.fileno(), slug, token)


def remove_root_folder(folder: str, name: str, token: CancelToken) -> bool:
    """`remove_tree` of `name` in a folder of root's own (such as the sites' log folder)."""
    try:
        parent = os.open(folder, _O_PATH_DIR)
    except FileNotFoundError:
        return False
    try:
        return remove_tree(parent, name, token)
    finally:
        os.close(parent)


# --- run as the user ------------------------------------------------------------------------------


def as_user(account: Account) -> dict[str, Any]:
    """The options of `stream_command` / `capture_command` that run the child as `account`: its
    uid, its gid and its own supplementary groups only (never root's). Empty when the agent is not
    root (the child is the agent's own account then, as every site is).

    Why: a tool that reads or writes a site user's tree runs as that user, so the kernel grants the
    child what it grants the user.

    Args:
        account: the site's account (`site_account`).
    """
    if os.geteuid() != 0:
        return {}
    try:
        groups = [gid for gid in os.getgrouplist(account.name, account.gid) if gid != account.gid]
    except OSError:
        groups = []
    return {"user": account.uid, "group": account.gid, "extra_groups": groups}


def processes_of(uid: int) -> tuple[list[int], list[int]]:
    """(live processes, zombies) whose real uid is `uid` (from /proc)."""
    live: list[int] = []
    zombies: list[int] = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(os.path.join(entry.path, "status"), "rb") as f:
                fields = dict(line.split(b":", 1) for line in f.read().splitlines() if b":" in line)
        except OSError:
            continue
        uids = fields.get(b"Uid", b"").split()
        if uids and int(uids[0]) == uid:
            state = fields.get(b"State", b"").split()
            (zombies if state and state[0] in (b"Z", b"X") else live).append(int(entry.name))
    return live, zombies


async def stop_user_processes(account: Account) -> None:
    """Stop every process of `account` for good: ``kill -KILL -1`` run as the user, which the
    kernel delivers to all of the user's processes at once (a process forking meanwhile cannot
    escape it), again until none has been seen alive for `QUIET_S` (a killed one may stay a
    zombie until its parent reaps it: it holds no file, and userdel does not count it). Run it
    once the account is locked and whatever of root's starts processes as the user (cron, a pool)
    is gone, so nothing starts new ones.

    Raises:
        JobError: processes are still alive after `STOP_WAIT_S` (something of root's keeps
            starting them).
    """
    kill = require("kill", "stop the site user's processes")
    deadline = time.monotonic() + STOP_WAIT_S
    quiet_since: float | None = None
    while True:
        live, _ = await trio.to_thread.run_sync(processes_of, account.uid)
        now = time.monotonic()
        if not live:
            quiet_since = quiet_since or now
            if now - quiet_since >= QUIET_S:
                return
        else:
            quiet_since = None
            if now > deadline:
                raise JobError(f"{len(live)} process(es) of {account.name} are still running (pids {live[:10]})")
            await capture_command([kill, "-KILL", "--", "-1"], **as_user(account))
        await trio.sleep(_POLL_S)


def scope_jail(home: str, site: str | None) -> Jail:
    """The jail of the home, or of the site folder `site` in it. Blocking; the caller closes it.

    Why: a site scope is resolved in the home's jail, as the file workspace resolves one, so a site
    folder that is a symlink cannot lead out.

    Args:
        home: the home (``/home`` or the agent's).
        site: a site's folder name (a slug), or None for the home itself.

    Raises:
        RpcError: the site's folder is missing (``not_found``) or leads out of the home.
    """
    home_jail = Jail(home)
    if site is None:
        return home_jail
    with home_jail:
        return home_jail.subjail(site)
