"""`/v1/health`, `/v1/auth/login`, `/v1/me`, `/v1/tokens`."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Request, Response

from contract.errors import Forbidden, NotFound, RateLimited, Unauthenticated
from contract.models import (
    ApiToken,
    ApiTokenCreated,
    Health,
    LoginRequest,
    LoginResponse,
    Me,
    Org,
    TokenCreate,
    TokenList,
    User,
)
from control_plane import __version__
from control_plane.auth import store as accounts
from control_plane.auth.passwords import verify_password
from control_plane.auth.principal import Principal
from control_plane.auth.throttle import Limit, source_address
from control_plane.clock import parse
from control_plane.state import Caller, Fleet, FleetDep
from control_plane.storage.outage import is_outage

router = APIRouter(prefix="/v1")


@router.get("/health", response_model=Health, tags=["health"], responses={503: {"model": Health}})
async def health(fleet: FleetDep) -> Response:
    """Whether this process can serve: 503 while its database or its bus is away, so that a load
    balancer takes it out of rotation. Cheap: the database's state comes from the latest
    transaction when it is recent (`Database.health`), the bus's from its client."""
    database = await fleet.db.health()
    bus: Literal["ok", "unavailable"] | None = None
    if fleet.replicas is not None:
        bus = "ok" if fleet.replicas.bus.connected else "unavailable"
    agents = fleet.hub.online_count  # those linked here; with the others' when the database says
    if database == "ok":
        try:
            agents = await fleet.agents_online()
        except Exception as exc:
            if not is_outage(exc):
                raise
            database = "unavailable"
    serving = database == "ok" and bus != "unavailable"
    body = Health(
        status="ok" if serving else "unavailable", version=__version__, agents_online=agents, database=database, bus=bus
    )
    return Response(body.model_dump_json(), status_code=200 if serving else 503, media_type="application/json")


@router.post("/auth/login", response_model=LoginResponse, tags=["auth"])
async def login(body: LoginRequest, request: Request, fleet: FleetDep) -> LoginResponse:
    source = source_address(request, fleet.settings.trusted_proxies)
    throttle = fleet.login_throttle
    if (wait := await throttle.retry_after(body.email, source)) is not None:
        raise RateLimited(f"too many failed logins: try again in {wait} s", details={"retry_after_s": wait})
    user = await fleet.db.run(accounts.user_by_email, body.email)
    # Verify even for an unknown email: both failures take the same time and say the same thing.
    if not verify_password(user["password_hash"] if user else None, body.password) or user is None:
        # Counted, not audited one by one (a flood of guesses would flood the log): the failure
        # that reaches a limit writes one entry.
        for limit in await throttle.failed(body.email, source):
            await _audit_throttled(fleet, user, source, limit)
        raise Unauthenticated("wrong email or password")
    await throttle.succeeded(body.email, source)
    membership = await fleet.db.run(accounts.first_membership, user["id"])
    if membership is None:
        raise Forbidden("this user belongs to no organisation")
    token, expires_at = await fleet.db.run(
        accounts.create_session, user["id"], membership["org_id"], fleet.settings.session_ttl
    )
    await fleet.audit(None, "auth.login", org_id=membership["org_id"], user_id=user["id"], actor_email=user["email"])
    return LoginResponse(
        token=token,
        expires_at=parse(expires_at),
        user=User.model_validate(user),
    )


async def _audit_throttled(fleet: Fleet, user: dict[str, Any] | None, source: str, limit: Limit) -> None:
    """Failures reached a limit: one entry, in the audit log of the account's org when the email is
    a user's (so its owners see the attack), else in no org's. The actor is unknown (no user, no
    email); the target is the account's email, but only a user's: an email that is no account's
    is not kept (people type passwords into that field). Never the password."""
    membership = await fleet.db.run(accounts.first_membership, user["id"]) if user else None
    policy = fleet.login_throttle.policy
    failures = policy.per_account_source if limit == "account_source" else policy.per_source
    await fleet.audit(
        None,
        "auth.throttled",
        org_id=membership["org_id"] if membership else None,
        outcome="error",
        error_code="rate_limited",
        target=user["email"] if user else None,
        details={"source": source, "limit": limit, "failures": failures, "window_s": policy.window_s},
    )


@router.get("/me", response_model=Me, tags=["auth"])
async def me(caller: Caller) -> Me:
    return Me(
        user=User(id=caller.user_id, email=caller.email, name=caller.name, super_admin=caller.super_admin),
        org=Org(id=caller.org_id, name=caller.org_name, plan=caller.plan),
        role=caller.role,
        capabilities=sorted(caller.capabilities),
    )


def _require_max(caller: Principal) -> None:
    caller.require_plan("max")


@router.get("/tokens", response_model=TokenList, tags=["auth"])
async def list_tokens(caller: Caller, fleet: FleetDep) -> TokenList:
    _require_max(caller)
    rows = await fleet.db.run(accounts.list_api_tokens, caller.user_id, caller.org_id)
    return TokenList(tokens=[ApiToken.model_validate(r) for r in rows])


@router.post("/tokens", response_model=ApiTokenCreated, status_code=201, tags=["auth"])
async def create_token(body: TokenCreate, caller: Caller, fleet: FleetDep) -> ApiTokenCreated:
    _require_max(caller)
    row, token = await fleet.db.run(accounts.create_api_token, caller.user_id, caller.org_id, body.name)
    await fleet.audit(caller, "tokens.create", target=row["id"], details={"name": body.name}, secrets=[token])
    return ApiTokenCreated(**row, token=token)


@router.delete("/tokens/{token_id}", status_code=204, tags=["auth"])
async def delete_token(token_id: str, caller: Caller, fleet: FleetDep) -> Response:
    _require_max(caller)
    if not await fleet.db.run(accounts.delete_api_token, caller.user_id, caller.org_id, token_id):
        raise NotFound("no such token")
    await fleet.audit(caller, "tokens.delete", target=token_id)
    return Response(status_code=204)
