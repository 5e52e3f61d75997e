"""The agent's end of the link: dial, say hello, serve calls, and reconnect forever.

The agent may be given several control-plane URLs (the replicas of one cluster, on one database):
it links to one at a time and goes round the list when a dial fails or a link is lost.
"""

from __future__ import annotations

import logging
import math
import random
import socket
import ssl
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn
from urllib.parse import urlsplit, urlunsplit

import trio
from trio_websocket import (
    ConnectionClosed,
    ConnectionRejected,
    HandshakeError,
    WebSocketConnection,
    open_websocket_url,
)

from agent.link.call import Call, Handler
from contract.backoff import full_jitter
from contract.link import fastmask, protocol
from contract.link.protocol import ProtocolError, RpcError

log = logging.getLogger("fleetdeck.agent")

# Each process start gets its own id: the control plane tells a restart from a reconnect.
BOOT_ID = uuid.uuid4().hex


@dataclass(frozen=True)
class Backoff:
    """Full-jitter exponential backoff (`contract.backoff.full_jitter`) with its base and cap."""

    base: float
    cap: float

    def delay(self, attempt: int) -> float:
        return full_jitter(attempt, self.base, self.cap)


_DISCONNECT_TIMEOUT_S = 2.0

# A dial that fails (nothing listens, the network is down) costs the control plane nothing, so its
# cap is short: it bounds how long a fleet takes to come back after its control plane restarts, as
# the agents that failed most while it was down wait up to a whole cap once it is back. With 60 s, a
# restart of 6 s already left the last of 10,000 agents a minute away (benchmarks/fleet.py).
NETWORK_BACKOFF = Backoff(base=1.0, cap=15.0)
# A control plane that answers "try again later" without saying when (close code 1013, from a
# control plane older than its 503 with a Retry-After) spends work on each such answer: those
# retries spread over up to a minute.
BUSY_BACKOFF = Backoff(base=1.0, cap=60.0)
# A turn given by the control plane (503's Retry-After) is kept to within a second: the control
# plane spreads the turns, this spreads those given the same second.
TURN_JITTER_S = 1.0
MAX_TURN_S = 600
AUTH_BACKOFF = Backoff(base=30.0, cap=600.0)
MAX_QUEUED_REPORTS = 1000

OnWelcome = Callable[[dict[str, Any]], None]


class LinkAuthRefused(Exception):
    """The control plane refused the agent token (close code 4401, or HTTP 401/403)."""

    def __init__(self, *, close_code: int | None = None, status: int | None = None) -> None:
        what = f"close code {close_code}" if close_code is not None else f"HTTP {status}"
        super().__init__(f"the control plane refused the agent token ({what})")
        self.close_code = close_code
        self.status = status


def link_url(base_url: str) -> str:
    """``ws(s)://host[:port]/prefix/v1/agent/link`` from the control plane's http(s) base URL."""
    parts = urlsplit(base_url)
    schemes = {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"}
    if parts.scheme not in schemes or not parts.netloc:
        raise ValueError(f"not an http(s) URL: {base_url!r}")
    path = parts.path.rstrip("/") + protocol.LINK_PATH
    return urlunsplit((schemes[parts.scheme], parts.netloc, path, "", ""))


def link_urls(base_urls: str | Sequence[str]) -> tuple[str, ...]:
    """The link URLs (`link_url`) of one control plane's base URL or of its replicas', in order."""
    listed = [base_urls] if isinstance(base_urls, str) else list(base_urls)
    if not listed:
        raise ValueError("no control plane URL")
    return tuple(link_url(url) for url in listed)


class AgentLink:
    """Keeps one link to the control plane up and serves the registered handlers over it.

    `urls` is the control plane's base URL, or its replicas' (tried in turn, see `run`).
    """

    def __init__(
        self,
        urls: str | Sequence[str],
        token: str,
        handlers: Mapping[str, Handler],
        *,
        version: str,
        hostname: str | None = None,
        direct_ingress_url: str | None = None,
        job_kinds: Iterable[str] = (),
        kernel_protections: Callable[[], dict[str, bool | None]] | None = None,
        needs: Callable[[], dict[str, str]] | None = None,
        pulse: Callable[[], dict[str, Any]] | None = None,
        pulse_every_s: float = protocol.DEFAULT_PULSE_S,
        on_welcome: OnWelcome | None = None,
        backoff: Backoff = NETWORK_BACKOFF,
        busy_backoff: Backoff = BUSY_BACKOFF,
        auth_backoff: Backoff = AUTH_BACKOFF,
        ssl_context: ssl.SSLContext | None = None,
        connect_timeout: float = 10.0,
    ) -> None:
        fastmask.install()  # every byte the agent sends is masked: in C when it can be
        self.urls = link_urls(urls)
        self.url = self.urls[0]  # the one being dialled, or linked to
        self._token = token
        self.handlers = dict(handlers)
        self.version = version
        self.hostname = hostname or socket.gethostname()
        self.direct_ingress_url = direct_ingress_url
        self.job_kinds = sorted(job_kinds)  # the kinds ``job.run`` has a handler for, said in hello
        self.kernel_protections = kernel_protections  # read at each hello (a sysctl may change)
        self.needs = needs  # the kinds that cannot run here now: read at each hello and on `needs_changed`
        self._needs_changed = trio.Event()
        self.pulse = pulse  # a pulse frame's figures (blocking: run in a thread), sent every `pulse_every_s`
        self.pulse_every_s = pulse_every_s
        self.on_welcome = on_welcome
        self.backoff = backoff
        self.busy_backoff = busy_backoff
        self.auth_backoff = auth_backoff
        self._told_busy = False  # the last dial was answered "try again later" (1013)
        self._turn: int | None = None  # the last dial was told when to come back (503's Retry-After)
        if ssl_context is None and any(url.startswith("wss:") for url in self.urls):
            ssl_context = ssl.create_default_context()
        self._ssl_context = ssl_context  # for the wss: URLs only (trio-websocket refuses one for ws:)
        self._connect_timeout = connect_timeout
        self.server_id: str | None = None
        # Reports wait here until a link is up (the oldest go first when too many pile up).
        self._reports: deque[dict[str, Any]] = deque(maxlen=MAX_QUEUED_REPORTS)
        self._reports_waiting = trio.Event()

    def report(self, message: dict[str, Any]) -> None:
        """Queue a ``report`` message for the control plane; sent now, or once the link is up."""
        self._reports.append({**message, "t": protocol.REPORT})
        self._reports_waiting.set()

    async def _send_reports(self, session: _Session) -> None:
        while True:
            while self._reports:
                try:
                    await session.send_text(protocol.encode(self._reports[0]))
                except ConnectionClosed:
                    return  # kept for the next link
                self._reports.popleft()
            self._reports_waiting = trio.Event()
            await self._reports_waiting.wait()

    def needs_changed(self) -> None:
        """The kinds that cannot run here changed: say them again (now, or in the next hello)."""
        self._needs_changed.set()

    async def _send_needs(self, session: _Session, said: dict[str, str]) -> None:
        """Send a ``needs`` frame each time the map differs from what this link last said."""
        assert self.needs is not None
        while True:
            self._needs_changed = trio.Event()  # before reading: a change from now on wakes us
            current = self.needs()
            if current != said:
                try:
                    await session.send_text(protocol.encode({"t": protocol.NEEDS, "needs": current}))
                except ConnectionClosed:
                    return  # the next hello says it
                said = current
            await self._needs_changed.wait()

    async def _send_pulses(self, session: _Session) -> None:
        """A ``pulse`` frame every `pulse_every_s` while this link is up (none is kept for the next)."""
        assert self.pulse is not None
        while True:
            figures = await trio.to_thread.run_sync(self.pulse)
            try:
                await session.send_text(protocol.encode({**figures, "t": protocol.PULSE}))
            except ConnectionClosed:
                return
            await trio.sleep(self.pulse_every_s)

    async def run(self) -> NoReturn:
        """Connect, serve, and reconnect forever (until cancelled), going round the URLs.

        A failed dial or a lost link moves on to the next URL at once. One backoff step is one
        sweep of the whole list that failed: a dead replica does not delay reaching a live one, and
        a dead cluster is not hammered. A lost healthy link waits the first (shortest) step before
        the next URL, so that the agents of a replica that went away do not all land on the next
        one at the same instant. A welcome resets the steps.

        A refused token moves on to the next URL as well (a replica pointed at the wrong database
        must not keep the agent off the others), but a sweep in which a replica refused it waits
        the long auth backoff: the token is checked in the database every replica shares, so one
        refusal is the whole cluster's answer. A sweep in which a replica said "try again later"
        with a time to come back (503 and Retry-After) waits until then, and one in which it did
        not say when (1013) waits the busy backoff, whose cap is longer than that of a failed dial.
        """
        attempt = auth_attempt = 0
        failed = refused = busy = 0  # dials of the current sweep that failed, were refused, found it busy
        turns: list[int] = []  # the times to come back that the busy ones gave
        following = 0  # the index of the next URL to dial
        while True:
            self.url = self.urls[following]
            following = (following + 1) % len(self.urls)
            try:
                healthy = await self.run_once()
            except LinkAuthRefused as exc:
                log.error("%s at %s", exc, self.url)
                healthy, refused = False, refused + 1
            except Exception:
                # A bug must not take the agent off the network for good: log it and retry.
                log.exception("agent link to %s failed unexpectedly", self.url)
                healthy = False
            if healthy:
                attempt = auth_attempt = failed = refused = busy = 0
            else:
                failed += 1
                busy += self._told_busy
                if self._turn is not None:
                    turns.append(self._turn)
                if failed < len(self.urls):
                    continue
            if refused:
                delay = self.auth_backoff.delay(auth_attempt)
                auth_attempt += 1
                log.error("check the agent token; retrying in %.1f s", delay)
            elif turns:
                delay = min(turns) + random.uniform(0, TURN_JITTER_S)
                log.info("the control plane is busy: reconnecting to %s in %.1f s", self.urls[following], delay)
            else:
                delay = (self.busy_backoff if busy else self.backoff).delay(attempt)
                attempt += 1
                log.info("reconnecting to %s in %.1f s", self.urls[following], delay)
            failed = refused = busy = 0
            turns.clear()
            await trio.sleep(delay)

    async def run_once(self) -> bool:
        """One connection, to `url`. Raises `LinkAuthRefused`.

        Returns whether it was a healthy session: welcomed, and not displaced by a newer link of
        the same server (two agents sharing a token must not reset each other's backoff forever).
        """
        session: _Session | None = None
        self._told_busy, self._turn = False, None
        try:
            try:
                async with open_websocket_url(
                    self.url,
                    self._ssl_context if self.url.startswith("wss:") else None,
                    extra_headers=[(b"authorization", b"Bearer " + self._token.encode())],
                    max_message_size=protocol.MAX_MESSAGE_SIZE,
                    # trio-websocket's default 4 KiB receive buffer cuts throughput 2-4x.
                    receive_buffer_size=None,
                    connect_timeout=self._connect_timeout,
                    # A link given up for silence is not worth a long wait for a polite close.
                    disconnect_timeout=_DISCONNECT_TIMEOUT_S,
                ) as ws:
                    session = _Session(self, ws)
                    await session.run()
            except BaseExceptionGroup as group:
                # trio-websocket's nursery wraps what the session raised: a close (4401 when the
                # server was deleted) is handled below, not logged as a failure.
                raise protocol.single_error(group) from None
        except ConnectionRejected as exc:
            if exc.status_code in (401, 403):
                raise LinkAuthRefused(status=exc.status_code) from None
            if exc.status_code == 503:  # a gateway's has no Retry-After: a failed dial, as before
                self._turn = _retry_after(exc.headers)
            if self._turn is not None:  # a refusal by design (busy, or its database away): no fault
                log.info("the control plane at %s said to come back in %d s", self.url, self._turn)
            else:
                log.warning("link handshake rejected with HTTP %s", exc.status_code)
        except ConnectionClosed as exc:
            code = exc.reason.code if exc.reason is not None else None
            if code == protocol.CLOSE_AUTH_REFUSED:
                raise LinkAuthRefused(close_code=code) from None
            self._told_busy = code == protocol.CLOSE_TRY_AGAIN
            log.warning("link closed (%s)", exc.reason)
        except (HandshakeError, OSError) as exc:
            # HandshakeError wraps the OSError that says what actually went wrong.
            log.warning("cannot connect to %s: %s", self.url, exc.__cause__ or exc or type(exc).__name__)
        except (ProtocolError, trio.TooSlowError) as exc:
            log.warning("link dropped: %s", exc or type(exc).__name__)
        if session is not None and session.close_code == protocol.CLOSE_REPLACED:
            log.warning("another link of this server replaced ours: is a second agent using the same token?")
            return False
        return session is not None and session.welcomed


class _Session:
    """One connected link: handshake, receive loop, heartbeat and the calls in flight."""

    def __init__(self, link: AgentLink, ws: WebSocketConnection) -> None:
        self._link = link
        self._ws = ws
        self._send_lock = trio.Lock()
        self._calls: dict[int, Call] = {}
        self._last_received = trio.current_time()
        self.welcomed = False
        self.close_code: int | None = None

    async def send_text(self, frame: str) -> None:
        async with self._send_lock:
            await self._ws.send_message(frame)

    async def send_bytes(self, frame: bytes) -> None:
        async with self._send_lock:
            await self._ws.send_message(frame)

    async def _send_quietly(self, message: dict[str, Any]) -> None:
        """Send a control message; a closed link is the receive loop's business, not ours."""
        try:
            await self.send_text(protocol.encode(message))
        except ConnectionClosed:
            pass

    async def _receive(self) -> str | bytes:
        message = await self._ws.get_message()
        self._last_received = trio.current_time()
        return message

    async def run(self) -> None:
        link = self._link
        hello: dict[str, Any] = {
            "t": protocol.HELLO,
            "version": link.version,
            "boot_id": BOOT_ID,
            "handlers": sorted(link.handlers),
            "hostname": link.hostname,
            "direct_ingress_url": link.direct_ingress_url,
            "job_kinds": link.job_kinds,
        }
        if link.kernel_protections is not None:
            hello["kernel_protections"] = link.kernel_protections()
        if link.needs is not None:
            hello["needs"] = link.needs()
        await self.send_text(protocol.encode(hello))
        with trio.fail_after(protocol.HELLO_TIMEOUT_S):
            welcome = await self._receive()
        heartbeat_s = self._check_welcome(welcome)
        self.welcomed = True
        log.info("linked to %s as server %s", link.url, link.server_id)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._heartbeat, heartbeat_s, nursery.cancel_scope)
                nursery.start_soon(link._send_reports, self)
                if link.needs is not None:
                    nursery.start_soon(link._send_needs, self, hello["needs"])
                if link.pulse is not None:
                    nursery.start_soon(link._send_pulses, self)
                await self._receive_loop(nursery)
                nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            # Only the receive loop raises (call tasks keep their errors): unwrap its one error.
            raise protocol.single_error(group) from None

    def _check_welcome(self, frame: str | bytes) -> float:
        if isinstance(frame, bytes):
            raise ProtocolError("expected welcome, got a binary frame")
        welcome = protocol.decode(frame)
        server_id, heartbeat_s = welcome.get("server_id"), welcome.get("heartbeat_s")
        if welcome["t"] != protocol.WELCOME or not isinstance(server_id, str):
            raise ProtocolError(f"expected welcome, got {welcome['t']!r}")
        if not isinstance(heartbeat_s, int | float) or not 0 < heartbeat_s < 3600:
            raise ProtocolError("welcome carries no usable heartbeat_s")
        self._link.server_id = server_id
        if self._link.on_welcome is not None:
            self._link.on_welcome(welcome)
        return float(heartbeat_s)

    async def _heartbeat(self, heartbeat_s: float, scope: trio.CancelScope) -> None:
        """Every `heartbeat_s`: an "alive" message, which the control plane's app reads and does
        not answer, and a WebSocket ping, which its server answers without the app (see the
        protocol's Heartbeat). Drop the link once the control plane has been silent, not even a
        pong, for `dead_after`."""
        limit = protocol.dead_after(heartbeat_s)
        beat = trio.current_time()
        while True:
            beat += heartbeat_s
            await trio.sleep_until(beat)
            if trio.current_time() - self._last_received > limit:
                log.warning("no word from the control plane for %.1f s: dropping the link", limit)
                scope.cancel()
                return
            await self._send_quietly({"t": protocol.ALIVE})
            with trio.move_on_after(heartbeat_s / 2):
                try:
                    await self._ws.ping()
                except ConnectionClosed:
                    return  # the receive loop sees the close and ends the session
                self._last_received = trio.current_time()

    async def _receive_loop(self, nursery: trio.Nursery) -> None:
        # Never awaits a send: the peer may be blocked sending to us, and both would wait forever.
        while True:
            try:
                frame = await self._receive()
            except ConnectionClosed as exc:
                self.close_code = exc.reason.code if exc.reason is not None else None
                if self.close_code == protocol.CLOSE_AUTH_REFUSED:
                    raise
                log.warning("link closed by the control plane (%s)", exc.reason)
                return
            if isinstance(frame, bytes):
                cid, payload = protocol.unpack_binary(frame)
                call = self._calls.get(cid)
                if call is not None:
                    call.push_upload(payload)
                continue
            message = protocol.decode(frame)
            kind = message["t"]
            if kind == protocol.REQ:
                self._start_call(message, nursery)
            elif kind == protocol.PING:
                nursery.start_soon(self._send_quietly, {"t": protocol.PONG})
            elif kind == protocol.CANCEL:
                call = self._calls.get(protocol.call_id(message))
                if call is not None:
                    call.cancel_scope.cancel()
            elif kind == protocol.CREDIT:
                call = self._calls.get(protocol.call_id(message))
                n = message.get("n")
                if call is not None and type(n) is int and n > 0:
                    call.add_credit(n)
            elif kind == protocol.END:
                call = self._calls.get(protocol.call_id(message))
                if call is not None:
                    call.end_upload()
            # pong needs nothing (any frame counts as a sign of life); unknown types are ignored.

    def _start_call(self, message: dict[str, Any], nursery: trio.Nursery) -> None:
        cid = protocol.call_id(message)
        if cid in self._calls:
            log.warning("control plane reused call id %d while it was open; ignored", cid)
            return
        method, params = message.get("method"), message.get("params")
        timeout, window = message.get("timeout"), message.get("window")
        if not isinstance(method, str) or not isinstance(params, dict):
            raise ProtocolError("req without method or params")
        if timeout is not None and not (isinstance(timeout, int | float) and timeout >= 0):
            raise ProtocolError("req with a bad timeout")
        if window is not None and (type(window) is not int or window <= 0):
            raise ProtocolError("req with a bad window")
        call = Call(cid, method, params, window=window, upload=message.get("upload") is True, outbound=self)
        self._calls[cid] = call
        nursery.start_soon(self._serve_call, call, timeout)

    async def _serve_call(self, call: Call, time_limit: float | None) -> None:
        try:
            answer = await self._answer(call, time_limit)
            try:
                frame = protocol.encode(answer)
            except TypeError:
                log.exception("%s returned a result JSON cannot carry", call.method)
                frame = protocol.encode(_error(call.id, RpcError(protocol.INTERNAL, "internal error")))
            await self.send_text(frame)
        except ConnectionClosed:
            pass  # the receive loop sees the close and ends the session
        finally:
            self._calls.pop(call.id, None)

    async def _answer(self, call: Call, time_limit: float | None) -> dict[str, Any]:
        handler = self._link.handlers.get(call.method)
        if handler is None:
            return _error(call.id, RpcError(protocol.UNKNOWN_METHOD, f"unknown method {call.method!r}"))
        try:
            with call.cancel_scope, trio.move_on_after(math.inf if time_limit is None else time_limit) as deadline:
                return {"t": protocol.RES, "id": call.id, "result": await handler(call)}
            if deadline.cancelled_caught:
                return _error(call.id, RpcError(protocol.TIMEOUT, f"{call.method} timed out after {time_limit} s"))
            return _error(call.id, RpcError(protocol.CANCELLED, f"{call.method} was cancelled"))
        except ConnectionClosed:
            raise
        except Exception as exc:
            error = protocol.single_error(exc)
            if isinstance(error, ConnectionClosed):
                raise error from None
            if isinstance(error, RpcError):
                return _error(call.id, error)
            # Details stay in the agent's log: the message goes to users of the control plane.
            log.exception("handler %s failed", call.method)
            return _error(call.id, RpcError(protocol.INTERNAL, f"internal error in {call.method}"))


def _retry_after(headers: Iterable[tuple[bytes, bytes]] | None) -> int | None:
    """A 503's Retry-After in seconds (capped), or None when it has none this agent reads (an
    HTTP date: a proxy's, not the control plane's)."""
    for name, value in headers or ():
        if name.lower() == b"retry-after" and value.strip().isdigit():
            return min(int(value), MAX_TURN_S)
    return None


def _error(cid: int, error: RpcError) -> dict[str, Any]:
    return {"t": protocol.RES, "id": cid, "error": error.to_wire()}
