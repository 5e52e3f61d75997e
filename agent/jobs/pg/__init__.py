"""``pg *``: PostgreSQL, driven with its own client tools (psql, pg_dump, pg_restore, vacuumdb)."""

from __future__ import annotations

from agent.jobs.pg import databases, dumps, hba, roles
from agent.jobs.toolkit.needs import Tool

NEEDS = (Tool("psql"),)  # every kind talks to the server with it

KINDS = [*databases.KINDS, *roles.KINDS, *dumps.KINDS, *hba.KINDS]
