"""`/v1/job-kinds`, `/v1/servers/{id}/jobs`, `/v1/jobs/{id}`, its SSE stream and its cancel.

Every check happens here, before anything reaches a server: the kind is in the whitelist, may be
created on this route, the org's plan allows it, the caller's role has its capability group,
and its arguments fit its schema. Only then is a fixed argv built and dispatched.
"""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Header, Query, Request, Response
from pydantic import ValidationError
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from contract.errors import (
    AgentError,
    AgentOffline,
    IdempotencyMismatch,
    KindNotAllowed,
    LiteServer,
    NotFound,
    NotRunning,
    UnknownKind,
    ValidationFailed,
)
from contract.job_kinds import BuiltJob, JobKind, json_schemas, lookup
from contract.link import protocol
from contract.models import Capability, Job, JobCreate, JobKindList, JobList
from control_plane import sse
from control_plane.audit import store as audit
from control_plane.auth.principal import Principal
from control_plane.clock import parse
from control_plane.errors import BUS_AWAY, unavailable
from control_plane.jobs import store
from control_plane.masking import mask_command_lines, mask_command_output
from control_plane.servers.routes import server_row
from control_plane.state import Caller, Fleet, FleetDep
from control_plane.storage.rows import StoredJson

router = APIRouter(prefix="/v1", tags=["jobs"])

MASK = "***"
# Kinds whose output shows other processes' command lines, secrets in their argv included: a
# caller without `sysadmin` sees their secret-looking arguments masked, in the result and in the
# output (`masking.mask_command_line`); the stored job keeps them as the agent said them.
COMMAND_LINE_KINDS = frozenset({"system.processes"})


def _masks_command_lines(caller: Principal, kind: str) -> bool:
    return kind in COMMAND_LINE_KINDS and "sysadmin" not in caller.capabilities


class _StoredJob(Job):
    """A `jobs` row as the wire `Job`: its arguments are kept as JSON text."""

    args: Annotated[dict[str, Any], StoredJson]


def job_model(row: dict[str, Any], caller: Principal) -> Job:
    """The wire `Job` of a stored row, as `caller` may see it."""
    result = orjson.loads(row["result"]) if row["result"] else None
    if result is not None and _masks_command_lines(caller, row["kind"]):
        result = mask_command_lines(result)
    return _StoredJob.model_validate({**row, "result": result})


def _json(model: Job, status: int = 200) -> Response:
    return Response(model.model_dump_json(), status_code=status, media_type="application/json")


@router.get("/job-kinds", response_model=JobKindList)
async def job_kinds(caller: Caller) -> Response:
    return Response(orjson.dumps({"kinds": json_schemas()}), media_type="application/json")


def _checked_kind(caller: Principal, name: str) -> JobKind:
    kind = lookup(name)
    if kind is None:
        raise UnknownKind(f"{name!r} is not a job kind", details={"kind": name})
    if kind.route is not None:  # backups and load balancers: their routes check what their jobs carry
        raise KindNotAllowed(
            f"{name} is made through {kind.route}, not as a plain job", details={"kind": name, "route": kind.route}
        )
    caller.require_plan(kind.min_plan)
    caller.require(kind.group)
    return kind


def _require_path_scopes(caller: Principal, kind: JobKind, args: dict[str, Any]) -> None:
    """Every path a job names is scoped as the file routes scope theirs (`files.routes.resolve_target`):
    a path in a site needs only the kind's own capability, checked already; a path of the home
    (the server-root scope) needs `root_scope`, owners and super-admins. The agent resolves the
    path beneath that scope through its jail."""
    for scoped in kind.paths:
        scope, _domain = scoped.scope(args)
        if scope == "root":
            caller.require("root_scope")


def _validation_details(exc: ValidationError) -> dict[str, Any]:
    errors = [{"loc": ["body", "args", *map(str, e["loc"])], "msg": e["msg"]} for e in exc.errors()]
    return {"errors": errors}


def masked_args(kind: JobKind, args: dict[str, Any]) -> dict[str, Any]:
    return {k: (MASK if k in kind.secret_fields and v not in (None, "") else v) for k, v in args.items()}


@router.post("/servers/{server_id}/jobs", response_model=Job, status_code=201)
async def create_job(
    server_id: str,
    body: JobCreate,
    caller: Caller,
    fleet: FleetDep,
    idempotency_key: str | None = Header(default=None, max_length=200),
) -> Response:
    server = await server_row(fleet, caller.org_id, server_id)
    kind = _checked_kind(caller, body.kind)
    if body.lookup and not kind.read:
        raise ValidationFailed(
            f"lookup: {kind.kind} changes the server: only a read kind is a look-up",
            details={"errors": [{"loc": ["lookup"], "msg": "only a read kind is a look-up", "type": "value_error"}]},
        )
    if server["kind"] != "full":
        raise LiteServer("this is a lite server: it has no agent to run jobs")
    try:
        built = kind.build(body.args)
    except ValidationError as exc:
        details = _validation_details(exc)
        first = details["errors"][0]
        raise ValidationFailed(f"{'.'.join(first['loc'])}: {first['msg']}", details=details) from exc
    _require_path_scopes(caller, kind, built.args)
    args = masked_args(kind, built.args)
    if idempotency_key and (earlier := await _earlier_job(fleet, caller, server_id, idempotency_key, kind, args)):
        return earlier
    online = await fleet.agent_online(server_id)
    if not online and kind.read:
        return await _cached_answer(fleet, caller, server_id, kind, args)
    if not online:
        raise AgentOffline("the server's agent is not connected")
    if online and not fleet.hub.is_online(server_id) and fleet.replicas and not fleet.replicas.bus.connected:
        raise unavailable("bus", BUS_AWAY)  # its agent is on another replica: refused now, not queued unseen
    try:
        row = await submit_job(
            fleet, caller, server_id, kind, built, idempotency_key=idempotency_key, as_lookup=body.lookup
        )
    except IntegrityError:
        # Another request with the same key was created between the look-up above and this insert.
        if idempotency_key and (earlier := await _earlier_job(fleet, caller, server_id, idempotency_key, kind, args)):
            return earlier
        raise
    return _json(job_model(row, caller), 201)


async def submit_job(
    fleet: Fleet,
    caller: Principal,
    server_id: str,
    kind: JobKind,
    built: BuiltJob,
    *,
    idempotency_key: str | None = None,
    as_lookup: bool = False,
) -> dict[str, Any]:
    """The one way a job comes to be, once its checks passed: the row (args masked) and its
    audit entry in one transaction (a database lost between the two would leave a job that no
    request created), and its start when the agent is online (else it stays `queued` for its
    return). Handed to another replica, it waits for a bus that is away (`Replicas.dispatch`)."""
    args = masked_args(kind, built.args)
    here = fleet.hub.is_online(server_id)
    online = await fleet.agent_online(server_id)
    row = await fleet.db.run(
        _create_job,
        org_id=caller.org_id,
        server_id=server_id,
        kind=kind.kind,
        args=args,
        argv=built.argv,
        created_by=caller.user_id,
        idempotency_key=idempotency_key,
        lookup=as_lookup,
        audit_entry={**fleet.audit_identity(caller), "queued": not online, "secrets": built.secrets.values()},
    )
    if here:
        fleet.jobs.start(row, secrets=built.secrets, read=kind.read)
    elif online and fleet.replicas is not None:
        # The replica holding the agent's link runs it; it stays queued until that one starts it.
        fleet.replicas.dispatch(row, built.secrets, read=kind.read)
    return row


def _create_job(conn: Connection, /, *, audit_entry: dict[str, Any], **job: Any) -> dict[str, Any]:
    row = store.create_job(conn, **job)
    queued, secrets = audit_entry.pop("queued"), audit_entry.pop("secrets")
    audit.record(
        conn,
        action="jobs.create",
        server_id=row["server_id"],
        target=row["kind"],
        details={"job_id": row["id"], "args": job["args"], "queued": queued},
        secrets=secrets,
        **audit_entry,
    )
    return row


async def _earlier_job(
    fleet: Fleet, caller: Principal, server_id: str, key: str, kind: JobKind, args: dict[str, Any]
) -> Response | None:
    """The job an earlier request with this `Idempotency-Key` made, if any; the same key with
    another kind or other arguments (secrets compared masked, as stored) is a client bug: 422."""
    earlier = await fleet.db.run(store.job_by_idempotency_key, server_id, caller.user_id, key)
    if earlier is None:
        return None
    if earlier["kind"] != kind.kind or orjson.loads(earlier["args"]) != args:
        raise IdempotencyMismatch(
            "this Idempotency-Key was used for another job request", details={"job_id": earlier["id"]}
        )
    return _json(job_model(earlier, caller), 201)


async def _cached_answer(
    fleet: Fleet, caller: Principal, server_id: str, kind: JobKind, args: dict[str, Any]
) -> Response:
    """A read while the agent is away: the last successful result of the same kind and args."""
    cached = await fleet.db.run(store.cached_read, server_id, kind.kind, store.args_key(args))
    if cached is None:
        raise AgentOffline("the server's agent is not connected, and this read has no earlier result")
    original = await fleet.db.run(store.get_job, caller.org_id, cached["job_id"])
    if original is None:
        raise AgentOffline("the server's agent is not connected, and this read has no earlier result")
    answer = job_model(original, caller).model_copy(update={"cached": True, "cached_at": parse(cached["at"])})
    return _json(answer, 200)


@router.get("/servers/{server_id}/jobs", response_model=JobList)
async def list_jobs(
    server_id: str,
    caller: Caller,
    fleet: FleetDep,
    limit: int = Query(50, ge=1, le=500),
    lookups: bool = Query(False, description="list look-ups too (`JobCreate.lookup`)"),
) -> JobList:
    await server_row(fleet, caller.org_id, server_id)
    rows = await fleet.db.run(store.list_jobs, caller.org_id, server_id, limit, lookups=lookups)
    return JobList(jobs=[job_model(r, caller) for r in rows])


async def _job_row(fleet: Fleet, caller: Principal, job_id: str) -> dict[str, Any]:
    row = await fleet.db.read(store.get_job, caller.org_id, job_id)  # inline on SQLite: a client polls it
    if row is None:
        raise NotFound("no such job")
    return row


@router.get("/jobs/{job_id}", response_model=Job)
async def get_job(job_id: str, caller: Caller, fleet: FleetDep) -> Response:
    return _json(job_model(await _job_row(fleet, caller, job_id), caller))


@router.get("/jobs/{job_id}/stream", response_class=Response, responses={200: {"content": {"text/event-stream": {}}}})
async def stream_job(job_id: str, request: Request, caller: Caller, fleet: FleetDep) -> Response:
    """SSE: `line` events (id = seq) as they come, then `exit`; resumes after `Last-Event-ID`."""
    row = await _job_row(fleet, caller, job_id)
    view = mask_command_output if _masks_command_lines(caller, row["kind"]) else None
    return sse.response(fleet.jobs.events(caller.org_id, job_id, sse.resume_seq(request), view=view))


# Who may cancel a job of a kind that left the catalog: those who may change the server.
RETIRED_KIND_GROUP: Capability = "infra"
CANCEL_TIMEOUT_S = 15.0
CANCELLED_NOTE = "fleetdeck: cancelled before it started"


@router.post("/jobs/{job_id}/cancel", response_model=Job, status_code=202)
async def cancel_job(job_id: str, caller: Caller, fleet: FleetDep) -> Response:
    """Stop a job: a queued one never runs; a running one is stopped by its agent (its process
    group gets TERM, then KILL) and ends `cancelled` with what it printed.

    Whoever may create a job of that kind may cancel it. A running job whose agent is away
    answers 409 `agent_offline`: nothing can stop it then, and the job ends `interrupted` if its
    agent does not return within the grace period. A job that ended before the cancel reached its
    agent keeps its own status: 409 `not_running`.
    """
    row = await _job_row(fleet, caller, job_id)
    kind = lookup(row["kind"])
    caller.require(kind.group if kind is not None else RETIRED_KIND_GROUP)
    if row["status"] == "queued" and await fleet.db.run(store.end_queued, job_id, "cancelled", CANCELLED_NOTE):
        return await _cancelled(fleet, caller, job_id, was="queued")
    row = await _job_row(fleet, caller, job_id)  # it may have started meanwhile
    if row["status"] != "running":
        raise NotRunning(f"the job has already ended ({row['status']})", details={"status": row["status"]})
    if not await fleet.agent_online(row["server_id"]):
        raise AgentOffline("the server's agent is not connected: the job cannot be stopped until it is back")
    try:
        answer = await fleet.call_agent(row["server_id"], "job.cancel", {"job_id": job_id}, timeout=CANCEL_TIMEOUT_S)
    except AgentError as exc:
        # Told by the agent itself, wherever it is linked (this replica or another).
        if exc.details.get("agent_code") == protocol.UNKNOWN_METHOD:
            raise AgentError("the server's agent is too old to cancel jobs: update it") from exc
        raise
    if isinstance(answer, dict) and answer.get("ended") is True:
        raise NotRunning("the job ended before the cancel reached its agent")
    return await _cancelled(fleet, caller, job_id, was="running")


async def _cancelled(fleet: Fleet, caller: Principal, job_id: str, *, was: str) -> Response:
    """The 202 answer of an accepted cancel, and its audit entry."""
    row = await _job_row(fleet, caller, job_id)
    await fleet.audit(
        caller, "jobs.cancel", server_id=row["server_id"], target=row["kind"], details={"job_id": job_id, "was": was}
    )
    return _json(job_model(row, caller), 202)
