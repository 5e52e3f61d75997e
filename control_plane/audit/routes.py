"""`GET /v1/audit`: the org's audit log, for owners and admins. Secrets were masked on the way in.

Besides the contract's `server_id`, `action`, `limit` and `before`, three optional filters (older
clients never send them): `actor` (an email or a user id), `outcome` (`ok` or `error`) and `q`,
text searched for in the action, target, actor's email and error code (any case), so that a
search finds entries older than the ones a client has loaded.
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Query

from contract.models import MAX_INTEGER, AuditList
from control_plane.audit import store as audit
from control_plane.state import Caller, FleetDep

router = APIRouter(prefix="/v1", tags=["audit"])


@router.get("/audit", response_model=AuditList)
async def audit_entries(
    caller: Caller,
    fleet: FleetDep,
    server_id: str | None = None,
    action: str | None = None,
    actor: str | None = None,
    outcome: Literal["ok", "error"] | None = None,
    q: str | None = Query(None, min_length=1, max_length=200),
    limit: int = Query(100, ge=1, le=1000),
    before: int | None = Query(None, ge=1, le=MAX_INTEGER),
) -> AuditList:
    caller.require_role("owner", "admin")
    rows = await fleet.db.run(
        audit.entries,
        caller.org_id,
        limit=limit,
        before=before,
        server_id=server_id,
        action=action,
        actor=actor,
        outcome=outcome,
        text=q,
    )
    return AuditList.model_validate({"entries": rows})
