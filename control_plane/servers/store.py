"""Servers and the presence facts the hub reports about their agents."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from control_plane.auth.secrets import AGENT_PREFIX, hash_token, new_id, new_token
from control_plane.clock import now_iso
from control_plane.storage.schema import servers

Row = dict[str, Any]

_PUBLIC = [c for c in servers.c if c.name != "agent_token_hash"]


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
        "created_at": now_iso(),
    }
    conn.execute(servers.insert().values(**row, agent_token_hash=hash_token(token) if token else None))
    return row, token


def list_servers(conn: Connection, org_id: str) -> list[Row]:
    query = sa.select(*_PUBLIC).where(servers.c.org_id == org_id).order_by(servers.c.name)
    return [dict(r) for r in conn.execute(query).mappings()]


def get_server(conn: Connection, org_id: str, server_id: str) -> Row | None:
    """The server if it belongs to `org_id`: another org's server does not exist for the caller."""
    query = sa.select(*_PUBLIC).where(servers.c.id == server_id, servers.c.org_id == org_id)
    found = conn.execute(query).mappings().first()
    return dict(found) if found else None


def server_by_name(conn: Connection, org_id: str, name: str) -> Row | None:
    query = sa.select(*_PUBLIC).where(servers.c.name == name, servers.c.org_id == org_id)
    found = conn.execute(query).mappings().first()
    return dict(found) if found else None


def org_of_server(conn: Connection, server_id: str) -> str | None:
    org_id: str | None = conn.execute(sa.select(servers.c.org_id).where(servers.c.id == server_id)).scalar()
    return org_id


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


def record_presence(conn: Connection, server_id: str, *, online: bool, version: str | None) -> None:
    now = now_iso()
    values: Row = {"agent_last_seen_at": now}
    if online:
        values |= {"agent_connected_at": now, "agent_version": version}
    conn.execute(servers.update().where(servers.c.id == server_id).values(values))
