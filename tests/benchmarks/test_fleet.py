"""Smoke test of `benchmarks/fleet.py` at a tiny N, so it cannot rot: the fleet is provisioned,
linked from two simulator processes, answers its RPCs, and relinks in full after the control
plane is killed and started again. It checks what the benchmark computed, not how fast."""

from __future__ import annotations

import argparse
from collections import Counter

from benchmarks.fleet import measure, percentile, presence_complete

N = 20


def test_a_tiny_fleet_measured() -> None:
    args = argparse.Namespace(
        simulators=2, quiet_seconds=1.0, settle_seconds=0.5, rpcs=10, ramp=0.0, relink_timeout=120.0,
        presence_timeout=60.0,
    )  # fmt: skip
    row = measure(N, args)
    assert (row.n, row.simulators) == (N, 2)
    assert row.rss_before > 0 and row.rss_linked > 0 and row.simulators_rss > 0
    assert row.quiet_s >= 1.0 and row.cpu_s >= 0.0
    assert len(row.rpc_ms) == 10 and not row.rpc_failures  # every stat answered by a simulated agent
    assert 0 < percentile(row.rpc_ms, 50) <= percentile(row.rpc_ms, 99)
    assert row.gave_up == 0 and row.relink_s is not None and row.relink_s > 0
    assert row.online_after_relink == [N]  # as the API lists them, not only as the simulators count
    assert presence_complete(row) and row.presence_s is not None
    # every agent saw its link cut by the kill, and came back
    assert cut_by_the_kill(row.relink_events) == N


def test_a_tiny_fleet_over_three_replicas_measured() -> None:
    """Three `fleetdeck serve` on one PostgreSQL database with NATS: the agents spread over them,
    RPCs asked of random replicas (most relayed over the bus) all answered, and the agents of the
    replica killed all linked again."""
    args = argparse.Namespace(
        simulators=2, quiet_seconds=1.0, settle_seconds=0.5, rpcs=30, ramp=0.0, relink_timeout=120.0,
        presence_timeout=60.0, replicas=3, kill="one",
    )  # fmt: skip
    row = measure(N, args)
    assert (row.replicas, row.killed) == (3, 1)
    assert sum(row.spread) == N and len(row.spread) == 3 and min(row.spread) > 0
    assert len(row.rpc_ms) == 30 and not row.rpc_failures
    assert row.relinked in row.spread  # the links the killed replica held
    assert row.gave_up == 0 and row.relink_s is not None
    assert row.online_after_relink == [N, N, N]  # every replica lists every agent online again
    assert presence_complete(row) and row.presence_s is not None
    assert cut_by_the_kill(row.relink_events) == row.relinked


def cut_by_the_kill(events: Counter[str]) -> int:
    """Links the agents saw closed by the control plane (counted by close code)."""
    return sum(n for what, n in events.items() if what.startswith("link closed by the control plane"))
