"""`/v1/load-balancers` (CONTRACT.md § B): definitions, their backends, and their dispatch.

The definition in the database is the source of truth. Every accepted mutation bumps the
revision, leaves the state `pending_apply` and dispatches `lb.apply` with the whole spec of that
revision as a job on the node (through `jobs.routes.submit_job`, the one way a job comes to be);
a node offline keeps it queued, and a newer apply ends the older queued ones `cancelled`, so
only the newest revision is ever applied. What the node reports back is `reports.LbReports`'s.
"""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Body, Query, Response
from pydantic import BaseModel, ValidationError
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from contract.errors import Conflict, ImmutableField, LiteServer, NotFound, ValidationFailed
from contract.job_kinds import JobKind, lookup
from contract.job_kinds.lb import BackendHealth, BackendRuntime, BackendStats, LbApply, LbHealthCheck, LbRemove
from contract.load_balancers import (
    ApplyStarted,
    Backend,
    BackendAdd,
    BackendPatch,
    LbSummary,
    LoadBalancer,
    LoadBalancerCreate,
    LoadBalancerList,
    LoadBalancerPatch,
)
from control_plane.auth.principal import Principal
from control_plane.clock import now_iso
from control_plane.jobs import store as job_store
from control_plane.jobs.routes import submit_job
from control_plane.load_balancers import store
from control_plane.state import Caller, Fleet, FleetDep
from control_plane.storage.rows import StoredJson

router = APIRouter(prefix="/v1", tags=["load-balancers"])

IMMUTABLE_FIELDS = ("engine", "node_server_id")


def _kind(name: str) -> JobKind:
    kind = lookup(name)
    assert kind is not None, f"{name} is missing from the job catalog"
    return kind


APPLY, REMOVE = _kind("lb.apply"), _kind("lb.remove")


# --- wire models ----------------------------------------------------------------------------


class _StoredBackend(Backend):
    """An `lb_backends` row (with its server's address) as the wire `Backend`: stats and runtime
    as JSON text."""

    stats: Annotated[BackendStats | None, StoredJson] = None
    runtime: Annotated[BackendRuntime | None, StoredJson] = None


class _StoredLoadBalancer(LoadBalancer):
    """A `load_balancers` row as the wire `LoadBalancer`: its health check as JSON text."""

    health_check: Annotated[LbHealthCheck, StoredJson]


def backend_model(row: dict[str, Any]) -> Backend:
    """A drained backend reads `draining` whatever its probe says; one never checked, `unhealthy`
    (not known to be healthy: `last_check_at` is null)."""
    health: BackendHealth = "draining" if row["drained"] else (row["health"] or "unhealthy")
    return _StoredBackend.model_validate({**row, "address": row["address"] or "", "health": health})


def lb_model(row: dict[str, Any], backends: list[dict[str, Any]]) -> LoadBalancer:
    return _StoredLoadBalancer.model_validate({**row, "backends": [backend_model(b) for b in backends]})


def _json(model: BaseModel, status: int = 200) -> Response:
    return Response(model.model_dump_json(), status_code=status, media_type="application/json")


async def _lb_row(fleet: Fleet, caller: Principal, lb_id: str) -> dict[str, Any]:
    row = await fleet.db.run(store.get_lb, caller.org_id, lb_id)
    if row is None:
        raise NotFound("no such load balancer")
    return row


async def _lb_answer(fleet: Fleet, caller: Principal, lb_id: str, status: int = 200) -> Response:
    row = await _lb_row(fleet, caller, lb_id)
    backends = await fleet.db.run(store.backends_of, [lb_id])
    return _json(lb_model(row, backends[lb_id]), status)


def _may_change(caller: Principal) -> None:
    """Mutations need what `lb.apply` needs: the lb domain's plan and its capability group."""
    caller.require_plan(APPLY.min_plan)
    caller.require(APPLY.group)


async def _servers(fleet: Fleet, caller: Principal, server_ids: list[str]) -> dict[str, dict[str, Any]]:
    """The org's servers of these ids; any other id (another org's) is 404."""
    found = await fleet.db.run(store.check_servers, caller.org_id, sorted(set(server_ids)))
    for server_id in server_ids:
        if server_id not in found:
            raise NotFound(f"no such server: {server_id}", details={"server_id": server_id})
    return found


def _validation(exc: ValidationError, prefix: tuple[str, ...] = ("body",)) -> ValidationFailed:
    errors = [{"loc": [*prefix, *map(str, e["loc"])], "msg": e["msg"]} for e in exc.errors()]
    first = errors[0]
    return ValidationFailed(f"{'.'.join(first['loc'])}: {first['msg']}", details={"errors": errors})


# --- dispatch -------------------------------------------------------------------------------


async def _change(fleet: Fleet, lb_id: str, if_revision: int | None, fn: Any, *args: Any) -> LbApply:
    """The bump of the revision (over `if_revision` when given: else 409 `conflict`), then
    `fn(conn, *args)` (the change), in one transaction, with the spec of the new revision; a
    change that makes no valid spec is rolled back and refused."""

    def bump_and_change(conn: Connection) -> LbApply:
        current = store.bump(conn, lb_id, if_revision)
        if current == 0:
            raise NotFound("no such load balancer")
        if current is not None:
            raise _stale(current, if_revision)
        fn(conn, *args)
        return store.spec_of(conn, lb_id)

    return await _transaction(fleet, bump_and_change)


def _stale(current: int, if_revision: int | None) -> Conflict:
    """The change was made over `if_revision`, and the definition has moved on to `current`."""
    return Conflict(
        f"the load balancer was changed meanwhile: it is at revision {current}, not {if_revision}",
        details={"revision": current, "if_revision": if_revision},
    )


async def _transaction(fleet: Fleet, fn: Any) -> LbApply:
    try:
        spec: LbApply = await fleet.db.run(fn)
    except store.MissingAddress as exc:
        raise ValidationFailed(str(exc)) from exc
    except ValidationError as exc:
        raise _validation(exc) from exc
    except IntegrityError as exc:
        raise Conflict("a load balancer of that name exists already") from exc
    return spec


async def _dispatch_apply(fleet: Fleet, caller: Principal, node: str, spec: LbApply) -> str:
    """`lb.apply` of this revision on the node; the older applies still queued end `cancelled`
    (this one too, when a newer one is queued already: another replica's, accepted meanwhile)."""
    job = await submit_job(fleet, caller, node, APPLY, APPLY.build(spec.model_dump(mode="json")))
    await _supersede(fleet, node, spec.id, _apply_order(job))
    fleet.lb_reports.watch(node)
    return str(job["id"])


def _apply_order(job: dict[str, Any]) -> tuple[int, str, str]:
    """Which of two applies of a load balancer is the newer: its revision, then its creation."""
    return orjson.loads(job["args"])["revision"], job["created_at"], job["id"]


async def _supersede(fleet: Fleet, node: str, lb_id: str, dispatched: tuple[int, str, str] | None) -> None:
    """End `cancelled` the applies of this load balancer still queued on its node but the newest,
    `dispatched` or a queued one (all of them when `dispatched` is None: it is being removed).
    Every dispatch runs this once its job is in the database, so of two concurrent dispatches
    (two replicas) the one that runs it last sees both jobs."""
    queued = [
        job
        for job in await fleet.db.run(job_store.queued_of_kind, node, APPLY.kind)
        if orjson.loads(job["args"]).get("id") == lb_id
    ]
    if dispatched is None:
        newest, note = None, "superseded by the load balancer's removal before it ran"
    else:
        newest = max([dispatched, *map(_apply_order, queued)])
        note = f"superseded by revision {newest[0]} before it ran"
    for job in queued:
        if newest is None or _apply_order(job) < newest:
            await fleet.db.run(job_store.end_queued, job["id"], "cancelled", note)


async def _audit(fleet: Fleet, caller: Principal, action: str, spec: LbApply, node: str, **details: Any) -> None:
    await fleet.audit(
        caller,
        f"load_balancers.{action}",
        server_id=node,
        target=spec.name,
        details={"lb_id": spec.id, "revision": spec.revision, **details},
    )


# --- routes ---------------------------------------------------------------------------------


@router.get("/load-balancers", response_model=LoadBalancerList)
async def list_load_balancers(caller: Caller, fleet: FleetDep) -> Response:
    rows = await fleet.db.run(store.list_lbs, caller.org_id)
    backends = await fleet.db.run(store.backends_of, [r["id"] for r in rows])
    lbs = [lb_model(r, backends[r["id"]]) for r in rows]
    pool = [b for lb in lbs for b in lb.backends]
    summary = LbSummary(
        total=len(lbs),
        applied=sum(1 for lb in lbs if lb.applied_revision == lb.revision),
        healthy_backends=sum(1 for b in pool if b.health == "healthy"),
        total_backends=len(pool),
    )
    return _json(LoadBalancerList(load_balancers=lbs, summary=summary))


@router.post("/load-balancers", response_model=LoadBalancer, status_code=201)
async def create_load_balancer(body: LoadBalancerCreate, caller: Caller, fleet: FleetDep) -> Response:
    _may_change(caller)
    servers = await _servers(fleet, caller, [body.node_server_id, *(b.server_id for b in body.backends)])
    if servers[body.node_server_id]["kind"] != "full":
        raise LiteServer("the node is a lite server: it has no agent to run a load balancer")
    if await fleet.db.run(store.lb_by_name, caller.org_id, body.name):
        raise Conflict(f"a load balancer named {body.name} exists already")
    values = {
        "name": body.name,
        "port": body.port,
        "tls": body.tls,
        "hostname": body.hostname,
        "node_server_id": body.node_server_id,
        "engine": body.engine,
        "algorithm": body.algorithm,
        "health_check": body.health_check.model_dump_json(),
    }
    backends = [{"server_id": b.server_id, "port": b.port, "weight": b.weight} for b in body.backends]

    def create(conn: Connection) -> LbApply:
        return store.spec_of(conn, store.create_lb(conn, caller.org_id, values, backends))

    spec = await _transaction(fleet, create)
    answer = await _lb_answer(fleet, caller, spec.id, 201)  # as accepted: the apply may end first
    job_id = await _dispatch_apply(fleet, caller, body.node_server_id, spec)
    await _audit(fleet, caller, "create", spec, body.node_server_id, job_id=job_id)
    return answer


@router.get("/load-balancers/{lb_id}", response_model=LoadBalancer)
async def get_load_balancer(lb_id: str, caller: Caller, fleet: FleetDep) -> Response:
    return await _lb_answer(fleet, caller, lb_id)


@router.patch("/load-balancers/{lb_id}", response_model=LoadBalancer)
async def update_load_balancer(
    lb_id: str, body: Annotated[dict[str, Any], Body()], caller: Caller, fleet: FleetDep
) -> Response:
    """The body is read as a plain object first: `engine` and `node_server_id` are refused as
    immutable, not as unknown fields of `LoadBalancerPatch`."""
    row = await _lb_row(fleet, caller, lb_id)
    _may_change(caller)
    for field in IMMUTABLE_FIELDS:
        if field in body:
            raise ImmutableField(f"{field} is fixed once the load balancer exists", details={"field": field})
    try:
        patch = LoadBalancerPatch.model_validate(body)
    except ValidationError as exc:
        raise _validation(exc) from exc
    taken = None
    if patch.name is not None and patch.name != row["name"]:
        taken = await fleet.db.run(store.lb_by_name, caller.org_id, patch.name)
    if taken is not None:
        raise Conflict(f"a load balancer named {patch.name} exists already")
    values = _patched(row, patch)
    spec = await _change(fleet, lb_id, patch.if_revision, _apply_values, lb_id, values)
    answer = await _lb_answer(fleet, caller, lb_id)
    job_id = await _dispatch_apply(fleet, caller, row["node_server_id"], spec)
    changed = patch.model_dump(mode="json", exclude_unset=True, exclude={"if_revision"})
    await _audit(fleet, caller, "update", spec, row["node_server_id"], job_id=job_id, changed=changed)
    return answer


def _patched(row: dict[str, Any], patch: LoadBalancerPatch) -> dict[str, Any]:
    """The columns a patch changes. Port 443 turns TLS on; a move to port 80 turns it off unless
    the patch says otherwise. The merged definition is validated as a whole spec afterwards."""
    given = patch.model_fields_set
    values: dict[str, Any] = {}
    for field in ("name", "algorithm", "port", "tls", "hostname"):
        if field in given:
            values[field] = getattr(patch, field)
    if "port" in given and patch.port is not None:
        values.setdefault("tls", patch.port == 443)
    if values.get("port") == 443:
        values["tls"] = True
    if patch.health_check is not None:
        merged = orjson.loads(row["health_check"]) | patch.health_check.model_dump(exclude_unset=True)
        try:
            values["health_check"] = LbHealthCheck.model_validate(merged).model_dump_json()
        except ValidationError as exc:
            raise _validation(exc, ("body", "health_check")) from exc
    return {k: v for k, v in values.items() if v is not None or k == "hostname"}


def _apply_values(conn: Connection, lb_id: str, values: dict[str, Any]) -> None:
    if values:
        store.update_lb(conn, lb_id, values)


@router.delete("/load-balancers/{lb_id}", status_code=204)
async def delete_load_balancer(lb_id: str, caller: Caller, fleet: FleetDep) -> Response:
    row = await _lb_row(fleet, caller, lb_id)
    _may_change(caller)
    node = row["node_server_id"]
    remove = LbRemove(id=lb_id, name=row["name"], engine=row["engine"])
    job = await submit_job(fleet, caller, node, REMOVE, REMOVE.build(remove.model_dump(mode="json")))
    await _supersede(fleet, node, lb_id, None)
    await fleet.db.run(store.delete_lb, lb_id)
    await fleet.audit(
        caller,
        "load_balancers.delete",
        server_id=node,
        target=row["name"],
        details={"lb_id": lb_id, "revision": row["revision"], "job_id": job["id"]},
    )
    return Response(status_code=204)


@router.post("/load-balancers/{lb_id}/backends", response_model=Backend, status_code=201)
async def add_backend(lb_id: str, body: BackendAdd, caller: Caller, fleet: FleetDep) -> Response:
    row = await _lb_row(fleet, caller, lb_id)
    _may_change(caller)
    await _servers(fleet, caller, [body.server_id])
    values = {"server_id": body.server_id, "port": body.port, "weight": body.weight}
    added: list[str] = []

    def add(conn: Connection) -> None:
        _refuse_taken(conn, lb_id, body.server_id, body.port)
        added.append(store.insert_backend(conn, lb_id, values))

    spec = await _change(fleet, lb_id, body.if_revision, add)
    answer = await _backend_answer(fleet, lb_id, added[0], 201)
    job_id = await _dispatch_apply(fleet, caller, row["node_server_id"], spec)
    await _audit(fleet, caller, "backend_add", spec, row["node_server_id"], job_id=job_id, backend_id=added[0])
    return answer


def _refuse_taken(conn: Connection, lb_id: str, server_id: str, port: int, other_than: str | None = None) -> None:
    """A backend is a (server, port) pair: the same one twice in a pool is 409 `conflict`."""
    if store.backend_taken(conn, lb_id, server_id, port, other_than):
        raise Conflict(f"the pool has a backend on port {port} of that server already", details={"port": port})


async def _backend_row(fleet: Fleet, lb: dict[str, Any], backend_id: str, if_revision: int | None) -> dict[str, Any]:
    """The backend of the pool; a backend gone since the revision the change was made over is
    that change's 409 `conflict` (it was removed meanwhile), else 404."""
    row = await fleet.db.run(store.get_backend, lb["id"], backend_id)
    if row is None:
        if if_revision is not None and if_revision != lb["revision"]:
            raise _stale(lb["revision"], if_revision)
        raise NotFound("no such backend")
    return row


async def _backend_answer(fleet: Fleet, lb_id: str, backend_id: str, status: int = 200) -> Response:
    backends = await fleet.db.run(store.backends_of, [lb_id])
    found = next(b for b in backends[lb_id] if b["id"] == backend_id)
    return _json(backend_model(found), status)


@router.patch("/load-balancers/{lb_id}/backends/{backend_id}", response_model=Backend)
async def update_backend(lb_id: str, backend_id: str, body: BackendPatch, caller: Caller, fleet: FleetDep) -> Response:
    row = await _lb_row(fleet, caller, lb_id)
    backend = await _backend_row(fleet, row, backend_id, body.if_revision)
    _may_change(caller)
    values = body.model_dump(exclude_unset=True, exclude_none=True, exclude={"if_revision"})

    def change(conn: Connection) -> None:
        if "port" in values:
            _refuse_taken(conn, lb_id, backend["server_id"], values["port"], other_than=backend_id)
        if values:
            store.update_backend(conn, backend_id, values)

    spec = await _change(fleet, lb_id, body.if_revision, change)
    answer = await _backend_answer(fleet, lb_id, backend_id)
    job_id = await _dispatch_apply(fleet, caller, row["node_server_id"], spec)
    await _audit(
        fleet, caller, "backend_update", spec, row["node_server_id"], job_id=job_id, backend_id=backend_id, **values
    )
    return answer


@router.delete("/load-balancers/{lb_id}/backends/{backend_id}", status_code=204)
async def remove_backend(
    lb_id: str,
    backend_id: str,
    caller: Caller,
    fleet: FleetDep,
    if_revision: Annotated[int | None, Query(ge=1)] = None,
) -> Response:
    """`if_revision` is a query parameter here: a DELETE has no body."""
    row = await _lb_row(fleet, caller, lb_id)
    await _backend_row(fleet, row, backend_id, if_revision)
    _may_change(caller)
    spec = await _change(fleet, lb_id, if_revision, store.delete_backend, backend_id)
    job_id = await _dispatch_apply(fleet, caller, row["node_server_id"], spec)
    await _audit(fleet, caller, "backend_remove", spec, row["node_server_id"], job_id=job_id, backend_id=backend_id)
    return Response(status_code=204)


@router.post("/load-balancers/{lb_id}/apply", response_model=ApplyStarted, status_code=202)
async def apply_load_balancer(lb_id: str, caller: Caller, fleet: FleetDep) -> Response:
    """Dispatch the current revision again (the same spec; the node applies it anew)."""
    row = await _lb_row(fleet, caller, lb_id)
    _may_change(caller)
    spec = await _transaction(fleet, lambda conn: store.spec_of(conn, lb_id))
    await fleet.db.run(store.update_lb, lb_id, {"state": "pending_apply", "state_error": None, "updated_at": now_iso()})
    job_id = await _dispatch_apply(fleet, caller, row["node_server_id"], spec)
    await _audit(fleet, caller, "apply", spec, row["node_server_id"], job_id=job_id)
    return _json(ApplyStarted(job_id=job_id), 202)
