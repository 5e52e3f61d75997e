"""The audit log: who did what, to which target, with what outcome. Secrets never reach it.

`masking.mask_fields` is applied to every `details` object before it is written: values under
secret-looking keys become `***`, and so does any form of a secret value the caller names.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from control_plane.clock import now_iso
from control_plane.masking import Masker, mask_fields
from control_plane.storage.schema import audit_log

# PostgreSQL's text cannot hold NUL, SQLite's can; an audited target is whatever a request named
# (a generated path may hold one), so it is written with a visible stand-in on both. `details` is
# JSON, where NUL is already the escape \u0000.
NUL_STAND_IN = "\u2400"  # ␀


def _storable(text: str) -> str:
    return text.replace("\x00", NUL_STAND_IN)


def record(
    conn: Connection,
    *,
    action: str,
    outcome: str = "ok",
    org_id: str | None = None,
    user_id: str | None = None,
    actor_email: str | None = None,
    server_id: str | None = None,
    target: str | None = None,
    details: dict[str, Any] | None = None,
    error_code: str | None = None,
    secrets: Iterable[str] = (),
) -> None:
    masker = Masker(secrets)
    conn.execute(
        audit_log.insert().values(
            at=now_iso(),
            org_id=org_id,
            user_id=user_id,
            actor_email=actor_email,
            server_id=server_id,
            action=action,
            target=_storable(masker(target)) if target else None,
            details=orjson.dumps(mask_fields(details or {}, masker)).decode(),
            outcome=outcome,
            error_code=error_code,
        )
    )


def entries(
    conn: Connection,
    org_id: str,
    *,
    limit: int = 100,
    before: int | None = None,
    server_id: str | None = None,
    action: str | None = None,
    actor: str | None = None,
    outcome: str | None = None,
    text: str | None = None,
) -> list[dict[str, Any]]:
    """The org's entries, newest first; `before` is the id of the oldest entry already seen.

    `actor` is an email or a user id; `text` is looked for, in any case, in the action, target,
    actor's email and error code (`%` and `_` in it are plain characters). The filters are applied
    here, not by the caller, so that a page of `limit` matching entries stays a full page and
    `before` pages on correctly.
    """
    query = sa.select(audit_log).where(audit_log.c.org_id == org_id)
    if before is not None:
        # Bound as BIGINT: the contract allows any 63-bit `before`; PostgreSQL's INTEGER would overflow.
        query = query.where(audit_log.c.id < sa.literal(before, sa.BigInteger))
    if server_id is not None:
        query = query.where(audit_log.c.server_id == server_id)
    if action is not None:
        query = query.where(audit_log.c.action == action)
    if actor is not None:
        query = query.where(sa.or_(audit_log.c.actor_email == actor, audit_log.c.user_id == actor))
    if outcome is not None:
        query = query.where(audit_log.c.outcome == outcome)
    if text is not None:
        searched = (audit_log.c.action, audit_log.c.target, audit_log.c.actor_email, audit_log.c.error_code)
        folded = text.lower()
        query = query.where(sa.or_(*(sa.func.lower(c).contains(folded, autoescape=True) for c in searched)))
    rows = conn.execute(query.order_by(audit_log.c.id.desc()).limit(limit)).mappings()
    return [
        {
            "id": str(r["id"]),
            "at": r["at"],
            "actor": {"user_id": r["user_id"], "email": r["actor_email"]},
            "server_id": r["server_id"],
            "action": r["action"],
            "target": r["target"],
            "details": orjson.loads(r["details"]),
            "outcome": r["outcome"],
            "error_code": r["error_code"],
        }
        for r in rows
    ]
