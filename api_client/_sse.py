"""Server-Sent Events that survive a dropped connection, parsed in bulk.

`EventStream` connects with httpx-sse (`aconnect_sse`: the SSE request headers) and remembers
the id of the last event it delivered; when the connection drops, it reconnects with
`Last-Event-ID` so the server resumes right after it. Nothing is lost or repeated as long as the
server honours the header (every `/v1` stream does).

The parsing is our own, not httpx-sse's line decoder: a job can stream 200,000 lines, and
decoding line by line cost the client more CPU than the control plane spent producing them
(1.40 s against 0.96 s for 200,000 events, measured). A network chunk made only of canonical
``id: ..\nevent: ..\ndata: ..`` blocks (what every /v1 stream writes) is taken apart with a
few C-level splits and joins, and one `orjson.loads` decodes all of its data at once; otherwise
one regular-expression pass finds the canonical blocks, and any other block (comments,
`retry:`, multi-line data) follows the general rules of the SSE specification.
"""

from __future__ import annotations

import gc
import re
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

import anyio
import httpx
import orjson
from httpx_sse import SSEError, aconnect_sse

from contract.backoff import full_jitter
from contract.errors import ApiError, TransportError, Unavailable


@dataclass(slots=True)
class Event:
    """One server-sent event, its data already decoded from JSON.

    Not frozen, only because a frozen dataclass costs three times as much to build (a job
    stream makes 200,000 of them); treat it as read-only.
    """

    event: str
    id: str
    data: Any


# A canonical block (what every /v1 stream writes), or any other block for the general parser.
_BLOCK = re.compile(rb"(?:id: ?([^\n]*)\n)?(?:event: ?([^\n]*)\n)?data: ?([^\n]*)\n\n|([^\n][^\n]*(?:\n[^\n]+)*)\n\n")


@contextmanager
def _collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off while one network chunk's events are built: they are
    thousands of new dicts and `Event`s at once (a 1 MiB read holds some 10,000), and each
    700 of them set off a collection that walks all the young ones again; none of them is part
    of a cycle. Measured on 200,000 lines of a job (`benchmarks/job_stream.py`, one run each):
    217,000 lines/s with the collector and 1 MiB reads, 470,000 without it (292,000 and 483,000
    with 64 KiB reads)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class SSEParser:
    """Feed bytes, get events. Keeps the id of the last event and the server's retry delay."""

    def __init__(self) -> None:
        self._buffer = b""
        self._crlf = False
        self.last_event_id: str | None = None
        self.retry_ms: int | None = None
        self._names: dict[bytes, str] = {}  # b"event: line" -> "line"

    def feed(self, chunk: bytes) -> list[Event]:
        if b"\r" in chunk or self._crlf:
            self._crlf = True
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        data = self._buffer + chunk
        cut = data.rfind(b"\n\n")
        if cut < 0:
            self._buffer = data
            return []
        self._buffer = data[cut + 2 :]
        return self._parse(data[: cut + 2])

    def _parse(self, block: bytes) -> list[Event]:
        fast = self._canonical(block)
        if fast is not None:
            return fast
        found = _BLOCK.findall(block)
        canonical = [m[2] for m in found if not m[3]]
        try:
            values = orjson.loads(b"[" + b",".join(canonical) + b"]") if canonical else []
        except orjson.JSONDecodeError:
            values = []
        if len(values) != len(canonical):  # bad JSON, or a data line holding two values
            values = [_loads(data) for data in canonical]
        decoded = iter(values)
        events: list[Event] = []
        for event_id, name, _data, other in found:
            if other:
                event = self._general(other)
                if event is None:
                    continue
            else:
                if event_id:
                    self.last_event_id = event_id.decode()
                name_text = name.decode() if name else ""
                event = Event(name_text or "message", self.last_event_id or "", next(decoded))
            events.append(event)
        return events

    def _canonical(self, block: bytes) -> list[Event] | None:
        """The events of `block` when every one is exactly ``id: <id>\nevent: <name>\ndata: <json>``
        with a non-empty id and name (else None), with no work in Python per event but its `Event`.

        `block` ends with a blank line and holds no CR, so its lines come four by four; a line
        never holds a newline, so ``\n<field>: `` found once per line shows every one of them
        starts with its field. Event names are the same few strings: looked up, not decoded.
        """
        lines = block[:-1].split(b"\n")
        count = len(lines) // 4
        if not count or len(lines) != 4 * count or lines[3::4].count(b"") != count:
            return None
        ids, datas, names = b"\n" + b"\n".join(lines[0::4]) + b"\n", b"\n".join(lines[2::4]), lines[1::4]
        if (
            ids.count(b"\nid: ") != count
            or (b"\n" + datas).count(b"\ndata: ") != count
            or b"\0" in ids
            or b"\nid: \n" in ids
        ):
            return None
        event_names = self._event_names(names)
        if event_names is None:
            return None
        with _collector_paused():
            try:
                event_ids = ids[5:-1].replace(b"\nid: ", b"\n").decode().split("\n")
                data = orjson.loads(b"[" + datas[6:].replace(b"\ndata: ", b",") + b"]")
            except (UnicodeDecodeError, orjson.JSONDecodeError):
                return None  # the general path decodes what it can and raises for the data that is bad
            if len(data) != count:
                return None  # a data line with more than one JSON value in it
            self.last_event_id = event_ids[-1]
            return list(map(Event, event_names, event_ids, data))

    def _event_names(self, lines: list[bytes]) -> list[str] | None:
        """The names of ``event: <name>`` lines (None when one is not such a line)."""
        known = self._names
        for line in set(lines).difference(known):
            if not line.startswith(b"event: ") or len(line) == 7 or len(known) >= 1000:
                return None
            try:
                known[line] = line[7:].decode()
            except UnicodeDecodeError:
                return None
        return list(map(known.__getitem__, lines))

    def _general(self, block: bytes) -> Event | None:
        name, data_lines, seen_data = "message", [], False
        for line in block.split(b"\n"):
            if line.startswith(b":"):
                continue  # a comment: keep-alives
            field, _, value = line.partition(b":")
            value = value[1:] if value.startswith(b" ") else value
            if field == b"event":
                name = value.decode() or "message"
            elif field == b"data":
                data_lines.append(value)
                seen_data = True
            elif field == b"id" and b"\0" not in value:
                self.last_event_id = value.decode()
            elif field == b"retry" and value.isdigit():
                self.retry_ms = int(value)
        if not seen_data:
            return None
        return Event(name, self.last_event_id or "", _loads(b"\n".join(data_lines)))


_event_name = attrgetter("event")


def _loads(data: bytes) -> Any:
    return orjson.loads(data) if data else None


class EventStream:
    """Iterate the events of one SSE route, reconnecting with `Last-Event-ID` on a drop.

    `final_events` names the event types after which the stream is over (e.g. `exit`); the
    iteration ends after delivering one. `max_reconnects` bounds consecutive failed attempts.
    Iterate events one by one, or `batches()` for lists of events as they arrive (cheaper for a
    consumer that handles many at once, like a log panel).
    """

    def __init__(
        self,
        http: httpx.AsyncClient,
        url: str,
        *,
        params: Mapping[str, str] | None = None,
        last_event_id: str | None = None,
        final_events: frozenset[str] = frozenset(),
        max_reconnects: int = 8,
    ) -> None:
        self._http = http
        self._url = url
        self._params = dict(params or {})
        self.last_event_id = last_event_id
        self._final = final_events
        self._max_reconnects = max_reconnects
        self._retry_ms = 1000

    async def __aiter__(self) -> AsyncIterator[Event]:
        async for batch in self._batches():
            for event in batch:
                # Handed over means delivered: a consumer that stops after it resumes after it.
                self.last_event_id = event.id or self.last_event_id
                yield event

    async def batches(self) -> AsyncIterator[list[Event]]:
        async for batch in self._batches():
            self.last_event_id = next((e.id for e in reversed(batch) if e.id), self.last_event_id)
            yield batch

    async def _batches(self) -> AsyncIterator[list[Event]]:
        failures = 0
        while True:
            try:
                async for batch in self._one_connection():
                    failures = 0
                    names = list(map(_event_name, batch))
                    final = min((names.index(name) for name in self._final if name in names), default=None)
                    if final is not None:
                        yield batch[: final + 1]
                        return
                    yield batch
                return  # the server ended the stream cleanly
            except (httpx.TransportError, SSEError, _GatewayError) as exc:
                failures += 1
                if failures > self._max_reconnects:
                    raise TransportError(f"event stream lost: {exc}") from exc
                retry_s = self._retry_ms / 1000
                await anyio.sleep(full_jitter(failures, base=retry_s, cap=retry_s * 30))

    async def _one_connection(self) -> AsyncIterator[list[Event]]:
        headers = {} if self.last_event_id is None else {"Last-Event-ID": self.last_event_id}
        async with aconnect_sse(
            self._http, "GET", self._url, params=self._params, headers=headers, timeout=None
        ) as source:
            response = source.response
            if response.status_code >= 400:
                await response.aread()
                body = _json_or_none(response.content)
                if response.status_code in GATEWAY_STATUSES and not _is_api_error(body):
                    raise _GatewayError(f"{response.status_code} from a gateway in front of the control plane")
                if _is_api_error(body) and body["error"].get("code") == Unavailable.code:
                    raise _GatewayError("the control plane's database or bus is away")  # for now: try again
                raise ApiError.from_body(response.status_code, body)
            parser = SSEParser()
            parser.last_event_id = self.last_event_id
            async for chunk in response.aiter_bytes():
                events = parser.feed(chunk)
                if parser.retry_ms is not None:
                    self._retry_ms = parser.retry_ms
                if events:
                    yield events


# A load balancer in front of the replicas answers these, in its own words (not the API's error
# shape), while the replica it chose has just gone and its health checks have not said so yet:
# a reconnect tries again, as after a drop. The API's own 502/504 (`agent_error`,
# `agent_timeout`) carry an error code and end the stream; its 503 (`unavailable`: its database
# or bus is away for now) is tried again too.
GATEWAY_STATUSES = frozenset({502, 503, 504})


class _GatewayError(Exception):
    """A gateway's 502/503/504 that is not an answer of the API."""


def _is_api_error(body: Any) -> bool:
    return isinstance(body, dict) and isinstance(body.get("error"), dict)


def _json_or_none(content: bytes) -> Any:
    try:
        return orjson.loads(content)
    except orjson.JSONDecodeError:
        return None
