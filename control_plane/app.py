"""The ASGI application: `create_app(fleet)` wires routes, errors and the agent link endpoint.

Handlers are written against anyio, so the same app runs under hypercorn's trio worker (the
default) and on an asyncio server.
"""

from __future__ import annotations

from fastapi import FastAPI, WebSocket

from . import __version__, errors
from .clock import now_iso
from .files.routes import router as files_router
from .hub import AgentHub, AgentSession
from .presence import PresenceFeed
from .routes.auth import router as auth_router
from .routes.servers import router as servers_router
from .settings import Settings
from .state import Fleet
from .storage import Database
from .storage import servers as server_store

AGENT_LINK_PATH = "/v1/agent/link"


def build_fleet(settings: Settings, db: Database | None = None) -> Fleet:
    """The app's shared state: a migrated database, the agent hub and the presence feed."""
    db = db or Database(settings.db_url)
    db.migrate()
    presence = PresenceFeed()

    async def authenticate_agent(token: str) -> str | None:
        row = await db.run(server_store.server_for_agent_token, token)
        return row["id"] if row else None

    async def on_presence(server_id: str, session: AgentSession | None) -> None:
        await db.run(
            server_store.record_presence,
            server_id,
            online=session is not None,
            version=session.version if session else None,
        )
        org_id = await db.run(server_store.org_of_server, server_id)
        if org_id is not None:
            presence.publish(
                org_id,
                {
                    "server_id": server_id,
                    "online": session is not None,
                    "version": session.version if session else None,
                    "at": now_iso(),
                },
            )

    hub = AgentHub(authenticate=authenticate_agent, on_presence=on_presence, heartbeat_s=settings.heartbeat_s)
    return Fleet(settings=settings, db=db, hub=hub, presence=presence)


def create_app(fleet: Fleet) -> FastAPI:
    app = FastAPI(
        title="fleetdeck",
        version=__version__,
        openapi_url="/v1/openapi.json",
        docs_url=None,
        redoc_url=None,
    )
    app.state.fleet = fleet
    errors.install(app)
    app.include_router(auth_router)
    app.include_router(servers_router)
    app.include_router(files_router)

    @app.websocket(AGENT_LINK_PATH)
    async def agent_link(websocket: WebSocket) -> None:
        await fleet.hub.handle(websocket)

    return app
