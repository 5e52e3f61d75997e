"""The file workspace routes. The control plane stores no file content: it checks who may do what
in which scope, relays the call to the server's agent (which jails every path), and audits writes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from fastapi import APIRouter, Query, Response

from api_client.errors import BadRequest, LiteServer, ValidationFailed
from api_client.models import Entry, FileContent, Scope, ScopeList

from ..auth.principal import Principal
from ..routes.servers import server_row
from ..state import Caller, Fleet, FleetDep

router = APIRouter(prefix="/v1/servers/{server_id}/fs", tags=["files"])

MAX_LIST_LIMIT = 50000


@dataclass(frozen=True)
class FsTarget:
    """A checked (server, scope) pair: the server is the caller's, full, and the scope allowed."""

    server_id: str
    scope: str
    domain: str | None

    def params(self, **extra: Any) -> dict[str, Any]:
        return {"scope": self.scope, "domain": self.domain, **extra}


async def _full_server(fleet: Fleet, caller: Principal, server_id: str) -> None:
    row = await server_row(fleet, caller.org_id, server_id)
    if row["kind"] != "full":
        raise LiteServer("this is a lite server: it has no agent to run file operations")


async def resolve_target(fleet: Fleet, caller: Principal, server_id: str, scope: str, domain: str | None) -> FsTarget:
    await _full_server(fleet, caller, server_id)
    if scope not in ("site", "root"):
        raise BadRequest(f"unknown scope {scope!r}: use site or root", details={"allowed": ["site", "root"]})
    if scope == "site":
        caller.require("observe")
        if not domain:
            raise ValidationFailed(
                "scope=site needs a domain", details={"errors": [{"loc": ["query", "domain"], "msg": "required"}]}
            )
    else:
        caller.require("root_scope")
        domain = None
    return FsTarget(server_id, scope, domain)


def _json(body: Any) -> Response:
    # Listings can hold 50,000 entries: encode with orjson straight from the agent's dicts.
    return Response(orjson.dumps(body), media_type="application/json")


@router.get("/scopes", response_model=ScopeList)
async def scopes(server_id: str, caller: Caller, fleet: FleetDep) -> ScopeList:
    await _full_server(fleet, caller, server_id)
    caller.require("observe")
    answer = await fleet.call_agent(server_id, "fs.scopes", {})
    listed = [Scope(scope="site", domain=s["domain"], slug=s["slug"]) for s in answer["sites"]]
    if "root_scope" in caller.capabilities:
        listed.append(Scope(scope="root"))
    return ScopeList(scopes=listed)


@router.get("/list", response_class=Response, responses={200: {"description": "a `Listing`"}})
async def list_dir(
    server_id: str,
    caller: Caller,
    fleet: FleetDep,
    scope: str = "site",
    domain: str | None = None,
    path: str = "",
    cursor: str | None = None,
    limit: int = Query(5000, ge=1, le=MAX_LIST_LIMIT),
) -> Response:
    target = await resolve_target(fleet, caller, server_id, scope, domain)
    params = target.params(path=path, cursor=cursor, limit=limit)
    return _json(await fleet.call_agent(server_id, "fs.list", params))


@router.get("/stat", response_model=Entry)
async def stat(
    server_id: str, caller: Caller, fleet: FleetDep, scope: str = "site", domain: str | None = None, path: str = ""
) -> Response:
    target = await resolve_target(fleet, caller, server_id, scope, domain)
    return _json(await fleet.call_agent(server_id, "fs.stat", target.params(path=path)))


@router.get("/read", response_model=FileContent)
async def read(
    server_id: str, caller: Caller, fleet: FleetDep, scope: str = "site", domain: str | None = None, path: str = ""
) -> Response:
    target = await resolve_target(fleet, caller, server_id, scope, domain)
    return _json(await fleet.call_agent(server_id, "fs.read", target.params(path=path)))
