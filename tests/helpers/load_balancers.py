"""Load balancers in tests, at three levels: a `Node` of the agent's own (`LbNode` with a job
context, jobs run as the agent runs them), an org of its own for the TUI whose node has no agent
(`AgentlessOrg`, `new_org`: every change stays `pending_apply`), and an org for the whole product
(`Org`) whose node is a full server with a real agent process (`LinkedNode`).
"""

from __future__ import annotations

import json
import socket
import ssl
import uuid
from collections import Counter
from dataclasses import dataclass
from itertools import count
from pathlib import Path
from typing import Any

import httpx
import trio

from agent.jobs.kinds import all_kinds
from agent.jobs.toolkit.base import JobContext, run_kind
from agent.jobs.toolkit.output import STDERR, STDOUT, Output
from agent.load_balancers.haproxy import HAPROXY_MAX_SOCKET_PATH
from agent.load_balancers.node import LbNode
from agent.unix_sockets import fits, runtime_path
from api_client import Client
from contract.job_kinds import lookup
from contract.load_balancers import Backend as LbBackend
from contract.load_balancers import LoadBalancer
from tests.helpers import wait_until
from tests.helpers.http_backends import Backend
from tests.helpers.stacks import AgentProcess, Stack
from tui.app import FleetdeckApp
from tui.connection import Connection

KINDS = all_kinds()
REVISIONS = count(1)
APPLY_TIMEOUT_S = 60.0
# Quick checks: a killed backend is out after one failed check, back after one good one.
QUICK_CHECKS = {"path": "/", "interval_s": 2, "healthy_threshold": 1, "unhealthy_threshold": 1}


# --- a node of the agent's own ----------------------------------------------------------------------


class Collected(Output):
    def __init__(self) -> None:
        self.out: list[str] = []
        self.err: list[str] = []

    def lines(self, stream: str, texts: list[str]) -> None:
        (self.out if stream == STDOUT else self.err).extend(texts)
        assert stream in (STDOUT, STDERR)


@dataclass
class Node:
    engine: str
    node: LbNode
    ctx: JobContext
    port: int
    root: Path

    async def job(self, kind: str, args: dict[str, Any]) -> tuple[int, Collected]:
        out = Collected()
        code = await run_kind(KINDS, kind, lookup(kind).build(args).argv, self.ctx, out)  # type: ignore[union-attr]
        return code, out

    async def apply(self, name: str = "web", **spec: Any) -> tuple[int, dict[str, Any], Collected]:
        args = {"id": f"lb-{name}", "name": name, "port": 80, "engine": self.engine, **spec}
        args.setdefault("revision", next(REVISIONS))
        code, out = await self.job("lb.apply", args)
        assert len(out.out) == 1, (out.out, out.err)
        return code, json.loads(out.out[0]), out

    def spec(self, backends: list[Backend], **extra: Any) -> dict[str, Any]:
        weights = extra.pop("weights", [1] * len(backends))
        drained = extra.pop("drained", ())
        return {
            "backends": [
                {"id": b.name, "server_id": f"srv-{b.name}", "address": "127.0.0.1", "port": b.port,
                 "weight": w, "drained": b.name in drained}
                for b, w in zip(backends, weights, strict=True)
            ],
            "health_check": {"path": "/", "interval_s": 2, "healthy_threshold": 2, "unhealthy_threshold": 2},
            **extra,
        }  # fmt: skip

    def get(self, path: str = "/", host: str | None = None) -> str:
        headers = {"Host": host} if host else {}
        response = httpx.get(f"http://127.0.0.1:{self.port}{path}", headers=headers, timeout=30)
        assert response.status_code == 200, response.text
        return response.text

    async def spread(self, n: int, host: str | None = None) -> Counter[str]:
        return Counter([await trio.to_thread.run_sync(self.get, "/", host) for _ in range(n)])


def https_get(port: int, hostname: str, context: ssl.SSLContext) -> str:
    """GET / over TLS at 127.0.0.1:`port` with SNI `hostname`; the certificate must verify for it."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    with raw, context.wrap_socket(raw, server_hostname=hostname) as tls:
        tls.sendall(f"GET / HTTP/1.1\r\nHost: {hostname}\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := tls.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.split(b" ", 2)[1] == b"200", head
    return body.decode()


# --- an org for the TUI: a node without agent, lite servers as backends --------------------------


@dataclass
class AgentlessOrg:
    """An org of its own: its owner's token, its node (a full server, no agent) and backends."""

    stack: Stack
    token: str
    node: str
    backends: dict[str, str]  # name → server id

    def get(self, path: str) -> Any:
        with self.stack.http(self.token) as http:
            answer = http.get(path)
        assert answer.status_code == 200, answer.text
        return answer.json()

    def post(self, path: str, body: dict[str, Any]) -> Any:
        with self.stack.http(self.token) as http:
            answer = http.post(path, json=body)
        assert answer.status_code in (200, 201, 202), answer.text
        return answer.json()

    def lb(self, lb_id: str) -> LoadBalancer:
        return LoadBalancer.model_validate(self.get(f"/v1/load-balancers/{lb_id}"))

    def lb_gone(self, lb_id: str) -> bool:
        with self.stack.http(self.token) as http:
            return http.get(f"/v1/load-balancers/{lb_id}").status_code == 404

    def backend(self, lb_id: str, backend_id: str) -> LbBackend | None:
        return next((b for b in self.lb(lb_id).backends if b.id == backend_id), None)

    def create_lb(self, name: str, backends: list[str], **fields: Any) -> LoadBalancer:
        body = {
            "name": name,
            "port": 80,
            "node_server_id": self.node,
            "engine": "haproxy",
            "algorithm": "round_robin",
            "backends": [{"server_id": self.backends[b], "port": 8080} for b in backends],
            **fields,
        }
        return LoadBalancer.model_validate(self.post("/v1/load-balancers", body))

    def app(self) -> FleetdeckApp:
        client = Client(self.stack.base_url, token=self.token)
        connection = Connection(self.stack.base_url, self.token, "test stack")
        return FleetdeckApp(connection, theme="fleetdeck-dark", client=client)


def new_org(stack: Stack, name: str | None = None) -> AgentlessOrg:
    name = name or f"lb-{uuid.uuid4().hex[:8]}"
    stack.admin("create-org", name, "--plan", "max")
    email = f"owner@{name}.test"
    stack.admin("create-user", email, "--org", name, "--role", "owner", "--password", "pw-123456")
    token = stack.login(email, "pw-123456")
    ids: dict[str, str] = {}
    with stack.http(token) as http:
        for server, kind, address in [("edge-1", "full", "10.9.0.1")] + [
            (f"app-{n}", "lite", f"10.9.1.{n}") for n in (1, 2, 3)
        ]:
            created = http.post("/v1/servers", json={"name": server, "kind": kind, "address": address})
            assert created.status_code == 201, created.text
            ids[server] = created.json()["server"]["id"]
    node = ids.pop("edge-1")
    return AgentlessOrg(stack=stack, token=token, node=node, backends=ids)


# --- an org for the whole product: a node with its agent process ----------------------------------


@dataclass
class Org:
    stack: Stack
    token: str
    host: str  # a lite server at 127.0.0.1: where the backends run

    def http(self) -> httpx.Client:
        return self.stack.http(self.token)

    def lb(self, lb_id: str) -> dict[str, Any]:
        with self.http() as http:
            answer = http.get(f"/v1/load-balancers/{lb_id}")
        assert answer.status_code == 200, answer.text
        found: dict[str, Any] = answer.json()
        return found

    def create_lb(self, node: LinkedNode, engine: str, backends: list[Backend], **fields: Any) -> dict[str, Any]:
        body = {
            "name": f"web-{uuid.uuid4().hex[:6]}",
            "port": 80,
            "node_server_id": node.server_id,
            "engine": engine,
            "health_check": QUICK_CHECKS,
            "backends": [{"server_id": self.host, "port": b.port} for b in backends],
            **fields,
        }
        with self.http() as http:
            answer = http.post("/v1/load-balancers", json=body)
        assert answer.status_code == 201, answer.text
        created: dict[str, Any] = answer.json()
        return created

    def patch_backend(self, lb_id: str, backend_id: str, **fields: Any) -> None:
        with self.http() as http:
            answer = http.patch(f"/v1/load-balancers/{lb_id}/backends/{backend_id}", json=fields)
        assert answer.status_code == 200, answer.text

    def patch_lb(self, lb_id: str, **fields: Any) -> None:
        with self.http() as http:
            answer = http.patch(f"/v1/load-balancers/{lb_id}", json=fields)
        assert answer.status_code == 200, answer.text

    def wait_applied(self, lb_id: str, state: str = "active") -> dict[str, Any]:
        """The load balancer once its node applied its current revision and it reads `state`."""

        def applied() -> bool:
            lb = self.lb(lb_id)
            return lb["applied_revision"] == lb["revision"] and lb["state"] == state

        wait_until(applied, timeout=APPLY_TIMEOUT_S)
        return self.lb(lb_id)

    def apply_jobs(self, node: LinkedNode, lb_id: str) -> list[dict[str, Any]]:
        """The node's `lb.apply` jobs of this load balancer, oldest first."""
        with self.http() as http:
            jobs = http.get(f"/v1/servers/{node.server_id}/jobs", params={"limit": 500}).json()["jobs"]
        return [j for j in reversed(jobs) if j["kind"] == "lb.apply" and j["args"]["id"] == lb_id]


def haproxy_says(lb_root: Path, command: str) -> str:
    """One command on the stats socket of the agent-run HAProxy under `lb_root`, as any HAProxy
    client (hatop, socat) sends it: its answer."""
    engine_root = lb_root / "haproxy"
    folder = engine_root if fits(engine_root / "master.sock", HAPROXY_MAX_SOCKET_PATH) else runtime_path(engine_root)
    with socket.socket(socket.AF_UNIX) as client:
        client.settimeout(10)
        client.connect(str(folder / "stats.sock"))
        client.sendall(command.encode() + b"\n")
        client.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := client.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode()


@dataclass
class LinkedNode:
    """A full server of the org with its own agent process, serving its load balancers on
    127.0.0.1 at `ports` (80/443 -> the mapped port)."""

    agent: AgentProcess
    ports: dict[int, int]
    lb_root: Path

    @property
    def server_id(self) -> str:
        return self.agent.server_id

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.ports[80]}{path}"
