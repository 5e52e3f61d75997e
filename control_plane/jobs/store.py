"""Queries of jobs, their lines and the read cache."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from control_plane.auth.secrets import new_id
from control_plane.clock import now_iso
from control_plane.jobs import lines
from control_plane.jobs.lines import Run
from control_plane.storage.schema import job_output, jobs, read_cache

Row = dict[str, Any]

# INSERT ... ON CONFLICT DO UPDATE of each database the control plane runs on (the same SQL on both).
UPSERTS: dict[str, Callable[[sa.Table], postgresql.Insert | sqlite.Insert]] = {
    "sqlite": sqlite.insert,
    "postgresql": postgresql.insert,
}

RUNNING_STATUSES = ("queued", "running")


def args_key(args: dict[str, Any]) -> str:
    return hashlib.sha256(orjson.dumps(args, option=orjson.OPT_SORT_KEYS)).hexdigest()


def create_job(
    conn: Connection,
    *,
    org_id: str,
    server_id: str,
    kind: str,
    args: dict[str, Any],
    argv: list[str],
    created_by: str | None,
    idempotency_key: str | None,
    status: str = "queued",
    lookup: bool = False,
) -> Row:
    row: Row = {
        "id": new_id("job"),
        "org_id": org_id,
        "server_id": server_id,
        "kind": kind,
        "args": orjson.dumps(args).decode(),
        "argv": orjson.dumps(argv).decode(),
        "status": status,
        "cached": False,
        "created_by": created_by,
        "idempotency_key": idempotency_key,
        "lookup": lookup,
        "created_at": now_iso(),
    }
    conn.execute(jobs.insert().values(row))
    return get_job(conn, org_id, row["id"]) or row


def get_job(conn: Connection, org_id: str, job_id: str) -> Row | None:
    found = conn.execute(jobs.select().where(jobs.c.id == job_id, jobs.c.org_id == org_id)).mappings().first()
    return dict(found) if found else None


def job_by_idempotency_key(conn: Connection, server_id: str, user_id: str, key: str) -> Row | None:
    query = jobs.select().where(
        jobs.c.server_id == server_id, jobs.c.created_by == user_id, jobs.c.idempotency_key == key
    )
    found = conn.execute(query).mappings().first()
    return dict(found) if found else None


def list_jobs(conn: Connection, org_id: str, server_id: str, limit: int, *, lookups: bool = False) -> list[Row]:
    """The server's newest jobs; look-ups (a client's own reads) only if `lookups`."""
    query = jobs.select().where(jobs.c.org_id == org_id, jobs.c.server_id == server_id)
    if not lookups:
        query = query.where(jobs.c.lookup == sa.false())
    query = query.order_by(jobs.c.created_at.desc(), jobs.c.id.desc()).limit(limit)
    return [dict(r) for r in conn.execute(query).mappings()]


def queued_jobs(conn: Connection, server_id: str) -> list[Row]:
    query = jobs.select().where(jobs.c.server_id == server_id, jobs.c.status == "queued").order_by(jobs.c.created_at)
    return [dict(r) for r in conn.execute(query).mappings()]


def update_job(conn: Connection, /, job_id: str, **values: Any) -> None:
    conn.execute(jobs.update().where(jobs.c.id == job_id).values(**values))


def start_job(conn: Connection, job_id: str, agent_boot_id: str, started_at: str) -> bool:
    """Mark a queued job running; False when it is no longer queued (ended while it waited).
    Safe to run again (the database lost between its commit and its answer): the job this very
    call started (`started_at`, `agent_boot_id`) answers True again."""
    started = conn.execute(
        jobs.update()
        .where(jobs.c.id == job_id, jobs.c.status == "queued")
        .values(status="running", started_at=started_at, agent_boot_id=agent_boot_id)
    )
    if started.rowcount > 0:
        return True
    query = sa.select(jobs.c.id).where(
        jobs.c.id == job_id,
        jobs.c.status == "running",
        jobs.c.started_at == started_at,
        jobs.c.agent_boot_id == agent_boot_id,
    )
    return conn.execute(query).first() is not None


def end_queued(conn: Connection, job_id: str, status: str, note: str) -> bool:
    """End a job that has not started, with `note` as its one output line; False when it had
    started (or ended) already."""
    ended = conn.execute(
        jobs.update().where(jobs.c.id == job_id, jobs.c.status == "queued").values(status=status, finished_at=now_iso())
    )
    if ended.rowcount == 0:
        return False
    insert_lines(conn, job_id, [Run(1, "stderr", now_iso(), [note])])
    return True


def queued_of_kind(conn: Connection, server_id: str, kind: str) -> list[Row]:
    query = jobs.select().where(jobs.c.server_id == server_id, jobs.c.kind == kind, jobs.c.status == "queued")
    return [dict(r) for r in conn.execute(query).mappings()]


def running_jobs(conn: Connection, server_id: str | None = None) -> list[Row]:
    """The jobs left `running`, of one server or all: at start-up, those of a previous process
    (their agents may still run them); with replicas, those of an agent that linked here."""
    query = jobs.select().where(jobs.c.status == "running").order_by(jobs.c.created_at)
    if server_id is not None:
        query = query.where(jobs.c.server_id == server_id)
    return [dict(r) for r in conn.execute(query).mappings()]


def stored_output(conn: Connection, job_id: str) -> tuple[int, int]:
    """The last stored seq of a job (0 for none) and the bytes its stored lines take."""
    query = sa.select(sa.func.max(job_output.c.last_seq), sa.func.sum(sa.func.length(job_output.c.lines))).where(
        job_output.c.job_id == job_id
    )
    last_seq, size = conn.execute(query).one()
    return int(last_seq or 0), int(size or 0)


CHUNK_LINES = 5000


def insert_lines(conn: Connection, job_id: str, runs: list[Run]) -> None:
    """Store consecutive runs as chunks of at most `CHUNK_LINES` lines, each one row.

    A row's ``lines`` is the JSON list of its runs (``{"seq", "stream", "at", "texts"}``); rows
    written before runs hold a list of line objects, which `lines_after` reads too.

    A seq is stored once, whoever writes: two control planes may both write a job's output (a
    replica that lost the agent's link still draining, the one it relinked to taking the job
    back). The job's row is locked first, so the writers of one job take turns, and the lines up
    to the last stored seq are dropped; the primary key (job_id, first_seq) refuses the rest.
    """
    _lock_job(conn, job_id)
    stored = conn.execute(sa.select(sa.func.max(job_output.c.last_seq)).where(job_output.c.job_id == job_id)).scalar()
    if stored is not None:
        runs = [run.after(stored) for run in runs if run.last_seq > stored]
    rows = [
        {
            "job_id": job_id,
            "first_seq": chunk[0].seq,
            "last_seq": chunk[-1].last_seq,
            "lines": orjson.dumps([run.wire() for run in chunk]),
        }
        for chunk in lines.chunks(runs, CHUNK_LINES)
    ]
    if rows:
        conn.execute(job_output.insert(), rows)


def _lock_job(conn: Connection, job_id: str) -> None:
    """Hold the job's row until the transaction ends. A write, not `SELECT ... FOR UPDATE`: on
    PostgreSQL both lock the row, but SQLite ignores FOR UPDATE and takes its one write lock
    only at a transaction's first write."""
    conn.execute(jobs.update().where(jobs.c.id == job_id).values(status=jobs.c.status))


def lines_after(conn: Connection, job_id: str, after: int, limit: int) -> list[Run]:
    """Stored lines with seq > `after`, in order, as runs: whole chunks, about `limit` lines."""
    query = (
        sa.select(job_output.c.lines)
        # Bound as BIGINT: a Last-Event-ID may be any 63-bit number; PostgreSQL's INTEGER would overflow.
        .where(job_output.c.job_id == job_id, job_output.c.last_seq > sa.literal(after, sa.BigInteger))
        .order_by(job_output.c.first_seq)
        .limit(max(1, limit // CHUNK_LINES))
    )
    found: list[Run] = []
    for (chunk,) in conn.execute(query):
        runs = lines.from_items(orjson.loads(chunk), after)
        if runs:
            found.extend(runs)
            after = runs[-1].last_seq
    return found


def lines_through(conn: Connection, job_id: str, last: int) -> list[Run]:
    """Stored lines with seq <= `last`, in order, as runs: what a job printed before a restart of
    the control plane took it back (the rows written since start after `last`)."""
    query = (
        sa.select(job_output.c.lines)
        .where(job_output.c.job_id == job_id, job_output.c.first_seq <= last)
        .order_by(job_output.c.first_seq)
    )
    found: list[Run] = []
    for (chunk,) in conn.execute(query):
        found.extend(lines.from_items(orjson.loads(chunk), found[-1].last_seq if found else 0))
    return found


def remember_read(conn: Connection, server_id: str, kind: str, key: str, job_id: str, result: Any) -> None:
    """Keep this result as the read's last one. One upsert: an update, then an insert when it
    found no row, lets two reads of the same (kind, args) that end at once both insert (on
    PostgreSQL; SQLite's one writer serialises them), and the second fail on the key."""
    values = {"job_id": job_id, "result": orjson.dumps(result).decode(), "at": now_iso()}
    upsert = UPSERTS[conn.dialect.name](read_cache).values(server_id=server_id, kind=kind, args_key=key, **values)
    conn.execute(upsert.on_conflict_do_update(index_elements=list(read_cache.primary_key), set_=values))


def cached_read(conn: Connection, server_id: str, kind: str, key: str) -> Row | None:
    query = read_cache.select().where(
        read_cache.c.server_id == server_id, read_cache.c.kind == kind, read_cache.c.args_key == key
    )
    found = conn.execute(query).mappings().first()
    return dict(found) if found else None
