"""The front door: what a request body may be before any route reads it.

`BodyGuard` is an ASGI middleware around every HTTP route:

- **Size.** A body is at most its route's cap: `JSON_BODY_LIMIT` unless the route declares
  another with `body_limit` (its `openapi_extra`, so the OpenAPI document says it too). Over it:
  `413 too_large`, `details: {limit, size}`. A declared `Content-Length` over the cap is refused
  before a byte of the body is read (and before it is parsed, or anything else is done: FastAPI
  reads a route's body first); a body without one (chunked) is cut once the bytes passed on
  reach past the cap. Routes that read a raw body (relay uploads) declare None and check their
  own, larger cap.
- **Time.** A body that stalls is cut with `408 timeout`: no bytes for `BODY_IDLE_TIMEOUT_S`,
  or, after `BODY_GRACE_S`, less than `BODY_MIN_RATE` on average (a trickle of a byte every few
  seconds never idles, yet would hold a connection, and a relay upload's agent call, for ever).
  Only while the body is read: a streamed answer (SSE) or a long job never meets these.

The refusal is answered here, with `Connection: close` (the rest of the body is never read, so
the client stops writing and reads the answer); the route then sees a client that went away, and
its own answer goes nowhere. A route that must tell that apart (to audit the right error) asks
`refusal(scope)`.

The request head has a time limit too (`REQUEST_HEAD_TIMEOUT_S`, slow headers): that is the
HTTP server's part (`control_plane.serving`), before there is a request to hand an app.
WebSockets (agent links, streamed uploads) pass through untouched.
"""

from __future__ import annotations

from typing import Any

import anyio
import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from contract.errors import ApiError, Timeout, TooLarge
from contract.models import JSON_BODY_LIMIT

# A request body's pace: bytes at least every BODY_IDLE_TIMEOUT_S; and, after BODY_GRACE_S, at
# least BODY_MIN_RATE on average (a 1 MiB JSON body within 74 s, a 64 MiB relay upload within
# 68 minutes: a link that slow takes the streamed upload, which has only the idle rule).
BODY_IDLE_TIMEOUT_S = 30.0
BODY_GRACE_S = 10.0
BODY_MIN_RATE = 16 * 1024  # bytes per second
# How long a request's head (request line and headers) may take, from the connection's start or
# from the end of the previous answer on it; also how long an idle keep-alive connection stays.
REQUEST_HEAD_TIMEOUT_S = 10.0

_LIMIT_KEY = "x-body-limit"
_REFUSAL_KEY = "fleetdeck.body_refusal"


def body_limit(limit: int | None) -> dict[str, Any]:
    """The `openapi_extra` of a route whose body may be larger than `JSON_BODY_LIMIT` (None: a
    route that reads a raw body and checks its size itself)."""
    return {_LIMIT_KEY: limit}


def refusal(scope: Scope) -> ApiError | None:
    """The error `BodyGuard` answered this request with, if it cut its body."""
    error: ApiError | None = scope.get(_REFUSAL_KEY)
    return error


def error_answer(error: ApiError) -> tuple[dict[str, Any], bytes]:
    """The `http.response.start` message and body of `error` in the contract's shape, closing the
    connection: the request's unread bytes are never read."""
    body = orjson.dumps({"error": {"code": error.error_code, "message": error.message, "details": error.details}})
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    return {"type": "http.response.start", "status": error.status_code, "headers": headers}, body


def head_timeout_answer() -> bytes:
    """The raw HTTP/1.1 answer to a request head that did not arrive in time."""
    start, body = error_answer(head_timeout())
    head = b"HTTP/1.1 408 Request Timeout\r\n" + b"".join(b"%s: %s\r\n" % pair for pair in start["headers"])
    return head + b"\r\n" + body


def head_timeout() -> Timeout:
    return Timeout(
        f"the request's head did not arrive within {REQUEST_HEAD_TIMEOUT_S:g} s",
        details={"limit_s": REQUEST_HEAD_TIMEOUT_S},
    )


def _too_large(limit: int, size: int) -> TooLarge:
    return TooLarge(
        f"the request body is over this route's limit of {limit:,} bytes", details={"limit": limit, "size": size}
    )


def _declared_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None


def route_limit(scope: Scope) -> int | None:
    """The body cap of the route `scope` was routed to (known once the app reads the body)."""
    extra = getattr(scope.get("route"), "openapi_extra", None)
    return extra.get(_LIMIT_KEY, JSON_BODY_LIMIT) if isinstance(extra, dict) else JSON_BODY_LIMIT


class BodyGuard:
    """See the module docstring."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        answer = _Answer(send)
        await self.app(scope, _GuardedBody(scope, receive, answer).receive, answer.send)


class _Answer:
    """The app's `send`, which stops passing messages on once the guard answered instead."""

    def __init__(self, send: Send) -> None:
        self.send_to_client = send
        self.started = False
        self.taken_over = False

    async def send(self, message: Message) -> None:
        if self.taken_over:
            return
        if message["type"] == "http.response.start":
            self.started = True
        await self.send_to_client(message)


class _GuardedBody:
    """One request's `receive`, counting its body's bytes and the time the client keeps the app
    waiting for them (time the app spends elsewhere, e.g. waiting for the agent, is not counted).

    Its first call comes once the request is routed (a route reads its body before anything
    else): the route's cap is known then, and a declared length over it is refused at once."""

    def __init__(self, scope: Scope, receive: Receive, answer: _Answer) -> None:
        self.scope, self._receive, self.answer = scope, receive, answer
        self.limit: int | None = None
        self.received = 0
        self.waited = 0.0
        self.first = True
        self.done = False

    async def receive(self) -> Message:
        if self.done:
            return await self._receive()
        if self.first:
            self.first = False
            self.limit = route_limit(self.scope)
            declared = _declared_length(self.scope)
            if self.limit is not None and declared is not None and declared > self.limit:
                return await self._refuse(_too_large(self.limit, declared))
        budget = BODY_GRACE_S + self.received / BODY_MIN_RATE - self.waited
        started = anyio.current_time()
        with anyio.move_on_after(min(BODY_IDLE_TIMEOUT_S, max(budget, 0.0))):
            message = await self._receive()
            self.waited += anyio.current_time() - started
            return await self._counted(message)
        return await self._refuse(self._stalled())

    async def _counted(self, message: Message) -> Message:
        if message["type"] != "http.request":
            self.done = True  # http.disconnect
            return message
        self.received += len(message.get("body", b""))
        self.done = not message.get("more_body", False)
        if self.limit is not None and self.received > self.limit:
            return await self._refuse(_too_large(self.limit, self.received))
        return message

    def _stalled(self) -> Timeout:
        return Timeout(
            f"the request body stalled: bytes must come at least every {BODY_IDLE_TIMEOUT_S:g} s, and after"
            f" {BODY_GRACE_S:g} s at {BODY_MIN_RATE // 1024} KiB/s or more on average",
            details={"idle_s": BODY_IDLE_TIMEOUT_S, "grace_s": BODY_GRACE_S, "min_rate": BODY_MIN_RATE},
        )

    async def _refuse(self, error: ApiError) -> Message:
        """Answer `error` (unless the app's answer has started: it then ends as its client went
        away) and tell the app its client went away."""
        self.done = True
        self.scope[_REFUSAL_KEY] = error
        if not self.answer.started:
            self.answer.taken_over = True
            await _answer(self.answer.send_to_client, error)
        return {"type": "http.disconnect"}


async def _answer(send: Send, error: ApiError) -> None:
    start, body = error_answer(error)
    await send(start)
    await send({"type": "http.response.body", "body": body})
