"""Load balancers on real nginx and HAProxy (the agent-run instances, on loopback with a port map).

Three backend HTTP servers answer with their own name (``/slow`` holds the answer until the test
releases it); each engine gets its own node (its own root and ports), started on the first apply
and stopped at the end of the module. Jobs run the way the agent runs them (`run_kind`)."""

from __future__ import annotations

import json
import socket
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import trio

from agent import __version__
from agent.jobs.toolkit.base import JobContext
from agent.load_balancers.node import LbNode
from agent.load_balancers.settings import LbSettings
from agent.sites import SiteRegistry
from tests.helpers import eventually
from tests.helpers.http_backends import Backend, start_backends, stop_backends
from tests.helpers.load_balancers import REVISIONS, Node

# --- backends ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def backends() -> Iterator[list[Backend]]:
    started = start_backends("alpha", "beta", "gamma")
    yield started
    stop_backends(started)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- a node per engine ---------------------------------------------------------------------


@pytest.fixture(scope="module", params=["nginx", "haproxy"])
def node(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    engine = request.param
    state = tmp_path_factory.mktemp(f"lb-{engine}")
    port = free_port()
    settings = LbSettings(bind="127.0.0.1", port_map={80: port, 443: free_port()}, broken_render_hook=True)
    lb = LbNode(settings, str(state))
    ctx = JobContext(str(state), str(state), SiteRegistry(str(state)), __version__, lb=lb)
    yield Node(engine, lb, ctx, port, lb.root)
    trio.run(lb.stop_engines)


@pytest.fixture
async def monitored(node: Node) -> Any:
    """The node's health monitor running for the test (as in the agent's nursery)."""
    async with trio.open_nursery() as nursery:
        await nursery.start(node.node.monitor.run)
        yield node
        nursery.cancel_scope.cancel()


# --- tests -------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_round_robin_spreads_by_weight(node: Node, backends: list[Backend]) -> None:
    code, outcome, out = await node.apply(**node.spec(backends, weights=[1, 2, 1]))
    assert code == 0, out.err
    assert outcome["state"] == "active" and outcome["error"] is None
    counts = await node.spread(200)
    for backend, share in zip(backends, (50, 100, 50), strict=True):
        assert abs(counts[backend.name] - share) <= share * 0.1, counts


@pytest.mark.anyio
async def test_least_conn_prefers_the_idle_backends(node: Node, backends: list[Backend]) -> None:
    code, _, out = await node.apply(**node.spec(backends, algorithm="least_conn"))
    assert code == 0, out.err
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.to_thread.run_sync, node.get, "/slow")
        await eventually(lambda: any(b.held for b in backends), within=10)
        busy = next(b for b in backends if b.held)
        counts = await node.spread(20)
        for backend in backends:
            backend.release.set()
    assert counts[busy.name] == 0, counts
    assert sum(counts.values()) == 20
    for backend in backends:
        backend.release.clear()


@pytest.mark.anyio
async def test_ip_hash_pins_a_client(node: Node, backends: list[Backend]) -> None:
    code, _, out = await node.apply(**node.spec(backends, algorithm="ip_hash"))
    assert code == 0, out.err
    counts = await node.spread(30)
    assert len(counts) == 1 and sum(counts.values()) == 30, counts


@pytest.mark.anyio
async def test_drained_backend_finishes_its_request_and_gets_no_new_ones(node: Node, backends: list[Backend]) -> None:
    spec = node.spec(backends)
    code, _, out = await node.apply(**spec)
    assert code == 0, out.err
    answers: list[str] = []

    async def slow() -> None:
        answers.append(await trio.to_thread.run_sync(node.get, "/slow"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(slow)
        await eventually(lambda: any(b.held for b in backends), within=10)
        busy = next(b for b in backends if b.held)
        code, _, out = await node.apply(**node.spec(backends, drained={busy.name}))
        assert code == 0, out.err
        counts = await node.spread(30)
        assert counts[busy.name] == 0, counts
        busy.release.set()
    assert answers == [busy.name]  # the in-flight request completed through the old worker
    busy.release.clear()
    status, report = await node.job("lb.status", {"id": "lb-web", "name": "web", "engine": node.engine})
    assert status == 0
    health = {b["id"]: b["health"] for b in json.loads(report.out[0])["backends"]}
    assert health[busy.name] == "draining"


@pytest.mark.anyio
async def test_a_dead_backend_goes_unhealthy_then_comes_back(monitored: Node, backends: list[Backend]) -> None:
    node = monitored
    code, _, out = await node.apply(**node.spec(backends))
    assert code == 0, out.err
    victim = backends[2]

    def health_of(name: str) -> str | None:
        report = node.node.status("lb-web")
        return next((b.health for b in report.backends if b.id == name), None) if report else None

    await eventually(lambda: health_of(victim.name) == "healthy", within=10)
    victim.stop()
    try:
        await eventually(lambda: health_of(victim.name) == "unhealthy", within=30)
        counts = await node.spread(30)
        assert counts[victim.name] == 0 and sum(counts.values()) == 30, counts
    finally:
        victim.start()  # same port again
    await eventually(lambda: health_of(victim.name) == "healthy", within=30)
    if node.engine == "haproxy":
        report = node.node.status("lb-web")
        assert report is not None and all(b.stats is not None for b in report.backends)
    else:
        report = node.node.status("lb-web")
        assert report is not None and all(b.stats is None for b in report.backends)
    await eventually(lambda: victim.name in Counter(node.get() for _ in range(9)), within=20)


@pytest.mark.anyio
async def test_broken_render_is_degraded_and_the_old_configuration_serves(node: Node, backends: list[Backend]) -> None:
    code, _, out = await node.apply(**node.spec(backends[:1]))
    assert code == 0, out.err
    hook = node.root / f"test-hook-{node.engine}.conf"
    hook.write_text("bogus_directive_for_the_test on;\n")
    try:
        code, outcome, out = await node.apply(**node.spec(backends))
    finally:
        hook.unlink()
    assert code == 3
    assert outcome["state"] == "degraded" and "bogus_directive_for_the_test" in outcome["error"]
    counts = await node.spread(6)
    assert counts == Counter({backends[0].name: 6})  # the previous configuration, one backend


@pytest.mark.anyio
async def test_a_stale_revision_changes_nothing(node: Node, backends: list[Backend]) -> None:
    revision = next(REVISIONS)
    code, _, _ = await node.apply(revision=revision, **node.spec(backends[:2]))
    assert code == 0
    code, outcome, _ = await node.apply(revision=revision - 1, **node.spec(backends))
    assert code == 4
    assert outcome["revision"] == revision
    assert backends[2].name not in await node.spread(6)


@pytest.mark.anyio
async def test_two_load_balancers_side_by_side(node: Node, backends: list[Backend]) -> None:
    if node.engine == "nginx":  # one port, told apart by name
        code, _, out = await node.apply(hostname="one.example.com", **node.spec(backends[:1]))
        assert code == 0, out.err
        code, _, out = await node.apply("other", hostname="two.example.com", **node.spec(backends[1:2]))
        assert code == 0, out.err
        assert await node.spread(4, "one.example.com") == Counter({"alpha": 4})
        assert await node.spread(4, "two.example.com") == Counter({"beta": 4})
    else:  # HAProxy would split one port between two frontends: the second is refused in words
        code, outcome, _ = await node.apply("other", **node.spec(backends[1:2]))
        assert code == 3 and "port 80 is already served" in outcome["error"]
    code, out = await node.job("lb.remove", {"id": "lb-other", "name": "other", "engine": node.engine})
    assert code == 0, out.err


@pytest.mark.anyio
async def test_the_most_backends_the_contract_allows_fit_in_nginxs_shared_zone(
    node: Node, backends: list[Backend]
) -> None:
    """256 backends (the contract's limit): 3 that answer and 253 drained ones, on free ports.
    Under nginx the pool sits in a zone the workers share, which `nginx -t` refuses when too small."""
    spec = node.spec(backends)
    spec["backends"] += [
        {"id": f"idle-{n}", "server_id": f"srv-idle-{n}", "address": "127.0.0.1", "port": 1, "drained": True}
        for n in range(256 - len(backends))
    ]
    code, outcome, out = await node.apply(**spec)
    assert code == 0 and outcome["state"] == "active", (outcome, out.err)
    assert await node.spread(30) == Counter({backend.name: 10 for backend in backends})


IN_FLIGHT = 48  # more requests at once than one nginx worker kept backend connections for (32)


@pytest.fixture
def keep_alive_backend() -> Iterator[Backend]:
    started = Backend("kept", keep_alive=True)
    started.start()
    yield started
    stop_backends([started])


async def answer(stream: trio.SocketStream) -> bytes:
    """One answer with a `Content-Length` body, read off a kept-open connection: its body."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += await stream.receive_some(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 "), head
    length = int(next(line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))[15:])
    while len(body) < length:
        body += await stream.receive_some(65536)
    return body


@pytest.mark.anyio
async def test_backend_connections_are_kept_for_every_request_in_flight(
    node: Node, keep_alive_backend: Backend
) -> None:
    """Two waves of IN_FLIGHT requests at once on the same client connections: the second finds
    the backend connections the first opened, idle and kept, and opens none (nginx closed those
    over its `keepalive` after each answer: a new connection for every request past it)."""
    backend = keep_alive_backend
    code, _, out = await node.apply(**node.spec([backend]))
    assert code == 0, out.err
    clients = [await trio.open_tcp_stream("127.0.0.1", node.port) for _ in range(IN_FLIGHT)]
    try:
        opened = []
        for _ in range(2):
            for stream in clients:
                await stream.send_all(b"GET /slow HTTP/1.1\r\nHost: lb\r\n\r\n")
            await eventually(lambda: backend.held == IN_FLIGHT, within=20)
            backend.release.set()
            assert [await answer(stream) for stream in clients] == [b"kept"] * IN_FLIGHT
            backend.release.clear()
            opened.append(len(backend.slow_connections))
    finally:
        for stream in clients:
            await stream.aclose()
    assert opened[0] <= IN_FLIGHT and opened[1] == opened[0], opened


@pytest.mark.anyio
async def test_remove_stops_serving_and_is_idempotent(node: Node, backends: list[Backend]) -> None:
    args = {"id": "lb-web", "name": "web", "engine": node.engine}
    code, out = await node.job("lb.remove", args)
    assert code == 0, out.err
    assert json.loads(out.out[0]) == {"id": "lb-web", "removed": True}
    with pytest.raises(httpx.ConnectError):
        node.get()
    code, out = await node.job("lb.remove", args)
    assert code == 0 and "already removed" in out.err[0]
    assert json.loads(out.out[0]) == {"id": "lb-web", "removed": False}
