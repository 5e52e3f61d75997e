"""Orgs, users, memberships and tokens."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from control_plane.auth.secrets import API_PREFIX, SESSION_PREFIX, hash_token, new_id, new_token
from control_plane.clock import iso, now_iso, utcnow
from control_plane.storage.schema import memberships, orgs, tokens, users

Row = dict[str, Any]


def create_org(conn: Connection, name: str, plan: str) -> Row:
    row = {"id": new_id("org"), "name": name, "plan": plan, "created_at": now_iso()}
    conn.execute(orgs.insert().values(row))
    return row


def org_by_name(conn: Connection, name: str) -> Row | None:
    found = conn.execute(orgs.select().where(orgs.c.name == name)).mappings().first()
    return dict(found) if found else None


def set_org_plan(conn: Connection, org_id: str, plan: str) -> None:
    conn.execute(orgs.update().where(orgs.c.id == org_id).values(plan=plan))


def create_user(conn: Connection, email: str, name: str, password_hash: str, super_admin: bool = False) -> Row:
    row = {
        "id": new_id("usr"),
        "email": email.strip().lower(),
        "name": name,
        "password_hash": password_hash,
        "super_admin": super_admin,
        "created_at": now_iso(),
    }
    conn.execute(users.insert().values(row))
    return row


def user_by_email(conn: Connection, email: str) -> Row | None:
    found = conn.execute(users.select().where(users.c.email == email.strip().lower())).mappings().first()
    return dict(found) if found else None


def set_password(conn: Connection, user_id: str, password_hash: str) -> None:
    conn.execute(users.update().where(users.c.id == user_id).values(password_hash=password_hash))


def add_membership(conn: Connection, user_id: str, org_id: str, role: str) -> None:
    conn.execute(
        memberships.insert().values(id=new_id("mem"), user_id=user_id, org_id=org_id, role=role, created_at=now_iso())
    )


def first_membership(conn: Connection, user_id: str) -> Row | None:
    query = memberships.select().where(memberships.c.user_id == user_id).order_by(memberships.c.created_at)
    found = conn.execute(query).mappings().first()
    return dict(found) if found else None


def create_session(conn: Connection, user_id: str, org_id: str, ttl: timedelta) -> tuple[str, str]:
    """A new session token; returns (token, expires_at)."""
    token = new_token(SESSION_PREFIX)
    expires_at = iso(utcnow() + ttl)
    conn.execute(
        tokens.insert().values(
            id=new_id("ses"),
            kind="session",
            token_hash=hash_token(token),
            user_id=user_id,
            org_id=org_id,
            created_at=now_iso(),
            expires_at=expires_at,
        )
    )
    return token, expires_at


def create_api_token(conn: Connection, user_id: str, org_id: str, name: str) -> tuple[Row, str]:
    token = new_token(API_PREFIX)
    row = {"id": new_id("tok"), "name": name, "created_at": now_iso()}
    conn.execute(
        tokens.insert().values(
            **row, kind="api", token_hash=hash_token(token), user_id=user_id, org_id=org_id, expires_at=None
        )
    )
    return row, token


def list_api_tokens(conn: Connection, user_id: str, org_id: str) -> list[Row]:
    query = (
        sa.select(tokens.c.id, tokens.c.name, tokens.c.created_at)
        .where(tokens.c.kind == "api", tokens.c.user_id == user_id, tokens.c.org_id == org_id)
        .order_by(tokens.c.created_at)
    )
    return [dict(r) for r in conn.execute(query).mappings()]


def delete_api_token(conn: Connection, user_id: str, org_id: str, token_id: str) -> bool:
    result = conn.execute(
        tokens.delete().where(
            tokens.c.id == token_id, tokens.c.kind == "api", tokens.c.user_id == user_id, tokens.c.org_id == org_id
        )
    )
    return result.rowcount > 0


# Built once, with a bound parameter (as control_plane.servers.store's per-request reads are).
_IDENTITY = (
    sa.select(
        tokens.c.kind.label("token_kind"),
        tokens.c.expires_at,
        users.c.id.label("user_id"),
        users.c.email,
        users.c.name,
        users.c.super_admin,
        orgs.c.id.label("org_id"),
        orgs.c.name.label("org_name"),
        orgs.c.plan,
        memberships.c.role,
        memberships.c.capabilities,
    )
    .select_from(
        tokens.join(users, users.c.id == tokens.c.user_id)
        .join(orgs, orgs.c.id == tokens.c.org_id)
        .join(memberships, (memberships.c.user_id == users.c.id) & (memberships.c.org_id == orgs.c.id))
    )
    .where(tokens.c.token_hash == sa.bindparam("token_hash"))
)


def identity_for_token(conn: Connection, token: str) -> Row | None:
    """Everything a request needs to know about its caller, from one indexed lookup."""
    found = conn.execute(_IDENTITY, {"token_hash": hash_token(token)}).mappings().first()
    if found is None:
        return None
    row = dict(found)
    raw = row.pop("capabilities")
    row["narrowed"] = frozenset(orjson.loads(raw)) if raw else None
    return row
