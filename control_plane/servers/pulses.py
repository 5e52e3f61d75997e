"""The last few minutes of each linked agent's pulses, in memory, behind the sparklines of
`GET /v1/servers/events`.

An agent sends a ``pulse`` frame every few seconds (`contract.link.protocol`, Pulses); the hub
hands it here, and each is kept in its server's ring and published on the presence feed, to the
followers of the server's org. A stream that opens starts with every ring of its org. Nothing
is stored: a ring goes with its agent's link, and a restarted control plane starts empty.

Replicas (`control_plane.replicas`) hand each other their agents' pulses over the bus: each
replica keeps a ring for every linked agent of the cluster, those linked to the others fed from
the bus (`received`), and drops one when the replica holding its link says the link is gone
(`dropped_elsewhere`) or a presence event says the agent is offline (`gone`: its replica died).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
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
        self._here: set[str] = set()  # the servers whose agents are linked to this process
        self._sources: dict[str, str] = {}  # server id -> the replica its ring comes from
        # With replicas: each pulse of an agent linked here, and each such link gone, for the others.
        self.share: Callable[[str, str, dict[str, Any]], None] | None = None
        self.share_drop: Callable[[str], None] | None = None

    def linked(self, server_id: str, org_id: str) -> None:
        """The agent of `server_id` (of `org_id`) is linked here: its pulses are published from now
        on. A ring fed by another replica goes on from here (its link moved): the sparkline too."""
        self._orgs[server_id] = org_id
        self._here.add(server_id)
        self._sources.pop(server_id, None)

    def dropped(self, server_id: str) -> None:
        """Its link here is gone: so are its pulses (an offline server has no live figures), on the
        other replicas too."""
        was_here = server_id in self._here
        self._forget(server_id)
        if was_here and self.share_drop is not None:
            self.share_drop(server_id)

    def on_pulse(self, server_id: str, pulse: Pulse) -> None:
        """A pulse frame of the agent of `server_id` (the hub's `on_pulse`)."""
        self._sources.pop(server_id, None)
        sample = sample_of(pulse)
        self.record(server_id, sample)
        if server_id in self._here and self.share is not None:
            self.share(server_id, self._orgs[server_id], sample)

    def received(self, replica_id: str, server_id: str, org_id: str, samples: list[dict[str, Any]]) -> None:
        """Pulses of an agent linked to replica `replica_id`, from the bus, kept and published as
        this process's own. Those of an agent linked here are stale (its link was there before)."""
        if server_id not in self._here:
            held = self._rings.get(server_id, ())
            self._keep_from(replica_id, server_id, org_id, [*held, *samples], samples)

    def replaced(self, replica_id: str, server_id: str, org_id: str, samples: list[dict[str, Any]]) -> None:
        """The whole ring of an agent linked to replica `replica_id` (said to a replica that starts),
        instead of what this process holds of it."""
        if server_id not in self._here:
            held = self._rings.get(server_id, ())
            news = [sample for sample in samples if sample not in held]  # the open streams had the others
            self._keep_from(replica_id, server_id, org_id, samples, news)

    def _keep_from(
        self, replica_id: str, server_id: str, org_id: str, ring: list[dict[str, Any]], news: list[dict[str, Any]]
    ) -> None:
        self._sources[server_id] = replica_id
        self._orgs[server_id] = org_id
        self._rings[server_id] = deque(ring, maxlen=self._size)
        if news:
            self._feed.pulse(org_id, {"server_id": server_id, "samples": news})

    def dropped_elsewhere(self, replica_id: str, server_id: str) -> None:
        """Replica `replica_id` says the agent's link there is gone: the ring goes if it came from
        there (not if the link moved here, or to a replica whose pulses came since)."""
        if self._sources.get(server_id) == replica_id:
            self._forget(server_id)

    def gone(self, server_id: str) -> None:
        """A presence event says the agent is offline: its ring goes, unless its link is here (the
        replica that held it died; a link here is the hub's to report)."""
        if server_id not in self._here:
            self._forget(server_id)

    def held_here(self) -> list[tuple[str, str, list[dict[str, Any]]]]:
        """(server id, org id, samples) of each agent linked here with pulses, for a replica that starts."""
        return [(sid, self._orgs[sid], list(ring)) for sid, ring in self._rings.items() if sid in self._here and ring]

    def _forget(self, server_id: str) -> None:
        self._here.discard(server_id)
        self._sources.pop(server_id, None)
        self._orgs.pop(server_id, None)
        self._rings.pop(server_id, None)

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
