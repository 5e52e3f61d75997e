"""``pg allow-list|allow-add|allow-remove``: remote logins, as pg_hba.conf entries.

The agent owns one block of the server's pg_hba.conf (the file ``SHOW hba_file`` names, unless the
layout gives it), between a BEGIN and an END line; each entry allows TCP logins (``host``) to a
database (or all) by a role (or all) from a network, with a SCRAM-SHA-256 password. Lines outside
the block are left alone. The block sits before the first ``host`` rule of the file (or at its end
when there is none), so its entries are matched before the file's own TCP rules.

A change is written atomically (a temporary file with the old one's owner and mode, renamed over
it), then checked by the server itself (``pg_hba_file_rules`` parses the file on disk): a file
with errors is put back as it was and the job exits 78; a good one is loaded with
``pg_reload_conf()``. Changes are serialised by a lock file in the agent's state folder.
"""

from __future__ import annotations

import fcntl
import os
import stat
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import trio

from agent.jobs.pg.client import Postgres
from agent.jobs.toolkit.base import JobContext, handler
from agent.jobs.toolkit.output import EXIT_REFUSED, JobError, Output
from agent.sites import write_atomically
from agent.state import open_lock_file
from contract.job_kinds.base import NoArgs
from contract.job_kinds.pg import PgAllow

BEGIN = "# BEGIN fleetdeck: remote logins allowed by the fleetdeck agent (pg allow-add); edits inside are overwritten"
END = "# END fleetdeck"
METHOD = "scram-sha-256"
LOCK_FILE = "pg_hba.lock"


@dataclass(frozen=True)
class HbaEntry:
    cidr: str
    database: str | None = None  # None: all
    user: str | None = None  # None: all

    @classmethod
    def of(cls, args: PgAllow) -> HbaEntry:
        return cls(args.cidr, args.name, args.user)

    def line(self) -> str:
        # A quoted name is only that name ("all" quoted is a database called all, not the keyword).
        database = f'"{self.database}"' if self.database else "all"
        user = f'"{self.user}"' if self.user else "all"
        return f"host    {database}    {user}    {self.cidr}    {METHOD}"

    def as_dict(self) -> dict[str, Any]:
        return {"cidr": self.cidr, "database": self.database or "all", "user": self.user or "all", "method": METHOD}


@dataclass
class HbaFile:
    """pg_hba.conf split around the agent's block (`entries`; `found`: the block is there)."""

    before: list[str]
    entries: list[HbaEntry]
    after: list[str]
    found: bool

    @classmethod
    def parse(cls, text: str) -> HbaFile:
        lines = text.splitlines()
        if BEGIN not in lines:
            cut = next((i for i, line in enumerate(lines) if line.split()[:1] and _is_host_rule(line)), len(lines))
            return cls(lines[:cut], [], lines[cut:], False)
        start = lines.index(BEGIN)
        end = next((i for i in range(start + 1, len(lines)) if lines[i] == END), None)
        if end is None:
            raise JobError(f"pg_hba.conf has the line {BEGIN!r} but no {END!r}: fix the file by hand first")
        entries = [parse_entry(line) for line in lines[start + 1 : end] if line.strip()]
        return cls(lines[:start], entries, lines[end + 1 :], True)

    def render(self) -> str:
        block = [BEGIN, *(entry.line() for entry in self.entries), END] if self.entries else []
        return "\n".join([*self.before, *block, *self.after]) + "\n"


def _is_host_rule(line: str) -> bool:
    return line.split()[0].startswith("host")


def parse_entry(line: str) -> HbaEntry:
    """One entry of the agent's block, as `HbaEntry.line` writes it."""
    fields = line.split()
    if len(fields) != 5 or fields[0] != "host" or fields[4] != METHOD:
        raise JobError(f"pg_hba.conf: a line of the fleetdeck block was edited by hand: {line.strip()!r}")

    def name(field: str) -> str | None:
        return None if field == "all" else field.strip('"')

    return HbaEntry(fields[3], name(fields[1]), name(fields[2]))


async def hba_path(pg: Postgres) -> str:
    if pg.layout.hba_file is not None:
        return pg.layout.hba_file
    (row,) = await pg.rows("SELECT current_setting('hba_file') AS path")
    path: str = row["path"]
    return path


@asynccontextmanager
async def _hba_lock(ctx: JobContext) -> AsyncIterator[None]:
    os.makedirs(ctx.state_dir, mode=0o700, exist_ok=True)
    with open_lock_file(os.path.join(ctx.state_dir, LOCK_FILE)) as lock:
        await trio.to_thread.run_sync(fcntl.flock, lock.fileno(), fcntl.LOCK_EX)
        yield


def _read(path: str) -> tuple[str, os.stat_result]:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read(), os.fstat(f.fileno())
    except FileNotFoundError:
        raise JobError(f"{path} does not exist: is PostgreSQL installed here?") from None


def replace_file(path: str, text: str, like: os.stat_result) -> None:
    """Replace `path` with `text` atomically, with the owner and mode of `like` (the file it replaces)."""
    write_atomically(path, text.encode("utf-8"), stat.S_IMODE(like.st_mode), (like.st_uid, like.st_gid))


async def _hba_errors(pg: Postgres) -> list[str]:
    rows = await pg.rows("SELECT line_number, error FROM pg_hba_file_rules WHERE error IS NOT NULL ORDER BY 1")
    return [f"line {row['line_number']}: {row['error']}" for row in rows]


async def _change(ctx: JobContext, change: Any) -> tuple[str, bool]:
    """Apply `change(HbaFile) -> bool` (whether it changed anything) under the lock, then check
    the file with the server and reload it; (the file's path, changed)."""
    pg = Postgres.of(ctx)
    path = await hba_path(pg)
    async with _hba_lock(ctx):
        text, st = await trio.to_thread.run_sync(_read, path)
        hba = HbaFile.parse(text)
        if not change(hba):
            return path, False
        await trio.to_thread.run_sync(replace_file, path, hba.render(), st)
        try:
            errors = await _hba_errors(pg)
        except BaseException:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(replace_file, path, text, st)
            raise
        if errors:
            await trio.to_thread.run_sync(replace_file, path, text, st)
            raise JobError(f"PostgreSQL refused {path} ({'; '.join(errors)}): it was put back as it was", EXIT_REFUSED)
        (row,) = await pg.rows("SELECT pg_reload_conf() AS reloaded")
        if not row["reloaded"]:
            raise JobError("pg_reload_conf() failed: the new pg_hba.conf is written but not loaded yet")
    return path, True


async def _allow_list(args: NoArgs, ctx: JobContext, out: Output) -> int:
    pg = Postgres.of(ctx)
    path = await hba_path(pg)
    text, _ = await trio.to_thread.run_sync(_read, path)
    entries = [entry.as_dict() for entry in HbaFile.parse(text).entries]
    out.result({"hba_file": path, "entries": entries}, as_json=ctx.as_json)
    return 0


async def _allow_add(args: PgAllow, ctx: JobContext, out: Output) -> int:
    entry = HbaEntry.of(args)

    def add(hba: HbaFile) -> bool:
        if entry in hba.entries:
            return False
        hba.entries.append(entry)
        return True

    path, changed = await _change(ctx, add)
    message = f"logins from {entry.cidr} {'allowed' if changed else 'were already allowed'} ({path})"
    out.result({"message": message, "added": changed, "entry": entry.as_dict()}, as_json=ctx.as_json)
    return 0


async def _allow_remove(args: PgAllow, ctx: JobContext, out: Output) -> int:
    entry = HbaEntry.of(args)

    def remove(hba: HbaFile) -> bool:
        if entry not in hba.entries:
            return False
        hba.entries.remove(entry)
        return True

    path, changed = await _change(ctx, remove)
    message = f"the entry for {entry.cidr} {'was removed' if changed else 'is not in the allowlist'} ({path})"
    out.result({"message": message, "removed": changed, "entry": entry.as_dict()}, as_json=ctx.as_json)
    return 0


KINDS = [
    handler("pg.allow-list", _allow_list),
    handler("pg.allow-add", _allow_add),
    handler("pg.allow-remove", _allow_remove),
]
