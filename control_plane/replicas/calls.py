"""Calls to an agent linked to another replica, relayed over the bus.

The relay speaks the agent link protocol itself (`contract.link.protocol`), so nothing is
translated twice:

* the requesting replica gets a `RemoteLink` where the hub would have a `Link`: the hub's own
  `call`, `ReplyStream` and `UploadStream` run on it unchanged (timeouts, credit, errors), and its
  frames go to the serving replica's subject instead of a WebSocket;
* the serving replica runs each relayed call on its link as a `RelayedCall`, a `Pending` that
  forwards what the agent sends (chunks, upload credit, the answer) instead of keeping it, and
  forwards the requester's frames (credit, upload bytes, end, cancel) to the agent under the
  link's own call id.

Flow control is end to end: the agent sends within the window the requester grants, so neither
replica holds more than a window per call. A requester that abandons a call (timeout, cancel,
an error of its own) sends `cancel`, which reaches the agent; a requester replica that dies is
noticed by its heartbeat going stale, and its calls are cancelled on the agents then.

A bus message is a JSON header, a newline, and an agent frame (text or binary) when it carries one.
"""

from __future__ import annotations

import functools
import itertools
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import anyio.abc
import orjson

from contract.errors import ApiError
from contract.link import protocol
from contract.link.protocol import ProtocolError
from control_plane.bus import Bus, BusAway
from control_plane.hub import AgentCallError, AgentHub, AgentOfflineError, AgentSession
from control_plane.hub.link import Link, Pending

log = logging.getLogger("fleetdeck.replicas")

SUBJECT_PREFIX = "fleetdeck.replica."
# Run a job created on another replica for an agent linked here: {"job_id", "org_id", "secrets", "read"}.
StartJob = Callable[[dict[str, Any]], Awaitable[None]]
# A method the replica holding the link answers itself, from its session (what never leaves it,
# such as the link's signing key), with the call's params: its result, or an ApiError.
AnswerHere = Callable[[AgentSession, dict[str, Any]], Awaitable[Any]]


def subject(replica_id: str) -> str:
    return SUBJECT_PREFIX + replica_id


def message(header: dict[str, Any], frame: bytes | str = b"") -> bytes:
    body = frame.encode() if isinstance(frame, str) else frame
    return orjson.dumps(header) + b"\n" + body


def parse(data: bytes) -> tuple[dict[str, Any], bytes]:
    head, _, body = data.partition(b"\n")
    header = orjson.loads(head)
    if not isinstance(header, dict):
        raise ProtocolError("a bus message without a header")
    return header, body


class RemoteLink:
    """The hub's view of an agent linked to another replica: a `Link` for calls."""

    # A bus message holds at most 1 MiB (NATS's default max_payload), its header included.
    upload_chunk_size = protocol.DEFAULT_CHUNK_SIZE

    def __init__(self, calls: RelayedCalls, replica_id: str, server_id: str) -> None:
        self._calls = calls
        self.replica_id = replica_id
        self.server_id = server_id

    def start_call(self, method: str, *, window: int | None = None, upload: bool = False) -> Pending:
        return self._calls.start(self, method, window=window, upload=upload)

    async def send_request(
        self, pending: Pending, params: dict[str, Any], time_limit: float | None, *, upload: bool = False
    ) -> None:
        header = {
            "t": "req",
            "from": self._calls.replica_id,
            "id": pending.id,
            "server_id": self.server_id,
            "method": pending.method,
            "params": params,
            "timeout": time_limit,
            "window": pending.window,
            "upload": upload,
        }
        self._calls.bus.publish(subject(self.replica_id), message(header))

    async def send_text(self, frame: str) -> None:
        self._calls.bus.publish(subject(self.replica_id), message({"t": "text", "from": self._calls.replica_id}, frame))

    async def send_bytes(self, frame: bytes) -> None:
        self._calls.bus.publish(subject(self.replica_id), message({"t": "bin", "from": self._calls.replica_id}, frame))

    def abandon(self, pending: Pending) -> None:
        if self._calls.forget(pending.id) is not None and not pending.done:
            pending.fail(AgentOfflineError("call abandoned"))
            frame = protocol.encode({"t": protocol.CANCEL, "id": pending.id})
            self._calls.bus.publish(
                subject(self.replica_id), message({"t": "text", "from": self._calls.replica_id}, frame)
            )


class RelayedCall(Pending):
    """A call another replica asked for, run on this replica's link: what the agent sends goes on
    to the requester under its own call id."""

    def __init__(self, call_id: int, method: str, *, window: int | None, upload: bool, relay: Relay) -> None:
        super().__init__(call_id, method, window=window, upload=upload)
        self.relay = relay

    def push(self, data: list[Any] | bytes, cost: int) -> None:
        self.unconsumed += cost  # until the requester grants it back: the link's guard still holds
        if isinstance(data, bytes):
            self.relay.send_bytes(protocol.pack_binary(self.relay.remote_id, data))
        else:
            self.relay.send_text({"t": protocol.ITEMS, "id": self.relay.remote_id, "items": data})

    def add_credit(self, n: int) -> None:
        self.relay.send_text({"t": protocol.CREDIT, "id": self.relay.remote_id, "n": n})

    def finish(self, message: dict[str, Any]) -> None:
        if not self.done:
            self.done = True
            self.relay.send_text({**message, "id": self.relay.remote_id})
            self.relay.ended()

    def fail(self, error: Exception) -> None:
        if self.done:
            return
        self.done = True
        if isinstance(error, AgentCallError):
            self.relay.send_text(
                {"t": protocol.RES, "id": self.relay.remote_id, "error": {"code": error.code, "message": error.message}}
            )
        else:
            self.relay.send_header({"t": "offline", "id": self.relay.remote_id})
        self.relay.ended()


class Relay:
    """The serving side of one relayed call: where its frames go, on the bus and on the link."""

    def __init__(self, calls: RelayedCalls, requester: str, remote_id: int, link: Link) -> None:
        self.calls = calls
        self.requester = requester
        self.remote_id = remote_id
        self.link = link
        self.pending: RelayedCall | None = None

    def send_text(self, frame: dict[str, Any]) -> None:
        self.calls.bus.publish(subject(self.requester), message({"t": "text"}, protocol.encode(frame)))

    def send_bytes(self, frame: bytes) -> None:
        self.calls.bus.publish(subject(self.requester), message({"t": "bin"}, frame))

    def send_header(self, header: dict[str, Any]) -> None:
        self.calls.bus.publish(subject(self.requester), message(header))

    def ended(self) -> None:
        self.calls.relays.pop((self.requester, self.remote_id), None)

    def cancel(self) -> None:
        """The requester is gone or gave up: stop the call on the agent."""
        self.ended()
        if self.pending is not None:
            self.link.abandon(self.pending)


class RelayedCalls:
    """Both sides of the calls this replica relays: those it asked others for (`RemoteLink`),
    and those others asked it for (`Relay`)."""

    def __init__(self, replica_id: str, bus: Bus, hub: AgentHub, start_job: StartJob) -> None:
        self.replica_id = replica_id
        self._start_job = start_job
        self.bus = bus
        self.hub = hub
        self._ids = itertools.count(1)
        self._pending: dict[int, Pending] = {}
        self._serving: dict[int, str] = {}  # the replica each call of ours runs on
        self.relays: dict[tuple[str, int], Relay] = {}
        # Methods answered here, not by the agent (`AnswerHere`), each in a task of `task_group`
        # (the bus is served one message at a time: an answer may wait on the agent).
        self.answered_here: dict[str, AnswerHere] = {}
        self.task_group: anyio.abc.TaskGroup | None = None
        # What is to be sent to the agents linked here, in order per link, by a task per link
        # while it has any (`_to_link`): a send waits while the agent's socket is full, and an
        # agent that reads slowly (a relayed upload to it piling up) must hold up its own calls
        # only, not the bus, which carries every relayed call to every agent linked here.
        self._outboxes: dict[Link, deque[Callable[[], Awaitable[None]]]] = {}

    # --- requesting ------------------------------------------------------------------------

    def start(self, link: RemoteLink, method: str, *, window: int | None, upload: bool) -> Pending:
        pending = Pending(next(self._ids) & protocol.MAX_CALL_ID, method, window=window, upload=upload)
        self._pending[pending.id] = pending
        self._serving[pending.id] = link.replica_id
        return pending

    def forget(self, call_id: int) -> Pending | None:
        self._serving.pop(call_id, None)
        return self._pending.pop(call_id, None)

    # --- receiving -------------------------------------------------------------------------

    async def on_message(self, data: bytes) -> None:
        """One message on this replica's subject: a frame for a call either side."""
        try:
            header, body = parse(data)
            kind = header.get("t")
            requester = header.get("from")
            if kind == "req":
                self._serve(header)
            elif kind == "job":
                await self._start_job(header)
            elif requester is not None:
                self._to_agent(str(requester), kind, body)
            elif kind == "text":
                self._answer_text(body.decode())
            elif kind == "bin":
                self._answer_binary(body)
            elif kind == "offline":
                pending = self.forget(protocol.call_id(header))
                if pending is not None:
                    pending.fail(AgentOfflineError("the agent's link dropped on the replica holding it"))
        except (ProtocolError, ValueError, KeyError, TypeError) as exc:
            log.warning("a bad message on the bus: %s", exc)

    def _answer_text(self, frame: str) -> None:
        answer = protocol.decode(frame)
        kind = answer["t"]
        if kind == protocol.RES:
            pending = self.forget(protocol.call_id(answer))
            if pending is not None:
                pending.finish(answer)
            return
        pending = self._pending.get(protocol.call_id(answer))
        if pending is None:
            return
        if kind == protocol.ITEMS and isinstance(answer.get("items"), list) and pending.window is not None:
            self._push(pending, answer["items"], protocol.text_cost(frame))
        elif kind == protocol.CREDIT and type(answer.get("n")) is int and answer["n"] > 0:
            pending.add_credit(answer["n"])

    def _answer_binary(self, frame: bytes) -> None:
        call_id, payload = protocol.unpack_binary(frame)
        pending = self._pending.get(call_id)
        if pending is not None and pending.window is not None:
            self._push(pending, payload, len(payload))

    def _push(self, pending: Pending, data: list[Any] | bytes, cost: int) -> None:
        pending.push(data, cost)
        assert pending.window is not None
        if pending.unconsumed > pending.window + protocol.MAX_MESSAGE_SIZE:
            self.forget(pending.id)
            pending.fail(AgentCallError(protocol.INTERNAL, "the relayed call ignored flow control"))

    # --- serving ---------------------------------------------------------------------------

    def _serve(self, request: dict[str, Any]) -> None:
        """A call from another replica, for an agent it believes linked here."""
        requester, remote_id = str(request["from"]), protocol.call_id(request)
        link = self.hub.local_link(str(request["server_id"]))
        if link is None:
            self.bus.publish(subject(requester), message({"t": "offline", "id": remote_id}))
            return
        answer_here = self.answered_here.get(str(request["method"]))
        if answer_here is not None and self.task_group is not None:
            params = request.get("params")
            self.task_group.start_soon(
                self._answer_here,
                answer_here,
                link.session,
                params if isinstance(params, dict) else {},
                requester,
                remote_id,
            )
            return
        relay = Relay(self, requester, remote_id, link)
        window = request.get("window")
        upload = request.get("upload") is True
        try:
            pending = relay.pending = link.adopt(
                lambda call_id: RelayedCall(call_id, str(request["method"]), window=window, upload=upload, relay=relay)
            )
        except AgentOfflineError:
            relay.send_header({"t": "offline", "id": remote_id})
            return
        self.relays[(requester, remote_id)] = relay
        params = request.get("params")
        params = params if isinstance(params, dict) else {}

        async def send_request() -> None:
            try:
                await link.send_request(pending, params, request.get("timeout"), upload=upload)
            except AgentOfflineError:
                pending.fail(AgentOfflineError("link closed"))

        self._to_link(link, send_request)

    async def _answer_here(
        self, answer: AnswerHere, session: AgentSession, params: dict[str, Any], requester: str, remote_id: int
    ) -> None:
        frame: dict[str, Any] = {"t": protocol.RES, "id": remote_id}
        try:
            frame["result"] = await answer(session, params)
        except ApiError as exc:
            frame["error"] = {"code": exc.error_code, "message": exc.message, "details": exc.details}
        except Exception:
            log.exception("a call for server %s answered here failed", session.server_id)
            frame["error"] = {"code": protocol.INTERNAL, "message": "the replica holding the link failed"}
        self.bus.publish(subject(requester), message({"t": "text"}, protocol.encode(frame)))

    def _to_agent(self, requester: str, kind: Any, body: bytes) -> None:
        """The requester's frame for a call this replica serves, under the link's call id."""
        if kind == "bin":
            remote_id, payload = protocol.unpack_binary(body)
            relay = self.relays.get((requester, remote_id))
            if relay is not None and relay.pending is not None:
                frame = protocol.pack_binary(relay.pending.id, payload)
                self._to_link(relay.link, functools.partial(relay.link.send_bytes, frame))
            return
        message = protocol.decode(body.decode())
        relay = self.relays.get((requester, protocol.call_id(message)))
        if relay is None or relay.pending is None:
            return
        if message["t"] == protocol.CANCEL:
            relay.cancel()
            return
        if message["t"] == protocol.CREDIT and type(message.get("n")) is int:
            relay.pending.unconsumed -= message["n"]
        text = protocol.encode({**message, "id": relay.pending.id})
        self._to_link(relay.link, functools.partial(relay.link.send_text, text))

    def _to_link(self, link: Link, send: Callable[[], Awaitable[None]]) -> None:
        """Send to an agent linked here, after what is already on its way to it (`_outboxes`)."""
        outbox = self._outboxes.get(link)
        if outbox is None:
            if self.task_group is None:
                raise RuntimeError("relayed calls are served only while the replica runs")
            outbox = self._outboxes[link] = deque()
            self.task_group.start_soon(self._send_to_link, link, outbox)
        outbox.append(send)

    async def _send_to_link(self, link: Link, outbox: deque[Callable[[], Awaitable[None]]]) -> None:
        try:
            while outbox:
                try:
                    await outbox.popleft()()
                except AgentOfflineError:
                    pass  # the link's end fails its calls, which tells their requesters
        finally:
            del self._outboxes[link]

    def replicas_gone(self, live: set[str]) -> None:
        """Replicas not in `live` (their heartbeat went stale, or the bus no longer reaches them):
        our calls on them fail, and their calls here are cancelled on the agents."""
        for call_id, replica_id in list(self._serving.items()):
            if replica_id not in live and (pending := self.forget(call_id)) is not None:
                pending.fail(AgentOfflineError("the replica holding the agent's link is gone"))
        self._requesters_gone(live)

    def bus_lost(self) -> None:
        """The bus is away: every call relayed either way is cut (its frames cannot pass). Ours
        fail now with `BusAway`, rather than at their timeout; those served here are cancelled
        on their agents (their requesters fail theirs alike)."""
        for call_id in list(self._serving):
            pending = self.forget(call_id)
            if pending is not None:
                pending.fail(BusAway("the bus to the replica holding the agent's link is away"))
        for relay in list(self.relays.values()):
            relay.cancel()

    def _requesters_gone(self, live: set[str]) -> None:
        """Cancel the calls of replicas whose heartbeat went stale."""
        for (requester, _), relay in list(self.relays.items()):
            if requester not in live:
                log.info(
                    "replica %s is gone: its call on server %s is cancelled", requester, relay.link.session.server_id
                )
                relay.cancel()
