"""A hub served over real sockets by hypercorn's trio worker: the control plane end of agent link tests."""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import trio
from hypercorn.config import Config
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute

from agent.link.client import Backoff
from contract.link import protocol
from control_plane.hub import AgentHub, AgentSession
from control_plane.hub.admission import MAX_PENDING_LINKS
from control_plane.hub.link import OnPulse

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


def make_control_plane(
    heartbeat_s: float = 10.0, max_pending_links: int = MAX_PENDING_LINKS, on_pulse: OnPulse | None = None
) -> ControlPlane:
    cp: ControlPlane

    async def authenticate(token: str) -> str | None:
        cp.auth_calls += 1
        return SERVER_ID if token == TOKEN else None

    async def on_presence(server_id: str, session: AgentSession | None) -> None:
        cp.presence.append((server_id, session))
        cp.changed.set()

    hub = AgentHub(
        authenticate=authenticate,
        on_presence=on_presence,
        on_pulse=on_pulse,
        heartbeat_s=heartbeat_s,
        max_pending_links=max_pending_links,
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


@asynccontextmanager
async def hello_from(url: str, *, without: tuple[str, ...] = (), **fields: Any) -> AsyncIterator[Any]:
    """A hand-made hello (version 1, no handlers, plus `fields`, less the fields named in
    `without`); yields the first frame back (a decoded message, or the close reason) while the
    WebSocket is still open."""
    from trio_websocket import ConnectionClosed, open_websocket_url

    ws_url = url.replace("http", "ws") + protocol.LINK_PATH
    hello = {"t": "hello", "version": "1", "boot_id": "b", "handlers": [], "hostname": "h", **fields}
    for name in without:
        del hello[name]
    async with open_websocket_url(ws_url, extra_headers=[(b"authorization", f"Bearer {TOKEN}".encode())]) as ws:
        await ws.send_message(protocol.encode(hello))
        with trio.fail_after(5):
            try:
                answer = protocol.decode(await ws.get_message())
            except ConnectionClosed as closed:
                answer = closed.reason
        yield answer


class StalledAgent:
    """An agent that links, then reads nothing more while it goes on saying "alive": its control
    plane's sends to it pile up in the socket and wait, while the link is kept (as an agent's
    whose disk or CPU is too slow for what it is sent). A plain socket and wsproto, in threads:
    trio-websocket would read on its own. `close` ends it."""

    def __init__(self, base_url: str, token: str, heartbeat_s: float) -> None:
        import threading

        from wsproto import ConnectionType, WSConnection
        from wsproto.events import AcceptConnection, Request, TextMessage

        host, port = base_url.removeprefix("http://").split(":")
        self.socket = socket.socket()
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window: full soon
        self.socket.connect((host, int(port)))
        self.port = self.socket.getsockname()[1]
        self._ws = WSConnection(ConnectionType.CLIENT)
        auth = [(b"authorization", f"Bearer {token}".encode())]
        self._send(Request(host=host, target=protocol.LINK_PATH, extra_headers=auth))
        hello = {"t": "hello", "version": "1", "boot_id": "stalled", "handlers": [], "hostname": "stalled"}
        welcomed = accepted = False
        while not welcomed:
            data = self.socket.recv(65536)
            if not data:
                raise ConnectionError("the control plane closed the link before its welcome")
            self._ws.receive_data(data)
            for event in self._ws.events():
                if isinstance(event, AcceptConnection) and not accepted:
                    accepted = True
                    self._send(TextMessage(protocol.encode(hello)))
                elif isinstance(event, TextMessage):
                    welcomed = protocol.decode(event.data)["t"] == protocol.WELCOME
        self._closed = threading.Event()
        self._beats = threading.Thread(target=self._beat, args=(heartbeat_s, TextMessage), daemon=True)
        self._beats.start()

    def _send(self, event: Any) -> None:
        self.socket.sendall(self._ws.send(event))

    def _beat(self, heartbeat_s: float, text_message: Any) -> None:
        while not self._closed.wait(heartbeat_s / 3):
            try:
                self._send(text_message(protocol.encode({"t": protocol.ALIVE})))
            except OSError:
                return

    def close(self) -> None:
        self._closed.set()
        self._beats.join()
        self.socket.close()


def unsent_bytes(local_port: int, peer_port: int) -> int:
    """What the loopback TCP socket from `local_port` to `peer_port` holds unacknowledged or unsent
    (its send queue, from /proc/net/tcp): how far its peer is behind reading."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, queues = fields[1], fields[2], fields[4]
        if int(local.split(":")[1], 16) == local_port and int(remote.split(":")[1], 16) == peer_port:
            return int(queues.split(":")[0], 16)
    return 0
