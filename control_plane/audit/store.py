"""The audit log: who did what, to which target, with what outcome. Secrets never reach it.

`mask` is applied to every `details` object before it is written: values under secret-looking
keys become `***`, and so does any occurrence of a secret value the caller names.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from control_plane.clock import now_iso
from control_plane.storage.schema import audit_log

MASK = "***"
_SECRET_KEY = re.compile(r"pass(word|phrase)?|secret|token|api[_-]?key|private[_-]?key|credential|auth", re.I)


def mask(value: Any, secrets: Iterable[str] = ()) -> Any:
    """A copy of `value` with secret-keyed fields and every given secret string replaced by `***`."""
    known = sorted({s for s in secrets if s}, key=len, reverse=True)
    return _mask(value, known)


def _mask(value: Any, known: list[str]) -> Any:
    if isinstance(value, dict):
        return {k: MASK if _SECRET_KEY.search(str(k)) else _mask(v, known) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_mask(v, known) for v in value]
    if isinstance(value, str):
        for secret in known:
            value = value.replace(secret, MASK)
        return value
    return value


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
    conn.execute(
        audit_log.insert().values(
            at=now_iso(),
            org_id=org_id,
            user_id=user_id,
            actor_email=actor_email,
            server_id=server_id,
            action=action,
            target=mask(target, secrets) if target else None,
            details=orjson.dumps(mask(details or {}, secrets)).decode(),
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
) -> list[dict[str, Any]]:
    """The org's entries, newest first; `before` is the id of the oldest entry already seen."""
    query = sa.select(audit_log).where(audit_log.c.org_id == org_id)
    if before is not None:
        query = query.where(audit_log.c.id < before)
    if server_id is not None:
        query = query.where(audit_log.c.server_id == server_id)
    if action is not None:
        query = query.where(audit_log.c.action == action)
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
