"""The ASGI application: `create_app(fleet)` wires routes, errors and the agent link endpoint.

Handlers are written against anyio, so the same app runs under hypercorn's trio worker (the
default) and on an asyncio server.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from fastapi import FastAPI
from sqlalchemy.engine import Connection
from starlette.routing import WebSocketRoute

from contract.job_kinds import lookup
from contract.link import fastmask
from control_plane import __version__, errors
from control_plane.audit.routes import router as audit_router
from control_plane.auth.routes import router as auth_router
from control_plane.auth.throttle import LoginThrottle
from control_plane.bus import Bus
from control_plane.clock import now_iso
from control_plane.files.direct import DirectUploads
from control_plane.files.operations import FileOperations
from control_plane.files.routes import (
    DIRECT_DOWNLOAD_METHOD,
    DIRECT_UPLOAD_METHOD,
    answer_relayed_direct_download,
    answer_relayed_direct_upload,
)
from control_plane.files.routes import router as files_router
from control_plane.frontdoor import BodyGuard
from control_plane.hub import AgentHub, AgentSession
from control_plane.jobs import store as job_store
from control_plane.jobs.routes import router as jobs_router
from control_plane.jobs.runner import JobRunner
from control_plane.load_balancers import store as lb_store
from control_plane.load_balancers.reports import LbReports
from control_plane.load_balancers.routes import router as load_balancers_router
from control_plane.replicas import Replicas
from control_plane.servers import store as server_store
from control_plane.servers.presence import PresenceFeed
from control_plane.servers.pulses import PulseRings
from control_plane.servers.routes import router as servers_router
from control_plane.servers.store import Row
from control_plane.settings import Settings
from control_plane.state import Fleet
from control_plane.storage import Database
from control_plane.storage.batches import Batched

AGENT_LINK_PATH = "/v1/agent/link"


def build_fleet(settings: Settings, db: Database | None = None) -> Fleet:
    """The app's shared state: a migrated database, the agent hub and the presence feed."""
    db = db or Database(settings.db_url)
    db.migrate()
    # Replicas number presence events alike (from the database): one epoch for all of them.
    presence = PresenceFeed(epoch="replicas" if settings.bus_url else None)
    pulses = PulseRings(presence)

    async def authenticate_agent(token: str) -> str | None:
        # A read by index (`Database.read`): in a relink storm, thousands a minute.
        row = await db.read(server_store.server_for_agent_token, token)
        return row["id"] if row else None

    # With replicas: the link id each server's row names for its link here.
    claimed: dict[str, str] = {}

    # Presence writes made at once share a transaction (a relink storm makes thousands).
    presence_writes = Batched(db, _store_presence)

    async def on_presence(server_id: str, session: AgentSession | None) -> None:
        row, queued, serves_lbs = await presence_writes.run((server_id, session))
        newer_elsewhere = False
        if replicas is not None and session is not None:
            claimed[server_id] = await replicas.claim(server_id, session.peer)
        elif replicas is not None and (link_id := claimed.get(server_id)) is not None:
            newer_elsewhere = not await replicas.release(server_id, link_id)
            del claimed[server_id]  # once released: a report the database failed is made again
        if row is not None and not newer_elsewhere:
            event = {
                "server_id": server_id,
                "online": session is not None,
                "version": session.version if session else None,
                # Also when it left: what its last hello said stays true of the server.
                "job_kinds": server_store.stored_job_kinds(row),
                "at": now_iso(),
            }
            if replicas is not None:
                await replicas.publish_presence(row["org_id"], event)
            else:
                presence.publish(row["org_id"], event)

        if row is not None and session is not None:  # the hub reports the current state: this link is it
            pulses.linked(server_id, row["org_id"])
        elif session is None:
            pulses.dropped(server_id)
        if session is not None:
            runner.start_queued(queued, is_read)
            if replicas is not None:
                runner.take_back_soon(server_id, is_read)
            if serves_lbs:  # watch its load balancers' health
                lb_reports.watch(server_id)

    direct = DirectUploads(db)
    hub = AgentHub(
        authenticate=authenticate_agent,
        on_presence=on_presence,
        on_report=direct.on_report,
        on_pulse=pulses.on_pulse,
        heartbeat_s=settings.heartbeat_s,
    )
    runner = JobRunner(db, hub, grace_s=settings.job_grace_s, output_cap=settings.job_output_cap_bytes)
    lb_reports = LbReports(db, hub)
    replicas = Replicas(db, Bus(settings.bus_url), hub, presence, pulses, runner) if settings.bus_url else None
    runner.on_finish("lb.apply", lb_reports.on_apply_finished)
    fleet = Fleet(
        settings=settings,
        db=db,
        hub=hub,
        presence=presence,
        pulses=pulses,
        jobs=runner,
        operations=FileOperations(hub),
        direct_uploads=direct,
        lb_reports=lb_reports,
        login_throttle=LoginThrottle(db),
        replicas=replicas,
    )
    if replicas is not None:
        replicas.calls.answered_here[DIRECT_UPLOAD_METHOD] = functools.partial(answer_relayed_direct_upload, fleet)
        replicas.calls.answered_here[DIRECT_DOWNLOAD_METHOD] = functools.partial(answer_relayed_direct_download, fleet)
    return fleet


def _store_presence(conn: Connection, report: tuple[str, AgentSession | None]) -> tuple[Row | None, list[Row], bool]:
    """What an agent's link or drop writes and reads: its presence, the server's row, and
    (linked) the jobs that waited for it and whether it serves load balancers. In one
    transaction with the other reports of the moment (`Batched`): a relink storm makes thousands."""
    server_id, session = report
    online = session is not None
    server_store.record_presence(
        conn,
        server_id,
        online=online,
        version=session.version if session else None,
        job_kinds=session.job_kinds if session else None,
    )
    row = server_store.presence_row(conn, server_id)
    if not online:
        return row, [], False
    return row, job_store.queued_jobs(conn, server_id), lb_store.serves_lbs(conn, server_id)


def is_read(kind_name: str) -> bool:
    kind = lookup(kind_name)
    return kind is not None and kind.read


@asynccontextmanager
async def _lifespan(fleet: Fleet) -> AsyncIterator[None]:
    """The app's own task group: every running job is a child of it, also those a previous
    process left running (taken back from their agents as they link again)."""
    async with anyio.create_task_group() as group:
        if fleet.replicas is not None:
            await group.start(fleet.replicas.run)
        fleet.hub.bind(group)
        fleet.jobs.bind(group)
        fleet.operations.bind(group)
        fleet.lb_reports.bind(group)
        await fleet.jobs.resume_unfinished(is_read)
        yield
        group.cancel_scope.cancel()


def _without_native_telemetry() -> dict[str, Any]:
    """FastAPI's own OpenTelemetry hooks off, where this FastAPI has them (0.165 and later): the
    control plane configures no OpenTelemetry, and the check that finds none, made on every
    request and every agent's dial, cost some 10 us of a bare route's 75 (12 %)."""
    if "telemetry" not in inspect.signature(FastAPI.__init__).parameters:
        return {}
    return {"telemetry": {"tracing": False, "metrics": False, "logs": False}}


def create_app(fleet: Fleet) -> FastAPI:
    fastmask.install()  # every byte agents and clients send over a WebSocket is unmasked here
    app = FastAPI(
        lifespan=lambda _app: _lifespan(fleet),
        title="fleetdeck",
        version=__version__,
        openapi_url="/v1/openapi.json",
        docs_url=None,
        redoc_url=None,
        responses=errors.OPENAPI_RESPONSES,
        **_without_native_telemetry(),
    )
    app.state.fleet = fleet
    errors.install(app)
    # The first route, and a plain Starlette one: in a relink storm thousands of agents dial it
    # a minute, and each dial would otherwise be matched against every API route before it, and go
    # through FastAPI's dependency solving, which the link does not use (benchmarks/fleet.py).
    app.router.routes.append(WebSocketRoute(AGENT_LINK_PATH, fleet.hub.handle))
    app.include_router(auth_router)
    app.include_router(servers_router)
    app.include_router(files_router)
    app.include_router(jobs_router)
    app.include_router(audit_router)
    app.include_router(load_balancers_router)
    # Around every route: request bodies over their cap, or stalled, are refused before a route reads them.
    app.add_middleware(BodyGuard)

    return app
