"""Servers and the presence facts the hub reports about their agents."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from control_plane.auth.secrets import AGENT_PREFIX, hash_token, new_id, new_token
from control_plane.clock import now_iso
from control_plane.storage.schema import servers

Row = dict[str, Any]

_PUBLIC = [c for c in servers.c if c.name != "agent_token_hash"]
# The per-request reads are built once, with bound parameters: SQLAlchemy then reuses the
# statement's cache key and compiled form, where a statement built per call was built, keyed
# and looked up each time (some 0.7 ms against 0.2 ms per read here, measured on SQLite; the
# server's lookup was 18 % of the control plane's time under benchmarks/concurrency.py).
_ORG_SERVERS = sa.select(*_PUBLIC).where(servers.c.org_id == sa.bindparam("org_id")).order_by(servers.c.name)
_ORG_SERVER = sa.select(*_PUBLIC).where(
    servers.c.id == sa.bindparam("server_id"), servers.c.org_id == sa.bindparam("org_id")
)


def create_server(conn: Connection, org_id: str, name: str, kind: str, address: str | None) -> tuple[Row, str | None]:
    """A new server; a full server gets an agent token, returned here once and stored hashed."""
    token = new_token(AGENT_PREFIX) if kind == "full" else None
    row: Row = {
        "id": new_id("srv"),
        "org_id": org_id,
        "name": name,
        "kind": kind,
        "address": address,
        "agent_version": None,
        "agent_connected_at": None,
        "agent_last_seen_at": None,
        "agent_job_kinds": None,
        "created_at": now_iso(),
    }
    conn.execute(servers.insert().values(**row, agent_token_hash=hash_token(token) if token else None))
    return row, token


def list_servers(conn: Connection, org_id: str) -> list[Row]:
    return [dict(r) for r in conn.execute(_ORG_SERVERS, {"org_id": org_id}).mappings()]


def get_server(conn: Connection, org_id: str, server_id: str) -> Row | None:
    """The server if it belongs to `org_id`: another org's server does not exist for the caller."""
    found = conn.execute(_ORG_SERVER, {"server_id": server_id, "org_id": org_id}).mappings().first()
    return dict(found) if found else None


def server_by_name(conn: Connection, org_id: str, name: str) -> Row | None:
    query = sa.select(*_PUBLIC).where(servers.c.name == name, servers.c.org_id == org_id)
    found = conn.execute(query).mappings().first()
    return dict(found) if found else None


def org_of_server(conn: Connection, server_id: str) -> str | None:
    org_id: str | None = conn.execute(sa.select(servers.c.org_id).where(servers.c.id == server_id)).scalar()
    return org_id


def presence_row(conn: Connection, server_id: str) -> Row | None:
    """What a presence event needs beside the live session: the server's org and stored job kinds."""
    query = sa.select(servers.c.org_id, servers.c.agent_job_kinds).where(servers.c.id == server_id)
    found = conn.execute(query).mappings().first()
    return dict(found) if found else None


def delete_server(conn: Connection, org_id: str, server_id: str) -> bool:
    result = conn.execute(servers.delete().where(servers.c.id == server_id, servers.c.org_id == org_id))
    return result.rowcount > 0


def rotate_agent_token(conn: Connection, server_id: str) -> str:
    token = new_token(AGENT_PREFIX)
    conn.execute(servers.update().where(servers.c.id == server_id).values(agent_token_hash=hash_token(token)))
    return token


def server_for_agent_token(conn: Connection, token: str) -> Row | None:
    """The full server an agent token belongs to; lite servers have no agent and match nothing."""
    query = sa.select(servers.c.id, servers.c.org_id).where(
        servers.c.agent_token_hash == hash_token(token), servers.c.kind == "full"
    )
    found = conn.execute(query).mappings().first()
    return dict(found) if found else None


def record_presence(
    conn: Connection, server_id: str, *, online: bool, version: str | None, job_kinds: Sequence[str] | None
) -> None:
    """An agent linked (what its hello said replaces what was stored) or left (which keeps it)."""
    now = now_iso()
    values: Row = {"agent_last_seen_at": now}
    if online:
        kinds = orjson.dumps(list(job_kinds)).decode() if job_kinds is not None else None
        values |= {"agent_connected_at": now, "agent_version": version, "agent_job_kinds": kinds}
    conn.execute(servers.update().where(servers.c.id == server_id).values(values))


def stored_job_kinds(row: Row) -> list[str] | None:
    """The job kinds a server row holds, as its agent last announced them."""
    text = row["agent_job_kinds"]
    return list(orjson.loads(text)) if text is not None else None
