"""Smoke test of `benchmarks/load_balancers.py`'s own parts on real tools: the static nginx
backends, wrk's report parsed, and the paced client (new connections and keep-alive) counting
no failure against a backend that does not reload."""

from __future__ import annotations

import argparse
import shutil
import socket

import pytest
import trio

from benchmarks.load_balancers import control_load, parse_wrk, run_wrk, static_backends

pytestmark = pytest.mark.skipif(not (shutil.which("wrk") and shutil.which("nginx")), reason="needs wrk and nginx")


def test_static_backends_measured_and_stopped() -> None:
    with static_backends(2) as ports:
        wrk = trio.run(run_wrk, ports[0], 1)
        args = argparse.Namespace(rate=50.0, load_seconds=1.0, keepalive_clients=2)
        load = trio.run(control_load, ports[1], args)
    assert wrk.requests_per_s > 0 and wrk.p50_ms <= wrk.p99_ms
    assert load.new_connections.sent == 50 and not load.new_connections.failed
    assert load.keep_alive.sent == 20 and not load.keep_alive.failed and not load.keep_alive.retried
    for port in ports:  # stopped: nothing listens any more
        with socket.socket() as probe:
            assert probe.connect_ex(("127.0.0.1", port)) != 0


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
