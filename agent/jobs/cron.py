r"""``cron list|add|edit|pause|resume|delete|run``: scheduled commands of the sites.

The agent's own record is ``<state_dir>/cron.json`` (``{"entries": [{id, domain, schedule,
command, paused, created_at}]}``, rewritten atomically under a lock). As root, the active entries
of each site user are installed into that user's crontab with ``crontab -u <user> -``, inside a
block marked ``# BEGIN fleetdeck-agent`` / ``# END fleetdeck-agent``: lines the user keeps
outside the block are left alone. The block is always rebuilt from the record, so installing is
idempotent and a lost update heals at the next change. Without root or without ``crontab``,
every change fails with a clear line and changes nothing; ``list`` reads the record.

cron runs a line with ``/bin/sh`` and turns an unescaped ``%`` into a newline (what follows goes
to the command's stdin): ``crontab_line`` writes every ``%`` as ``\%``, which cron gives back as
``%``, so ``date +%F`` runs as written.

A command is a program and its arguments separated by single spaces, no shell syntax; ``run``
executes it now, without a shell, as the site user, in the site's folder.

Runs are recorded in ``<site>/logs/cron-<id>.history``, one line when a run starts and one when it
ends: ``start KEY EPOCH`` and ``end KEY EPOCH EXIT``. A scheduled run writes them itself: its
crontab line wraps the command in ``echo``/``date`` (cron runs the line with ``/bin/sh`` anyway),
KEY being the shell's pid; ``run`` appends them with ``dd`` as the site user (``oflag=nonblock``:
a FIFO planted there fails at once instead of holding the job), KEY ``run-<random>``. Both write
as the site user, so the agent never writes a file in a folder the site user controls. A line
keeps the file under `HISTORY_MAX_BYTES` (``tail -n`` into a new file, renamed over it).
``history`` reads the file's end through the site's jail (`agent.jobs.toolkit.site_files`: a link out of
the site, a FIFO or another user's file hard-linked there is refused) and pairs the lines by KEY:
a start without its end is ``running`` while its pid lives, else ``interrupted``.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import shlex
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import orjson
import trio

from agent.jobs.toolkit.base import JobContext, handler, rfc3339
from agent.jobs.toolkit.boundary import as_user
from agent.jobs.toolkit.common import Account, find_site, site_account
from agent.jobs.toolkit.logfiles import start_of_last_lines
from agent.jobs.toolkit.output import JobError, Output
from agent.jobs.toolkit.proc import SYSTEM_PATH, capture_command, require, stream_command, which
from agent.jobs.toolkit.site_files import open_site_input_if_there
from agent.sites import Site, write_atomically
from agent.state import open_lock_file
from contract.job_kinds.base import IdArgs, OptionalDomain
from contract.job_kinds.cron import CronAdd, CronEdit, CronHistory

CRON_FILE = "cron.json"
BEGIN = "# BEGIN fleetdeck-agent: entries managed by the fleetdeck agent; edits inside are overwritten"
END = "# END fleetdeck-agent"


# --- the record ----------------------------------------------------------------------------


class CronStore:
    """``cron.json``: blocking; call it from a worker thread."""

    def __init__(self, state_dir: str) -> None:
        self.path = os.path.join(state_dir, CRON_FILE)

    def entries(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as f:
                document = orjson.loads(f.read())
        except FileNotFoundError:
            return []
        except orjson.JSONDecodeError as exc:
            raise JobError(f"{self.path} is not valid JSON ({exc}); fix it first") from None
        entries = document.get("entries") if isinstance(document, dict) else None
        return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []

    @contextmanager
    def editing(self) -> Iterator[list[dict[str, Any]]]:
        """The entries under the lock, written back (atomically) when the block succeeds."""
        os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
        with open_lock_file(self.path + ".lock") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            entries = self.entries()
            yield entries
            write_atomically(self.path, orjson.dumps({"entries": entries}, option=orjson.OPT_INDENT_2) + b"\n", 0o600)

    def update(self, change: Callable[[list[dict[str, Any]]], Any]) -> Any:
        with self.editing() as entries:
            return change(entries)


def _find(entries: list[dict[str, Any]], entry_id: str) -> dict[str, Any]:
    for entry in entries:
        if entry.get("id") == entry_id:
            return entry
    raise JobError(f"no cron entry {entry_id} on this server")


# --- crontab -------------------------------------------------------------------------------


HISTORY_MAX_BYTES = 256 * 1024  # past this, a scheduled run keeps the last HISTORY_KEEP_LINES
HISTORY_KEEP_LINES = 2000  # about 1000 runs: cron.history's limit tops at 1000
HISTORY_READ_BYTES = 4 * 1024 * 1024  # what cron.history reads back from a history's end, at most


def history_file(entry_id: str) -> str:
    """The run history of an entry, relative to its site's folder."""
    return f"logs/cron-{entry_id}.history"


def crontab_line(entry: dict[str, Any], folder: str) -> str:
    """The entry's line: in the site's folder, the command between its start and end records.
    cron runs the line with /bin/sh and turns an unescaped % into a newline: each % is escaped."""
    history = history_file(entry["id"])
    script = (
        f"cd {shlex.quote(folder)} || exit; "
        f'echo "start $$ $(date +%s)" >>{history}; '
        f"{entry['command']}; r=$?; "
        f'echo "end $$ $(date +%s) $r" >>{history}; '
        f"if [ $(wc -c <{history}) -gt {HISTORY_MAX_BYTES} ]; "
        f"then tail -n {HISTORY_KEEP_LINES} {history} >{history}.new && mv {history}.new {history}; fi; "
        "exit $r"
    ).replace("%", "\\%")
    return f"{entry['schedule']} {script}"


def replace_block(crontab: str, block: list[str]) -> str:
    kept, inside = [], False
    for line in crontab.splitlines():
        if line.startswith("# BEGIN fleetdeck-agent"):
            inside = True
        elif line == END and inside:
            inside = False
        elif not inside:
            kept.append(line)
    while kept and not kept[-1].strip():
        kept.pop()
    if block:
        kept += ([""] if kept else []) + [BEGIN, *block, END]
    return "\n".join(kept) + "\n" if kept else ""


def _require_crontab(ctx: JobContext) -> str:
    crontab = which("crontab")
    if crontab is None:
        raise JobError("crontab is missing on this server (install the cron package): the entry cannot be installed")
    if not ctx.is_root:
        raise JobError("the agent does not run as root: it cannot install entries into a site user's crontab")
    return crontab


async def install(ctx: JobContext, account: Account) -> None:
    """Rewrite the fleetdeck block of `account`'s crontab from the record (its active entries)."""
    crontab = _require_crontab(ctx)
    entries = await trio.to_thread.run_sync(CronStore(ctx.state_dir).entries)
    block: list[str] = []
    for entry in entries:
        if entry.get("paused"):
            continue
        site = await trio.to_thread.run_sync(ctx.sites.get, str(entry.get("domain")))
        if site is None:
            continue
        try:
            owner = site_account(ctx, site)
        except JobError:
            continue
        if owner.name == account.name:
            block += [f"# fleetdeck cron {entry['id']} ({site.domain})", crontab_line(entry, ctx.site_home(site.slug))]
    code, current, err = await capture_command([crontab, "-u", account.name, "-l"])
    if code != 0 and "no crontab" not in err:
        raise JobError(f"crontab -u {account.name} -l failed (exit {code}): {' '.join(err.split())}")
    text = replace_block(current if code == 0 else "", block)
    code, _, err = await capture_command([crontab, "-u", account.name, "-"], stdin=text.encode())
    if code != 0:
        raise JobError(f"crontab -u {account.name} failed (exit {code}): {' '.join(err.split())}")


async def forget_site(ctx: JobContext, site: Site, out: Output) -> int:
    """Drop a site's entries from the record and its user's crontab (for ``site delete``)."""

    def drop(entries: list[dict[str, Any]]) -> int:
        before = len(entries)
        entries[:] = [e for e in entries if e.get("domain") != site.domain]
        return before - len(entries)

    store = CronStore(ctx.state_dir)
    if not any(e.get("domain") == site.domain for e in await trio.to_thread.run_sync(store.entries)):
        return 0
    removed: int = await trio.to_thread.run_sync(store.update, drop)
    if ctx.is_root and which("crontab"):
        try:
            await install(ctx, site_account(ctx, site))
        except JobError as exc:
            out.stderr(f"warning: {exc}")
    return removed


# --- handlers ------------------------------------------------------------------------------


async def _list(args: OptionalDomain, ctx: JobContext, out: Output) -> int:
    entries = await trio.to_thread.run_sync(CronStore(ctx.state_dir).entries)
    if args.domain:
        entries = [e for e in entries if e.get("domain") == args.domain]
    out.result({"entries": entries}, as_json=ctx.as_json)
    return 0


async def _add(args: CronAdd, ctx: JobContext, out: Output) -> int:
    site = await find_site(ctx, args.domain)
    _require_crontab(ctx)
    account = site_account(ctx, site)
    entry = {
        "id": f"c{secrets.token_hex(6)}",
        "domain": site.domain,
        "schedule": args.schedule,
        "command": args.command,
        "paused": False,
        "created_at": rfc3339(time.time()),
    }
    store = CronStore(ctx.state_dir)
    await trio.to_thread.run_sync(store.update, lambda entries: entries.append(entry))
    try:
        await install(ctx, account)
    except BaseException:
        with trio.CancelScope(shield=True):

            def undo(entries: list[dict[str, Any]]) -> None:
                entries[:] = [e for e in entries if e.get("id") != entry["id"]]

            await trio.to_thread.run_sync(store.update, undo)
        raise
    out.result({"entry": entry, "user": account.name}, as_json=ctx.as_json)
    return 0


async def _change(ctx: JobContext, entry_id: str, change: Callable[[list[dict[str, Any]]], Any]) -> Site:
    """Apply `change` to the record (under its lock), then rebuild the entry's user's crontab;
    if the crontab cannot be written, the record is put back as it was. Returns the entry's site."""
    store = CronStore(ctx.state_dir)
    before = await trio.to_thread.run_sync(store.entries)
    site = await find_site(ctx, str(_find(before, entry_id).get("domain")))
    _require_crontab(ctx)
    account = site_account(ctx, site)
    await trio.to_thread.run_sync(store.update, change)
    try:
        await install(ctx, account)
    except BaseException:
        with trio.CancelScope(shield=True):

            def undo(entries: list[dict[str, Any]]) -> None:  # only this entry: others may have changed
                index = next((i for i, e in enumerate(entries) if e.get("id") == entry_id), len(entries))
                entries[index : index + 1] = [_find(before, entry_id)]

            await trio.to_thread.run_sync(store.update, undo)
        raise
    return site


def _setting(entry_id: str, **values: Any) -> Callable[[list[dict[str, Any]]], None]:
    def change(entries: list[dict[str, Any]]) -> None:
        _find(entries, entry_id).update(values)

    return change


async def _pause(args: IdArgs, ctx: JobContext, out: Output) -> int:
    site = await _change(ctx, args.id, _setting(args.id, paused=True))
    out.stdout(f"cron entry {args.id} of {site.domain} paused")
    return 0


async def _resume(args: IdArgs, ctx: JobContext, out: Output) -> int:
    site = await _change(ctx, args.id, _setting(args.id, paused=False))
    out.stdout(f"cron entry {args.id} of {site.domain} resumed")
    return 0


async def _edit(args: CronEdit, ctx: JobContext, out: Output) -> int:
    values = {name: value for name, value in (("schedule", args.schedule), ("command", args.command)) if value}
    site = await _change(ctx, args.id, _setting(args.id, **values))
    out.stdout(f"cron entry {args.id} of {site.domain} changed: " + ", ".join(f"{k} {v}" for k, v in values.items()))
    return 0


async def _delete(args: IdArgs, ctx: JobContext, out: Output) -> int:
    removed: list[dict[str, Any]] = []

    def delete(entries: list[dict[str, Any]]) -> None:
        removed.append(_find(entries, args.id))
        entries.remove(removed[0])

    site = await _change(ctx, args.id, delete)
    runner = _Runner(ctx, site)
    code, _, err = await runner.capture([require("rm", "remove the entry's history"), "-f", history_file(args.id)])
    if code != 0:
        out.stderr(f"warning: the run history of {args.id} stays: {' '.join(err.split())}")
    out.result({"deleted": removed[0]}, as_json=ctx.as_json)
    return 0


class _Runner:
    """Runs a program the way an entry's command runs: as the site user, in the site's folder,
    with a small environment of its own (what cron gives a job)."""

    def __init__(self, ctx: JobContext, site: Site) -> None:
        self.account = site_account(ctx, site)
        self.folder = ctx.site_home(site.slug)
        self.env = {
            "PATH": SYSTEM_PATH,
            "HOME": self.folder,
            "USER": self.account.name,
            "LOGNAME": self.account.name,
            "SHELL": "/bin/sh",
            "LANG": "C.UTF-8",
        }
        self.options: dict[str, Any] = as_user(self.account)

    async def stream(self, out: Output, argv: list[str]) -> int:
        return await stream_command(out, argv, cwd=self.folder, env=self.env, **self.options)

    async def capture(self, argv: list[str], stdin: bytes = b"") -> tuple[int, str, str]:
        return await capture_command(argv, stdin=stdin, cwd=self.folder, env=self.env, **self.options)

    async def record(self, entry_id: str, line: str, out: Output) -> None:
        """Append `line` to the entry's history, as the site user (see the module docstring)."""
        dd = require("dd", "record the run")
        argv = [dd, f"of={history_file(entry_id)}", "oflag=append,nonblock", "conv=notrunc", "status=none"]
        code, _, err = await self.capture(argv, stdin=f"{line}\n".encode())
        if code != 0:
            out.stderr(f"warning: the run was not recorded in {history_file(entry_id)}: {' '.join(err.split())}")


async def _run(args: IdArgs, ctx: JobContext, out: Output) -> int:
    entry = _find(await trio.to_thread.run_sync(CronStore(ctx.state_dir).entries), args.id)
    site = await find_site(ctx, str(entry.get("domain")))
    runner = _Runner(ctx, site)
    argv = str(entry.get("command", "")).split(" ")
    if not await trio.to_thread.run_sync(os.path.isdir, runner.folder):
        raise JobError(f"the folder of site {site.domain} is missing: {runner.folder}")
    key = f"run-{secrets.token_hex(4)}"
    await runner.record(args.id, f"start {key} {int(time.time())}", out)
    code = 143  # what the history says if the job is cancelled (its process group gets SIGTERM)
    try:
        code = await runner.stream(out, argv)
    except FileNotFoundError:
        code = 127
        raise JobError(f"command not found: {argv[0]} (in {runner.folder})", 127) from None
    except PermissionError:
        code = 126
        raise JobError(f"permission denied: {argv[0]} cannot be run by {runner.account.name}", 126) from None
    finally:
        with trio.CancelScope(shield=True):
            await runner.record(args.id, f"end {key} {int(time.time())} {code}", out)
    return code


# --- history -------------------------------------------------------------------------------


def parse_history(text: str, alive: Callable[[int], bool]) -> list[dict[str, Any]]:
    """The runs of a history file (see the module's docstring), newest first. `alive(pid)` tells
    whether the shell of a scheduled run that has no end yet still runs."""
    runs: list[dict[str, Any]] = []
    started: dict[str, tuple[int, dict[str, Any]]] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "start" and parts[2].isdigit():
            previous = started.pop(parts[1], None)
            if previous is not None:  # the same key again: that run never ended (a pid reused after a reboot)
                previous[1]["state"] = "interrupted"
            run: dict[str, Any] = {
                "started_at": rfc3339(int(parts[2])),
                "ended_at": None,
                "duration_s": None,
                "exit_code": None,
                "state": "running",
                "trigger": "manual" if parts[1].startswith("run-") else "schedule",
            }
            started[parts[1]] = (int(parts[2]), run)
            runs.append(run)
        elif len(parts) == 4 and parts[0] == "end" and parts[2].isdigit() and parts[3].isdigit():
            begun = started.pop(parts[1], None)
            if begun is None:  # its start was trimmed away
                continue
            at, run = begun
            code = int(parts[3])
            run.update(
                ended_at=rfc3339(int(parts[2])),
                duration_s=max(0, int(parts[2]) - at),
                exit_code=code,
                state="ok" if code == 0 else "failed",
            )
    for key, (_, run) in started.items():
        if key.isdigit() and not alive(int(key)):
            run["state"] = "interrupted"
    return runs[::-1]


def _last_history_lines(ctx: JobContext, site: Site, entry_id: str, count: int) -> str:
    """The last `count` lines of an entry's history ("" when it has none), read through the site's
    jail, at most `HISTORY_READ_BYTES` of them."""
    fd = open_site_input_if_there(ctx, site, history_file(entry_id))
    if fd is None:
        return ""
    try:
        size = os.fstat(fd).st_size
        start = max(start_of_last_lines(fd, size, count), size - HISTORY_READ_BYTES)
        return os.pread(fd, size - start, start).decode("utf-8", "replace")
    finally:
        os.close(fd)


def _pid_alive(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


async def _history(args: CronHistory, ctx: JobContext, out: Output) -> int:
    entry = _find(await trio.to_thread.run_sync(CronStore(ctx.state_dir).entries), args.id)
    site = await find_site(ctx, str(entry.get("domain")))
    lines = 2 * args.limit + 100  # a start and an end each, and room for runs of other keys in between
    text = await trio.to_thread.run_sync(_last_history_lines, ctx, site, args.id, lines)
    runs = await trio.to_thread.run_sync(parse_history, text, _pid_alive)
    result = {
        "id": args.id,
        "domain": site.domain,
        "schedule": entry.get("schedule"),
        "command": entry.get("command"),
        "paused": entry.get("paused", False),
        "history_file": os.path.join(ctx.site_home(site.slug), history_file(args.id)),
        "runs": runs[: args.limit],
    }
    out.result(result, as_json=ctx.as_json)
    return 0


KINDS = [
    handler("cron.list", _list),
    handler("cron.add", _add),
    handler("cron.edit", _edit),
    handler("cron.pause", _pause),
    handler("cron.resume", _resume),
    handler("cron.delete", _delete),
    handler("cron.run", _run),
    handler("cron.history", _history),
]
