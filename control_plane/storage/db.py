"""The database handle: an engine, its migrations, and a way to run sync Core code off the loop.

SQLAlchemy Core is synchronous. Route handlers call `await db.run(fn, ...)`, which runs
`fn(conn, ...)` inside one transaction on a worker thread, so a slow disk never stalls the event
loop (and with it every agent link and stream of the control plane). Long-running tasks call
`run_retrying`, which rides out an outage of the database (`control_plane.storage.outage`).
The two lookups every request makes (its caller, the server it names) call `read` instead: on
SQLite it runs on the loop's own thread (see `read` for why that is the faster and no less live).
"""

from __future__ import annotations

import logging
import os
import stat
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

import anyio
import anyio.to_thread
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from contract.backoff import full_jitter
from control_plane.storage.outage import DatabaseState, Health, is_outage

log = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")

MIGRATIONS = Path(__file__).parent / "migrations"
POSTGRES_DRIVER = "postgresql+psycopg"
# A PostgreSQL server that does not answer a new connection within this is away: without it, a
# connection to a host that went silent waits for the system's TCP timeout (minutes). Likewise an
# open connection whose server went silent is given up after about 11 s of TCP keepalives.
POSTGRES_CONNECT_ARGS = {
    "connect_timeout": 5,
    "keepalives": 1,
    "keepalives_idle": 5,
    "keepalives_interval": 2,
    "keepalives_count": 3,
}
# Tries of a long-running task during an outage wait full_jitter(attempt, base, cap) seconds.
RETRY_BASE_S = 0.25
RETRY_CAP_S = 5.0
# How old the state `/v1/health` reports may be before it asks the database itself.
HEALTH_MAX_AGE_S = 1.0
HEALTH_PROBE_TIMEOUT_S = 3.0


class DriverMissing(Exception):
    """The database URL needs a driver this installation lacks; the message says how to add it."""


def database_url(url: str) -> sa.URL:
    """`url` parsed, PostgreSQL's with the one driver fleetdeck supports (psycopg 3) when it names
    none (SQLAlchemy would pick psycopg2, which the `postgres` extra does not install)."""
    parsed = sa.make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername=POSTGRES_DRIVER)
    return parsed


def create_engine(url: str) -> Engine:
    parsed = database_url(url)
    if parsed.get_backend_name() == "sqlite":
        engine = sa.create_engine(parsed, connect_args={"check_same_thread": False, "timeout": 30})
        sa.event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    try:
        return sa.create_engine(parsed, pool_pre_ping=True, connect_args=POSTGRES_CONNECT_ARGS)
    except ImportError as exc:  # the dialect imports its driver here
        if parsed.get_backend_name() == "postgresql":
            raise DriverMissing(
                "PostgreSQL needs the psycopg driver: pip install 'fleetdeck[postgres]'"
                f" (and a {POSTGRES_DRIVER}:// URL)"
            ) from exc
        raise DriverMissing(f"no driver for {parsed.drivername} databases: {exc}") from exc


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    # WAL lets the admin command write while the server runs; NORMAL is durable across app crashes.
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def newest_revision() -> str:
    """The head revision, from the migration files' names (`NNNN_what.py` holds revision "NNNN";
    `tests/control_plane/storage/test_migrations.py` checks that alembic agrees)."""
    return max(path.name.split("_", 1)[0] for path in (MIGRATIONS / "versions").glob("[0-9][0-9][0-9][0-9]_*.py"))


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        if not sa.inspect(connection).has_table("alembic_version"):
            return None
        revision = connection.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()
        return str(revision) if revision is not None else None


def migrate(engine: Engine) -> None:
    """Bring the schema to the newest revision. At the newest already (every start but the first
    after an upgrade), alembic is not even imported: it is a good part of the start-up time."""
    if current_revision(engine) == newest_revision():
        return
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


def prepare_sqlite_file(url: str) -> None:
    """Make an SQLite database file readable by its owner only, before SQLite first opens it.

    The database holds every org's users, password hashes, job output and audit log. SQLite gives
    its `-wal` and `-shm` files the mode of the database file, so creating that one 0600 (in a
    folder made 0700) covers all three from their first write. Files left readable by an older
    version are tightened here, with a log line.
    """
    prefix = "sqlite:///"
    if not url.startswith(prefix) or url[len(prefix) :] in ("", ":memory:"):
        return
    path = Path(url[len(prefix) :])
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))
    for file in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        _owner_only(file)


def _owner_only(file: Path) -> None:
    try:
        mode = stat.S_IMODE(file.stat().st_mode)
    except FileNotFoundError:
        return
    if mode & 0o077:
        file.chmod(mode & 0o700)
        log.warning("%s was open to other accounts (mode %04o): tightened to %04o", file, mode, mode & 0o700)


class Database:
    def __init__(self, url: str, *, threads: int = 4) -> None:
        prepare_sqlite_file(url)
        self.url = url
        self.engine = create_engine(url)
        self.state = DatabaseState()
        self._limiter: anyio.CapacityLimiter | None = None
        self._first_limiter: anyio.CapacityLimiter | None = None
        self._probe: anyio.Lock | None = None
        self._threads = threads
        self._reads_inline = self.engine.dialect.name == "sqlite"

    def migrate(self) -> None:
        migrate(self.engine)

    def run_sync(self, fn: Callable[Concatenate[Connection, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run `fn(conn, ...)` in one transaction, on the calling thread (for CLI commands)."""
        try:
            with self.engine.begin() as conn:
                result = fn(conn, *args, **kwargs)
        except Exception as exc:
            if is_outage(exc):
                self.state.failed(exc)
            raise
        self.state.answered()
        return result

    async def run(self, fn: Callable[Concatenate[Connection, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run `fn(conn, ...)` in one transaction on a worker thread."""
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(self._threads)
        call = partial(self.run_sync, fn, *args, **kwargs)
        return await anyio.to_thread.run_sync(call, limiter=self._limiter)

    async def read(self, fn: Callable[Concatenate[Connection, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
        """A short read by index (`fn` must not write): on SQLite run here, on the event loop's
        thread; on a server database, `run`. Why: most of such a read is SQLAlchemy's Python,
        which holds the interpreter's lock, so the loop waits about as long while a worker thread
        runs it; the thread's two hand-offs cost more than the read itself (some 0.3 ms of the
        0.5 ms `run` took per lookup, `benchmarks/serving.py`). SQLite's WAL mode never makes a
        reader wait for a writer, and its pages are local: the loop is not held by another
        process's transaction. PostgreSQL's reads wait for the network, so they stay on threads."""
        if not self._reads_inline:
            return await self.run(fn, *args, **kwargs)
        return self.run_sync(fn, *args, **kwargs)

    async def run_first(self, fn: Callable[Concatenate[Connection, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
        """`run`, on a thread of its own rather than after the transactions waiting for the
        others: for the replica's heartbeat, which a relink storm's thousands of presence writes
        must not make late (late, the other replicas take it for dead)."""
        if self._first_limiter is None:
            self._first_limiter = anyio.CapacityLimiter(1)
        call = partial(self.run_sync, fn, *args, **kwargs)
        return await anyio.to_thread.run_sync(call, limiter=self._first_limiter)

    async def run_retrying(self, fn: Callable[Concatenate[Connection, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
        """`run`, tried again through an outage of the database until it succeeds: for tasks that
        outlive any request (a job's output writer, presence, the heartbeat's housekeeping).
        `fn` must be safe to run again after a failure, also one whose commit did go through.
        The outage is logged once (`DatabaseState`); any other error is raised at once."""
        attempt = 0
        while True:
            try:
                return await self.run(fn, *args, **kwargs)
            except Exception as exc:
                if not is_outage(exc):
                    raise
            await anyio.sleep(full_jitter(attempt, RETRY_BASE_S, RETRY_CAP_S))
            attempt += 1

    async def health(self) -> Health:
        """Whether the database answers: the outcome of the latest transaction if it is recent
        (`HEALTH_MAX_AGE_S`), else of a `SELECT 1` of its own, one at a time and given up after
        `HEALTH_PROBE_TIMEOUT_S`. Cheap enough for a load balancer's checks every second."""
        if self._probe is None:
            self._probe = anyio.Lock()
        async with self._probe:
            if time.monotonic() - self.state.checked_at < HEALTH_MAX_AGE_S:
                return self.state.health
            with anyio.move_on_after(HEALTH_PROBE_TIMEOUT_S) as probe:
                try:
                    # Abandoned on timeout: a silent server holds its thread until the connect timeout.
                    await anyio.to_thread.run_sync(partial(self.run_sync, _select_one), abandon_on_cancel=True)
                except Exception as exc:
                    if not is_outage(exc):
                        raise
            return "unavailable" if probe.cancelled_caught else self.state.health

    def dispose(self) -> None:
        self.engine.dispose()


def _select_one(conn: Connection) -> None:
    conn.execute(sa.text("SELECT 1"))
