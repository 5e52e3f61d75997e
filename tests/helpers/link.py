"""A hub served over real sockets by hypercorn's trio worker: the control plane end of agent link tests."""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import trio
from hypercorn.config import Config
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute

from agent.link import protocol
from agent.link.client import Backoff
from control_plane.hub import AgentHub, AgentSession
from control_plane.hub.admission import MAX_PENDING_LINKS

TOKEN = "agent-token-1"
SERVER_ID = "srv-1"
FAST = Backoff(base=0.05, cap=0.2)
NEVER = Backoff(base=1000.0, cap=1000.0)  # a path the test must not take


@dataclass
class ControlPlane:
    hub: AgentHub
    presence: list[tuple[str, AgentSession | None]]
    changed: trio.Event = field(default_factory=trio.Event)
    auth_calls: int = 0

    async def wait_presence(self, online: bool, version: str | None = None) -> AgentSession | None:
        """The last presence report, once it says `online` (of `version`, if given)."""

        def matches() -> bool:
            session = self.presence[-1][1] if self.presence else None
            if not self.presence or (session is not None) != online:
                return False
            return version is None or (session is not None and session.version == version)

        with trio.fail_after(5):
            while not matches():
                self.changed = trio.Event()
                await self.changed.wait()
        return self.presence[-1][1]


def make_control_plane(heartbeat_s: float = 10.0, max_pending_links: int = MAX_PENDING_LINKS) -> ControlPlane:
    cp: ControlPlane

    async def authenticate(token: str) -> str | None:
        cp.auth_calls += 1
        return SERVER_ID if token == TOKEN else None

    async def on_presence(server_id: str, session: AgentSession | None) -> None:
        cp.presence.append((server_id, session))
        cp.changed.set()

    hub = AgentHub(
        authenticate=authenticate, on_presence=on_presence, heartbeat_s=heartbeat_s, max_pending_links=max_pending_links
    )
    cp = ControlPlane(hub, [])
    return cp


def hypercorn_config(bind: str) -> Config:
    config = Config()
    config.bind = [bind]
    config.accesslog = None
    config.graceful_timeout = 0.2
    config.websocket_max_message_size = protocol.MAX_MESSAGE_SIZE
    return config


def listening_socket() -> tuple[str, str]:
    """(hypercorn bind, base URL) of a socket bound here: for servers that cannot report their port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        # hypercorn owns (and closes) the duplicate.
        return f"fd://{os.dup(sock.fileno())}", f"http://127.0.0.1:{sock.getsockname()[1]}"


@asynccontextmanager
async def serving_app(app: Any, port: int = 0) -> AsyncIterator[str]:
    """`app` under hypercorn's trio worker on 127.0.0.1; yields the http base URL."""
    from hypercorn.trio import serve

    stop = trio.Event()
    config = hypercorn_config(f"127.0.0.1:{port}")
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(partial(serve, app, config, shutdown_trigger=stop.wait))
        try:
            yield binds[0]
        finally:
            stop.set()


def serving(hub: AgentHub, port: int = 0) -> AbstractAsyncContextManager[str]:
    return serving_app(Starlette(routes=[WebSocketRoute(protocol.LINK_PATH, hub.handle)]), port)
