"""The feed of agent presence changes behind `GET /v1/servers/events`.

A bounded in-memory log with a sequence number per event: a client that reconnects with
`Last-Event-ID` gets every event after it that is still held. Followers share one wake-up event
instead of holding a queue each, so a slow follower costs nothing to the others.
"""

from __future__ import annotations

import secrets
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import anyio


class PresenceFeed:
    def __init__(self, capacity: int = 4096, *, epoch: str | None = None) -> None:
        self._log: deque[tuple[int, str, dict[str, Any]]] = deque(maxlen=capacity)
        self._seq = 0
        self._wakeup: anyio.Event | None = None
        # Event ids are "<epoch>:<seq>": an id from before a restart names another epoch, and a
        # client resuming with it gets everything this process holds instead of nothing.
        # Replicas number their events alike, from the database, and share one epoch.
        self.epoch = epoch or secrets.token_hex(4)
        self.capacity = capacity

    @property
    def last_seq(self) -> int:
        return self._seq

    def event_id(self, seq: int) -> str:
        return f"{self.epoch}:{seq}"

    def resume_point(self, last_event_id: str | None) -> int:
        """The seq to follow after, for a client that last saw `last_event_id` (None: start now)."""
        if last_event_id is None:
            return self._seq
        epoch, _, seq = last_event_id.partition(":")
        if epoch != self.epoch or not seq.isdigit():
            return 0
        return min(int(seq), self._seq)

    def start_after(self, seq: int) -> None:
        """Before the first event: the feed's numbering goes on from `seq` (replicas: the database's)."""
        self._seq = seq

    def publish(self, org_id: str, payload: dict[str, Any], seq: int | None = None) -> None:
        """An event; `seq` numbers it when the numbering is not this feed's own (replicas share
        the database's: `control_plane.replicas`), and must then grow from one event to the next."""
        self._seq = self._seq + 1 if seq is None else seq
        self._log.append((self._seq, org_id, payload))
        if self._wakeup is not None:
            self._wakeup.set()
            self._wakeup = None

    async def follow(
        self, org_id: str, after: int, *, keepalive_s: float = 15.0
    ) -> AsyncIterator[list[tuple[int, dict[str, Any]]]]:
        """Batches of (seq, payload) for `org_id` after `after`; an empty batch is a keep-alive tick."""
        while True:
            batch = [(seq, p) for seq, org, p in self._log if seq > after and org == org_id]
            if batch:
                after = batch[-1][0]
                yield batch
                continue
            after = self._seq  # everything up to here was scanned: none of it was this org's
            if self._wakeup is None:
                self._wakeup = anyio.Event()
            with anyio.move_on_after(keepalive_s) as scope:
                await self._wakeup.wait()
            if scope.cancelled_caught:
                yield []
