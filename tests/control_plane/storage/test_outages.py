"""What the control plane takes for an outage of its database (answered 503, waited out by its
long-running tasks) and what for a bug (a 500, raised at once), on real errors of real SQLite
files and a real PostgreSQL driver. The outages themselves, end to end, are in
tests/control_plane/replicas/test_faults.py (PostgreSQL and NATS stopped under a cluster and a single serve)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
import pytest
import sqlalchemy as sa

from control_plane.storage import Database
from control_plane.storage.outage import first_line, is_outage
from fleetdeck.launcher import free_port
from tests.helpers.postgres_server import PostgresDatabases


def _raised(engine: sa.engine.Engine, sql: str) -> BaseException:
    with pytest.raises(sa.exc.DBAPIError) as raised, engine.begin() as conn:
        conn.execute(sa.text(sql))
    return raised.value


def test_a_sqlite_file_locked_by_another_writer_is_an_outage_and_a_missing_table_a_bug(tmp_path: Path) -> None:
    """SQLite's "database is locked" comes only once its busy timeout (30 s in the control plane,
    none here) has run out while another process writes: the file is away for now, as a
    restarting PostgreSQL is. A query the schema does not know is a bug."""
    path = tmp_path / "fleet.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (x INTEGER)")
    holder.execute("BEGIN EXCLUSIVE")  # another process's write, not yet committed
    engine = sa.create_engine(f"sqlite:///{path}", connect_args={"timeout": 0})
    try:
        locked = _raised(engine, "INSERT INTO t VALUES (1)")
        assert is_outage(locked) and first_line(locked) == "database is locked"
        holder.execute("ROLLBACK")
        assert not is_outage(_raised(engine, "SELECT * FROM no_such_table"))
        assert not is_outage(_raised(engine, "INSERT INTO t VALUES ('a', 'b')"))
    finally:
        holder.close()
        engine.dispose()


def test_a_postgresql_server_that_does_not_answer_is_an_outage_and_a_broken_constraint_a_bug(
    control_plane_postgres: PostgresDatabases,
) -> None:
    nobody = f"postgresql+psycopg://fleetdeck:x@127.0.0.1:{free_port()}/fleetdeck"  # nothing listens
    away = Database(nobody)
    try:
        refused = _raised(away.engine, "SELECT 1")
        assert is_outage(refused) and "refused" in first_line(refused)

        async def health() -> str:
            return await away.health()

        assert anyio.run(health) == "unavailable" and away.state.health == "unavailable"
    finally:
        away.dispose()
    there = Database(control_plane_postgres.create("outages"))
    there.migrate()
    try:
        duplicate = "INSERT INTO orgs (id, name, plan, created_at) VALUES ('o', 'o', 'max', 'now')"
        there.run_sync(lambda conn: conn.execute(sa.text(duplicate)))
        bug = _raised(there.engine, duplicate)
        assert isinstance(bug, sa.exc.IntegrityError) and not is_outage(bug)

        async def retried() -> None:
            await there.run_retrying(lambda conn: conn.execute(sa.text(duplicate)))

        with pytest.raises(sa.exc.IntegrityError):  # a bug is raised at once, not retried forever
            anyio.run(retried)
        assert there.state.health == "ok"  # and it says nothing of the database's health
    finally:
        there.dispose()
