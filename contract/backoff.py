"""Full-jitter exponential backoff, the one formula of every reconnecting loop: the agent's link
(`agent.link.client.Backoff`) and the client's event streams (`api_client._sse.EventStream`).

It lives here because api_client is the lowest layer both of its users may import: the agent may
not import the control plane or the TUI, and api_client may not import the agent (the TUI, which
imports api_client, must never load the agent). It imports nothing but the standard library; the
agent pays for loading the api_client package once, at start.
"""

from __future__ import annotations

import random

MAX_EXPONENT = 64  # 2**attempt overflows a float after a few days of failures


def full_jitter(attempt: int, base: float, cap: float) -> float:
    """Seconds to wait before retry number `attempt` (from 0): ``uniform(0, min(cap, base * 2**attempt))``.

    Full jitter keeps a fleet of clients that lost the same server from coming back in lockstep.
    """
    return random.uniform(0, min(cap, base * 2 ** min(attempt, MAX_EXPONENT)))
