"""Load balancers through the whole product: the API, the control plane, the agent link, and the
real nginx and HAProxy a node's agent runs.

Three backend HTTP servers on loopback answer with their own name (``/slow`` holds its answer
until the test releases it). Each test works in an org of its own (so the summary strip counts
only its load balancers) with a node of its own: a full server whose agent is a real process
(`AgentProcess`) with a loopback port map, so tests never share a port. A node is stopped
gracefully at the end of its test, and nothing it started (nginx, HAProxy) may be left running.
"""

from __future__ import annotations

import ssl
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from textual.pilot import Pilot
from textual.widgets import Static

from agent.load_balancers.haproxy import parse_show_servers_state, parse_show_stat
from api_client import Client
from contract.job_kinds.lb import Engine
from fleetdeck.launcher import free_port
from tests.conftest import AgentProcess, Stack
from tests.helpers import wait_for, wait_until
from tests.helpers.http_backends import Backend, start_backends, stop_backends
from tests.helpers.load_balancers import APPLY_TIMEOUT_S, LinkedNode, Org, haproxy_says, https_get
from tests.helpers.pebble import pebble_installed, run_pebble
from tests.helpers.tui import open_screen, pick, run
from tui.app import FleetdeckApp
from tui.connection import Connection
from tui.load_balancers.tables import LbTable, PoolTable
from tui.widgets.dialogs import ConfirmDialog

ENGINES = list(get_args(Engine))
# --- the backends, an org, a node ------------------------------------------------------------------


@pytest.fixture(scope="module")
def backends() -> Iterator[list[Backend]]:
    started = start_backends("alpha", "beta", "gamma")
    yield started
    stop_backends(started)


@pytest.fixture(autouse=True)
def backends_serving(backends: list[Backend]) -> Iterator[None]:
    """Every test starts with the three backends up and their slow answers held."""
    for backend in backends:
        backend.release.clear()
        if backend.server is None:
            backend.start()
    yield
    for backend in backends:
        backend.release.set()


@pytest.fixture
def org(stack: Stack) -> Org:
    token = stack.new_owner("e2e")
    with stack.http(token) as http:
        created = http.post("/v1/servers", json={"name": "apps", "kind": "lite", "address": "127.0.0.1"})
    assert created.status_code == 201, created.text
    return Org(stack, token, created.json()["server"]["id"])


def start_node(org: Org, folder: Path, *extra: str, http_port: int | None = None) -> LinkedNode:
    with org.http() as http:
        created = http.post("/v1/servers", json={"name": f"edge-{uuid.uuid4().hex[:6]}", "kind": "full"})
    assert created.status_code == 201, created.text
    server_id, token = created.json()["server"]["id"], created.json()["agent_token"]
    home, state = folder / "home", folder / "state"
    home.mkdir(parents=True)
    state.mkdir()
    ports = {80: http_port or free_port(), 443: free_port()}
    options = ["--lb-bind", "127.0.0.1", "--lb-port-map", f"80:{ports[80]},443:{ports[443]}", *extra]
    agent = AgentProcess(org.stack, server_id, token, home, state, *options, api_token=org.token)
    return LinkedNode(agent, ports, state / "lb")


def stop_node(node: LinkedNode) -> None:
    """A graceful stop; the nginx and HAProxy it ran stop with it."""
    node.agent.stop()
    assert node.agent.process.returncode == 0, f"the agent exited with {node.agent.process.returncode}"
    assert processes_under(node.lb_root) == [], "the agent left its proxies running"


@pytest.fixture
def node(org: Org, tmp_path: Path) -> Iterator[LinkedNode]:
    started = start_node(org, tmp_path / "node")
    yield started
    stop_node(started)


def processes_under(folder: Path) -> list[str]:
    """The command lines of live processes that name `folder` (an agent's nginx, HAProxy)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            zombie = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            continue
        if str(folder) in cmdline and not zombie:
            found.append(f"{entry.name}: {cmdline}")
    return found


# --- requests through the proxy ---------------------------------------------------------------------


def answers(node: LinkedNode, count: int, path: str = "/") -> Counter[str]:
    """Which backend answered each of `count` requests, each on a new connection."""
    seen: Counter[str] = Counter()
    for _ in range(count):
        answer = httpx.get(node.url(path), timeout=10)
        assert answer.status_code == 200, answer.text
        seen[answer.text] += 1
    return seen


def close_to(actual: int, expected: float) -> bool:
    """Within ±10 % (and one request) of the share the weights give."""
    return abs(actual - expected) <= max(1.0, expected * 0.1)


def by_name(lb: dict[str, Any], backends: list[Backend]) -> dict[str, dict[str, Any]]:
    """The load balancer's backends, by the name of the backend server at their port."""
    names = {b.port: b.name for b in backends}
    return {names[b["port"]]: b for b in lb["backends"]}


class SlowRequest:
    """A `/slow` request through the proxy in a thread: it ends once its backend is released."""

    def __init__(self, node: LinkedNode) -> None:
        self.answer: httpx.Response | None = None
        self.error: Exception | None = None
        self._thread = threading.Thread(target=self._run, args=(node.url("/slow"),), daemon=True)
        self._thread.start()

    def _run(self, url: str) -> None:
        try:
            self.answer = httpx.get(url, timeout=60)
        except Exception as exc:
            self.error = exc

    def result(self) -> httpx.Response:
        self._thread.join(60)
        assert self.error is None, f"the slow request failed: {self.error!r}"
        assert self.answer is not None
        return self.answer


# --- 1. create: active, the algorithm, the summary, health from the node ---------------------------


@pytest.mark.parametrize("engine", ENGINES)
def test_a_new_load_balancer_serves_by_its_algorithm_and_reports_health(
    org: Org, node: LinkedNode, backends: list[Backend], engine: str
) -> None:
    created = org.create_lb(node, engine, backends)
    assert created["state"] == "pending_apply" and created["applied_revision"] is None
    lb = org.wait_applied(created["id"])
    assert lb["applied_revision"] == lb["revision"] == 1 and lb["state_error"] is None
    pool = by_name(lb, backends)
    org.patch_backend(lb["id"], pool["gamma"]["id"], weight=2)
    org.wait_applied(lb["id"])

    # Round robin by weight: 1, 1, 2.
    seen = answers(node, 80)
    assert close_to(seen["alpha"], 20) and close_to(seen["beta"], 20) and close_to(seen["gamma"], 40), seen

    # Health comes from the node's lb.watch: every backend healthy, with a check time.
    def healthy() -> bool:
        return all(b["health"] == "healthy" and b["last_check_at"] for b in org.lb(lb["id"])["backends"])

    wait_until(healthy, timeout=30)
    with org.http() as http:
        listing = http.get("/v1/load-balancers").json()
    assert [x["id"] for x in listing["load_balancers"]] == [lb["id"]]
    assert listing["summary"] == {"total": 1, "applied": 1, "healthy_backends": 3, "total_backends": 3}

    if engine == "nginx":
        assert all(b["stats"] is None for b in org.lb(lb["id"])["backends"])  # never invented
    else:  # HAProxy's real figures, from its stats socket
        before = {b["id"]: b["stats"]["total_requests"] for b in org.lb(lb["id"])["backends"]}
        answers(node, 30)

        def counted() -> bool:
            now = {b["id"]: b["stats"]["total_requests"] for b in org.lb(lb["id"])["backends"]}
            return all(now[i] >= before[i] + 5 for i in before)

        wait_until(counted, timeout=30)

    # ip_hash pins one client to one backend.
    org.patch_lb(lb["id"], algorithm="ip_hash")
    org.wait_applied(lb["id"])
    assert len(answers(node, 20)) == 1


# --- 2. drain, undrain, weights ------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
def test_drain_keeps_the_request_in_flight_and_sends_no_new_ones(
    org: Org, node: LinkedNode, backends: list[Backend], engine: str
) -> None:
    lb = org.wait_applied(org.create_lb(node, engine, backends)["id"])
    pool = by_name(lb, backends)
    beta = backends[1]
    slow = [SlowRequest(node) for _ in range(3)]  # round robin: one held on each backend
    wait_until(lambda: all(b.held == 1 for b in backends), timeout=15)

    org.patch_backend(lb["id"], pool["beta"]["id"], drained=True)
    lb = org.wait_applied(lb["id"])
    assert by_name(lb, backends)["beta"]["health"] == "draining"
    seen = answers(node, 30)
    assert "beta" not in seen and seen["alpha"] + seen["gamma"] == 30
    assert beta.held == 1  # the request in flight to the drained backend is still open
    for backend in backends:
        backend.release.set()
    assert sorted(s.result().text for s in slow) == ["alpha", "beta", "gamma"]

    org.patch_backend(lb["id"], pool["beta"]["id"], drained=False)
    lb = org.wait_applied(lb["id"])
    assert "beta" in answers(node, 30)
    wait_until(lambda: by_name(org.lb(lb["id"]), backends)["beta"]["health"] == "healthy", timeout=30)

    org.patch_backend(lb["id"], pool["alpha"]["id"], weight=4)
    org.wait_applied(lb["id"])
    seen = answers(node, 60)  # 4, 1, 1
    assert close_to(seen["alpha"], 40) and close_to(seen["beta"], 10) and close_to(seen["gamma"], 10), seen


# --- 3. a backend dies and comes back ---------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
def test_a_dead_backend_degrades_the_load_balancer_until_it_is_back(
    org: Org, node: LinkedNode, backends: list[Backend], engine: str
) -> None:
    lb = org.wait_applied(org.create_lb(node, engine, backends)["id"])
    gamma = backends[2]
    wait_until(lambda: all(b["health"] == "healthy" for b in org.lb(lb["id"])["backends"]), timeout=30)

    gamma.stop()
    wait_until(lambda: org.lb(lb["id"])["state"] == "degraded", timeout=30)
    now = org.lb(lb["id"])
    assert by_name(now, backends)["gamma"]["health"] == "unhealthy"
    assert f"127.0.0.1:{gamma.port}" in now["state_error"]
    assert "gamma" not in answers(node, 20)  # out of rotation, and no request fails

    gamma.start()
    wait_until(lambda: org.lb(lb["id"])["state"] == "active", timeout=30)
    now = org.lb(lb["id"])
    assert by_name(now, backends)["gamma"]["health"] == "healthy" and now["state_error"] is None
    wait_until(lambda: "gamma" in answers(node, 6), timeout=15)


# --- 4. the node offline ------------------------------------------------------------------------------


def test_an_offline_node_applies_only_the_newest_revision_when_it_is_back(
    org: Org, node: LinkedNode, backends: list[Backend]
) -> None:
    lb = org.wait_applied(org.create_lb(node, "nginx", backends)["id"])
    pool = by_name(lb, backends)
    node.agent.kill()
    org.patch_backend(lb["id"], pool["gamma"]["id"], drained=True)  # r1 = 2
    org.patch_backend(lb["id"], pool["beta"]["id"], drained=True)  # r2 = 3
    now = org.lb(lb["id"])
    assert now["state"] == "pending_apply" and now["revision"] == 3 and now["applied_revision"] == 1
    assert answers(node, 9) == Counter(alpha=3, beta=3, gamma=3)  # the proxy serves on, revision 1

    node.agent.restart()
    lb = org.wait_applied(lb["id"])
    assert lb["applied_revision"] == 3
    _, r1, r2 = org.apply_jobs(node, lb["id"])
    assert (r1["args"]["revision"], r1["status"], r1["started_at"]) == (2, "cancelled", None)
    assert (r2["args"]["revision"], r2["status"]) == (3, "succeeded")
    assert answers(node, 10) == Counter(alpha=10)  # revision 3: beta and gamma drained


# --- 5. delete ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
def test_delete_removes_the_endpoint_and_leaves_the_backends_alone(
    org: Org, node: LinkedNode, backends: list[Backend], engine: str
) -> None:
    lb = org.wait_applied(org.create_lb(node, engine, backends)["id"])
    assert answers(node, 3)
    with org.http() as http:
        assert http.delete(f"/v1/load-balancers/{lb['id']}").status_code == 204
        assert http.get(f"/v1/load-balancers/{lb['id']}").status_code == 404
        jobs = http.get(f"/v1/servers/{node.server_id}/jobs").json()["jobs"]
        [remove] = [j for j in jobs if j["kind"] == "lb.remove"]

        def ended() -> bool:
            return http.get(f"/v1/jobs/{remove['id']}").json()["status"] not in ("queued", "running")

        wait_until(ended, timeout=30)
        assert http.get(f"/v1/jobs/{remove['id']}").json()["status"] == "succeeded"
    with pytest.raises(httpx.ConnectError):
        httpx.get(node.url(), timeout=5)
    for backend in backends:
        assert httpx.get(f"http://127.0.0.1:{backend.port}/", timeout=5).text == backend.name


# --- 6. a broken render -------------------------------------------------------------------------------

# Added at the end of the file: in nginx's http block, in HAProxy's last section.
INVALID = {"nginx": "fleetdeck_no_such_directive on;", "haproxy": "    fleetdeck_no_such_directive on"}


@pytest.mark.parametrize("engine", ENGINES)
def test_a_broken_render_is_degraded_with_the_validators_message_and_the_old_config_serves(
    org: Org, backends: list[Backend], tmp_path: Path, engine: str
) -> None:
    node = start_node(org, tmp_path / "node", "--lb-test-hook")
    try:
        lb = org.wait_applied(org.create_lb(node, engine, backends)["id"])
        pool = by_name(lb, backends)
        hook = node.lb_root / f"test-hook-{engine}.conf"
        hook.write_text(INVALID[engine] + "\n")
        org.patch_backend(lb["id"], pool["alpha"]["id"], drained=True)
        wait_until(lambda: org.lb(lb["id"])["state"] == "degraded", timeout=APPLY_TIMEOUT_S)
        now = org.lb(lb["id"])
        assert now["applied_revision"] == 1 and now["revision"] == 2
        assert "fleetdeck_no_such_directive" in now["state_error"], now["state_error"]
        assert "alpha" in answers(node, 6)  # revision 1 still serves: alpha is not drained there

        hook.unlink()
        with org.http() as http:
            assert http.post(f"/v1/load-balancers/{lb['id']}/apply").status_code == 202
        now = org.wait_applied(lb["id"])
        assert now["applied_revision"] == 2
        assert "alpha" not in answers(node, 6)
    finally:
        stop_node(node)


# --- 7. TLS with a certificate from pebble ------------------------------------------------------------


@pytest.mark.skipif(not pebble_installed(), reason="pebble is not installed (scripts/test installs it)")
@pytest.mark.parametrize("engine", ENGINES)
def test_tls_serves_a_certificate_from_the_acme_ca_for_the_hostname(
    org: Org, backends: list[Backend], tmp_path: Path, engine: str
) -> None:
    hostname = f"shop-{engine}.fleetdeck.test"
    (tmp_path / "pebble").mkdir()
    with run_pebble(tmp_path / "pebble") as pebble:
        acme = ["--acme-directory", pebble.directory_url, "--acme-ca-bundle", str(pebble.ca_bundle)]
        node = start_node(org, tmp_path / "node", *acme, http_port=pebble.http_port)
        try:
            created = org.create_lb(node, engine, backends, port=443, hostname=hostname)
            lb = org.wait_applied(created["id"])
            assert lb["tls"] is True and lb["state_error"] is None
            root = pebble.root().public_bytes(serialization.Encoding.PEM).decode()
            context = ssl.create_default_context(cadata=root)
            seen = Counter(https_get(node.ports[443], hostname, context) for _ in range(6))
            assert seen == Counter(alpha=2, beta=2, gamma=2)  # the backends get plain HTTP
            # Port 80 sends clients to https.
            redirect = httpx.get(node.url("/x"), headers={"Host": hostname}, timeout=10)
            assert redirect.status_code in (301, 302)
            assert redirect.headers["location"].startswith(f"https://{hostname}")
        finally:
            stop_node(node)
    assert processes_under(tmp_path / "pebble") == [], "pebble left running"


# --- 8. the TUI's pool keys, seen on the real proxy ---------------------------------------------------


def test_the_pool_keys_drain_and_weigh_a_backend_on_the_real_proxy(
    org: Org, node: LinkedNode, backends: list[Backend]
) -> None:
    lb = org.wait_applied(org.create_lb(node, "haproxy", backends)["id"])
    pool = by_name(lb, backends)
    wait_until(lambda: all(b["health"] == "healthy" for b in org.lb(lb["id"])["backends"]), timeout=30)
    connection = Connection(org.stack.base_url, org.token, "test stack")
    app = FleetdeckApp(connection, theme="fleetdeck-dark", client=Client(org.stack.base_url, token=org.token))

    async def scenario(pilot: Pilot[Any]) -> None:
        screen = await open_screen(pilot)
        await pick(pilot, screen, lb["id"], pool["beta"]["id"])
        await pilot.press("d")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmDialog))
        await pilot.press("y")
        await wait_for(pilot, lambda: applied_with(org, lb["id"], "beta", backends, drained=True), 60)
        await wait_for(pilot, lambda: app.screen is screen)

        await pick(pilot, screen, lb["id"], pool["alpha"]["id"])
        await pilot.press("plus", "plus")
        await wait_for(pilot, lambda: applied_with(org, lb["id"], "alpha", backends, weight=3), 60)

    run(app, scenario)
    seen = answers(node, 40)  # beta drained; alpha 3, gamma 1
    assert "beta" not in seen and close_to(seen["alpha"], 30) and close_to(seen["gamma"], 10), seen


def test_hatop_on_the_real_haproxy_drain_reads_drain_and_a_weight_set_behind_its_back_is_drift_until_a(
    org: Org, node: LinkedNode, backends: list[Backend]
) -> None:
    """Point 10 of issue 25, through the TUI: a drain set with `d` reads DRAIN on HAProxy's own
    stats socket; a weight set on that socket behind the product's back shows `≠` and the drift
    line; `a` puts the definition back. The screen shows the port the node really listens on."""
    lb = org.wait_applied(org.create_lb(node, "haproxy", backends)["id"])
    pool = by_name(lb, backends)
    wait_until(lambda: all(b["health"] == "healthy" for b in org.lb(lb["id"])["backends"]), timeout=30)
    proxy = f"fleetdeck_lb_{lb['id']}"
    connection = Connection(org.stack.base_url, org.token, "test stack")
    app = FleetdeckApp(connection, theme="fleetdeck-dark", client=Client(org.stack.base_url, token=org.token))

    def socket_status(backend_id: str) -> str:
        rows = parse_show_stat(haproxy_says(node.lb_root, "show stat"))
        return next(r["status"] for r in rows if r["pxname"] == proxy and r["svname"] == backend_id)

    async def scenario(pilot: Pilot[Any]) -> None:
        screen = await open_screen(pilot)
        await pick(pilot, screen, lb["id"], pool["beta"]["id"])
        table = screen.query_one(LbTable)
        await wait_for(pilot, lambda: str(table.get_cell(lb["id"], "port")) == str(node.ports[80]))
        await pilot.press("d")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmDialog))
        await pilot.press("y")
        await wait_for(pilot, lambda: applied_with(org, lb["id"], "beta", backends, drained=True), 60)
        assert socket_status(pool["beta"]["id"]) == "DRAIN"  # not UP with weight 0
        cells = screen.query_one(PoolTable)
        await wait_for(pilot, lambda: str(cells.get_cell(pool["beta"]["id"], "status")) == "DRAIN")

        alpha = pool["alpha"]["id"]
        assert haproxy_says(node.lb_root, f"set weight {proxy}/{alpha} 9").strip() == ""
        await wait_for(pilot, lambda: str(cells.get_cell(alpha, "weight")) == "9≠1", 30)
        status_line = str(screen.query_one("#lb-status", Static).render())
        assert "≠ drift apps:" in status_line and "weight 9 on the node, 1 defined" in status_line
        await pilot.press("a")
        await wait_for(pilot, lambda: str(cells.get_cell(alpha, "weight")) == "1", 60)
        assert "drift" not in str(screen.query_one("#lb-status", Static).render())

    run(app, scenario)
    states = parse_show_servers_state(haproxy_says(node.lb_root, f"show servers state {proxy}"))
    assert states[pool["alpha"]["id"]].weight == 1 and states[pool["beta"]["id"]].drain
    seen = answers(node, 20)
    assert "beta" not in seen and close_to(seen["alpha"], 10) and close_to(seen["gamma"], 10), seen


def applied_with(org: Org, lb_id: str, name: str, backends: list[Backend], **fields: Any) -> bool:
    """The load balancer applied (active) with its backend `name` as `fields` say."""
    lb = org.lb(lb_id)
    backend = by_name(lb, backends)[name]
    return (
        lb["applied_revision"] == lb["revision"]
        and lb["state"] == "active"
        and all(backend[k] == v for k, v in fields.items())
    )
