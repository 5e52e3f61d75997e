"""hatop's level on a real HAProxy and nginx (agent-run, on loopback): what the node reports of each
backend beyond its health, drain and weight through HAProxy's runtime API, and drift.

Every HAProxy figure is asserted against what any HAProxy client reads on the same stats socket
(`show stat`, `show servers state`, `show proc`), not against the agent's own idea of it."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import trio

from agent import __version__
from agent.jobs.toolkit.base import JobContext
from agent.load_balancers.haproxy import (
    Haproxy,
    master_command,
    parse_show_proc,
    parse_show_servers_state,
    parse_show_stat,
)
from agent.load_balancers.node import LbNode
from agent.load_balancers.settings import LbSettings
from agent.sites import SiteRegistry
from contract.job_kinds.lb import BackendReport
from tests.helpers import eventually
from tests.helpers.http_backends import Backend, start_backends, stop_backends
from tests.helpers.load_balancers import Node

PROXY = "fleetdeck_lb_lb-web"


@pytest.fixture(scope="module")
def backends() -> Iterator[list[Backend]]:
    started = start_backends("alpha", "beta")
    yield started
    stop_backends(started)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_node(engine: str, tmp_path_factory: pytest.TempPathFactory) -> Node:
    state = tmp_path_factory.mktemp(f"lb-runtime-{engine}")
    port = free_port()
    lb = LbNode(LbSettings(bind="127.0.0.1", port_map={80: port, 443: free_port()}), str(state))
    ctx = JobContext(str(state), str(state), SiteRegistry(str(state)), __version__, lb=lb)
    return Node(engine, lb, ctx, port, lb.root)


@pytest.fixture(scope="module")
def haproxy_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    node = make_node("haproxy", tmp_path_factory)
    yield node
    trio.run(node.node.stop_engines)


@pytest.fixture(scope="module")
def nginx_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    node = make_node("nginx", tmp_path_factory)
    yield node
    trio.run(node.node.stop_engines)


@pytest.fixture
async def haproxy(haproxy_node: Node) -> AsyncIterator[Node]:
    """The HAProxy node with its health monitor running (as in the agent's nursery)."""
    async with trio.open_nursery() as nursery:
        await nursery.start(haproxy_node.node.monitor.run)
        yield haproxy_node
        nursery.cancel_scope.cancel()


@pytest.fixture
async def nginx(nginx_node: Node) -> AsyncIterator[Node]:
    async with trio.open_nursery() as nursery:
        await nursery.start(nginx_node.node.monitor.run)
        yield nginx_node
        nursery.cancel_scope.cancel()


# --- what any HAProxy client reads ---------------------------------------------------------------


async def socket_says(node: Node, command: str) -> str:
    engine = node.node.engines["haproxy"]
    assert isinstance(engine, Haproxy)
    return await master_command(engine.stats_socket, command)


async def stat_status(node: Node) -> dict[str, str]:
    """`show stat`'s status column of each server of the load balancer."""
    rows = parse_show_stat(await socket_says(node, "show stat"))
    return {row["svname"]: row["status"] for row in rows if row["pxname"] == PROXY and row["svname"] != "BACKEND"}


async def servers_state(node: Node) -> dict[str, tuple[int, int]]:
    """`show servers state`: each server's (user weight, admin state mask)."""
    states = parse_show_servers_state(await socket_says(node, f"show servers state {PROXY}"))
    return {name: (state.weight, state.admin) for name, state in states.items()}


async def workers(node: Node) -> set[int]:
    engine = node.node.engines["haproxy"]
    assert isinstance(engine, Haproxy)
    return set(parse_show_proc(await master_command(engine.master_socket, "show proc")).workers)


def reported(node: Node, backend: str) -> BackendReport | None:
    report = node.node.status("lb-web")
    return next((b for b in report.backends if b.id == backend), None) if report else None


def runtime_of(node: Node, backend: str) -> Any:
    found = reported(node, backend)
    return found.runtime if found is not None else None


def status_of(node: Node, backend: str) -> str | None:
    runtime = runtime_of(node, backend)
    return runtime.status if runtime is not None else None


async def reloaded(node: Node, generation: set[int]) -> None:
    """Wait until the master lists none of `generation`'s workers: a reload took."""
    with trio.fail_after(20):
        while True:
            try:
                now = await workers(node)
            except OSError:
                now = generation  # the master is re-executing itself
            if now and not now & generation:
                return
            await trio.sleep(0.05)


FDRAIN, FMAINT = 0x08, 0x01


# --- HAProxy ----------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_haproxy_drain_and_weight_take_effect_through_the_runtime_api_and_the_file_keeps_them(
    haproxy: Node, backends: list[Backend]
) -> None:
    node = haproxy
    code, _, out = await node.apply(**node.spec(backends))
    assert code == 0, out.err
    await eventually(lambda: status_of(node, "alpha") == "UP", within=20)
    generation = await workers(node)

    code, _, out = await node.apply(**node.spec(backends, weights=[1, 5], drained={"alpha"}))
    assert code == 0, out.err
    # Any HAProxy client sees it: DRAIN (not UP with weight 0), the new weight, and no reload.
    assert (await stat_status(node))["alpha"] == "DRAIN"
    states = await servers_state(node)
    assert states["alpha"][1] & FDRAIN and states["beta"] == (5, 0)
    assert await workers(node) == generation
    conf = node.node.engines["haproxy"].path("lb-web").read_text()
    assert "server alpha 127.0.0.1:" in conf and " weight 0 check" in conf and " weight 5 check" in conf
    assert (await node.spread(10)) == {"beta": 10}
    await eventually(lambda: status_of(node, "alpha") == "DRAIN", within=10)
    assert reported(node, "alpha").health == "draining"  # type: ignore[union-attr]

    # A reload made outside the agent keeps the effect from the file (weight 0: no new requests),
    # though HAProxy's configuration has no drain state: the report says so as drift.
    engine = node.node.engines["haproxy"]
    assert isinstance(engine, Haproxy)
    await master_command(engine.master_socket, "reload")
    await reloaded(node, generation)
    assert (await node.spread(10)) == {"beta": 10}
    await eventually(lambda: "not drained on the node" in (runtime_of(node, "alpha").drift or ""), within=20)

    # Undrain: back at once, at its weight, READY.
    code, _, out = await node.apply(**node.spec(backends, weights=[1, 5]))
    assert code == 0, out.err
    assert (await stat_status(node))["alpha"] == "UP"
    assert (await servers_state(node))["alpha"] == (1, 0)
    await eventually(lambda: runtime_of(node, "alpha").drift is None, within=20)


@pytest.mark.anyio
async def test_haproxy_a_weight_set_behind_the_agents_back_is_drift_until_the_next_apply(
    haproxy: Node, backends: list[Backend]
) -> None:
    node = haproxy
    spec = node.spec(backends, weights=[2, 1])
    code, _, out = await node.apply(**spec)
    assert code == 0, out.err
    await eventually(lambda: runtime_of(node, "alpha") is not None and runtime_of(node, "alpha").weight == 2, within=20)
    assert runtime_of(node, "alpha").drift is None

    assert (await socket_says(node, f"set weight {PROXY}/alpha 7")).strip() == ""
    assert (await socket_says(node, f"set server {PROXY}/beta state maint")).strip() == ""
    await eventually(lambda: runtime_of(node, "alpha").drift == "weight 7 on the node, 2 defined", within=10)
    await eventually(lambda: status_of(node, "beta") == "MAINT", within=10)
    assert runtime_of(node, "beta").drift == "in maintenance on the node"
    assert runtime_of(node, "alpha").weight == 7

    # The same revision applied again (the screen's `a`) puts the definition back.
    code, _, out = await node.apply(revision=node.node.served["lb-web"].revision, **spec)
    assert code == 0, out.err
    assert await servers_state(node) == {"alpha": (2, 0), "beta": (1, 0)}
    await eventually(lambda: runtime_of(node, "alpha").drift is None and runtime_of(node, "beta").drift is None, 10)
    await eventually(lambda: status_of(node, "beta") == "UP", within=20)


@pytest.mark.anyio
async def test_haproxy_reports_hatops_figures_from_its_stats_socket(haproxy: Node, backends: list[Backend]) -> None:
    node = haproxy
    dead = free_port()  # nothing listens there
    spec = node.spec(backends)
    spec["backends"].append({"id": "gone", "server_id": "srv-gone", "address": "127.0.0.1", "port": dead})
    spec["health_check"] = {"path": "/", "interval_s": 2, "healthy_threshold": 1, "unhealthy_threshold": 1}
    code, _, out = await node.apply(**spec)
    assert code == 0, out.err
    await node.spread(20)
    await eventually(lambda: status_of(node, "gone") == "DOWN", within=30)
    gone = runtime_of(node, "gone")
    assert gone.check_failures >= 1 and gone.down_count >= 1 and gone.changed_at is not None

    def traffic_shown() -> bool:
        found = reported(node, "alpha")
        return found is not None and found.stats is not None and (found.stats.bytes_in or 0) > 0

    await eventually(traffic_shown, within=10)
    rows = {r["svname"]: r for r in parse_show_stat(await socket_says(node, "show stat")) if r["pxname"] == PROXY}
    stats = reported(node, "alpha").stats  # type: ignore[union-attr]
    assert stats is not None and stats.max_sessions is not None and stats.max_sessions >= 1
    assert 0 < stats.bytes_in <= int(rows["alpha"]["bin"]) and 0 < stats.bytes_out <= int(rows["alpha"]["bout"])  # type: ignore[operator]
    assert stats.connection_errors == 0 and stats.response_errors == 0
    report = node.node.status("lb-web")
    assert report is not None and report.listen_port == node.port


# --- nginx: only what it knows ------------------------------------------------------------------------


@pytest.mark.anyio
async def test_nginx_reports_the_probers_figures_and_no_invented_ones(nginx: Node, backends: list[Backend]) -> None:
    node = nginx
    dead = free_port()
    spec = node.spec(backends, drained={"beta"})
    spec["backends"].append({"id": "gone", "server_id": "srv-gone", "address": "127.0.0.1", "port": dead})
    spec["health_check"] = {"path": "/", "interval_s": 2, "healthy_threshold": 1, "unhealthy_threshold": 1}
    code, _, out = await node.apply(**spec)
    assert code == 0, out.err
    await eventually(lambda: status_of(node, "gone") == "DOWN", within=30)
    await eventually(lambda: status_of(node, "alpha") == "UP", within=30)
    gone, alpha, beta = (runtime_of(node, name) for name in ("gone", "alpha", "beta"))
    assert gone.check_failures >= 1 and gone.down_count == 1 and gone.changed_at is not None
    assert alpha.check_failures == 0 and alpha.down_count == 0
    assert beta.status == "DRAIN"
    for runtime in (gone, alpha, beta):
        assert runtime.weight is None and runtime.drift is None  # nginx has no runtime state to ask
    assert all(b.stats is None for b in node.node.status("lb-web").backends)  # type: ignore[union-attr]
    assert node.node.status("lb-web").listen_port == node.port  # type: ignore[union-attr]
