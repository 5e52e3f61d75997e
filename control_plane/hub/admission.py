"""How many agent links are being set up at once, and when to tell the turned-away to come back.

A control plane restarted under thousands of agents meets them all within seconds: their backoff
spreads the dials over its cap (15 s), faster than links can be set up (a few ms of the control
plane's CPU each, and the agent's hello). Links beyond `limit` at once are turned away before
the WebSocket upgrade, with HTTP 503 and a Retry-After. The turns it gives are handed out in
order, at the rate links have lately been registered here, after the links being set up and the
turns already given: the storm then drains like a queue at the pace the control plane can serve,
instead of as retries at random that find it full again (each of which is work too, and used to
send its agent into a backoff of up to a minute).

anyio only, like the rest of the hub.
"""

from __future__ import annotations

import math
from collections import deque

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
# No agent is told to wait longer than this, whatever the queue.
MAX_RETRY_AFTER_S = 600


class Admission:
    """The links being set up (`enter`/`leave`), and the turns of those turned away."""

    def __init__(self, limit: int = MAX_PENDING_LINKS) -> None:
        self.limit = limit
        self.pending = 0
        self._registered: deque[float] = deque()  # times of the registrations of the last window
        self._last_turn = -math.inf

    def enter(self) -> bool:
        """Whether a new link may be set up now; if so, `leave` must follow."""
        if self.pending >= self.limit:
            return False
        self.pending += 1
        return True

    def leave(self, *, registered: bool) -> None:
        self.pending -= 1
        if registered:
            self._registered.append(anyio.current_time())

    def retry_after(self) -> int:
        """Whole seconds until the turn of a link turned away now (the agent adds its own jitter)."""
        now = anyio.current_time()
        rate = self.rate(now)
        turn = max(self._last_turn + 1 / rate, now + self.pending / rate)
        self._last_turn = turn
        return min(math.ceil(turn - now), MAX_RETRY_AFTER_S)

    def rate(self, now: float) -> float:
        """Links registered per second lately, and at least the assumed rate."""
        while self._registered and self._registered[0] < now - RATE_WINDOW_S:
            self._registered.popleft()
        return max(len(self._registered) / RATE_WINDOW_S, ASSUMED_LINKS_PER_S)
