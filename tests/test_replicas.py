"""Replicas: two `fleetdeck serve` processes on one database with a NATS server as their bus, and
a real agent process linked to replica A; everything is asked of replica B."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from fleetdeck.launcher import start_agent
from tests.helpers import wait_until
from tests.helpers.replicas import NatsServer, Replica, admin, start_nats, start_replica

ENV = {"FLEETDECK_HEARTBEAT_S": "1", "FLEETDECK_JOB_GRACE_S": "5", "FLEETDECK_LOG": "INFO"}
PASSWORD = "replicas-password-1"


@pytest.fixture(scope="session")
def nats() -> Iterator[NatsServer]:
    server = start_nats()
    yield server
    server.stop()


@dataclass
class Fleet:
    a: Replica
    b: Replica
    token: str
    org: str
    db_url: str
    home: Path
    server_id: str


@pytest.fixture(scope="module")
def fleet(nats: NatsServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    folder = tmp_path_factory.mktemp("replicas")
    db_url = f"sqlite:///{folder / 'fleet.db'}"
    admin(db_url, "create-org", "acme", "--plan", "max")
    admin(db_url, "create-user", "owner@acme.test", "--org", "acme", "--role", "owner", "--password", PASSWORD)
    server = admin(db_url, "create-server", "web-1", "--org", "acme")
    replicas = [start_replica(db_url, nats.url, folder / f"replica-{name}.log", ENV) for name in "ab"]
    home = folder / "home"
    home.mkdir()
    agent = None
    try:
        token = httpx.post(
            f"{replicas[1].base_url}/v1/auth/login", json={"email": "owner@acme.test", "password": PASSWORD}
        ).json()["token"]
        with open(folder / "agent.log", "a") as log:
            agent = start_agent(
                replicas[0].base_url, str(server["agent_token"]), home, folder / "agent-state", stderr=log
            )
        yield Fleet(replicas[0], replicas[1], token, "acme", db_url, home, str(server["id"]))
    finally:
        if agent is not None:
            agent.terminate()
            agent.wait(15)
        for replica in replicas:
            replica.stop()


def _online_on(replica: Replica, token: str, server_id: str) -> bool:
    with replica.http(token) as http:
        return bool(http.get(f"/v1/servers/{server_id}").json()["agent"]["online"])


def _linked(fleet: Fleet) -> None:
    wait_until(lambda: _online_on(fleet.a, fleet.token, fleet.server_id), timeout=30)


def test_an_agent_linked_to_a_is_online_on_b(fleet: Fleet) -> None:
    _linked(fleet)
    assert _online_on(fleet.b, fleet.token, fleet.server_id)
    with fleet.b.http(fleet.token) as http:
        listed = {s["id"]: s for s in http.get("/v1/servers").json()["servers"]}
    assert listed[fleet.server_id]["agent"]["online"] is True


def test_files_list_and_read_on_b(fleet: Fleet) -> None:
    _linked(fleet)
    (fleet.home / "hello.txt").write_text("hello from the agent of replica A\n")
    root = {"scope": "root"}
    with fleet.b.http(fleet.token) as http:
        listing = http.get(f"/v1/servers/{fleet.server_id}/fs/list", params={**root, "path": ""})
        assert listing.status_code == 200, listing.text
        assert "hello.txt" in {entry["name"] for entry in listing.json()["entries"]}
        read = http.get(f"/v1/servers/{fleet.server_id}/fs/read", params={**root, "path": "hello.txt"})
        assert read.status_code == 200, read.text
        assert read.json()["content"] == "hello from the agent of replica A\n"
        missing = http.get(f"/v1/servers/{fleet.server_id}/fs/read", params={**root, "path": "nothing-here.txt"})
        assert missing.status_code == 404, missing.text
        assert missing.json()["error"]["code"] == "not_found"


def test_upload_and_download_of_a_few_mb_on_b(fleet: Fleet) -> None:
    _linked(fleet)
    data = os.urandom(5 * 1024 * 1024 + 123)
    params = {"scope": "root", "path": "big.bin"}
    with fleet.b.http(fleet.token) as http:
        put = http.put(f"/v1/servers/{fleet.server_id}/fs/upload", params=params, content=data)
        assert put.status_code == 200, put.text
        assert hashlib.sha256((fleet.home / "big.bin").read_bytes()).digest() == hashlib.sha256(data).digest()
        with http.stream("GET", f"/v1/servers/{fleet.server_id}/fs/download", params=params) as got:
            assert got.status_code == 200
            body = b"".join(got.iter_bytes())
    assert body == data


def test_presence_changes_reach_b_feed_and_a_dead_replica_takes_its_agents_offline(fleet: Fleet) -> None:
    _linked(fleet)
    seen: list[str] = []
    with (
        fleet.b.http(fleet.token) as http,
        http.stream("GET", "/v1/servers/events", timeout=httpx.Timeout(60, read=60)) as events,
    ):
        lines = events.iter_lines()
        assert next(lines).startswith("retry:")
        fleet.a.kill()
        for line in lines:
            if line.startswith("data:") and fleet.server_id in line:
                seen.append(line)
                break
    assert '"online":false' in seen[0]
    assert not _online_on(fleet.b, fleet.token, fleet.server_id)
