"""Serving the app on a socket we bound ourselves, with hypercorn's trio worker or with uvicorn
on asyncio (`Settings.server`).

Binding first (port 0 = any free port) and handing the server the socket means the real port is
known before serving starts, with no window in which another process could take it.

The handlers are written against anyio, so the same app runs on either event loop; what runs
around it (`fleetdeck serve`, `fleetdeck local`) is anyio code too, started by `run` on the loop
the chosen server needs.

Which one. `benchmarks/serving.py` on this 2-core machine, shared with other work (load average
6 to 7), two runs of each server, alternating (figures: hypercorn, then uvicorn; last: the ratio
of the means of the control plane's work per CPU-second, which swings far less than wall-clock
rates do with the neighbours' load):

    GET /v1/health        465-800 vs 899-1,005 requests/s        1.9x per CPU-second
    GET /v1/servers       179-317 vs 267-402 requests/s          1.6x
    job output over SSE   73k-132k vs 118k-372k lines/s          1.6x
    128 MiB download      67-137 vs 120-329 MiB/s                2.5x
    RSS                   112 vs 113 MiB at rest, 174 MiB at the peak under both

uvicorn is ahead on every figure, so `fleetdeck serve` uses it by default (`fleetdeck.cli`);
`fleetdeck local` keeps hypercorn (`fleetdeck.local.LOCAL_SERVER` says why). uvicorn[standard]
(httptools and uvloop), measured the same way, did 1.6x plain uvicorn's /v1/health work per
CPU-second but no better on /v1/servers, SSE or downloads, nor in wall-clock rates: not taken;
uvicorn runs h11 (as hypercorn does) on asyncio's own loop, two compiled dependencies fewer.

The hypercorn patches below do not apply to uvicorn, where what they guard against does not
happen: a send after the client went is dropped (asyncio's writes never wait, so no send meets a
close in progress); an early answer (the 413 of a relay upload over 64 MiB) is written and the
connection closed (tests/control_plane/files/test_routes.py, the "uvicorn" stack variant); a client's broken
request is one warning line and a 400, a WebSocket upgrade of a plain route a 403 (tests/fleetdeck/test_local.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import socket
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import anyio
import anyio.abc
import h11
import trio
import uvicorn
from hypercorn.config import Config
from hypercorn.events import Closed, RawData
from hypercorn.events import Event as ServerEvent
from hypercorn.protocol.events import Body, Event, StreamClosed
from hypercorn.protocol.http_stream import ASGIHTTPState, HTTPStream
from hypercorn.trio import serve, tcp_server
from hypercorn.trio.tcp_server import TCPServer
from uvicorn._types import ASGISendEvent
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from control_plane.app import AGENT_LINK_PATH, create_app
from control_plane.errors import cut_by_error
from control_plane.frontdoor import REQUEST_HEAD_TIMEOUT_S, head_timeout_answer
from control_plane.hub import LinksFirst
from control_plane.hub.hub import BUSY_MESSAGE
from control_plane.settings import ServerName
from control_plane.state import Fleet

log = logging.getLogger(__name__)

# Connections the kernel queues before we accept them. hypercorn listens again on the socket it is
# given, with its own default of 100: a relink storm of thousands of agents then overflows the
# queue, their SYNs are dropped and they wait seconds of TCP retransmission before they even reach
# the control plane's backoff logic (benchmarks/fleet.py).
LISTEN_BACKLOG = 1024
RECEIVE_CAP = 1024 * 1024  # bytes per receive from a client (see _receive_in_larger_reads)

# The event loop each server runs on.
BACKENDS: dict[ServerName, str] = {"hypercorn": "trio", "uvicorn": "asyncio"}
# Agent links carry 256 KiB binary frames; allow whole 64 MiB relay messages.
WEBSOCKET_MAX_MESSAGE_SIZE = 64 * 1024 * 1024
# How long a stopping server waits for its requests (SSE streams, agent links) to end.
GRACEFUL_TIMEOUT_S = 2


def run(server: ServerName, main: Callable[..., Awaitable[None]], *args: object) -> None:
    """Run `main` (anyio code that serves with `serve_fleet`) on the event loop `server` needs."""
    anyio.run(main, *args, backend=BACKENDS[server])


def _contain_connection_failures() -> None:
    """Make one connection's failure end that connection, not the whole server.

    hypercorn's trio worker runs every connection in one nursery, so an exception that escapes a
    connection task (a `BusyResourceError` when a WebSocket close races the client's close reply;
    hypercorn issues #177, #225) cancels every other request and the agent links, and the control
    plane exits. Seen here as a rare death after streamed uploads. Each connection is wrapped so
    its failure is logged and its socket closed, as a broken connection should be.
    """
    if getattr(TCPServer.run, "_fleetdeck_contained", False):
        return
    original = TCPServer.run

    async def run(self: TCPServer) -> None:
        try:
            await original(self)
        except Exception as exc:
            # A client's broken bytes, not our bug: one line; the traceback only when debugging.
            log.warning("a connection failed (%r); the server goes on", exc, exc_info=log.isEnabledFor(logging.DEBUG))

    run._fleetdeck_contained = True  # type: ignore[attr-defined]
    TCPServer.run = run  # type: ignore[method-assign]


def _sending_while_closing_is_closed() -> None:
    """Treat a send that meets the connection's own close as a send to a closed connection.

    hypercorn sends under a lock, but closes (`send_eof`) without it: when the protocol closes
    the connection (the client broke its request off mid-body) while the app is still sending its
    answer, the app's send meets the half-close in progress and trio raises `BusyResourceError`,
    which reached the app as an unhandled error with a traceback in the log. Only a close can be
    sending without the lock, so that error means the connection is going: handled like the
    `BrokenResourceError` of a connection already gone.
    """
    if getattr(TCPServer.protocol_send, "_fleetdeck_closing", False):
        return
    original = TCPServer.protocol_send

    async def protocol_send(self: TCPServer, event: ServerEvent) -> None:
        try:
            await original(self, event)
        except trio.BusyResourceError:
            if not isinstance(event, RawData):
                raise
            await self.protocol.handle(Closed())

    protocol_send._fleetdeck_closing = True  # type: ignore[attr-defined]
    protocol_send.__wrapped__ = original  # type: ignore[attr-defined]
    TCPServer.protocol_send = protocol_send  # type: ignore[method-assign]


def _close_answered_requests() -> None:
    """Let a connection close once its request is answered, even if the app left its body unread.

    An early answer (413 to a relay upload over 64 MiB) leaves the rest of the body unread: up to
    `max_app_queue_size` chunks wait for the app, then hypercorn stops reading the socket. Ending
    the exchange, it then queues `http.disconnect` for the app, which blocks on the full queue,
    inside the app's own last `send`: the answer is out but the socket is never closed, and the
    client, still writing, never reads it. Here, once the answer is complete, a full queue is
    closed instead (the app reads nothing more of an answered request; body chunks still arriving
    are dropped), so hypercorn goes on to close the connection (the answer says `Connection: close`).
    """
    if getattr(HTTPStream.handle, "_fleetdeck_closing", False):
        return
    original = HTTPStream.handle

    async def handle(self: HTTPStream, event: Event) -> None:
        put = getattr(self, "app_put", None)
        queue = getattr(put, "__self__", None)
        if isinstance(event, StreamClosed) and self.state is ASGIHTTPState.CLOSED and queue is not None:
            self.closed = True
            try:
                queue.send_nowait({"type": "http.disconnect"})
            except trio.WouldBlock:
                queue.close()
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                pass
            return
        try:
            await original(self, event)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            if not isinstance(event, Body):
                raise  # only the rest of an answered request's body may go nowhere

    handle._fleetdeck_closing = True  # type: ignore[attr-defined]
    HTTPStream.handle = handle  # type: ignore[method-assign]


def _head_begun(connection: h11.Connection) -> bool:
    """An HTTP/1.1 connection waiting for a request's head, of which some bytes came."""
    return connection.their_state is h11.IDLE and bool(connection.trailing_data[0])


def _answer_stalled_heads() -> None:
    """Answer a request head that did not arrive in time with 408, not only a closed connection.

    hypercorn's idle timer (`keep_alive_timeout`, set to `REQUEST_HEAD_TIMEOUT_S`) runs from a
    connection's start, or the end of its previous answer, until a request's head is complete,
    whatever bytes come meanwhile: it already cuts slow headers. It closes the connection without
    a word; here, when part of a head had come, the client is told why first.
    """
    if getattr(TCPServer._initiate_server_close, "_fleetdeck_head_timeout", False):
        return
    original = TCPServer._initiate_server_close

    async def initiate_server_close(self: TCPServer) -> None:
        connection = getattr(getattr(self.protocol, "protocol", None), "connection", None)
        if isinstance(connection, h11.Connection) and _head_begun(connection):
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError):
                await self.stream.send_all(head_timeout_answer())
        await original(self)

    initiate_server_close._fleetdeck_head_timeout = True  # type: ignore[attr-defined]
    TCPServer._initiate_server_close = initiate_server_close  # type: ignore[method-assign]


class _BrokenProtocolFilter(logging.Filter):
    """hypercorn logs "Error in ASGI Framework" with a traceback when the app answers on a
    connection whose client broke HTTP (h11 is in its ERROR state: a stray byte after a WebSocket
    upgrade, say). That is the client's bad input, not our bug: one warning line instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, BaseExceptionGroup):
            protocol, rest = error.split(h11.ProtocolError)
            error = protocol.exceptions[0] if protocol is not None and rest is None else None
        if isinstance(error, h11.ProtocolError):
            record.msg, record.args = "a client broke the HTTP protocol (%s): its connection is closed", (error,)
            record.exc_info, record.exc_text = None, None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


class _ResponseCutFilter(logging.Filter):
    """Both servers log what the app raises ("Exception in ASGI application", "Error in ASGI
    Framework") with its traceback, then cut the connection. A `ResponseCut` is raised for that
    cut alone and was logged as one warning line already: the server's record is dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not cut_by_error(record.exc_info[1] if record.exc_info else None)


def _add_filter(logger_name: str, kind: type[logging.Filter]) -> None:
    logger = logging.getLogger(logger_name)
    if not any(isinstance(f, kind) for f in logger.filters):
        logger.addFilter(kind())


def install_server_fixes() -> None:
    """Patch hypercorn's trio worker where it fails us (each patch says why); idempotent."""
    _add_filter("hypercorn.error", _BrokenProtocolFilter)
    _add_filter("hypercorn.error", _ResponseCutFilter)
    _contain_connection_failures()
    _sending_while_closing_is_closed()
    _close_answered_requests()
    _answer_stalled_heads()
    _receive_in_larger_reads()


def _receive_in_larger_reads() -> None:
    """hypercorn's trio worker reads at most 64 KiB per receive (`tcp_server.MAX_RECV`), and each
    read goes through h11 or wsproto and the app's queue on its own: a 1 MiB WebSocket message of
    a streamed upload took 16 of them. A receive returns what has arrived, so a larger cap costs
    a small request nothing."""
    tcp_server.MAX_RECV = max(tcp_server.MAX_RECV, RECEIVE_CAP)


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP said, not left 0: asyncio sets TCP_NODELAY on the accepted connections only when
    # the protocol is TCP by name. Without it, uvicorn's answers waited for delayed ACKs (Nagle):
    # 45 ms per request on a keep-alive connection, 22 requests/s. (trio sets it on every socket.)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(LISTEN_BACKLOG)
    sock.set_inheritable(True)
    return sock


def close_unless_served(sock: socket.socket) -> None:
    """Close a bound socket that never reached `serve_fleet` (which detaches the ones it takes)."""
    if sock.fileno() != -1:
        sock.close()


def base_url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


async def serve_fleet(
    fleet: Fleet,
    sock: socket.socket,
    *,
    shutdown_trigger: Callable[[], Awaitable[None]] | None = None,
    wrap: Callable[[Any], Any] | None = None,
    task_status: anyio.abc.TaskStatus[list[str]] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the fleet's app on `sock` with the server its settings name, until `shutdown_trigger`
    returns or the caller is cancelled; `wrap` (an ASGI middleware) goes around the app when given.
    Started with `task_group.start`, it reports the served URLs once it listens."""
    # The servers' ASGI types are narrower than Starlette's own; the app is a plain ASGI 3 callable.
    app: Any = LinksFirst(create_app(fleet), fleet.hub, AGENT_LINK_PATH)
    if wrap is not None:
        app = wrap(app)
    # What is built by now (modules, the app, its schemas: some 120,000 objects) lives as long as
    # the process: out of the cyclic collector's way, a full collection no longer walks it again
    # each time (128 ms each here, many times over in a storm of thousands of agent links).
    gc.freeze()
    await serve_asgi(
        fleet.settings.server,
        app,
        sock,
        shutdown_trigger=shutdown_trigger,
        link_turn=fleet.hub.turn_if_busy,
        task_status=task_status,
    )


async def serve_asgi(
    server: ServerName,
    app: Any,
    sock: socket.socket,
    *,
    shutdown_trigger: Callable[[], Awaitable[None]] | None = None,
    link_turn: Callable[[], int | None] | None = None,
    task_status: anyio.abc.TaskStatus[list[str]] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve any ASGI `app` on `sock` with `server`, configured as the fleet's app is: what
    `serve_fleet` runs, and what benchmarks/concurrency.py serves its bare route with, so the two
    are measured on the same server. `link_turn`: the hub's early refusal of agent links (uvicorn
    asks it before an upgrade; none without a hub)."""
    trigger = shutdown_trigger or anyio.sleep_forever
    if server == "uvicorn":
        await _serve_uvicorn(app, sock, trigger, link_turn or _no_link_turns, task_status)
    else:
        await _serve_hypercorn(app, sock, trigger, task_status)


async def _serve_hypercorn(
    app: Any, sock: socket.socket, trigger: Callable[[], Awaitable[None]], task_status: anyio.abc.TaskStatus[Any]
) -> None:
    install_server_fixes()
    config = Config()
    # Hypercorn takes the descriptor over and closes it when it stops: hand it over for good.
    config.bind = [f"fd://{sock.detach()}"]
    config.accesslog = None
    config.backlog = LISTEN_BACKLOG
    config.graceful_timeout = GRACEFUL_TIMEOUT_S
    config.keep_alive_timeout = REQUEST_HEAD_TIMEOUT_S  # also the time a head may take (`_answer_stalled_heads`)
    config.websocket_max_message_size = WEBSOCKET_MAX_MESSAGE_SIZE
    await serve(app, config, shutdown_trigger=trigger, task_status=task_status)


class _HeadTimedH11(H11Protocol):
    """uvicorn's h11 protocol with a time limit on each request's head (`REQUEST_HEAD_TIMEOUT_S`),
    from the connection's start or the end of the previous answer on it. uvicorn has none (its
    keep-alive timer stops at a new request's first byte), so a client that sent its headers a
    byte at a time held a connection for ever. A head begun and not finished is answered 408; a
    connection with no byte of a new request is closed, as an idle keep-alive one is. A request's
    body is the app's (`control_plane.frontdoor`)."""

    _head_timer: asyncio.TimerHandle | None = None
    # The hub's `turn_if_busy`, in the subclass made for each served fleet (`_serve_uvicorn`).
    link_turn: Callable[[], int | None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        self._arm_head_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm_head_timer()

    def handle_websocket_upgrade(self, event: h11.Request) -> None:
        self._disarm_head_timer()
        if self.link_turn is not None and event.target.partition(b"?")[0] == AGENT_LINK_PATH.encode():
            turn = self.link_turn()
            if turn is not None:
                self._turn_link_away(turn)
                return
        super().handle_websocket_upgrade(event)

    def _turn_link_away(self, retry_after: int) -> None:
        """The hub's 503 and Retry-After (`AgentHub.handle`), answered here: a relink storm turns
        thousands of dials away, and each cost a WebSocket handshake and an ASGI task before the
        hub could say it (benchmarks/fleet.py)."""
        body = BUSY_MESSAGE.encode()
        headers = [
            (b"retry-after", str(retry_after).encode()),
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        for event in (h11.Response(status_code=503, headers=headers), h11.Data(data=body), h11.EndOfMessage()):
            self.transport.write(self.conn.send(event))
        self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        super().connection_lost(exc)

    def _arm_head_timer(self) -> None:
        self._disarm_head_timer()
        if not self.transport.is_closing():
            self._head_timer = self.loop.call_later(REQUEST_HEAD_TIMEOUT_S, self._head_timed_out)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return  # a head came in time
        if _head_begun(self.conn):
            self.transport.write(head_timeout_answer())
        self.transport.close()


class _QueueingWebSockets(WebSocketsSansIOProtocol):
    """uvicorn's websockets protocol, which stops reading a connection once `PAUSE_AT_MESSAGES`
    wait for the app rather than after each one. uvicorn's pauses at the first and resumes as soon
    as the app takes it: two epoll calls per message, most of the work an idle agent link's
    heartbeat costs (benchmarks/fleet.py, 10,000 links at rest). A slow reader still stops the
    connection, a message later."""

    PAUSE_AT_MESSAGES = 2

    def send_receive_event_to_app(self) -> None:
        paused = self.read_paused
        self.read_paused = True  # what keeps uvicorn from pausing: it pauses when it was not
        try:
            super().send_receive_event_to_app()
        finally:
            self.read_paused = paused
        if not paused and self.queue.qsize() >= self.PAUSE_AT_MESSAGES:
            self.read_paused = True
            self.transport.pause_reading()

    async def send(self, message: ASGISendEvent) -> None:
        await super().send(message)
        if message["type"] == "websocket.http.response.body" and not message.get("more_body", False):
            # A refusal before the upgrade (the hub's 503 and Retry-After) is a complete answer:
            # uvicorn logged each as an error ("returned without completing handshake"), thousands
            # of lines in a relink storm.
            self.handshake_complete = True


class _Uvicorn(uvicorn.Server):
    """uvicorn's server without its signal handlers (the command that serves owns the signals;
    uvicorn's would replace the event loop's own), saying when it listens."""

    def __init__(self, config: uvicorn.Config, on_listening: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_listening = on_listening

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            self._on_listening()


def _no_link_turns() -> int | None:
    return None


async def _serve_uvicorn(
    app: Any,
    sock: socket.socket,
    trigger: Callable[[], Awaitable[None]],
    link_turn: Callable[[], int | None],
    task_status: anyio.abc.TaskStatus[Any],
) -> None:
    _add_filter("uvicorn.error", _ResponseCutFilter)
    config = uvicorn.Config(
        app,
        lifespan="on",  # the app's task group (jobs, file operations) lives in its lifespan
        # uvicorn's h11 (see the module docstring for httptools), with a head timeout; agent links
        # turned away before their upgrade
        http=type("_FleetH11", (_HeadTimedH11,), {"link_turn": staticmethod(link_turn)}),
        timeout_keep_alive=int(REQUEST_HEAD_TIMEOUT_S),
        ws=_QueueingWebSockets,  # websockets' own protocol, not its deprecated legacy server
        ws_max_size=WEBSOCKET_MAX_MESSAGE_SIZE,
        ws_ping_interval=None,  # the agent link has heartbeats of its own (`Settings.heartbeat_s`)
        ws_per_message_deflate=False,
        timeout_graceful_shutdown=GRACEFUL_TIMEOUT_S,
        log_config=None,  # the command configured logging
        access_log=False,
    )
    url = base_url(sock)
    server = _Uvicorn(config, lambda: task_status.started([url]))

    async def exit_after_trigger() -> None:
        try:
            await trigger()
        finally:  # also when cancelled: uvicorn ends its connections within its graceful timeout
            server.should_exit = True

    async with anyio.create_task_group() as task_group:
        task_group.start_soon(exit_after_trigger)
        # uvicorn stops on its flag, not on cancellation: shielded, it closes its connections.
        with anyio.CancelScope(shield=True):
            await server.serve(sockets=[sock])
        task_group.cancel_scope.cancel()
