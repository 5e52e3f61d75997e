"""`AgentHub`: the control plane's end of every agent link, and the only way to call an agent."""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import UTC, datetime
from typing import Any, TypeVar

import anyio
from anyio.abc import TaskGroup
from pydantic import ValidationError
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect

from contract.backoff import full_jitter
from contract.link import grant, protocol
from contract.link.params import Hello, refusal
from contract.link.protocol import ProtocolError
from control_plane.hub.admission import MAX_PENDING_LINKS, Admission
from control_plane.hub.errors import AgentOfflineError, AgentTimeoutError
from control_plane.hub.link import AgentSession, CallPath, Link, OnPulse, OnReport, Pending
from control_plane.storage.outage import RETRY_AFTER_S, is_outage

log = logging.getLogger("fleetdeck.hub")

Authenticate = Callable[[str], Awaitable[str | None]]
# Where a call goes when the agent is not linked here: another replica's link (None: nowhere).
Elsewhere = Callable[[str], Awaitable[CallPath | None]]
OnPresence = Callable[[str, AgentSession | None], Awaitable[None]]

_CLEANUP_TIMEOUT_S = 10.0
# The body of the 503 that turns a dial away (its Retry-After says when to come back).
BUSY_MESSAGE = "too many agent links are being set up: try again later\n"
# A presence report the database could not take is made again after full_jitter(attempt, base, cap).
PRESENCE_RETRY_BASE_S = 0.5
PRESENCE_RETRY_CAP_S = 5.0
# What a report that failed on an outage leaves as reported: equal to no link nor to any.
UNSURE = object()


class ReplyStream:
    """A streamed answer: ``async for chunk in stream`` yields item batches (`list`) and `bytes`.

    Credit goes back to the agent as chunks are taken, so an idle consumer stops the agent. After
    the iteration ends, `result` holds the final result; an error answer raises `AgentCallError`.
    """

    def __init__(self, link: CallPath, pending: Pending, deadline: float) -> None:
        self._link = link
        self._pending = pending
        self._deadline = deadline
        self._ungranted = 0
        self._ended = False

    @property
    def result(self) -> Any:
        if not self._ended:
            raise RuntimeError("the stream has not been read to its end")
        return self._pending.result

    def __aiter__(self) -> ReplyStream:
        return self

    async def __anext__(self) -> list[Any] | bytes:
        pending = self._pending
        while not pending.chunks:
            if pending.done:
                pending.outcome()  # raises the error answer
                self._ended = True
                raise StopAsyncIteration
            await pending.wait_changed(self._deadline)
        data, cost = pending.chunks.popleft()
        await self._grant(cost)
        return data

    async def _grant(self, cost: int) -> None:
        pending = self._pending
        pending.unconsumed -= cost
        self._ungranted += cost
        assert pending.window is not None
        if self._ungranted >= protocol.grant_threshold(pending.window) and not pending.done:
            n, self._ungranted = self._ungranted, 0
            try:
                await self._link.send_text(protocol.encode({"t": protocol.CREDIT, "id": pending.id, "n": n}))
            except AgentOfflineError:
                pass  # surfaces on the next chunk, once what was received has been handed out


class UploadStream:
    """Bytes to an agent handler: `send` waits for the agent's credit; `finish` gives the result."""

    def __init__(self, link: CallPath, pending: Pending, deadline: float) -> None:
        self._link = link
        self._pending = pending
        self._deadline = deadline

    async def send(self, data: bytes) -> None:
        pending = self._pending
        view = memoryview(data)
        offset = 0
        while offset < len(view):
            if pending.done:
                # The handler answered before the end: an error is raised; a result means it
                # wanted no more bytes.
                pending.outcome()
                return
            if pending.upload_credit <= 0:
                await pending.wait_changed(self._deadline)
                continue
            n = min(len(view) - offset, pending.upload_credit, self._link.upload_chunk_size)
            pending.upload_credit -= n
            await self._link.send_bytes(protocol.pack_binary(pending.id, view[offset : offset + n]))
            offset += n

    async def finish(self) -> Any:
        if not self._pending.done:
            await self._link.send_text(protocol.encode({"t": protocol.END, "id": self._pending.id}))
        return await self._pending.wait_done(self._deadline)


class AgentHub:
    """The registry of live agent links, keyed by server id, and the calls made over them."""

    def __init__(
        self,
        *,
        authenticate: Authenticate,
        on_presence: OnPresence | None = None,
        on_report: OnReport | None = None,
        on_pulse: OnPulse | None = None,
        heartbeat_s: float = protocol.DEFAULT_HEARTBEAT_S,
        max_pending_links: int = MAX_PENDING_LINKS,
    ) -> None:
        if heartbeat_s <= 0:
            raise ValueError("heartbeat_s must be positive")
        self._admission = Admission(max_pending_links)
        self._authenticate = authenticate
        self._on_presence = on_presence
        self._on_report = on_report
        self._on_pulse = on_pulse  # each agent's pulse frames (`contract.link.params.Pulse`)
        self._heartbeat_s = heartbeat_s
        self._links: dict[str, Link] = {}
        # Presence reports of one server are serialised and always report the current state,
        # so a late "offline" of a replaced link never hides the link that replaced it.
        self._presence_locks: dict[str, anyio.Lock] = {}
        # The link last reported of each server (none: its absence), or UNSURE.
        self._reported: dict[str, AgentSession | object] = {}
        # Servers deleted while this process ran: a link authenticated just before the delete
        # (its hello still on the way) is refused when it would register, not left linked.
        self._deleted: set[str] = set()
        # Set by the replicas of a control plane on one database (`control_plane.replicas`).
        self.elsewhere: Elsewhere | None = None
        # Where a report that outlives its link runs (the app's lifespan task group; `bind`).
        self._group: TaskGroup | None = None

    def bind(self, group: TaskGroup) -> None:
        """Give the hub the task group its late presence reports run in (the app's lifespan owns it)."""
        self._group = group

    # --- queries --------------------------------------------------------------------------

    def session(self, server_id: str) -> AgentSession | None:
        link = self._links.get(server_id)
        return link.session if link is not None else None

    def is_online(self, server_id: str) -> bool:
        return server_id in self._links

    @property
    def online_count(self) -> int:
        return len(self._links)

    def disconnect(self, server_id: str) -> None:
        """Cut the link of a server that was deleted, at once. Its token went with it, so the
        link closes as a refused token does (4401): the agent waits its long backoff, and every
        relink is refused."""
        self._deleted.add(server_id)
        link = self._links.pop(server_id, None)
        if link is not None:
            log.info("server %s was deleted: its agent link is cut", server_id)
            link.close(protocol.CLOSE_AUTH_REFUSED)

    # --- calls ----------------------------------------------------------------------------

    def local_link(self, server_id: str) -> Link | None:
        return self._links.get(server_id)

    async def _link(self, server_id: str) -> CallPath:
        """The server's link here, else the way to it through the replica that holds it."""
        link: CallPath | None = self._links.get(server_id)
        if link is None and self.elsewhere is not None:
            link = await self.elsewhere(server_id)
        if link is None:
            raise AgentOfflineError(f"server {server_id}: agent not connected")
        return link

    # The timeout is part of the request: the agent stops its handler too, which a cancel scope
    # around the call could not tell it.
    async def call(
        self,
        server_id: str,
        method: str,
        params: dict[str, Any],
        *,
        timeout: float = 30.0,  # noqa: ASYNC109
    ) -> Any:
        """One request, one answer. Raises AgentOfflineError, AgentCallError, AgentTimeoutError."""
        link = await self._link(server_id)
        pending = link.start_call(method)
        deadline = _deadline(timeout)
        try:
            with anyio.move_on_after(timeout):
                await link.send_request(pending, params, timeout)
                return await pending.wait_done(deadline)
            raise AgentTimeoutError(f"{method} on server {server_id}: no answer within {timeout} s")
        finally:
            link.abandon(pending)

    def open_stream(
        self,
        server_id: str,
        method: str,
        params: dict[str, Any],
        *,
        timeout: float | None = None,
        window: int = protocol.DEFAULT_WINDOW,
    ) -> AbstractAsyncContextManager[ReplyStream]:
        """A streamed answer; leaving the context before its end cancels the call on the agent."""
        if window <= 0:
            raise ValueError("window must be positive")
        return self._open_stream(server_id, method, params, timeout, window)

    @asynccontextmanager
    async def _open_stream(
        self, server_id: str, method: str, params: dict[str, Any], time_limit: float | None, window: int
    ) -> AsyncIterator[ReplyStream]:
        link = await self._link(server_id)
        pending = link.start_call(method, window=window)
        try:
            await link.send_request(pending, params, time_limit)
            yield ReplyStream(link, pending, _deadline(time_limit))
        finally:
            link.abandon(pending)

    def open_upload(
        self, server_id: str, method: str, params: dict[str, Any], *, timeout: float | None = None
    ) -> AbstractAsyncContextManager[UploadStream]:
        """Bytes to a handler; leaving the context before `finish` cancels the call on the agent."""
        return self._open_upload(server_id, method, params, timeout)

    @asynccontextmanager
    async def _open_upload(
        self, server_id: str, method: str, params: dict[str, Any], time_limit: float | None
    ) -> AsyncIterator[UploadStream]:
        link = await self._link(server_id)
        pending = link.start_call(method, upload=True)
        try:
            await link.send_request(pending, params, time_limit, upload=True)
            yield UploadStream(link, pending, _deadline(time_limit))
        finally:
            link.abandon(pending)

    # --- the link endpoint ----------------------------------------------------------------

    def turn_if_busy(self) -> int | None:
        """The `Retry-After` of a dial turned away now, or None when it would be set up: for a
        server that can answer it before the upgrade costs anything (`control_plane.serving`)."""
        return self._admission.retry_after() if self._admission.full else None

    async def handle(self, websocket: WebSocket) -> None:
        """Body of the ASGI WebSocket route ``/v1/agent/link``."""
        if not self._admission.enter():
            await _turn_away(websocket, self._admission.retry_after())
            return
        link = None
        try:
            link = await self._set_up(websocket)
        finally:
            self._admission.leave(registered=link is not None)
        if link is not None:
            await self._serve(link)

    async def _set_up(self, websocket: WebSocket) -> Link | None:
        """Authenticate, hello, welcome, register: the link, or None when it was refused."""
        token = _bearer_token(websocket.headers.get("authorization"))
        try:
            server_id = await self._authenticate(token) if token else None
        except Exception as exc:
            if not is_outage(exc):
                raise
            # The token cannot be checked while the database is away: come back, as when busy.
            await _turn_away(websocket, RETRY_AFTER_S)
            return None
        await websocket.accept()
        if server_id is None:
            client = websocket.client.host if websocket.client else "?"
            log.warning("agent link from %s refused: unknown or missing agent token", client)
            await _close(websocket, protocol.CLOSE_AUTH_REFUSED)
            return None
        try:
            with anyio.fail_after(protocol.HELLO_TIMEOUT_S):
                peer = websocket.client.host if websocket.client else None
                session = _session_from_hello(server_id, await _receive_text(websocket), peer)
        except (TimeoutError, ProtocolError, WebSocketDisconnect) as exc:
            log.warning("agent link of server %s dropped before hello: %s", server_id, str(exc) or type(exc).__name__)
            await _close(websocket, protocol.CLOSE_PROTOCOL_ERROR)
            return None
        welcome: dict[str, Any] = {
            "t": protocol.WELCOME,
            "server_id": server_id,
            "heartbeat_s": self._heartbeat_s,
            "now": time.time(),
        }
        if session.direct_ingress_url is not None:
            # A fresh signing key per link: URLs signed for a link die with it (contract.link.grant).
            key = grant.new_key()
            session = dataclasses.replace(session, ingress_key=key)
            welcome["ingress_key"] = grant.encode_key(key)
        link = Link(websocket, session, self._heartbeat_s, self._on_report, self._on_pulse)
        try:
            await link.send_text(protocol.encode(welcome))
        except AgentOfflineError:
            return None
        if server_id in self._deleted:  # deleted since its token was checked: no await from here to registering
            log.info("agent link of server %s refused: the server was deleted meanwhile", server_id)
            await _close(websocket, protocol.CLOSE_AUTH_REFUSED)
            return None
        previous = self._links.get(server_id)
        self._links[server_id] = link
        if previous is not None:
            log.info("server %s: a new agent link replaces the previous one", server_id)
            previous.close(protocol.CLOSE_REPLACED)
        log.info("agent of server %s online (version %s, %s)", server_id, session.version, session.hostname)
        return link

    async def _serve(self, link: Link) -> None:
        """Serve a registered link until it drops; then unregister it and report it gone."""
        server_id = link.session.server_id
        try:
            # Serve while the presence callback runs (it may write to a database): the link is
            # registered, so calls may already be waiting for their answers.
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._report_presence, server_id)
                await link.serve()
        finally:
            with anyio.move_on_after(_CLEANUP_TIMEOUT_S, shield=True):
                if self._links.get(server_id) is link:
                    del self._links[server_id]
                    log.info("agent of server %s offline", server_id)
                await _close(link.websocket, link.close_code)
                if not self._report_later(server_id):
                    await self._report_presence(server_id)

    def _report_later(self, server_id: str) -> bool:
        """Report in the app's task group, beyond the link's end (through an outage of the
        database, as long as it lasts); False when there is none (tests, or the app stopping)."""
        if self._group is None:
            return False
        try:
            self._group.start_soon(self._report_presence, server_id)
        except RuntimeError:  # the task group has ended: the app is stopping
            return False
        return True

    async def report_all_again(self) -> None:
        """Report every link held here as new (what was stored of them was lost meanwhile)."""
        for server_id in list(self._links):
            self._reported.pop(server_id, None)
            await self._report_presence(server_id)

    async def _report_presence(self, server_id: str) -> None:
        """Report the server's current link (or none) if it is not what was reported last. An
        outage of the database does not lose the report: it is made again, with whatever is
        current by then, until it goes through (the agent stays linked meanwhile)."""
        if self._on_presence is None:
            return
        lock = self._presence_locks.setdefault(server_id, anyio.Lock())
        attempt = 0
        while True:
            async with lock:
                current = self.session(server_id)
                if current is self._reported.get(server_id):
                    return
                try:
                    await self._on_presence(server_id, current)
                except Exception as exc:
                    if is_outage(exc):
                        # Part of it may be stored: whatever is current then is reported again.
                        self._reported[server_id] = UNSURE
                    else:
                        log.exception("presence callback failed for server %s", server_id)
                        self._reported_now(server_id, current)
                        return
                else:
                    self._reported_now(server_id, current)
                    return
            await anyio.sleep(full_jitter(attempt, PRESENCE_RETRY_BASE_S, PRESENCE_RETRY_CAP_S))
            attempt += 1

    def _reported_now(self, server_id: str, current: AgentSession | None) -> None:
        if current is None:
            self._reported.pop(server_id, None)
        else:
            self._reported[server_id] = current


class LinksFirst:
    """An ASGI app that hands the agent link's WebSockets (`path`) straight to `hub.handle`, and
    everything else to `app`, whose route for `path` then serves only apps not wrapped in this.

    Why: a link passed through the app's middleware and routing (some 15 calls, FastAPI's
    telemetry check among them) on every dial, about a third of the control plane's CPU in a
    relink storm, and each of their frames stayed in memory as long as the link lived
    (benchmarks/fleet.py). None of them does anything for the link.
    """

    def __init__(self, app: ASGIApp, hub: AgentHub, path: str) -> None:
        self.app = app
        self.hub = hub
        self.path = path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket" and scope["path"] == self.path:
            await self.hub.handle(WebSocket(scope, receive, send))
        else:
            await self.app(scope, receive, send)


def _deadline(timeout: float | None) -> float:
    return math.inf if timeout is None else anyio.current_time() + timeout


def _bearer_token(header: str | None) -> str | None:
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


async def _receive_text(websocket: WebSocket) -> str:
    message = await websocket.receive()
    if message["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(message.get("code", 1000))
    text = message.get("text")
    if text is None:
        raise ProtocolError("expected hello, got a binary frame")
    return str(text)


# A fleet's agents say the same few sets of names (one per version): each set is kept once, not
# once per link (some 2.5 KiB a link for the handlers alone). Bounded, as agents choose what they say.
_SHARED_MAX = 256
_shared_values: dict[Hashable, Hashable] = {}
V = TypeVar("V", bound=Hashable)


def _shared(value: V) -> V:
    """The value equal to `value` that is already kept, else `value` (kept while there is room)."""
    kept = _shared_values.get(value)
    if kept is None:
        if len(_shared_values) >= _SHARED_MAX:
            return value
        _shared_values[value] = kept = value
    return kept  # type: ignore[return-value]


def _session_from_hello(server_id: str, frame: str, peer: str | None = None) -> AgentSession:
    message = protocol.decode(frame)
    if message["t"] != protocol.HELLO:
        raise ProtocolError(f"expected hello, got {message['t']!r}")
    try:
        hello = Hello.model_validate(message)
    except ValidationError as exc:
        raise ProtocolError(f"hello with a bad {refusal(exc)[0]}") from None
    kernel = None
    if hello.kernel_protections is not None:
        hardlinks, symlinks = (hello.kernel_protections.get(name) for name in protocol.KERNEL_PROTECTIONS)
        kernel = (hardlinks, symlinks)
    return AgentSession(
        server_id=server_id,
        version=hello.version,
        boot_id=hello.boot_id,
        hostname=hello.hostname,
        handlers=_shared(frozenset(hello.handlers)),
        direct_ingress_url=hello.direct_ingress_url,
        connected_at=datetime.now(UTC),
        peer=peer,
        # Sorted and without repeats; None: the agent did not say (older than the field).
        job_kinds=None if hello.job_kinds is None else _shared(tuple(sorted(set(hello.job_kinds)))),
        kernel_protections=kernel,
        needs=None if hello.needs is None else dict(hello.needs),
    )


async def _turn_away(websocket: WebSocket, retry_after: int) -> None:
    """Too many links are being set up: come back in `retry_after` s (HTTP 503 before the upgrade,
    which costs less than a WebSocket opened to be closed; a server without the ASGI denial
    response extension closes one with 1013, after which the agent waits its busy backoff)."""
    busy = PlainTextResponse(BUSY_MESSAGE, 503, {"Retry-After": str(retry_after)})
    try:
        await websocket.send_denial_response(busy)
    except RuntimeError:
        await websocket.accept()  # a refusal before accept is an HTTP 403: a refused token
        await _close(websocket, protocol.CLOSE_TRY_AGAIN)


async def _close(websocket: WebSocket, code: int) -> None:
    try:
        await websocket.close(code)
    except (OSError, RuntimeError, WebSocketDisconnect):
        pass  # already closed or gone
