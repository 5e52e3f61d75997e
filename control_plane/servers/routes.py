"""`/v1/servers`: the org's servers, their agents' presence, and its live feed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Request, Response
from pydantic import BeforeValidator, ConfigDict, Field
from sqlalchemy.exc import IntegrityError

from contract.errors import Conflict, NotFound
from contract.models import AgentInfo, KernelProtections, Server, ServerCreate, ServerCreated, ServerList
from control_plane import sse
from control_plane.clock import utcnow
from control_plane.hub import AgentSession
from control_plane.servers import store
from control_plane.state import Caller, Fleet, FleetDep
from control_plane.storage.rows import StoredJson

router = APIRouter(prefix="/v1", tags=["servers"])


class _StoredAgent(AgentInfo):
    """A `servers` row's agent columns (``agent_...``) as the wire `AgentInfo`: what its agent's
    last hello said, its job kinds as JSON text."""

    version: str | None = Field(None, validation_alias="agent_version")
    connected_at: datetime | None = Field(None, validation_alias="agent_connected_at")
    last_seen_at: datetime | None = Field(None, validation_alias="agent_last_seen_at")
    job_kinds: Annotated[list[str] | None, StoredJson] = Field(None, validation_alias="agent_job_kinds")


def _kernel_protections(pair: Any) -> Any:
    """The hello's (protected_hardlinks, protected_symlinks) pair as the wire model's fields."""
    if isinstance(pair, tuple):
        hardlinks, symlinks = pair
        return {"protected_hardlinks": hardlinks, "protected_symlinks": symlinks}
    return pair


class _LinkedAgent(AgentInfo):
    """The hub's session of an agent linked here (`AgentSession`) as the wire `AgentInfo`: online,
    seen now."""

    model_config = ConfigDict(from_attributes=True)

    online: bool = True
    last_seen_at: datetime | None = Field(default_factory=utcnow)
    kernel_protections: Annotated[KernelProtections | None, BeforeValidator(_kernel_protections)] = None


def server_model(row: dict[str, Any], session: AgentSession | None, *, linked_elsewhere: bool = False) -> Server:
    """The wire `Server`: presence from the live hub (or, for an agent linked to another replica,
    from what its hello stored), the rest from the stored row."""
    agent: AgentInfo
    if session is not None:
        agent = _LinkedAgent.model_validate(session)
    elif linked_elsewhere:
        agent = _StoredAgent.model_validate({**row, "online": True, "agent_last_seen_at": utcnow()})
    else:
        agent = _StoredAgent.model_validate({**row, "online": False})
    return Server.model_validate({**row, "agent": agent})


async def server_row(fleet: Fleet, caller_org: str, server_id: str) -> dict[str, Any]:
    """The caller's server, or 404: another org's server is indistinguishable from none. Kept
    for up to a second (`Fleet.servers_kept`): a server deleted or changed through this process is
    read again at once; through another replica, within that second. A server's org never changes,
    and the key holds it, so another org's server is never answered from what is kept."""
    kept = fleet.servers_kept.get((caller_org, server_id))
    if kept is not None:
        return dict(kept)  # a copy: callers may add to it
    generation = fleet.servers_kept.generation
    row = await fleet.db.read(store.get_server, caller_org, server_id)
    if row is None:
        raise NotFound("no such server")
    fleet.servers_kept.keep((caller_org, server_id), dict(row), generation)
    return row


@router.get("/servers", response_model=ServerList)
async def list_servers(caller: Caller, fleet: FleetDep) -> ServerList:
    rows = await fleet.db.read(store.list_servers, caller.org_id)
    elsewhere = await fleet.linked_elsewhere([r["id"] for r in rows if not fleet.hub.is_online(r["id"])])
    return ServerList(
        servers=[server_model(r, fleet.hub.session(r["id"]), linked_elsewhere=r["id"] in elsewhere) for r in rows]
    )


@router.post("/servers", response_model=ServerCreated, status_code=201)
async def create_server(body: ServerCreate, caller: Caller, fleet: FleetDep) -> ServerCreated:
    caller.require_role("owner", "admin")
    if await fleet.db.run(store.server_by_name, caller.org_id, body.name):
        raise Conflict(f"a server named {body.name} exists already")
    try:
        row, token = await fleet.db.run(store.create_server, caller.org_id, body.name, body.kind, body.address)
    except IntegrityError as exc:  # the same name, created since the look-up (another request, another replica)
        raise Conflict(f"a server named {body.name} exists already") from exc
    await fleet.audit(caller, "servers.create", server_id=row["id"], target=body.name, details={"kind": body.kind})
    return ServerCreated(server=server_model(row, None), agent_token=token or "")


@router.get("/servers/events", response_class=Response, responses={200: {"content": {"text/event-stream": {}}}})
async def presence_events(request: Request, caller: Caller, fleet: FleetDep) -> Response:
    """SSE: `event: presence` with a `PresenceEvent` each time an agent of the org connects or
    drops, and `event: pulse` with a `PulseEvent` (no id) for the linked agents' pulses: at the
    start every one held, then each as it comes."""
    after = fleet.presence.resume_point(request.headers.get("last-event-id"))
    return sse.response(_presence_chunks(fleet, caller.org_id, after))


async def _presence_chunks(fleet: Fleet, org_id: str, after: int) -> AsyncIterator[bytes]:
    # The first event names where the stream starts, so a client can resume even if nothing happens.
    feed = fleet.presence
    # The pulses held come with the first event, and the feed's from that same instant on: none
    # is lost between the two, none sent twice.
    mark, held = feed.pulse_mark, [sse.event("pulse", payload) for payload in fleet.pulses.of_org(org_id)]
    yield b"retry: 2000\n" + sse.event("ready", {}, feed.event_id(after)) + b"".join(held)
    async for batch in feed.follow(org_id, after, pulses_after=mark):
        if not batch:
            yield sse.KEEPALIVE
            continue
        yield b"".join(
            sse.event(name, payload, None if seq is None else feed.event_id(seq)) for name, seq, payload in batch
        )


@router.get("/servers/{server_id}", response_model=Server)
async def get_server(server_id: str, caller: Caller, fleet: FleetDep) -> Server:
    row = await server_row(fleet, caller.org_id, server_id)
    session = fleet.hub.session(server_id)
    elsewhere = session is None and server_id in await fleet.linked_elsewhere([server_id])
    return server_model(row, session, linked_elsewhere=elsewhere)


@router.delete("/servers/{server_id}", status_code=204)
async def delete_server(server_id: str, caller: Caller, fleet: FleetDep) -> Response:
    await server_row(fleet, caller.org_id, server_id)
    caller.require_role("owner", "admin")
    await fleet.db.run(store.delete_server, caller.org_id, server_id)  # its agent token goes with it
    fleet.hub.disconnect(server_id)
    if fleet.replicas is not None:
        fleet.replicas.disconnect_everywhere(server_id)
    await fleet.audit(caller, "servers.delete", server_id=server_id, target=server_id)
    return Response(status_code=204)
