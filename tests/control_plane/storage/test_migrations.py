"""The migrations build exactly the tables of `control_plane/storage/schema.py`, on both databases
the control plane runs on: SQLite and PostgreSQL (a fresh database of the session's server each).

An empty database is brought to `head` the way the control plane does it at startup, then
alembic's autogenerate comparison must find nothing to do. What that comparison does not report
on SQLite (a unique constraint the migrations made but the schema no longer has: alembic cannot
drop an unnamed one, so it stays silent) is compared from the reflected tables, with the foreign
keys and their `ON DELETE`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

from control_plane.audit import store as audit
from control_plane.auth.store import create_org
from control_plane.jobs import store as jobs
from control_plane.jobs.lines import Run
from control_plane.replicas.store import add_presence_event
from control_plane.servers.store import create_server
from control_plane.storage import Database
from control_plane.storage.db import MIGRATIONS, current_revision, newest_revision
from control_plane.storage.schema import audit_log, metadata, presence_events


@pytest.fixture
def migrated(database_url: str) -> Iterator[Database]:
    db = Database(database_url)
    db.migrate()
    yield db
    db.dispose()


def _diff(db: Database, target: sa.MetaData) -> list[Any]:
    with db.engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True, "compare_server_default": True})
        return list(compare_metadata(context, target))


def test_upgrade_head_builds_the_schema(migrated: Database) -> None:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with migrated.engine.connect() as connection:
        current = MigrationContext.configure(connection).get_current_revision()
    assert current == ScriptDirectory.from_config(config).get_current_head()
    assert _diff(migrated, metadata) == []


def test_the_comparison_sees_a_drift(migrated: Database) -> None:
    """A schema one column and one index ahead of the migrations is reported: the check above is
    not vacuous (it compares this database, with tables in it, against a real schema)."""
    ahead = sa.MetaData()
    for table in metadata.tables.values():
        table.to_metadata(ahead)
    ahead.tables["jobs"].append_column(sa.Column("not_migrated", sa.String, nullable=True))
    sa.Index("ix_not_migrated", ahead.tables["servers"].c.address)
    kinds = sorted(change[0] for change in _diff(migrated, ahead))
    assert kinds == ["add_column", "add_index"]


PAST_32_BITS = 2**31 + 5


def test_ids_and_sequence_numbers_run_past_32_bits(migrated: Database) -> None:
    """Audit entries and presence events are numbered past 2**31 by the database (PostgreSQL's
    sequence, SQLite's rowid: the next after the largest), and a job's output seqs go past it."""
    with migrated.engine.begin() as conn:
        org = create_org(conn, "big", "max")
        server, _token = create_server(conn, org["id"], "web", "full", None)

        def add_rows() -> None:
            audit.record(conn, action="big.ids")
            add_presence_event(conn, org["id"], {"server_id": server["id"], "online": True})

        add_rows()
        for table in (audit_log, presence_events):
            conn.execute(table.update().values(id=PAST_32_BITS))
            if conn.dialect.name == "postgresql":  # its sequence, where SQLite takes the largest rowid
                sequence = sa.select(sa.func.pg_get_serial_sequence(table.name, "id")).scalar_subquery()
                conn.execute(sa.select(sa.func.setval(sequence, PAST_32_BITS)))
        add_rows()
        job = jobs.create_job(
            conn,
            org_id=org["id"],
            server_id=server["id"],
            kind="site.list",
            args={},
            argv=[],
            created_by=None,
            idempotency_key=None,
        )
        jobs.insert_lines(conn, job["id"], [Run(PAST_32_BITS, "stdout", "2026-01-01T00:00:00Z", ["a", "b"])])
    with migrated.engine.connect() as conn:
        for table in (audit_log, presence_events):
            ids = conn.execute(sa.select(table.c.id).order_by(table.c.id)).scalars().all()
            assert ids == [PAST_32_BITS, PAST_32_BITS + 1], table.name
        assert jobs.stored_output(conn, job["id"])[0] == PAST_32_BITS + 1
        assert [run.seq for run in jobs.lines_after(conn, job["id"], PAST_32_BITS - 1, 100)] == [PAST_32_BITS]


def _unique_sets(columns: list[list[str]]) -> set[tuple[str, ...]]:
    return {tuple(sorted(names)) for names in columns}


def _schema_uniques(table: sa.Table) -> set[tuple[str, ...]]:
    listed = [[c.name for c in uc.columns] for uc in table.constraints if isinstance(uc, sa.UniqueConstraint)]
    listed += [[column.name] for column in table.columns if column.unique]
    return _unique_sets(listed)


def _schema_foreign_keys(table: sa.Table) -> set[tuple[tuple[str, ...], str, tuple[str, ...], str | None]]:
    return {
        (
            tuple(fk.column_keys),
            fk.referred_table.name,
            tuple(element.column.name for element in fk.elements),
            fk.ondelete.upper() if fk.ondelete else None,
        )
        for fk in table.foreign_key_constraints
    }


def test_constraints_the_comparison_skips(migrated: Database) -> None:
    with migrated.engine.connect() as connection:
        inspector = sa.inspect(connection)
        for name, table in metadata.tables.items():
            reflected_uniques = _unique_sets([uc["column_names"] for uc in inspector.get_unique_constraints(name)])
            assert reflected_uniques == _schema_uniques(table), name
            reflected_fks = {
                (
                    tuple(fk["constrained_columns"]),
                    fk["referred_table"],
                    tuple(fk["referred_columns"]),
                    (fk["options"].get("ondelete") or "").upper() or None,
                )
                for fk in inspector.get_foreign_keys(name)
            }
            assert reflected_fks == _schema_foreign_keys(table), name


def test_the_newest_revision_read_from_file_names_is_alembics_head(database_url: str) -> None:
    """`migrate` skips alembic when the database is at `newest_revision()`: it must be the head."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    assert ScriptDirectory.from_config(config).get_heads() == [newest_revision()]
    db = Database(database_url)
    try:
        assert current_revision(db.engine) is None
        db.migrate()
        assert current_revision(db.engine) == newest_revision()
        db.migrate()  # at the head: a no-op
        assert current_revision(db.engine) == newest_revision()
    finally:
        db.dispose()


def test_server_addresses_written_as_free_text_become_addresses_or_none(database_url: str) -> None:
    """Revision 0009: an address stored before the rule is normalised when it is one (a host name
    lowercased, an IPv6 address in its short form) and removed when it is not (an option for ssh)."""
    from alembic import command

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    db = Database(database_url)
    try:
        with db.engine.begin() as connection:
            config.attributes["connection"] = connection
            command.upgrade(config, "0008")
        stored = {"a": "10.0.0.11", "b": " Web1.Example.COM ", "c": "fd00:0::12", "d": "-oProxyCommand=id", "e": None}
        with db.engine.begin() as conn:
            org = create_org(conn, "addresses", "max")
            ids = {key: create_server(conn, org["id"], key, "full", value)[0]["id"] for key, value in stored.items()}
        db.migrate()
        with db.engine.connect() as conn:
            rows = dict(conn.execute(sa.text("SELECT id, address FROM servers")).all())
        assert {key: rows[server_id] for key, server_id in ids.items()} == {
            "a": "10.0.0.11",
            "b": "web1.example.com",
            "c": "fd00::12",
            "d": None,
            "e": None,
        }
    finally:
        db.dispose()
