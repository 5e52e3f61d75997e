"""The database handle: an engine, its migrations, and a way to run sync Core code off the loop.

SQLAlchemy Core is synchronous. Route handlers call `await db.run(fn, ...)`, which runs
`fn(conn, ...)` inside one transaction on a worker thread, so a slow disk never stalls the event
loop (and with it every agent link and stream of the control plane).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

import anyio
import anyio.to_thread
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

P = ParamSpec("P")
T = TypeVar("T")

MIGRATIONS = Path(__file__).parent / "migrations"


def create_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = sa.create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})
        sa.event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return sa.create_engine(url, pool_pre_ping=True)


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
    `tests/test_migrations.py` checks that alembic agrees)."""
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


def ensure_sqlite_dir(url: str) -> None:
    prefix = "sqlite:///"
    if url.startswith(prefix) and url[len(prefix) :] not in ("", ":memory:"):
        Path(url[len(prefix) :]).parent.mkdir(parents=True, exist_ok=True)


class Database:
    def __init__(self, url: str, *, threads: int = 4) -> None:
        ensure_sqlite_dir(url)
        self.url = url
        self.engine = create_engine(url)
        self._limiter: anyio.CapacityLimiter | None = None
        self._threads = threads

    def migrate(self) -> None:
        migrate(self.engine)

    def run_sync(self, fn: Callable[Concatenate[Connection, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run `fn(conn, ...)` in one transaction, on the calling thread (for CLI commands)."""
        with self.engine.begin() as conn:
            return fn(conn, *args, **kwargs)

    async def run(self, fn: Callable[Concatenate[Connection, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run `fn(conn, ...)` in one transaction on a worker thread."""
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(self._threads)
        call = partial(self.run_sync, fn, *args, **kwargs)
        return await anyio.to_thread.run_sync(call, limiter=self._limiter)

    def dispose(self) -> None:
        self.engine.dispose()
