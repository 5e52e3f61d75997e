"""Reading a control plane's database in a test, whichever kind it is (SQLite or PostgreSQL)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from control_plane.storage.db import create_engine


def query(db_url: str, sql: str, **params: Any) -> list[tuple[Any, ...]]:
    """The rows of `sql` (named `:params`) on the database at `db_url`, in a connection of its own."""
    engine = create_engine(db_url)
    try:
        with engine.connect() as connection:
            return [tuple(row) for row in connection.execute(sa.text(sql), params)]
    finally:
        engine.dispose()


def is_postgres(db_url: str) -> bool:
    return sa.make_url(db_url).get_backend_name() == "postgresql"
