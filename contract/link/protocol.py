"""The agent link protocol: one WebSocket between an agent and the control plane.

This docstring is the specification; both ends import this module (it does no I/O and imports
no async library, so the control plane can use it on any anyio backend).

Connection
    The agent dials ``ws(s)://<control plane>/v1/agent/link`` with the header
    ``Authorization: Bearer <agent token>``. A refused token is answered by accepting the
    WebSocket and closing it at once with code 4401 (`CLOSE_AUTH_REFUSED`); a proxy may instead
    reject the handshake with HTTP 401/403. Either way the agent backs off for much longer than
    after an ordinary network failure. A control plane setting up too many links at once (the
    storm of relinks after its restart) rejects the handshake with HTTP 503 and a ``Retry-After``
    in seconds: the agent comes back then, within a second (`control_plane.hub.admission` says
    how the turns are given). Both ends accept messages up to `MAX_MESSAGE_SIZE`.

Frames
    Text frames are JSON objects with a type field ``"t"``. Binary frames are
    ``struct.pack(">I", call_id) + payload``: call ids are unsigned 32-bit integers, chosen by the
    control plane, unique per link while the call is open.

Handshake
    agent → cp, first message::

        {"t": "hello", "version": str, "boot_id": str, "handlers": [method, ..],
         "hostname": str, "direct_ingress_url": str | null, "job_kinds": [kind, ..],
         "kernel_protections": {"protected_hardlinks": bool | null, "protected_symlinks": bool | null},
         "needs": {kind: package, ..}}

    cp → agent::

        {"t": "welcome", "server_id": str, "heartbeat_s": float,
         "ingress_key": str (only when hello announced an ingress), "now": float}

    ``ingress_key`` is the base64url HMAC key with which the control plane signs this link's
    direct-upload URLs (see `contract.link.grant`); ``now`` is the control plane's unix time, so the
    agent checks their expiry in the control plane's clock.

    ``job_kinds`` names the job kinds the agent has a handler for (at most `MAX_JOB_KINDS`, each
    ``<domain>.<action>`` as the job catalog spells it), so the control plane can tell which of
    the catalog's kinds this agent runs; a job of another kind ends with exit code 127. An agent
    older than this field sends none: the control plane then does not know (null). A hello whose
    ``job_kinds`` is not such a list is refused like any other malformed hello.

    ``kernel_protections`` says whether the server's kernel has ``fs.protected_hardlinks`` and
    ``fs.protected_symlinks`` on (null: it could not be read); `KERNEL_PROTECTIONS` names them.
    With them off, a site user can hard-link any file of the file system into the site, which
    the agent's files jail then refuses to read or change (see `agent.files.jail.is_foreign_to`).
    An agent older than this field sends none (null); another shape is a malformed hello.

    ``needs`` names, among ``job_kinds``, those that cannot run on this server now, each with the
    Debian package (or the software) it needs: a kind of ``job_kinds`` not in it runs here. The
    agent checks at start and after package changes (`agent.jobs.availability`) and sends the
    whole map again when it changes, as ``{"t": "needs", "needs": {kind: package, ..}}`` (no
    answer). An agent older than the field sends none (null: the control plane does not know).

    ``boot_id`` is random per agent process start, so the control plane can tell a reconnect of
    the same process from a restart. The control plane waits at most `HELLO_TIMEOUT_S` for hello.

Heartbeat
    Every ``heartbeat_s`` (the control plane's choice, sent in welcome) the agent sends
    ``{"t": "alive"}``, which asks no answer, and a WebSocket ping (RFC 6455's control frame, not
    a message). The control plane's WebSocket layer answers the ping by itself, without the app
    (uvicorn and hypercorn both do), so an idle link costs the control plane's app one message in
    per period and nothing out: with thousands of idle agents, frames, wakeups and tasks per link
    are what an idle control plane spends its CPU on (`benchmarks/fleet.py`). The pong still tells
    the agent that the control plane's event loop runs, as only that loop writes it. Each side
    closes the link when it has heard nothing at all for ``3 * heartbeat_s`` (`dead_after`):
    for the control plane any message counts; for the agent any message or pong.

    Older agents send ``{"t": "ping"}`` instead and wait for ``{"t": "pong"}``, which the control
    plane still sends them; an agent answers a ``ping`` with a ``pong`` all the same, as control
    planes older than that rule ping too.

Calls (cp → agent)
    ::

        {"t": "req", "id": int, "method": str, "params": {..},
         "timeout": float | null, "window": int | null, "upload": bool (optional)}

    ``timeout`` is relative seconds (no clock skew between hosts); the agent answers
    ``timeout`` when its handler overruns it. ``window`` present means the caller accepts a
    streamed reply and gives that initial credit in bytes. ``{"t": "cancel", "id": int}`` asks
    the agent to cancel the handler; it answers ``cancelled`` (the control plane has usually
    forgotten the call by then and drops the answer).

Answers (agent → cp)
    Exactly one per request::

        {"t": "res", "id": int, "result": <json>}
        {"t": "res", "id": int, "error": {"code": str, "message": str, "details": {..}}}

    Error codes are the `/v1` contract's (``not_found``, ``path_outside_scope``,
    ``binary_file``, ``too_large``, ``validation_error``, ``conflict``, ``forbidden``, ...)
    plus ``unknown_method``, ``internal``, ``timeout`` and ``cancelled``.

Streamed replies (agent → cp), only for a request that carried ``window``
    ``{"t": "items", "id": int, "items": [<json>, ..]}`` carries a batch of JSON items (log
    lines, search hits); binary frames carry bytes (file contents). The final ``res`` follows
    the last of them. Frames of one call arrive in the order they were sent.

Uploads (cp → agent)
    A ``req`` with ``"upload": true``, then binary frames for that id, then
    ``{"t": "end", "id": int}``. The handler's answer (``res``) may come before ``end`` when it
    fails; the control plane then stops sending.

Flow control
    Credit is counted in bytes: a binary frame costs its payload length, an items message the
    UTF-8 length of its whole text frame (`text_cost`). The sender spends credit as it sends and
    waits while it has none; a message may overdraw the credit (an items message is never split
    inside an item), so at most ``window + one message`` is ever unconsumed. The receiver gives
    credit back with ``{"t": "credit", "id": int, "n": int}`` as its consumer takes data, in
    batches of at least a quarter of the window (`grant_threshold`). Downloads start with the
    request's ``window``; uploads start with `UPLOAD_WINDOW`. Data frames stay under
    `DEFAULT_CHUNK_SIZE` (one item larger than that travels alone).

Reports (agent → cp)
    ``{"t": "report", "kind": str, ..}``: something the agent did outside any call, that the
    control plane records. ``kind`` ``"fs.upload.direct"``: a direct upload on the agent's HTTP
    ingress ended; fields ``nonce, scope, domain, path, size, overwrite, user_id, outcome ("ok" |
    "error"), error_code | null, bytes, entry | null``. No answer; a report made while the link is
    down is sent once it is up again.

Pulses (agent → cp)
    ``{"t": "pulse", "at": float, "cpu": float | null, "memory": float | null, "disk": float | null}``
    every few seconds while the link is up (the agent's ``--pulse-interval``): the server's CPU
    use since the pulse before, its memory in use and its home's disk in use, each a percentage
    (null: not known, as CPU in a link's first pulse), and the agent's unix time. No answer; a
    pulse is not kept while the link is down (a later one says more). The control plane keeps
    the last few minutes of them per server and shows them on ``GET /v1/servers/events``.
    `contract.link.params.Pulse` is its model; a malformed pulse breaks the protocol.

Jobs across a restart of the control plane
    ``job.run {job_id, kind, argv, secrets, runs?}`` starts a job and streams its lines (items;
    ``{"exit_code": n}`` at the end). The job belongs to the agent's job manager, not to the call
    or the link: it runs on when either drops. The agent keeps a bounded journal in memory of
    its running and recently finished jobs (`agent.jobs.manager`): their lines not yet
    acknowledged and their exit code. A control plane that links again (the same one after a
    drop, or a new process after a restart, whose running jobs carry the ``boot_id`` of the agent
    that ran them) takes a job back with::

        job.journal {"job_ids": [str, ..] (optional: all)}
            -> {"jobs": [{"job_id", "kind", "first_seq", "last_seq", "exit_code": int | null,
                          "secrets": [str, ..]}, ..]}   (only the jobs the agent still has)
        job.attach {"job_id", "after": int, "acked": int (optional, <= after), "runs"?}
            -> items of the lines with seq > after, then {"exit_code": n}; not_found when gone

    ``acked`` is the last line the control plane has stored: the agent forgets the lines up to
    it. ``secrets`` are the values the job was started with, so the new control plane masks the
    rest of the output as the first one did (it stores them nowhere). Sequence numbers continue;
    a job is never run twice: a job the agent no longer has (another ``boot_id``, or forgotten)
    ends ``interrupted``.

Cancelling a job
    ::

        job.cancel {"job_id": str} -> {"ended": bool}

    stops a running job: the agent cancels its run, so the job's process group gets TERM, then
    KILL after a grace period; its ``job.run``/``job.attach`` calls then answer ``{"exit_code":
    n, "cancelled": true}``. ``ended: true`` says the job had already ended by itself (its own
    exit code stands). A job id the agent does not have yet is remembered as cancelled, so a
    ``job.run`` that the cancel overtook runs nothing. An agent without this handler cannot
    cancel jobs.

Close codes
    4401 `CLOSE_AUTH_REFUSED`, 4408 `CLOSE_HEARTBEAT_TIMEOUT`, 4409 `CLOSE_REPLACED` (a newer
    link of the same server took over), 1002 `CLOSE_PROTOCOL_ERROR`, 1011 `CLOSE_INTERNAL_ERROR`,
    1013 `CLOSE_TRY_AGAIN` (the control plane is busy setting up other links, and did not say
    when to come back: an older control plane, or a server without the ASGI denial response; the
    agent backs off, with a longer cap than after a failed dial, and tries again).

Unknown frame types are ignored by both ends, so either side may add a message type without
breaking an older peer.

Params
    What the hello and each call's ``params`` may hold is `contract.link.params`, one model each
    (unknown fields are ignored there too); params that break it are answered ``validation_error``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from typing import Any, Final

import orjson

LINK_PATH: Final = "/v1/agent/link"

CLOSE_AUTH_REFUSED: Final = 4401
CLOSE_HEARTBEAT_TIMEOUT: Final = 4408
CLOSE_REPLACED: Final = 4409
CLOSE_PROTOCOL_ERROR: Final = 1002
CLOSE_INTERNAL_ERROR: Final = 1011
CLOSE_TRY_AGAIN: Final = 1013

DEFAULT_HEARTBEAT_S: Final = 10.0
DEFAULT_PULSE_S: Final = 5.0  # between pulse frames, unless the agent is told otherwise
HELLO_TIMEOUT_S: Final = 10.0
DEFAULT_CHUNK_SIZE: Final = 256 * 1024
UPLOAD_CHUNK_SIZE: Final = 1024 * 1024  # an upload's data frames: a client's 1 MiB message goes on whole
DEFAULT_WINDOW: Final = 4 * 1024 * 1024
UPLOAD_WINDOW: Final = 16 * 1024 * 1024
MAX_MESSAGE_SIZE: Final = 64 * 1024 * 1024
MAX_CALL_ID: Final = 2**32 - 1
MAX_JOB_KINDS: Final = 4096
KERNEL_PROTECTIONS: Final = ("protected_hardlinks", "protected_symlinks")  # hello's kernel_protections keys

# Message types ("t").
HELLO: Final = "hello"
WELCOME: Final = "welcome"
ALIVE: Final = "alive"
PING: Final = "ping"  # of agents and control planes older than ALIVE
PONG: Final = "pong"
REQ: Final = "req"
RES: Final = "res"
CANCEL: Final = "cancel"
ITEMS: Final = "items"
CREDIT: Final = "credit"
END: Final = "end"
REPORT: Final = "report"
NEEDS: Final = "needs"  # agent → cp: the kinds that cannot run here now, again (see Handshake)
PULSE: Final = "pulse"  # agent → cp: CPU, memory and disk now (see Pulses)

# Error codes the link itself produces (handlers use the contract's codes).
UNKNOWN_METHOD: Final = "unknown_method"
INTERNAL: Final = "internal"
TIMEOUT: Final = "timeout"
CANCELLED: Final = "cancelled"

_CALL_ID = struct.Struct(">I")


class ProtocolError(ValueError):
    """A frame that does not follow this specification."""


class RpcError(Exception):
    """An error answer: raised by a handler, carried as ``res.error``."""

    def __init__(self, code: str, message: str, details: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details: dict[str, Any] = dict(details or {})

    def __repr__(self) -> str:
        return f"RpcError({self.code!r}, {self.message!r}, {self.details!r})"

    def to_wire(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "details": self.details}

    @classmethod
    def from_wire(cls, error: Any) -> RpcError:
        if not isinstance(error, dict):
            return cls(INTERNAL, "malformed error answer")
        details = error.get("details")
        return cls(
            str(error.get("code") or INTERNAL),
            str(error.get("message") or error.get("code") or "error"),
            details if isinstance(details, dict) else {},
        )


def single_error(exc: BaseException) -> BaseException:
    """The one exception inside nested single-member groups (trio nurseries make these: a
    handler's own, the link's): what a caller or a log should see."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def dead_after(heartbeat_s: float) -> float:
    """Silence after which a side gives the link up."""
    return 3 * heartbeat_s


def grant_threshold(window: int) -> int:
    """Consumed bytes a receiver accumulates before it sends a credit message."""
    return max(1, window // 4)


def encode(message: Mapping[str, Any]) -> str:
    """A text frame. Raises TypeError when the message holds something JSON cannot carry."""
    try:
        return orjson.dumps(message).decode()
    except orjson.JSONEncodeError as exc:
        raise TypeError(str(exc)) from exc


def decode(frame: str | bytes) -> dict[str, Any]:
    """The JSON object of a text frame; its ``"t"`` is guaranteed to be a string."""
    try:
        message = orjson.loads(frame)
    except orjson.JSONDecodeError as exc:
        raise ProtocolError(f"text frame is not JSON: {exc}") from None
    if not isinstance(message, dict) or not isinstance(message.get("t"), str):
        raise ProtocolError("text frame is not an object with a type")
    return message


def call_id(message: Mapping[str, Any]) -> int:
    """The ``id`` of a call message, validated."""
    value = message.get("id")
    if type(value) is not int or not 0 <= value <= MAX_CALL_ID:
        raise ProtocolError(f"bad call id in {message.get('t')!r} message")
    return value


def text_cost(frame: str) -> int:
    """Credit an items message costs: the byte length of its frame."""
    return len(frame.encode())


def pack_binary(call_id: int, payload: bytes | memoryview) -> bytes:
    return _CALL_ID.pack(call_id) + payload  # one copy: bytes + a buffer is bytes


def unpack_binary(frame: bytes) -> tuple[int, bytes]:
    if len(frame) < _CALL_ID.size:
        raise ProtocolError("binary frame shorter than its call id")
    (cid,) = _CALL_ID.unpack_from(frame)
    return cid, frame[_CALL_ID.size :]


def items_frame(call_id: int, encoded_items: Iterable[bytes]) -> bytes:
    """An items message built from items already encoded with orjson, as UTF-8 bytes.

    Lets a sender measure each item once and cut batches to its credit without re-encoding.
    """
    head = b'{"t":"items","id":%d,"items":[' % call_id
    return head + b",".join(encoded_items) + b"]}"


ITEMS_OVERHEAD: Final = len(items_frame(MAX_CALL_ID, []))
"""Bytes of an items message besides its items (with the longest id) and their commas."""
