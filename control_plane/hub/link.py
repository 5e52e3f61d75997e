"""One agent's live link, seen from the control plane: calls in flight, receive loop, heartbeat.

anyio only (no trio import), so it runs under hypercorn's trio worker and on asyncio alike.
"""

from __future__ import annotations

import itertools
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Protocol, TypeVar

import anyio
from anyio.abc import TaskGroup
from pydantic import ValidationError
from starlette.websockets import WebSocket, WebSocketDisconnect

from contract.link import protocol
from contract.link.params import Needs, Pulse, refusal
from contract.link.protocol import ProtocolError
from control_plane.hub.errors import AgentCallError, AgentOfflineError, AgentTimeoutError

log = logging.getLogger("fleetdeck.hub")


@dataclass(frozen=True)
class AgentSession:
    """What the hub knows of a connected agent (from its hello)."""

    server_id: str
    version: str
    boot_id: str
    hostname: str
    handlers: frozenset[str]
    direct_ingress_url: str | None
    connected_at: datetime
    peer: str | None = None  # the IP address the link comes from, as this control plane sees it
    # The job kinds the agent has a handler for, sorted (None: an agent too old to say).
    job_kinds: tuple[str, ...] | None = None
    # (fs.protected_hardlinks, fs.protected_symlinks) as the hello said (None: it did not say).
    kernel_protections: tuple[bool | None, bool | None] | None = None
    # The kinds of job_kinds that cannot run on the server now, each with the package it needs, as
    # the agent last said (hello, then its needs frames); None: an agent too old to say.
    needs: dict[str, str] | None = None
    # The key this link's direct-upload URLs are signed with (None: the agent has no ingress).
    ingress_key: bytes | None = field(default=None, repr=False)


OnReport = Callable[[str, dict[str, Any]], Awaitable[None]]
OnPulse = Callable[[str, Pulse], None]  # (server id, its pulse): called on the link's receive loop, so quick


class Pending:
    """A call in flight: its streamed chunks, its answer, and (uploads) the credit it may spend."""

    def __init__(self, call_id: int, method: str, *, window: int | None, upload: bool) -> None:
        self.id = call_id
        self.method = method
        self.window = window
        self.chunks: deque[tuple[list[Any] | bytes, int]] = deque()
        self.unconsumed = 0  # bytes received and not yet granted back: bounded by flow control
        self.upload_credit = protocol.UPLOAD_WINDOW if upload else 0
        self.done = False
        self.result: Any = None
        self.error: Exception | None = None
        self._changed = anyio.Event()

    def _notify(self) -> None:
        self._changed.set()

    async def wait_changed(self, deadline: float) -> None:
        """Wait for a chunk, credit or the answer; AgentTimeoutError past the deadline."""
        self._changed = anyio.Event()
        with anyio.move_on_after(deadline - anyio.current_time()):
            await self._changed.wait()
            return
        raise AgentTimeoutError(f"{self.method}: no answer in time")

    async def wait_done(self, deadline: float) -> Any:
        while not self.done:
            await self.wait_changed(deadline)
        return self.outcome()

    def outcome(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.result

    def push(self, data: list[Any] | bytes, cost: int) -> None:
        self.chunks.append((data, cost))
        self.unconsumed += cost
        self._notify()

    def add_credit(self, n: int) -> None:
        self.upload_credit += n
        self._notify()

    def finish(self, message: dict[str, Any]) -> None:
        if "error" in message:
            error = protocol.RpcError.from_wire(message["error"])
            if error.code == protocol.TIMEOUT:
                self.fail(AgentTimeoutError(f"{self.method}: {error.message}"))
            else:
                self.fail(AgentCallError(error.code, error.message, error.details))
        elif not self.done:
            self.result = message.get("result")
            self.done = True
            self._notify()

    def fail(self, error: Exception) -> None:
        if not self.done:
            self.error = error
            self.done = True
            self._notify()


P = TypeVar("P", bound=Pending)


class CallPath(Protocol):
    """What the hub's calls need of a link: a `Link`, or a `RemoteLink` to another replica's."""

    upload_chunk_size: int  # the largest data frame of an upload this path carries

    def start_call(self, method: str, *, window: int | None = None, upload: bool = False) -> Pending: ...

    async def send_request(
        self, pending: Pending, params: dict[str, Any], time_limit: float | None, *, upload: bool = False
    ) -> None: ...

    async def send_text(self, frame: str) -> None: ...

    async def send_bytes(self, frame: bytes) -> None: ...

    def abandon(self, pending: Pending) -> None: ...


class Link:
    """A connected agent's WebSocket: one send lock, the calls in flight, `serve` until it drops."""

    upload_chunk_size = protocol.UPLOAD_CHUNK_SIZE

    def __init__(
        self,
        websocket: WebSocket,
        session: AgentSession,
        heartbeat_s: float,
        on_report: OnReport | None = None,
        on_pulse: OnPulse | None = None,
    ) -> None:
        self.websocket = websocket
        self.session = session
        self.heartbeat_s = heartbeat_s
        self._on_report = on_report
        self._on_pulse = on_pulse
        self.close_code = 1000
        self._send_lock = anyio.Lock()
        self._ids = itertools.count(1)
        self._pending: dict[int, Pending] = {}
        self._last_received = anyio.current_time()
        self._task_group: TaskGroup | None = None
        self._scope: anyio.CancelScope | None = None
        self._closed = False

    # --- sending --------------------------------------------------------------------------

    async def send_text(self, frame: str) -> None:
        if self._closed:
            raise AgentOfflineError(f"server {self.session.server_id}: agent link closed")
        try:
            async with self._send_lock:
                await self.websocket.send_text(frame)
        except (OSError, RuntimeError, WebSocketDisconnect) as exc:
            raise AgentOfflineError(f"server {self.session.server_id}: agent link closed") from exc

    async def send_bytes(self, frame: bytes) -> None:
        if self._closed:
            raise AgentOfflineError(f"server {self.session.server_id}: agent link closed")
        try:
            async with self._send_lock:
                await self.websocket.send_bytes(frame)
        except (OSError, RuntimeError, WebSocketDisconnect) as exc:
            raise AgentOfflineError(f"server {self.session.server_id}: agent link closed") from exc

    async def _send_quietly(self, message: dict[str, Any]) -> None:
        try:
            await self.send_text(protocol.encode(message))
        except AgentOfflineError:
            pass  # the receive loop or the heartbeat ends the link

    def send_soon(self, message: dict[str, Any]) -> None:
        """Send from the link's own task group: for a caller that must not wait (or is cancelled)."""
        if self._task_group is not None and not self._closed:
            self._task_group.start_soon(self._send_quietly, message)

    # --- calls ----------------------------------------------------------------------------

    def start_call(self, method: str, *, window: int | None = None, upload: bool = False) -> Pending:
        return self.adopt(lambda call_id: Pending(call_id, method, window=window, upload=upload))

    def adopt(self, make: Callable[[int], P]) -> P:
        """A new call on this link: `make` builds its `Pending` (a relayed call's own kind) for an id."""
        if self._closed:
            raise AgentOfflineError(f"server {self.session.server_id}: agent link closed")
        pending = make(next(self._ids) & protocol.MAX_CALL_ID)
        self._pending[pending.id] = pending
        return pending

    async def send_request(
        self, pending: Pending, params: dict[str, Any], time_limit: float | None, *, upload: bool = False
    ) -> None:
        request: dict[str, Any] = {
            "t": protocol.REQ,
            "id": pending.id,
            "method": pending.method,
            "params": params,
            "timeout": time_limit,
            "window": pending.window,
        }
        if upload:
            request["upload"] = True
        await self.send_text(protocol.encode(request))

    def abandon(self, pending: Pending) -> None:
        """The caller is done with a call: if it is still open, cancel it on the agent."""
        if self._pending.pop(pending.id, None) is not None and not pending.done:
            pending.fail(AgentOfflineError("call abandoned"))
            self.send_soon({"t": protocol.CANCEL, "id": pending.id})

    # --- serving --------------------------------------------------------------------------

    async def serve(self) -> None:
        """Receive loop and heartbeat until the agent leaves, goes silent or `close` is called."""
        self._last_received = anyio.current_time()  # the time since hello went to on_presence
        try:
            async with anyio.create_task_group() as tg:
                self._task_group, self._scope = tg, tg.cancel_scope
                await self._receive_loop()
                tg.cancel_scope.cancel()
        finally:
            self._closed = True
            self._task_group = None
            offline = AgentOfflineError(f"server {self.session.server_id}: agent link dropped")
            for pending in self._pending.values():
                pending.fail(offline)
            self._pending.clear()

    def close(self, code: int) -> None:
        """End `serve` from another task (a newer link replaced this one)."""
        self.close_code = code
        self._closed = True
        if self._scope is not None:
            self._scope.cancel()

    async def _receive_loop(self) -> None:
        """Receive until the agent leaves, breaks the protocol, or has been silent for
        `dead_after`. The agent says "alive" every `heartbeat_s` and is answered by the server's
        WebSocket layer (the pong of its ping), not here: an idle link costs this app one message
        in per period. The silence is timed by a deadline moved on at each message, not by a task
        of its own per link, which held memory as long as the link lived (benchmarks/fleet.py)."""
        # Never awaits a send: the agent may be blocked sending to us, and both would wait forever.
        limit = protocol.dead_after(self.heartbeat_s)
        with anyio.CancelScope(deadline=self._last_received + limit) as silence:
            while True:
                message = await self.websocket.receive()
                if message["type"] == "websocket.disconnect":
                    return
                self._last_received = anyio.current_time()
                silence.deadline = self._last_received + limit
                try:
                    if message.get("bytes") is not None:
                        self._on_binary(message["bytes"])
                    elif message.get("text") is not None:
                        self._on_text(message["text"])
                except ProtocolError as exc:
                    log.warning("agent of server %s broke the protocol: %s", self.session.server_id, exc)
                    self.close_code = protocol.CLOSE_PROTOCOL_ERROR
                    return
        silent = anyio.current_time() - self._last_received
        log.warning("agent of server %s silent for %.1f s: dropping its link", self.session.server_id, silent)
        self.close_code = protocol.CLOSE_HEARTBEAT_TIMEOUT

    def _on_binary(self, frame: bytes) -> None:
        cid, payload = protocol.unpack_binary(frame)
        pending = self._pending.get(cid)
        if pending is not None and pending.window is not None:
            self._push(pending, payload, len(payload))

    def _on_text(self, frame: str) -> None:
        message = protocol.decode(frame)
        kind = message["t"]
        if kind == protocol.RES:
            pending = self._pending.pop(protocol.call_id(message), None)
            if pending is not None:
                pending.finish(message)
        elif kind == protocol.ITEMS:
            pending = self._pending.get(protocol.call_id(message))
            items = message.get("items")
            if not isinstance(items, list):
                raise ProtocolError("items message without a list of items")
            if pending is not None and pending.window is not None:
                self._push(pending, items, protocol.text_cost(frame))
        elif kind == protocol.CREDIT:
            pending = self._pending.get(protocol.call_id(message))
            n = message.get("n")
            if type(n) is not int or n <= 0:
                raise ProtocolError("credit message without a positive n")
            if pending is not None:
                pending.add_credit(n)
        elif kind == protocol.PING:
            self.send_soon({"t": protocol.PONG})  # an agent older than ALIVE waits for it
        elif kind == protocol.NEEDS:
            self.session = replace(self.session, needs=_needs(message))
        elif kind == protocol.PULSE:
            pulse = _pulse(message)
            if self._on_pulse is not None:
                self._on_pulse(self.session.server_id, pulse)
        elif kind == protocol.REPORT and self._on_report is not None and self._task_group is not None:
            self._task_group.start_soon(self._report, message)
        # alive and pong need nothing (any frame is a sign of life); unknown types are ignored.

    async def _report(self, message: dict[str, Any]) -> None:
        assert self._on_report is not None
        try:
            await self._on_report(self.session.server_id, message)
        except Exception:
            log.exception("report %r of server %s failed", message.get("kind"), self.session.server_id)

    def _push(self, pending: Pending, data: list[Any] | bytes, cost: int) -> None:
        pending.push(data, cost)
        assert pending.window is not None
        # A compromised server must not be able to fill the control plane's memory.
        if pending.unconsumed > pending.window + protocol.MAX_MESSAGE_SIZE:
            log.warning("agent of server %s ignored flow control on %s", self.session.server_id, pending.method)
            pending.chunks.clear()
            self._pending.pop(pending.id, None)
            pending.fail(AgentCallError(protocol.INTERNAL, "the agent ignored flow control"))
            self.send_soon({"t": protocol.CANCEL, "id": pending.id})


def _needs(message: dict[str, Any]) -> dict[str, str]:
    """The map of a ``needs`` frame (a malformed one breaks the protocol, as a malformed hello does)."""
    try:
        return dict(Needs.model_validate(message).needs)
    except ValidationError as exc:
        raise ProtocolError(f"needs with a bad {refusal(exc)[0]}") from None


def _pulse(message: dict[str, Any]) -> Pulse:
    """The figures of a ``pulse`` frame (a malformed one breaks the protocol, as a bad ``needs`` does)."""
    try:
        return Pulse.model_validate(message)
    except ValidationError as exc:
        raise ProtocolError(f"pulse with a bad {refusal(exc)[0]}") from None
