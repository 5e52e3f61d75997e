"""Smoke test of `benchmarks/load_balancers.py`'s own parts on real tools: the static nginx
backends, the hand-written nginx and HAProxy references over them, the rounds' alternating order,
wrk's report parsed, and the paced client (new connections and keep-alive) counting no failure
against a backend that does not reload."""

from __future__ import annotations

import argparse
import shutil
import socket

import httpx
import pytest
import trio

from benchmarks.load_balancers import (
    STATIC_BODY,
    Target,
    control_load,
    hand_written,
    parse_wrk,
    round_order,
    run_wrk,
    static_backends,
)

pytestmark = pytest.mark.skipif(
    not (shutil.which("wrk") and shutil.which("nginx") and shutil.which("haproxy")), reason="needs wrk, nginx, haproxy"
)


def listens(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def test_static_backends_measured_and_stopped() -> None:
    with static_backends(2) as ports:
        wrk = trio.run(run_wrk, ports[0], 1)
        args = argparse.Namespace(rate=50.0, load_seconds=1.0, keepalive_clients=2)
        load = trio.run(control_load, ports[1], args)
    assert wrk.requests_per_s > 0 and wrk.p50_ms <= wrk.p99_ms
    assert load.new_connections.sent == 50 and not load.new_connections.failed
    assert load.keep_alive.sent == 20 and not load.keep_alive.failed and not load.keep_alive.retried
    assert not any(listens(port) for port in ports)  # stopped


def test_hand_written_references_forward_to_the_backends_and_stop() -> None:
    """Each reference answers with the backends' file, under wrk too, and is stopped at the end."""
    with static_backends(2) as ports, hand_written(ports) as references:
        assert set(references) == {"nginx", "haproxy"}
        for reference in references.values():
            answer = httpx.get(f"http://127.0.0.1:{reference.port}/")
            assert (answer.status_code, answer.content) == (200, STATIC_BODY), reference
            wrk = trio.run(run_wrk, reference.port, 1)
            assert wrk.requests > 0 and wrk.errors == "", (reference, wrk)
        reference_ports = [reference.port for reference in references.values()]
    assert not any(listens(port) for port in reference_ports)


def test_each_round_reverses_the_order_of_the_targets() -> None:
    """Neither side of a pair always runs first: round 2 measures the targets in reverse."""
    targets = [Target(name, 0, None) for name in ("direct", "nginx", "nginx_hand", "haproxy", "haproxy_hand")]
    first, second, third = ([target.name for target in round_order(targets, index)] for index in range(3))
    assert first == ["direct", "nginx", "nginx_hand", "haproxy", "haproxy_hand"]
    assert second == list(reversed(first)) and third == first


def test_wrk_report_parsed() -> None:
    report = """Running 10s test @ http://127.0.0.1:8080/
  Latency Distribution
     50%  635.91us
     75%  712.00us
     99%    1.38s
  829887 requests in 10.10s, 96.81MB read
  Socket errors: connect 0, read 3, write 0, timeout 0
  Non-2xx or 3xx responses: 12
Requests/sec:  82155.81
"""
    wrk = parse_wrk(report)
    assert (wrk.requests_per_s, wrk.requests) == (82155.81, 829887)
    assert (wrk.p50_ms, wrk.p99_ms) == (pytest.approx(0.63591), 1380.0)
    assert wrk.errors == "socket errors: connect 0, read 3, write 0, timeout 0; 12 non-2xx/3xx"
