"""How many agent links are being set up at once, and when to tell the turned-away to come back.

A control plane restarted under thousands of agents meets them all within seconds: their backoff
spreads the dials over its cap (15 s), faster than links can be set up (a few ms of the control
plane's CPU each, and the agent's hello). Links beyond `limit` at once are turned away before
the WebSocket upgrade, with HTTP 503 and a Retry-After. The turns it gives are handed out in
order, at the pace the control plane can set links up, after the links being set up and the turns
already given: the storm then drains like a queue at that pace, instead of as retries at random
that find it full again (each of which is work too, and used to send its agent into a backoff of
up to a minute).

That pace is what the links registered lately cost this process in CPU time: `BUSY_SHARE` of one
core, spent at that cost per link. It was the rate at which links had lately been registered,
which the turns themselves set: a control plane given turns at 200 links a second registered 200
a second and was given 200 again, idle most of the time (10,000 agents took 68 s to relink, with
34 s of its CPU; benchmarks/fleet.py).

anyio only, like the rest of the hub.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable

import anyio

# Links between their first byte and their registration, beyond which a new one is turned away:
# in a storm of relinks, a link set up late is a link its agent gave up on (it waits 10 s for the
# handshake), so queueing more than can be served in a few seconds only spends the control plane
# on work that is thrown away. Most of a slot's time is the agent's (its hello): under uvicorn
# (about 3 ms of control-plane CPU a link), 1,024 slots instead of 256 cut the refusals of 5,000
# agents relinking by 40 % (benchmarks/fleet.py).
MAX_PENDING_LINKS = 1024
# The registrations counted for the rate at which turns are given.
RATE_WINDOW_S = 2.0
# The rate turns are never given slower than (the first seconds of a storm count few). A guess too
# high costs an agent that comes back too early one more cheap 503 and a later turn; a guess too
# low would leave the control plane idle while the turned-away wait: it is on the high side.
ASSUMED_LINKS_PER_S = 200.0
# The share of one core a storm's turns are given for: the rest is for the API, the heartbeats of
# the links already set up, and the CPU time other processes take from this one.
BUSY_SHARE = 0.8
# No faster than this, whatever the links cost (a window with next to no CPU time counted).
MAX_LINKS_PER_S = 2000.0
# No agent is told to wait longer than this, whatever the queue.
MAX_RETRY_AFTER_S = 600


class Admission:
    """The links being set up (`enter`/`leave`), and the turns of those turned away."""

    def __init__(self, limit: int = MAX_PENDING_LINKS, cpu_clock: Callable[[], float] = time.process_time) -> None:
        self.limit = limit
        self.pending = 0
        self._cpu_clock = cpu_clock  # this process's CPU seconds
        # The registrations of the last window: when, and the process's CPU seconds then.
        self._registered: deque[tuple[float, float]] = deque()
        self._last_turn = -math.inf

    @property
    def full(self) -> bool:
        """Whether a new link would be turned away now."""
        return self.pending >= self.limit

    def enter(self) -> bool:
        """Whether a new link may be set up now; if so, `leave` must follow."""
        if self.full:
            return False
        self.pending += 1
        return True

    def leave(self, *, registered: bool) -> None:
        self.pending -= 1
        if registered:
            self._registered.append((anyio.current_time(), self._cpu_clock()))

    def retry_after(self) -> int:
        """Whole seconds until the turn of a link turned away now (the agent adds its own jitter)."""
        now = anyio.current_time()
        rate = self.rate(now)
        turn = max(self._last_turn + 1 / rate, now + self.pending / rate)
        self._last_turn = turn
        return min(math.ceil(turn - now), MAX_RETRY_AFTER_S)

    def rate(self, now: float) -> float:
        """Links per second this process can set up at `BUSY_SHARE` of a core, at what the links
        registered lately cost it; at least as many as it registered lately, and the assumed rate."""
        registered = self._registered
        while registered and registered[0][0] < now - RATE_WINDOW_S:
            registered.popleft()
        seen = len(registered) / RATE_WINDOW_S
        if len(registered) < 2:
            return max(seen, ASSUMED_LINKS_PER_S)
        cpu_s = self._cpu_clock() - registered[0][1]  # since the first of them: the others' cost
        affordable = BUSY_SHARE * (len(registered) - 1) / cpu_s if cpu_s > 0 else MAX_LINKS_PER_S
        return max(seen, min(affordable, MAX_LINKS_PER_S), ASSUMED_LINKS_PER_S)
