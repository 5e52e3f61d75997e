"""The agents' pulses on `GET /v1/servers/events` (issue 25, point 11), on the real stack with
real agents: each linked agent's pulses reach its org's streams as they come, a stream that
opens starts with the last minutes held, another org's never show, and an agent that goes
offline takes its pulses with it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import trio

from api_client import Client
from contract.models import PulseEvent, PulseSample
from control_plane.servers.presence import PresenceFeed
from control_plane.servers.pulses import PulseRings
from tests.conftest import AgentProcess, Stack
from tests.helpers import wait_until
from tests.helpers.pulses import pulsing_agent


@pytest.fixture
def other_org_token(stack: Stack) -> str:
    name = f"pulses-{uuid.uuid4().hex[:8]}"
    stack.admin("create-org", name, "--plan", "max")
    stack.admin("create-user", f"owner@{name}.test", "--org", name, "--role", "owner", "--password", "pw-123456")
    return stack.login(f"owner@{name}.test", "pw-123456")


@pytest.fixture
def agents(stack: Stack, tmp_path: Path, other_org_token: str) -> Iterator[tuple[AgentProcess, AgentProcess]]:
    ours = pulsing_agent(stack, tmp_path / "ours", stack.token, f"pulsing-{tmp_path.name[-8:]}")
    try:
        theirs = pulsing_agent(stack, tmp_path / "theirs", other_org_token, "pulsing-elsewhere")
        try:
            yield ours, theirs
        finally:
            theirs.stop()
    finally:
        ours.stop()


async def pulses_of(client: Client, server_id: str, count: int) -> tuple[list[PulseSample], set[str]]:
    """The first `count` samples of `server_id` on a new stream, and every server whose pulses it carried."""
    samples: list[PulseSample] = []
    servers: set[str] = set()
    with trio.fail_after(30):
        async for event in client.servers.events():
            if isinstance(event, PulseEvent):
                servers.add(event.server_id)
                samples.extend(event.samples if event.server_id == server_id else [])
                if len(samples) >= count:
                    return samples, servers
    raise AssertionError("the stream ended")


@pytest.mark.anyio
async def test_an_orgs_stream_carries_its_agents_pulses_and_only_theirs(
    stack: Stack, agents: tuple[AgentProcess, AgentProcess], other_org_token: str
) -> None:
    ours, theirs = agents
    async with Client(stack.base_url, token=stack.token) as client:
        samples, servers = await pulses_of(client, ours.server_id, 10)
        assert theirs.server_id not in servers  # pulsing ten times a second all the while
        times = [s.at for s in samples]
        assert times == sorted(times) and len(set(times)) == len(times)
        assert all(s.memory is not None and 0 < s.memory < 100 for s in samples)
        assert all(s.disk is not None and 0 < s.disk < 100 for s in samples)
        assert all(s.cpu is not None and 0 <= s.cpu <= 100 for s in samples[1:])

        # A stream that opens now starts with the pulses held: at once, many in one event.
        with trio.fail_after(10):
            async for event in client.servers.events():
                if isinstance(event, PulseEvent) and event.server_id == ours.server_id:
                    assert len(event.samples) >= 10 and event.samples[0].at <= samples[-1].at
                    break
    async with Client(stack.base_url, token=other_org_token) as client:
        _, servers = await pulses_of(client, theirs.server_id, 3)
        assert ours.server_id not in servers


def opening_of_the_stream(stack: Stack) -> str:
    """What a new stream of the demo org sends at once: its ready event and the pulses held."""
    with stack.http() as http, http.stream("GET", "/v1/servers/events") as response:
        return next(response.iter_raw()).decode()


def test_an_agent_that_goes_offline_takes_its_pulses_with_it(
    stack: Stack, agents: tuple[AgentProcess, AgentProcess]
) -> None:
    ours, _ = agents
    wait_until(lambda: ours.server_id in opening_of_the_stream(stack), timeout=10)
    ours.kill()
    opening = opening_of_the_stream(stack)
    assert "event: ready" in opening and "event: pulse" in opening  # the stack's own agent's
    assert ours.server_id not in opening


# With replicas, the rings of the agents linked to the others come over the bus (their stack tests
# are in tests/control_plane/replicas/test_replicas.py); here, which replica's word holds a ring.


def _sample(second: int) -> dict[str, Any]:
    return {"at": f"2026-01-01T00:00:{second:02d}.000000Z", "cpu": 1.0, "memory": 2.0, "disk": 3.0}


def test_a_replica_a_link_left_does_not_drop_the_ring_another_replica_feeds_since() -> None:
    rings = PulseRings(PresenceFeed())
    rings.received("rpl_a", "srv_1", "org_1", [_sample(1)])
    rings.received("rpl_b", "srv_1", "org_1", [_sample(2)])  # the link moved to B
    rings.dropped_elsewhere("rpl_a", "srv_1")  # A says so after B's first pulse came
    assert rings.of_org("org_1") == [{"server_id": "srv_1", "samples": [_sample(1), _sample(2)]}]
    rings.dropped_elsewhere("rpl_b", "srv_1")
    assert rings.of_org("org_1") == []


def test_a_link_here_is_undone_by_no_other_replica_and_its_end_is_shared() -> None:
    shared: list[tuple[str, str, dict[str, Any]]] = []
    drops: list[str] = []
    rings = PulseRings(PresenceFeed())
    rings.share = lambda server_id, org_id, sample: shared.append((server_id, org_id, sample))
    rings.share_drop = drops.append
    rings.received("rpl_a", "srv_1", "org_1", [_sample(1)])
    rings.linked("srv_1", "org_1")  # the link moved here
    rings.received("rpl_a", "srv_1", "org_1", [_sample(2)])  # a late pulse of the link A held: stale
    rings.dropped_elsewhere("rpl_a", "srv_1")
    rings.gone("srv_1")  # an offline event of A's link: this one is the hub's to report
    assert rings.of_org("org_1") == [{"server_id": "srv_1", "samples": [_sample(1)]}]
    assert (shared, drops) == ([], [])
    rings.dropped("srv_1")
    assert (rings.of_org("org_1"), drops) == ([], ["srv_1"])


@pytest.mark.anyio
async def test_a_ring_said_again_sends_the_open_streams_only_the_samples_they_lack() -> None:
    feed = PresenceFeed()
    rings = PulseRings(feed)
    rings.received("rpl_b", "srv_1", "org_1", [_sample(1), _sample(2)])
    mark = feed.pulse_mark
    rings.replaced("rpl_b", "srv_1", "org_1", [_sample(1), _sample(2), _sample(3)])
    with anyio.fail_after(5):
        batch = await anext(aiter(feed.follow("org_1", feed.last_seq, pulses_after=mark)))
    assert batch == [("pulse", None, {"server_id": "srv_1", "samples": [_sample(3)]})]
    assert rings.of_org("org_1") == [{"server_id": "srv_1", "samples": [_sample(1), _sample(2), _sample(3)]}]
