"""Server-Sent Events that survive a dropped connection.

`EventStream` wraps httpx-sse: it remembers the id of the last event it delivered and, when the
connection drops, reconnects with `Last-Event-ID` so the server resumes right after it. Nothing is
lost or repeated as long as the server honours the header (every `/v1` stream does).
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import orjson
from httpx_sse import SSEError, aconnect_sse

from .errors import ApiError, TransportError


@dataclass(frozen=True, slots=True)
class Event:
    """One server-sent event, its data already decoded from JSON."""

    event: str
    id: str
    data: Any


class EventStream:
    """Iterate the events of one SSE route, reconnecting with `Last-Event-ID` on a drop.

    `final_events` names the event types after which the stream is over (e.g. `exit`); the
    iteration ends after delivering one. `max_reconnects` bounds consecutive failed attempts.
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
        failures = 0
        while True:
            try:
                async for event in self._one_connection():
                    failures = 0
                    yield event
                    if event.event in self._final:
                        return
                return  # the server ended the stream cleanly
            except (httpx.TransportError, SSEError) as exc:
                failures += 1
                if failures > self._max_reconnects:
                    raise TransportError(f"event stream lost: {exc}") from exc
                # Full jitter keeps a fleet of clients from reconnecting in lockstep.
                await anyio.sleep(random.uniform(0, self._retry_ms / 1000 * min(2**failures, 30)))

    async def _one_connection(self) -> AsyncIterator[Event]:
        headers = {"Accept": "text/event-stream"}
        if self.last_event_id is not None:
            headers["Last-Event-ID"] = self.last_event_id
        async with aconnect_sse(
            self._http, "GET", self._url, params=self._params, headers=headers, timeout=None
        ) as source:
            response = source.response
            if response.status_code >= 400:
                await response.aread()
                raise ApiError.from_body(response.status_code, _json_or_none(response.content))
            async for sse in source.aiter_sse():
                if sse.retry is not None:
                    self._retry_ms = sse.retry
                if sse.id:
                    self.last_event_id = sse.id
                if not sse.event and not sse.data:
                    continue  # a comment or keep-alive
                yield Event(sse.event or "message", sse.id, orjson.loads(sse.data) if sse.data else None)


def _json_or_none(content: bytes) -> Any:
    try:
        return orjson.loads(content)
    except orjson.JSONDecodeError:
        return None
