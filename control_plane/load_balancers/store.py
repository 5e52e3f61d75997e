"""Queries of load balancers and their backends. Every read and write names the org: another
org's load balancer, backend or server does not exist for the caller."""

from __future__ import annotations

from typing import Annotated, Any

import sqlalchemy as sa
from pydantic import ConfigDict, Field
from sqlalchemy.engine import Connection

from contract.job_kinds.lb import LbApply, LbApplyOutcome, LbBackend, LbHealthCheck, LbHealthReport
from control_plane.auth.secrets import new_id
from control_plane.clock import now_iso
from control_plane.storage.rows import StoredJson
from control_plane.storage.schema import lb_backends, load_balancers, servers

Row = dict[str, Any]


class MissingAddress(Exception):
    """A backend's server has no `address`: the node would not know where to send requests."""


def get_lb(conn: Connection, org_id: str, lb_id: str) -> Row | None:
    query = load_balancers.select().where(load_balancers.c.id == lb_id, load_balancers.c.org_id == org_id)
    found = conn.execute(query).mappings().first()
    return dict(found) if found else None


def lb_by_name(conn: Connection, org_id: str, name: str) -> Row | None:
    query = load_balancers.select().where(load_balancers.c.name == name, load_balancers.c.org_id == org_id)
    found = conn.execute(query).mappings().first()
    return dict(found) if found else None


def list_lbs(conn: Connection, org_id: str) -> list[Row]:
    query = load_balancers.select().where(load_balancers.c.org_id == org_id).order_by(load_balancers.c.name)
    return [dict(r) for r in conn.execute(query).mappings()]


def backends_of(conn: Connection, lb_ids: list[str]) -> dict[str, list[Row]]:
    """The backends of these load balancers, with their server's address, in the order added."""
    query = (
        sa.select(lb_backends, servers.c.address)
        .join(servers, servers.c.id == lb_backends.c.server_id)
        .where(lb_backends.c.lb_id.in_(lb_ids))
        .order_by(lb_backends.c.created_at, lb_backends.c.id)
    )
    found: dict[str, list[Row]] = {lb_id: [] for lb_id in lb_ids}
    for row in conn.execute(query).mappings():
        found[row["lb_id"]].append(dict(row))
    return found


def get_backend(conn: Connection, lb_id: str, backend_id: str) -> Row | None:
    query = lb_backends.select().where(lb_backends.c.id == backend_id, lb_backends.c.lb_id == lb_id)
    found = conn.execute(query).mappings().first()
    return dict(found) if found else None


def backend_taken(conn: Connection, lb_id: str, server_id: str, port: int, other_than: str | None = None) -> bool:
    """Whether the pool has a backend at this server and port already (`other_than` aside): a
    backend is a (server, port) pair."""
    query = sa.select(lb_backends.c.id).where(
        lb_backends.c.lb_id == lb_id, lb_backends.c.server_id == server_id, lb_backends.c.port == port
    )
    if other_than is not None:
        query = query.where(lb_backends.c.id != other_than)
    return conn.execute(query.limit(1)).first() is not None


def serves_lbs(conn: Connection, server_id: str) -> bool:
    """Whether a server is the node of any load balancer."""
    query = sa.select(load_balancers.c.id).where(load_balancers.c.node_server_id == server_id).limit(1)
    return conn.execute(query).first() is not None


def create_lb(conn: Connection, org_id: str, values: Row, backends: list[Row]) -> str:
    now = now_iso()
    lb_id = new_id("lb")
    conn.execute(
        load_balancers.insert().values(
            id=lb_id, org_id=org_id, state="pending_apply", revision=1, created_at=now, updated_at=now, **values
        )
    )
    for backend in backends:
        insert_backend(conn, lb_id, backend)
    return lb_id


def insert_backend(conn: Connection, lb_id: str, values: Row) -> str:
    backend_id = new_id("be")
    conn.execute(lb_backends.insert().values(id=backend_id, lb_id=lb_id, drained=False, created_at=now_iso(), **values))
    return backend_id


def update_lb(conn: Connection, lb_id: str, values: Row) -> None:
    conn.execute(load_balancers.update().where(load_balancers.c.id == lb_id).values(**values))


def update_backend(conn: Connection, backend_id: str, values: Row) -> None:
    conn.execute(lb_backends.update().where(lb_backends.c.id == backend_id).values(**values))


def delete_backend(conn: Connection, backend_id: str) -> None:
    conn.execute(lb_backends.delete().where(lb_backends.c.id == backend_id))


def delete_lb(conn: Connection, lb_id: str) -> None:
    conn.execute(load_balancers.delete().where(load_balancers.c.id == lb_id))


def bump(conn: Connection, lb_id: str, if_revision: int | None = None) -> int | None:
    """A mutation is being accepted: the next revision, waiting for its apply; with `if_revision`,
    only over that revision. Returns None when done, else the revision the definition is at
    (nothing written; 0 when it is gone). Run it first in the transaction of the change: the check and the bump are
    one statement, and the write lock it takes (the row's on PostgreSQL, the database's on
    SQLite) holds a concurrent change of the same load balancer until this one commits, which
    then finds the revision moved on."""
    query = load_balancers.update().where(load_balancers.c.id == lb_id)
    if if_revision is not None:
        query = query.where(load_balancers.c.revision == if_revision)
    bumped = conn.execute(
        query.values(
            revision=load_balancers.c.revision + 1, state="pending_apply", state_error=None, updated_at=now_iso()
        )
    )
    if bumped.rowcount == 1:
        return None
    current = conn.execute(sa.select(load_balancers.c.revision).where(load_balancers.c.id == lb_id)).scalar()
    return int(current) if current is not None else 0


class _StoredBackendSpec(LbBackend):
    """An `lb_backends` row (with its server's address) as the spec's backend: `drained` is
    stored as a number (SQLite), and the row's other columns are not the spec's."""

    model_config = ConfigDict(extra="ignore")
    drained: bool = False


class _StoredSpec(LbApply):
    """A `load_balancers` row as the `lb.apply` spec: `tls` is stored as a number, the health
    check as JSON text, and the row's other columns are not the spec's."""

    model_config = ConfigDict(extra="ignore")
    tls: bool = False
    health_check: Annotated[LbHealthCheck, StoredJson] = Field(default_factory=LbHealthCheck)


def spec_of(conn: Connection, lb_id: str) -> LbApply:
    """The self-contained `lb.apply` spec of the current revision (backend addresses resolved).
    Raises MissingAddress when a backend's server has none, pydantic's ValidationError when the
    definition does not make a valid spec."""
    lb = conn.execute(load_balancers.select().where(load_balancers.c.id == lb_id)).mappings().one()
    backends = backends_of(conn, [lb_id])[lb_id]
    for backend in backends:
        if not backend["address"]:
            raise MissingAddress(f"server {backend['server_id']} has no address: set one to use it as a backend")
    return _StoredSpec.model_validate({**lb, "backends": [_StoredBackendSpec.model_validate(b) for b in backends]})


def check_servers(conn: Connection, org_id: str, server_ids: list[str]) -> dict[str, Row]:
    """The org's servers among `server_ids` (id, kind, address); the others are missing."""
    query = sa.select(servers.c.id, servers.c.kind, servers.c.address).where(
        servers.c.org_id == org_id, servers.c.id.in_(server_ids)
    )
    return {r["id"]: dict(r) for r in conn.execute(query).mappings()}


# --- what the node reports ---------------------------------------------------------------------


def health_problem(backends: list[Row]) -> str | None:
    """Why the pool reads degraded: it is empty, or a backend was reported unhealthy."""
    if not backends:
        return "the pool has no backends"
    sick = [f"{b['address'] or b['server_id']}:{b['port']}" for b in backends if b["health"] == "unhealthy"]
    if sick:
        return f"unhealthy backend{'s' if len(sick) > 1 else ''}: {', '.join(sick)}"
    return None


def _settle(conn: Connection, lb: Row) -> None:
    """Active or degraded by health, for a load balancer whose node serves its current revision."""
    problem = health_problem(backends_of(conn, [lb["id"]])[lb["id"]])
    state = "degraded" if problem else "active"
    if (state, problem) != (lb["state"], lb["state_error"]):
        update_lb(conn, lb["id"], {"state": state, "state_error": problem})


def record_outcome(conn: Connection, lb_id: str, outcome: LbApplyOutcome) -> None:
    """What a node said of an apply. Only a report of the current revision sets the state; an
    older one never marks a newer definition active. `applied_revision` follows the node."""
    found = conn.execute(load_balancers.select().where(load_balancers.c.id == lb_id)).mappings().first()
    if found is None:
        return  # deleted meanwhile
    lb = dict(found)
    if outcome.state == "active" and (lb["applied_revision"] or 0) <= outcome.revision:
        lb |= {"applied_revision": outcome.revision, "applied_at": now_iso()}
        update_lb(conn, lb_id, {"applied_revision": outcome.revision, "applied_at": lb["applied_at"]})
    if outcome.revision != lb["revision"]:
        return
    if outcome.state == "degraded":
        update_lb(conn, lb_id, {"state": "degraded", "state_error": outcome.error or "the apply failed"})
    else:
        _settle(conn, lb)


def record_failed_apply(conn: Connection, lb_id: str, revision: int, error: str) -> None:
    """An apply of `revision` ended without an outcome (no handler, a crash): degraded, if that
    is still the current revision."""
    conn.execute(
        load_balancers.update()
        .where(load_balancers.c.id == lb_id, load_balancers.c.revision == revision)
        .values(state="degraded", state_error=error)
    )


def record_health(conn: Connection, node_server_id: str, report: LbHealthReport) -> bool:
    """Store a node's health report in the backend rows; False when the node does not serve
    that load balancer (unknown id, or another node's). The state follows health only while the
    node serves the current revision."""
    found = (
        conn.execute(
            load_balancers.select().where(
                load_balancers.c.id == report.id, load_balancers.c.node_server_id == node_server_id
            )
        )
        .mappings()
        .first()
    )
    if found is None:
        return False
    for backend in report.backends:
        conn.execute(
            lb_backends.update()
            .where(lb_backends.c.id == backend.id, lb_backends.c.lb_id == report.id)
            .values(
                health=backend.health,
                last_check_at=backend.last_check_at.isoformat() if backend.last_check_at else None,
                stats=backend.stats.model_dump_json() if backend.stats else None,
                runtime=backend.runtime.model_dump_json() if backend.runtime else None,
            )
        )
    if report.listen_port is not None and report.listen_port != found["listen_port"]:
        update_lb(conn, report.id, {"listen_port": report.listen_port})
    lb = dict(found)
    if lb["applied_revision"] == lb["revision"] and lb["state"] != "pending_apply":
        _settle(conn, lb)
    return True
