"""The feed of agent presence changes behind `GET /v1/servers/events`.

A bounded in-memory log with a sequence number per event: a client that reconnects with
`Last-Event-ID` gets every event after it that is still held. Followers share one wake-up event
instead of holding a queue each, so a slow follower costs nothing to the others.

The feed also carries the agents' pulses (`control_plane.servers.pulses`): a log of their own,
as bounded, whose events have no id (a pulse missed is not resent: the next says more), so they
never take a presence event's place nor move where a client resumes.
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
        self._pulses: deque[tuple[int, str, dict[str, Any]]] = deque(maxlen=capacity)
        self._pulse_seq = 0  # this process's own numbering, never sent
        self._wakeup: anyio.Event | None = None
        # Event ids are "<epoch>:<seq>": an id from before a restart names another epoch, and a
        # client resuming with it gets everything this process holds instead of nothing.
        # Replicas number their events alike, from the database, and share one epoch.
        self.epoch = epoch or secrets.token_hex(4)
        self.capacity = capacity

    @property
    def last_seq(self) -> int:
        return self._seq

    @property
    def pulse_mark(self) -> int:
        """Where the pulses are now: `follow` from here misses none published after."""
        return self._pulse_seq

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
        self._wake()

    def pulse(self, org_id: str, payload: dict[str, Any]) -> None:
        """A `PulseEvent` for the followers of `org_id`: no id, not resent to a client that resumes."""
        self._pulse_seq += 1
        self._pulses.append((self._pulse_seq, org_id, payload))
        self._wake()

    def _wake(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()
            self._wakeup = None

    async def follow(
        self, org_id: str, after: int, *, pulses_after: int | None = None, keepalive_s: float = 15.0
    ) -> AsyncIterator[list[tuple[str, int | None, dict[str, Any]]]]:
        """Batches of (event, seq, payload) for `org_id`: its presence events after `after`
        (``presence``, numbered) and its pulses after `pulses_after` (a `pulse_mark`; None: from
        now on) (``pulse``, seq None); an empty batch is a keep-alive tick."""
        pulses_after = self._pulse_seq if pulses_after is None else pulses_after
        while True:
            presence = [(seq, p) for seq, org, p in self._log if seq > after and org == org_id]
            pulses = [(seq, p) for seq, org, p in self._pulses if seq > pulses_after and org == org_id]
            if presence or pulses:
                after = presence[-1][0] if presence else after
                pulses_after = pulses[-1][0] if pulses else pulses_after
                batch: list[tuple[str, int | None, dict[str, Any]]] = [("presence", seq, p) for seq, p in presence]
                yield batch + [("pulse", None, p) for _, p in pulses]
                continue
            after = self._seq  # everything up to here was scanned: none of it was this org's
            pulses_after = self._pulse_seq
            if self._wakeup is None:
                self._wakeup = anyio.Event()
            with anyio.move_on_after(keepalive_s) as scope:
                await self._wakeup.wait()
            if scope.cancelled_caught:
                yield []
