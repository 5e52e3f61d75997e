"""The last few minutes of each linked agent's pulses, in memory, behind the sparklines of
`GET /v1/servers/events`.

An agent sends a ``pulse`` frame every few seconds (`contract.link.protocol`, Pulses); the hub
hands it here, and each is kept in its server's ring and published on the presence feed, to the
followers of the server's org. A stream that opens starts with every ring of its org. Nothing
is stored: a ring goes with its agent's link, and a restarted control plane starts empty.
"""

from __future__ import annotations

from collections import deque
from datetime import UTC, datetime
from typing import Any, Final

from contract.link.params import Pulse
from control_plane.clock import iso
from control_plane.servers.presence import PresenceFeed

RING_SIZE: Final = 60  # pulses kept per server: five minutes at the agent's default 5 s


class PulseRings:
    """Each linked server's last `RING_SIZE` pulses, as `PulseSample` payloads."""

    def __init__(self, feed: PresenceFeed, size: int = RING_SIZE) -> None:
        self._feed = feed
        self._size = size
        self._rings: dict[str, deque[dict[str, Any]]] = {}
        self._orgs: dict[str, str] = {}  # server id -> its org, while its agent is linked

    def linked(self, server_id: str, org_id: str) -> None:
        """The agent of `server_id` (of `org_id`) is linked: its pulses are published from now on."""
        self._orgs[server_id] = org_id

    def dropped(self, server_id: str) -> None:
        """Its link is gone: so are its pulses (an offline server has no live figures)."""
        self._orgs.pop(server_id, None)
        self._rings.pop(server_id, None)

    def on_pulse(self, server_id: str, pulse: Pulse) -> None:
        """A pulse frame of the agent of `server_id` (the hub's `on_pulse`)."""
        self.record(server_id, sample_of(pulse))

    def record(self, server_id: str, sample: dict[str, Any]) -> None:
        """Keep `sample` in the server's ring and publish it to its org's followers. A pulse that
        comes before its link's presence was recorded has no org yet: it is kept, not published."""
        ring = self._rings.get(server_id)
        if ring is None:
            ring = self._rings[server_id] = deque(maxlen=self._size)
        ring.append(sample)
        if (org_id := self._orgs.get(server_id)) is not None:
            self._feed.pulse(org_id, {"server_id": server_id, "samples": [sample]})

    def of_org(self, org_id: str) -> list[dict[str, Any]]:
        """A `PulseEvent` payload for each of the org's servers that has pulses."""
        return [
            {"server_id": server_id, "samples": list(ring)}
            for server_id, ring in self._rings.items()
            if ring and self._orgs.get(server_id) == org_id
        ]


def sample_of(pulse: Pulse) -> dict[str, Any]:
    """The `PulseSample` payload of a pulse frame (its time as RFC 3339, as the API's times are)."""
    return {
        "at": iso(datetime.fromtimestamp(pulse.at, UTC)),
        "cpu": pulse.cpu,
        "memory": pulse.memory,
        "disk": pulse.disk,
    }
