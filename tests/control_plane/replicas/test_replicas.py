"""Replicas: two `fleetdeck serve` processes on one database with a NATS server as their bus, and
a real agent process linked to replica A; everything is asked of replica B.

Every test runs on two clusters: replicas on SQLite under uvicorn (`fleetdeck serve`'s default),
and replicas on PostgreSQL (a fresh database on the session's control-plane server) under
hypercorn-trio: both databases and both servers, for one doubling of the module (~40 s)."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import sqlalchemy as sa
import trio
from websockets.sync.client import ClientConnection, connect

from agent.link.call import Call
from agent.link.client import AgentLink, Backoff
from api_client import Event, SSEParser
from contract.link import protocol
from control_plane.bus import Bus
from control_plane.clock import iso
from control_plane.storage.schema import servers
from fleetdeck.launcher import start_agent
from tests.conftest import AgentProcess
from tests.helpers import wait_until
from tests.helpers.control_planes import OwnControlPlane, admin
from tests.helpers.copy_sshd import MISSING, Sshd, copy_sshd
from tests.helpers.http_backends import start_backends, stop_backends
from tests.helpers.link import StalledAgent, unsent_bytes
from tests.helpers.pebble import write_tls_files
from tests.helpers.replicas import NatsServer, start_haproxy, start_nats, start_replica

ENV = {"FLEETDECK_HEARTBEAT_S": "1", "FLEETDECK_JOB_GRACE_S": "5", "FLEETDECK_LOG": "INFO"}
# A cluster's server (FLEETDECK_SERVER), by its database.
SERVERS = {"sqlite": "uvicorn", "postgresql": "hypercorn"}
PASSWORD = "replicas-password-1"


@pytest.fixture(scope="session")
def nats() -> Iterator[NatsServer]:
    server = start_nats()
    yield server
    server.stop()


@pytest.fixture(params=["trio", "asyncio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    backend: str = request.param
    return backend


@pytest.mark.anyio
async def test_the_bus_carries_messages_in_order_under_both_anyio_backends(nats: NatsServer) -> None:
    sender, receiver = Bus(nats.url), Bus(nats.url)
    await sender.connect()
    await receiver.connect()
    try:
        inbox = await receiver.subscribe("fleetdeck.test")
        sent = [os.urandom(n) for n in (0, 1, 64 * 1024, 300 * 1024)] * 50
        for data in sent:
            sender.publish("fleetdeck.test", data)
        received: list[bytes] = []
        with anyio.fail_after(30):
            while len(received) < len(sent):
                received.extend(await inbox.take())
        assert received == sent
    finally:
        await sender.close()
        await receiver.close()


@dataclass
class Fleet:
    a: OwnControlPlane
    b: OwnControlPlane
    token: str
    org: str
    db_url: str
    home: Path
    server_id: str
    agent: AgentProcess  # server web-1's, linked to replica A
    env: dict[str, str]  # of its replicas (and of those a test adds)


@pytest.fixture(scope="module", params=list(SERVERS))
def fleet(
    request: pytest.FixtureRequest, nats: NatsServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Fleet]:
    folder = tmp_path_factory.mktemp(f"replicas-{request.param}")
    if request.param == "postgresql":
        db_url: str = request.getfixturevalue("control_plane_postgres").create("replicas")
    else:
        db_url = f"sqlite:///{folder / 'fleet.db'}"
    env = {**ENV, "FLEETDECK_SERVER": SERVERS[request.param]}
    admin(db_url, "create-org", "acme", "--plan", "max")
    admin(db_url, "create-user", "owner@acme.test", "--org", "acme", "--role", "owner", "--password", PASSWORD)
    server = admin(db_url, "create-server", "web-1", "--org", "acme")
    replicas = [start_replica(folder, db_url, nats.url, f"replica-{name}", env) for name in "ab"]
    home = folder / "home"
    home.mkdir()
    agent = None
    try:
        token = httpx.post(
            f"{replicas[1].base_url}/v1/auth/login", json={"email": "owner@acme.test", "password": PASSWORD}
        ).json()["token"]
        server_id, agent_token = str(server["id"]), str(server["agent_token"])
        agent = AgentProcess(replicas[0], server_id, agent_token, home, folder / "agent-state", api_token=token)
        yield Fleet(replicas[0], replicas[1], token, "acme", db_url, home, server_id, agent, env)
    finally:
        if agent is not None:
            agent.stop()
        for replica in replicas:
            replica.stop()


def _online_on(replica: OwnControlPlane, token: str, server_id: str) -> bool:
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


def _agents_online(replica: OwnControlPlane) -> int:
    count: int = httpx.get(f"{replica.base_url}/v1/health").json()["agents_online"]
    return count


def test_health_counts_the_agents_of_every_replica(fleet: Fleet) -> None:
    """The one agent, linked to A, is counted on B too (the fleet's count, not the replica's)."""
    _linked(fleet)
    wait_until(lambda: _agents_online(fleet.a) == _agents_online(fleet.b) == 1, timeout=30)
    health = httpx.get(f"{fleet.b.base_url}/v1/health").json()
    assert (health["status"], health["database"], health["bus"]) == ("ok", "ok", "ok")


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


def test_a_job_created_on_b_runs_on_a_and_its_stream_on_b_ends_with_its_exit_code(fleet: Fleet) -> None:
    _linked(fleet)
    args = {"domain": "absent.example.org", "schedule": "@daily", "command": "/bin/true"}
    with fleet.b.http(fleet.token) as http:
        created = http.post(f"/v1/servers/{fleet.server_id}/jobs", json={"kind": "cron.add", "args": args})
        assert created.status_code == 201, created.text
        job_id = created.json()["id"]
        events = SSEParser().feed(http.get(f"/v1/jobs/{job_id}/stream").content)
        lines = [event for event in events if event.event == "line"]
        assert any("no site absent.example.org" in event.data["text"] for event in lines), events
        assert events[-1].event == "exit" and events[-1].data["exit_code"] == 1
        # Resumed after its last line: only the exit event, nothing twice.
        rest = SSEParser().feed(http.get(f"/v1/jobs/{job_id}/stream", headers={"Last-Event-ID": lines[-1].id}).content)
        assert [event.event for event in rest] == ["exit"]
        assert http.get(f"/v1/jobs/{job_id}").json()["status"] == "failed"


def test_a_cancel_of_a_job_whose_agent_is_too_old_to_cancel_says_so_on_every_replica(fleet: Fleet) -> None:
    """An agent older than job.cancel, linked to A, runs a job made on B: a cancel asked on B (the
    call relayed to A) is refused in the same words as on A, from the agent's own answer."""
    server = admin(fleet.db_url, "create-server", f"old-{uuid.uuid4().hex[:6]}", "--org", "acme")
    server_id = str(server["id"])

    running = trio.Event()

    async def job_run(_call: Call) -> dict[str, Any]:
        running.set()  # the job is `running` by now: it is started before it is sent
        await trio.sleep_forever()  # and runs until the test ends
        raise AssertionError("unreachable")

    async def cancels() -> list[httpx.Response]:
        fast = Backoff(base=0.05, cap=0.2)
        token = str(server["agent_token"])
        link = AgentLink(
            fleet.a.base_url, token, {"job.run": job_run}, version="0.0.1", backoff=fast, auth_backoff=fast
        )
        headers = {"Authorization": f"Bearer {fleet.token}"}
        async with trio.open_nursery() as nursery:
            nursery.start_soon(link.run)
            await trio.to_thread.run_sync(lambda: wait_until(lambda: _online_on(fleet.b, fleet.token, server_id), 30))
            async with (
                httpx.AsyncClient(base_url=fleet.a.base_url, headers=headers, timeout=60) as a,
                httpx.AsyncClient(base_url=fleet.b.base_url, headers=headers, timeout=60) as b,
            ):
                job = {"kind": "cron.add", "args": {"domain": "x.example.org", "schedule": "@daily", "command": "true"}}
                created = await b.post(f"/v1/servers/{server_id}/jobs", json=job)
                with trio.fail_after(30):
                    await running.wait()
                job_id = created.json()["id"]
                answers = [await b.post(f"/v1/jobs/{job_id}/cancel"), await a.post(f"/v1/jobs/{job_id}/cancel")]
            nursery.cancel_scope.cancel()  # the link ends before its server goes, which would cut it
        return answers

    try:
        answers = trio.run(cancels)
    finally:
        with fleet.b.http(fleet.token) as http:
            http.delete(f"/v1/servers/{server_id}")
    for answer in answers:
        assert answer.status_code == 502, answer.text
        assert answer.json()["error"] == {
            "code": "agent_error",
            "message": "the server's agent is too old to cancel jobs: update it",
            "details": {},
        }


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    with copy_sshd(tmp_path_factory.mktemp("sshd")) as started:
        yield started


@pytest.mark.skipif(MISSING is not None, reason=str(MISSING))
def test_a_copy_asked_on_b_lets_the_key_in_from_where_the_source_links_to_a(
    fleet: Fleet, sshd: Sshd, tmp_path: Path
) -> None:
    """The source server has no address: the destination lets the transfer's key in from the
    address the source's agent link comes from, which replica A sees and B reads from the database."""
    tag = uuid.uuid4().hex[:6]
    source = admin(fleet.db_url, "create-server", f"xa-{tag}", "--org", "acme")
    dest = admin(fleet.db_url, "create-server", f"xb-{tag}", "--org", "acme", "--address", "127.0.0.1")
    agents: list[AgentProcess] = []
    try:
        for server, options in ((source, ["--ssh-host", "127.0.0.1"]), (dest, [])):
            home, state = tmp_path / f"{server['id']}-home", tmp_path / f"{server['id']}-state"
            (home / "example-com").mkdir(parents=True)
            state.mkdir()
            (state / "sites.json").write_text('{"sites": [{"domain": "example.com", "slug": "example-com"}]}')
            server_id, token = str(server["id"]), str(server["agent_token"])
            options = [*sshd.agent_options(), *options]
            agents.append(AgentProcess(fleet.a, server_id, token, home, state, *options, api_token=fleet.token))
        data = os.urandom(70_000)
        (tmp_path / f"{source['id']}-home" / "example-com" / "one.bin").write_bytes(data)
        body = {"scope": "site", "domain": "example.com", "paths": ["one.bin"], "destination": ""}
        with fleet.b.http(fleet.token) as http:
            copied = http.post(f"/v1/servers/{source['id']}/fs/copy", json={**body, "to": {"server_id": dest["id"]}})
        assert copied.status_code == 200, copied.text
        assert (tmp_path / f"{dest['id']}-home" / "example-com" / "one.bin").read_bytes() == data
    finally:
        for agent in agents:
            agent.stop()
        with fleet.b.http(fleet.token) as http:
            for server in (source, dest):
                http.delete(f"/v1/servers/{server['id']}")


def test_a_direct_upload_asked_on_b_gets_its_url_from_a(fleet: Fleet, tmp_path: Path) -> None:
    """An agent with an ingress, linked to A: B answers with a URL signed on A (the link's key
    never leaves it), the bytes go straight to the agent, and the audit names the user. What the
    agent refuses before a byte is sent (a name taken) is refused through B in the same words."""
    server = admin(fleet.db_url, "create-server", f"in-{uuid.uuid4().hex[:6]}", "--org", "acme")
    server_id, home = str(server["id"]), tmp_path / "home"
    home.mkdir()
    agent = AgentProcess(
        fleet.a, server_id, str(server["agent_token"]), home, tmp_path / "state", "--ingress", "127.0.0.1:0",
        api_token=fleet.token,
    )  # fmt: skip
    try:
        data = os.urandom(100_000)
        body = {"scope": "root", "path": "direct.bin", "size": len(data)}
        with fleet.b.http(fleet.token) as http:
            signed = http.post(f"/v1/servers/{server_id}/fs/upload/direct", json=body)
            assert signed.status_code == 200, signed.text
            assert signed.json()["url"] is not None, signed.text
            assert httpx.put(signed.json()["url"], content=data).status_code == 200
            assert (home / "direct.bin").read_bytes() == data
            taken = http.post(f"/v1/servers/{server_id}/fs/upload/direct", json=body)
            assert taken.status_code == 409 and taken.json()["error"]["code"] == "conflict", taken.text

            def audited() -> list[dict[str, Any]]:
                params = {"server_id": server_id, "action": "fs.upload"}
                entries: list[dict[str, Any]] = http.get("/v1/audit", params=params).json()["entries"]
                return entries

            wait_until(lambda: any(e["outcome"] == "ok" for e in audited()), timeout=10)
            ok = [e for e in audited() if e["outcome"] == "ok"]
            # A direct download asked on B is signed on A too, and its bytes come from the agent.
            params = {"scope": "root", "path": "direct.bin"}
            download = http.post(f"/v1/servers/{server_id}/fs/download/direct", params=params)
            assert download.status_code == 200 and download.json()["url"] is not None, download.text
            assert httpx.get(download.json()["url"]).content == data
        assert [(e["actor"]["email"], e["details"]["via"]) for e in ok] == [("owner@acme.test", "direct")]
    finally:
        agent.stop()
        with fleet.b.http(fleet.token) as http:
            http.delete(f"/v1/servers/{server_id}")


PRESENCE_WITHIN_S = 60.0


def _presence_of(lines: Iterator[str], server_id: str, online: bool) -> str:
    """Read the feed until an event says the server's agent is `online` (or not): its id. Within
    `PRESENCE_WITHIN_S`: the feed's keep-alives (and pulses) keep its read timeout from firing, so
    a presence that never comes would otherwise hold the test, and the suite, for good."""
    event_id = ""
    deadline = time.monotonic() + PRESENCE_WITHIN_S
    seen: list[str] = []
    for line in lines:
        if line.startswith("id:"):
            event_id = line.partition(":")[2].strip()
        elif line.startswith("data:") and server_id in line and f'"online":{str(online).lower()}' in line:
            return event_id
        elif line.startswith("data:"):
            seen.append(line[:200])
        if time.monotonic() > deadline:
            said = f"online={online} of {server_id}"
            raise AssertionError(f"no presence {said} within {PRESENCE_WITHIN_S:g} s; last events: {seen[-5:]}")
    raise AssertionError("the feed ended")


def test_presence_changes_made_on_a_reach_b_feed(fleet: Fleet) -> None:
    _linked(fleet)
    with (
        fleet.b.http(fleet.token) as http,
        http.stream("GET", "/v1/servers/events", timeout=httpx.Timeout(60, read=60)) as events,
    ):
        lines = events.iter_lines()
        assert next(lines).startswith("retry:")
        fleet.agent.stop()  # offline, then online again: both said by replica A
        fleet.agent.restart()
        offline = _presence_of(lines, fleet.server_id, online=False)
        online = _presence_of(lines, fleet.server_id, online=True)
    assert _online_on(fleet.b, fleet.token, fleet.server_id)
    # Resumed on replica A after what B's feed said last but one: the same event, with the same id.
    with (
        fleet.a.http(fleet.token) as http,
        http.stream("GET", "/v1/servers/events", headers={"Last-Event-ID": offline}) as events,
    ):
        assert _presence_of(events.iter_lines(), fleet.server_id, online=True) == online


def test_a_replica_that_dies_mid_upload_has_its_call_cancelled_on_the_agent(
    fleet: Fleet, nats: NatsServer, tmp_path: Path
) -> None:
    """Replica C relays an upload to the agent linked to A, and dies: A cancels the call once C's
    heartbeat is stale, and the agent drops its temporary file (nothing waits for bytes forever)."""
    _linked(fleet)
    inbox = fleet.home / f"inbox-{uuid.uuid4().hex[:6]}"
    inbox.mkdir()
    c = start_replica(tmp_path, fleet.db_url, nats.url, "replica-c", fleet.env)

    def body() -> Iterator[bytes]:
        yield os.urandom(1024 * 1024)
        wait_until(lambda: any(inbox.iterdir()), timeout=30)  # the agent's temporary file
        c.kill()
        yield os.urandom(1024 * 1024)

    try:
        with c.http(fleet.token) as http, pytest.raises(httpx.HTTPError):
            params = {"scope": "root", "path": f"{inbox.name}/never.bin"}
            http.put(f"/v1/servers/{fleet.server_id}/fs/upload", params=params, content=body())
        wait_until(lambda: not any(inbox.iterdir()), timeout=30)
    finally:
        c.stop()


def test_an_agent_that_reads_nothing_holds_up_its_own_relayed_calls_only(fleet: Fleet) -> None:
    """A second agent linked to A stops reading while uploads relayed from B pile up for it (more
    than its socket holds): the bus, which carries every relayed call to A's agents, goes on, and
    a call asked on B of the first agent is answered."""
    _linked(fleet)
    server = admin(fleet.db_url, "create-server", f"stalled-{uuid.uuid4().hex[:6]}", "--org", fleet.org)
    stalled = StalledAgent(fleet.a.base_url, str(server["agent_token"]), heartbeat_s=1.0)
    root = {"scope": "root"}

    def upload(name: str) -> None:
        url = f"/v1/servers/{server['id']}/fs/upload"
        with fleet.b.http(fleet.token) as http:
            try:
                http.put(url, params={**root, "path": name}, content=os.urandom(16 << 20))
            except httpx.HTTPError:
                pass  # cut when the stalled agent goes: only what it held up matters here

    uploads = [threading.Thread(target=upload, args=(f"stalled-{n}.bin",)) for n in range(3)]
    try:
        for thread in uploads:
            thread.start()
        # A's socket to it holds what it has not read, past its window: A's sends to it now wait,
        # with more of the uploads (their 4 MiB of credit each) behind them on A's bus.
        wait_until(lambda: unsent_bytes(fleet.a.port, stalled.port) > 8192, timeout=30)
        with fleet.b.http(fleet.token) as http:
            stat = http.get(f"/v1/servers/{fleet.server_id}/fs/stat", params={**root, "path": ""})
        assert stat.status_code == 200, stat.text
    finally:
        stalled.close()
        for thread in uploads:
            thread.join()


def test_a_replica_that_stops_has_its_agents_said_offline_on_the_others(
    fleet: Fleet, nats: NatsServer, tmp_path: Path
) -> None:
    server = admin(fleet.db_url, "create-server", f"web-{uuid.uuid4().hex[:6]}", "--org", "acme")
    server_id = str(server["id"])
    c = start_replica(tmp_path, fleet.db_url, nats.url, "replica-c", fleet.env)
    home = tmp_path / "home"
    home.mkdir()
    with open(tmp_path / "agent.log", "a") as log:
        agent = start_agent(c.base_url, str(server["agent_token"]), home, tmp_path / "state", stderr=log)
    try:
        wait_until(lambda: _online_on(fleet.b, fleet.token, server_id), timeout=30)
        with (
            fleet.b.http(fleet.token) as http,
            http.stream("GET", "/v1/servers/events", timeout=httpx.Timeout(60, read=60)) as events,
        ):
            lines = events.iter_lines()
            assert next(lines).startswith("retry:")
            c.stop()  # a graceful stop: SIGTERM
            _presence_of(lines, server_id, online=False)
        assert not _online_on(fleet.b, fleet.token, server_id)
    finally:
        agent.terminate()
        agent.wait(15)
        c.stop()
        with fleet.b.http(fleet.token) as http:
            http.delete(f"/v1/servers/{server_id}")


# --- pulses across replicas (issue 25, point 11) ---------------------------------------------------


def _pulsing_agent(fleet: Fleet, replica: OwnControlPlane, folder: Path) -> AgentProcess:
    """A new server of the org, its agent linked to `replica` and pulsing ten times a second."""
    server = admin(fleet.db_url, "create-server", f"pulsing-{uuid.uuid4().hex[:6]}", "--org", fleet.org)
    home, state = folder / "home", folder / "state"
    home.mkdir(parents=True)
    state.mkdir()
    server_id, token = str(server["id"]), str(server["agent_token"])
    return AgentProcess(replica, server_id, token, home, state, "--pulse-interval", "0.1", api_token=fleet.token)


def _events(stream: httpx.Response, within_s: float = PRESENCE_WITHIN_S) -> Iterator[Event]:
    """The stream's events, for `within_s` at most (its keep-alives and pulses keep its read
    timeout from firing)."""
    parser, deadline = SSEParser(), time.monotonic() + within_s
    for chunk in stream.iter_raw():
        yield from parser.feed(chunk)
        if time.monotonic() > deadline:
            raise AssertionError(f"what the test waited for did not come within {within_s:g} s")
    raise AssertionError("the stream ended")


def _pulses_of(events: Iterator[Event], server_id: str, count: int) -> list[dict[str, Any]]:
    """The next `count` (or more) pulse samples of `server_id` on the stream."""
    samples: list[dict[str, Any]] = []
    for event in events:
        if event.event == "pulse" and event.data["server_id"] == server_id:
            samples.extend(event.data["samples"])
            if len(samples) >= count:
                return samples
    raise AssertionError("the stream ended")


def _opening_of_a_stream(replica: OwnControlPlane, token: str) -> dict[str, list[dict[str, Any]]]:
    """What a new stream on `replica` starts with: the samples held of each server with pulses."""
    with replica.http(token) as http, http.stream("GET", "/v1/servers/events") as stream:
        opening = SSEParser().feed(next(stream.iter_raw()))
    assert opening[0].event == "ready", opening
    return {event.data["server_id"]: event.data["samples"] for event in opening if event.event == "pulse"}


def _owner_of_another_org(fleet: Fleet) -> str:
    """An API token of the owner of a new org of the cluster."""
    name = f"other-{uuid.uuid4().hex[:6]}"
    admin(fleet.db_url, "create-org", name, "--plan", "max")
    admin(fleet.db_url, "create-user", f"owner@{name}.test", "--org", name, "--role", "owner", "--password", PASSWORD)
    login = {"email": f"owner@{name}.test", "password": PASSWORD}
    token: str = httpx.post(f"{fleet.a.base_url}/v1/auth/login", json=login).json()["token"]
    return token


def _offline_on(events: Iterator[Event], server_id: str) -> None:
    for event in events:
        if event.event == "presence" and event.data["server_id"] == server_id and event.data["online"] is False:
            return


def test_the_pulses_of_an_agent_linked_to_b_reach_every_replica_and_go_with_its_link(
    fleet: Fleet, nats: NatsServer, tmp_path: Path
) -> None:
    """A stream on A carries them as they come; a new stream on A starts with B's ring (another
    org's does not), and so does one on a replica started since (it asks the others); the agent
    stops: its ring is gone on A by the time A's stream says it is offline."""
    agent = _pulsing_agent(fleet, fleet.b, tmp_path / "agent")
    try:
        with (
            fleet.a.http(fleet.token) as http,
            http.stream("GET", "/v1/servers/events", timeout=httpx.Timeout(60, read=60)) as stream,
        ):
            events = _events(stream)
            samples = _pulses_of(events, agent.server_id, 10)
            times = [sample["at"] for sample in samples]
            assert times == sorted(times) and len(set(times)) == len(times)
            assert all(0 < sample["memory"] < 100 for sample in samples)

            held = _opening_of_a_stream(fleet.a, fleet.token)[agent.server_id]
            assert len(held) >= 10 and held[0]["at"] <= samples[-1]["at"]
            assert agent.server_id not in _opening_of_a_stream(fleet.a, _owner_of_another_org(fleet))

            c_started = iso(datetime.now(UTC))
            c = start_replica(tmp_path, fleet.db_url, nats.url, "replica-c", fleet.env)
            try:

                def ring_on_c() -> list[dict[str, Any]]:
                    return _opening_of_a_stream(c, fleet.token).get(agent.server_id, [])

                wait_until(lambda: len(ring_on_c()) >= 10, timeout=30)
                assert ring_on_c()[0]["at"] < c_started  # B's ring, not only what came since
            finally:
                c.stop()

            agent.stop()
            _offline_on(events, agent.server_id)
            assert agent.server_id not in _opening_of_a_stream(fleet.a, fleet.token)
    finally:
        agent.stop()


def test_the_pulses_of_an_agent_whose_replica_dies_go_on_the_others(
    fleet: Fleet, nats: NatsServer, tmp_path: Path
) -> None:
    """Replica C, killed, says nothing: A takes its agent offline by its heartbeat, and the ring
    goes with that presence event."""
    c = start_replica(tmp_path, fleet.db_url, nats.url, "replica-c", fleet.env)
    agent = None
    try:
        agent = _pulsing_agent(fleet, c, tmp_path / "agent")
        with (
            fleet.a.http(fleet.token) as http,
            http.stream("GET", "/v1/servers/events", timeout=httpx.Timeout(60, read=60)) as stream,
        ):
            events = _events(stream)
            _pulses_of(events, agent.server_id, 3)
            c.kill()
            _offline_on(events, agent.server_id)
            assert agent.server_id not in _opening_of_a_stream(fleet.a, fleet.token)
    finally:
        if agent is not None:
            agent.stop()
        c.stop()


@contextmanager
def _hand_made_link(replica: OwnControlPlane, agent_token: str) -> Iterator[ClientConnection]:
    """A WebSocket link to `replica` by hand, said alive every half second (the hub's heartbeat
    is 1 s here): the test sends the frames it wants on it."""
    url = replica.base_url.replace("http", "ws") + protocol.LINK_PATH
    hello = {"t": protocol.HELLO, "version": "1", "boot_id": "b", "handlers": [], "hostname": "hand-made"}
    with connect(url, additional_headers={"Authorization": f"Bearer {agent_token}"}) as ws:
        ws.send(protocol.encode(hello))
        assert protocol.decode(ws.recv(timeout=10))["t"] == "welcome"
        done = threading.Event()

        def say_alive() -> None:
            while not done.wait(0.5):
                ws.send(protocol.encode({"t": protocol.ALIVE}))

        alive = threading.Thread(target=say_alive, daemon=True)
        alive.start()
        try:
            yield ws
        finally:
            done.set()
            alive.join()


def test_an_agent_that_pulses_without_pause_costs_the_other_replicas_a_bounded_amount(
    fleet: Fleet, tmp_path: Path
) -> None:
    """A hand-made agent linked to B sends 200 pulses at once: B holds its last 60, and A is sent
    a few of them only (at most `PULSES_PER_SERVER_GATHERED` per message of B). Once B holds them
    all, a pulse of another agent of B that comes to A says A was sent all it will be."""
    server = admin(fleet.db_url, "create-server", f"flooding-{uuid.uuid4().hex[:6]}", "--org", fleet.org)
    server_id = str(server["id"])
    marker = _pulsing_agent(fleet, fleet.b, tmp_path / "marker")
    try:
        with (
            fleet.a.http(fleet.token) as http,
            http.stream("GET", "/v1/servers/events", timeout=httpx.Timeout(60, read=60)) as stream,
            _hand_made_link(fleet.b, str(server["agent_token"])) as link,
        ):
            events = _events(stream)
            wait_until(lambda: _online_on(fleet.b, fleet.token, server_id), timeout=30)
            start = time.time()
            times = [start + n / 1000 for n in range(200)]
            for at in times:
                link.send(protocol.encode({"t": protocol.PULSE, "at": at, "cpu": 1.0, "memory": 2.0, "disk": 3.0}))
            last = iso(datetime.fromtimestamp(times[-1], UTC))
            wait_until(lambda: _opening_of_a_stream(fleet.b, fleet.token).get(server_id, [{}])[-1].get("at") == last)
            assert len(_opening_of_a_stream(fleet.b, fleet.token)[server_id]) == 60
            all_held = iso(datetime.now(UTC))
            on_a: list[dict[str, Any]] = []
            for event in events:
                if event.event != "pulse":
                    continue
                if event.data["server_id"] == server_id:
                    on_a.extend(event.data["samples"])
                elif event.data["server_id"] == marker.server_id and event.data["samples"][-1]["at"] > all_held:
                    break
        assert 0 < len(on_a) < 100, len(on_a)
    finally:
        marker.stop()
        with fleet.b.http(fleet.token) as http:
            http.delete(f"/v1/servers/{server_id}")


def test_a_load_balancer_made_on_b_is_applied_by_its_node_on_a_and_its_health_reaches_b(fleet: Fleet) -> None:
    _linked(fleet)
    backends = start_backends("alpha")
    try:
        with fleet.b.http(fleet.token) as http:
            host = http.post(
                "/v1/servers", json={"name": f"apps-{uuid.uuid4().hex[:6]}", "kind": "lite", "address": "127.0.0.1"}
            )
            assert host.status_code == 201, host.text
            body = {
                "name": f"lb-{uuid.uuid4().hex[:6]}",
                "port": 80,
                "node_server_id": fleet.server_id,
                "engine": "haproxy",
                "health_check": {"path": "/", "interval_s": 2, "healthy_threshold": 1, "unhealthy_threshold": 1},
                "backends": [{"server_id": host.json()["server"]["id"], "port": backends[0].port}],
            }
            created = http.post("/v1/load-balancers", json=body)
            assert created.status_code == 201, created.text
            lb_id = created.json()["id"]

            def applied_and_healthy() -> bool:
                lb = http.get(f"/v1/load-balancers/{lb_id}").json()
                return (
                    lb["applied_revision"] == lb["revision"]
                    and lb["state"] == "active"
                    and all(b["health"] == "healthy" for b in lb["backends"])
                )

            wait_until(applied_and_healthy, timeout=60)
            assert http.delete(f"/v1/load-balancers/{lb_id}").status_code in (202, 204)
    finally:
        stop_backends(backends)


# Prints a line every 0.1 s for about 8 s, as the site's user: long enough to outlive a move.
COUNT_SCRIPT = 'i=1\nwhile [ $i -le 80 ]; do echo "line $i"; i=$((i+1)); sleep 0.1; done\n'
needs_cron_as_root = pytest.mark.skipif(
    shutil.which("crontab") is None or os.geteuid() != 0,
    reason="needs crontab (Debian: cron) and root, for a real site user's long-running cron job",
)


def _finished(http: httpx.Client, job_id: str) -> dict[str, Any]:
    job: dict[str, Any] = {}

    def ended() -> bool:
        job.update(http.get(f"/v1/jobs/{job_id}").json())
        return job["status"] not in ("queued", "running")

    wait_until(ended, timeout=60)
    return job


def _run(http: httpx.Client, server_id: str, kind: str, args: dict[str, Any]) -> dict[str, Any]:
    answer = http.post(f"/v1/servers/{server_id}/jobs", json={"kind": kind, "args": args})
    assert answer.status_code == 201, answer.text
    return _finished(http, answer.json()["id"])


def _holder(fleet: Fleet, server_id: str) -> str | None:
    engine = sa.create_engine(fleet.db_url)
    try:
        with engine.connect() as db:
            holder: str | None = db.scalar(sa.select(servers.c.agent_replica_id).where(servers.c.id == server_id))
    finally:
        engine.dispose()
    return holder


@needs_cron_as_root
def test_a_link_that_moves_to_b_takes_its_running_job_along(fleet: Fleet, tmp_path: Path) -> None:
    """Replica A runs on; only the agent's link moves (HAProxy in front sends it to B)."""
    server = admin(fleet.db_url, "create-server", f"web-{uuid.uuid4().hex[:6]}", "--org", "acme")
    server_id = str(server["id"])
    proxy = start_haproxy(tmp_path, [fleet.a, fleet.b])
    home = tmp_path / "home"
    home.mkdir()
    domain = f"mv-{uuid.uuid4().hex[:6]}.example.com"
    with open(tmp_path / "agent.log", "a") as log:
        agent = start_agent(proxy.url, str(server["agent_token"]), home, tmp_path / "state", stderr=log)
    try:
        wait_until(lambda: _online_on(fleet.b, fleet.token, server_id), timeout=30)
        on_a = _holder(fleet, server_id)
        with fleet.b.http(fleet.token) as http:
            assert _run(http, server_id, "site.create", {"domain": domain})["status"] == "succeeded"
            site = home / domain.replace(".", "-")
            (site / "count.sh").write_text(COUNT_SCRIPT)
            (site / "count.sh").chmod(0o644)
            cron = {"domain": domain, "schedule": "@daily", "command": "/bin/sh count.sh"}
            assert _run(http, server_id, "cron.add", cron)["status"] == "succeeded"
            entry = _run(http, server_id, "cron.list", {"domain": domain})["result"]["entries"][-1]["id"]
            job_id = http.post(
                f"/v1/servers/{server_id}/jobs", json={"kind": "cron.run", "args": {"id": entry}}
            ).json()["id"]
            with http.stream("GET", f"/v1/jobs/{job_id}/stream") as stream:
                parser = SSEParser()
                for chunk in stream.iter_bytes():
                    if any(e.event == "line" and e.data["seq"] >= 5 for e in parser.feed(chunk)):
                        break
            proxy.move_links_off("r0")
            done = _finished(http, job_id)
            assert (done["status"], done["exit_code"]) == ("succeeded", 0), done
            assert _holder(fleet, server_id) not in (None, on_a)  # the link did move
            events = SSEParser().feed(http.get(f"/v1/jobs/{job_id}/stream").content)
            lines = [event.data for event in events if event.event == "line"]
            assert [line["text"] for line in lines] == [f"line {i}" for i in range(1, 81)]  # each exactly once
            assert [line["seq"] for line in lines] == list(range(1, 81))
            _run(http, server_id, "site.delete", {"domain": domain})
        # Deleted on replica A: replica B, which holds the link now, cuts it.
        with fleet.a.http(fleet.token) as http:
            assert http.delete(f"/v1/servers/{server_id}").status_code == 204
        wait_until(lambda: f"server {server_id} was deleted: its agent link is cut" in fleet.b.log(), timeout=10)
    finally:
        subprocess.run(["pkill", "-KILL", "-u", domain.replace(".", "-")], check=False)
        agent.terminate()
        agent.wait(15)
        proxy.stop()


def test_a_dead_replica_takes_its_agents_offline_and_fails_its_transfers(fleet: Fleet) -> None:
    """Killing replica A cuts the download B relays from it: an error for the client (never a
    short file), one warning line in B's log and no traceback (an expected end, not a bug)."""
    _linked(fleet)
    logged_before = len(fleet.b.log())
    (fleet.home / "large.bin").write_bytes(os.urandom(32 * 1024 * 1024))
    params = {"scope": "root", "path": "large.bin"}
    with (
        fleet.b.http(fleet.token) as http,
        http.stream("GET", "/v1/servers/events", timeout=httpx.Timeout(60, read=60)) as events,
        http.stream("GET", f"/v1/servers/{fleet.server_id}/fs/download", params=params) as download,
    ):
        lines = events.iter_lines()
        assert next(lines).startswith("retry:")
        chunks = download.iter_bytes()
        assert next(chunks)  # the transfer runs, relayed from replica A
        fleet.a.kill()
        _presence_of(lines, fleet.server_id, online=False)
        with pytest.raises(httpx.HTTPError):  # cut short, never completed with wrong bytes
            received = sum(len(chunk) for chunk in chunks)
            pytest.fail(f"the download ended normally after {received} more bytes")
    assert not _online_on(fleet.b, fleet.token, fleet.server_id)
    wait_until(lambda: "answer cut short" in fleet.b.log()[logged_before:], timeout=10)
    logged = fleet.b.log()[logged_before:]
    assert "Traceback" not in logged and "ERROR" not in logged, logged
    cut = [line for line in logged.splitlines() if "answer cut short" in line]
    assert len(cut) == 1 and cut[0].startswith("WARNING ") and "/fs/download" in cut[0], logged


def test_a_replica_taken_for_dead_while_it_ran_claims_its_links_again(nats: NatsServer, tmp_path: Path) -> None:
    """A replica stopped past the others' patience (here SIGSTOP; in life a starved CPU or a
    slow database) has its links released by them; its agents keep their links to it (a 30 s
    heartbeat outlasts the stop), so once it runs again it must say it holds them."""
    db_url = f"sqlite:///{tmp_path / 'fleet.db'}"
    env = {**ENV, "FLEETDECK_HEARTBEAT_S": "30", "FLEETDECK_SERVER": "uvicorn"}
    admin(db_url, "create-org", "acme", "--plan", "max")
    admin(db_url, "create-user", "owner@acme.test", "--org", "acme", "--role", "owner", "--password", PASSWORD)
    server = admin(db_url, "create-server", "web-1", "--org", "acme")
    a, b = (start_replica(tmp_path, db_url, nats.url, f"replica-{name}", env) for name in "ab")
    home = tmp_path / "home"
    (home / "site-a").mkdir(parents=True)
    agent = None
    try:
        token = httpx.post(f"{b.base_url}/v1/auth/login", json={"email": "owner@acme.test", "password": PASSWORD})
        token = token.json()["token"]
        server_id = str(server["id"])
        agent = AgentProcess(a, server_id, str(server["agent_token"]), home, tmp_path / "state", api_token=token)
        wait_until(lambda: _online_on(b, token, server_id), timeout=30)
        assert a.process is not None
        a.process.send_signal(signal.SIGSTOP)
        try:
            wait_until(lambda: not _online_on(b, token, server_id), timeout=30)  # B released A's link
        finally:
            a.process.send_signal(signal.SIGCONT)
        wait_until(lambda: _online_on(b, token, server_id), timeout=30)
        with b.http(token) as http:
            listed = http.get(f"/v1/servers/{server_id}/fs/list", params={"scope": "root"})
        assert listed.status_code == 200, listed.text  # relayed to A, where the link still is
        assert "taken for dead while it ran" in a.log()
    finally:
        if agent is not None:
            agent.stop()
        a.stop()
        b.stop()


def test_replicas_on_a_bus_that_requires_tls(tmp_path: Path) -> None:
    """The README's advice for a bus off a private network: NATS requiring TLS of its clients, the
    replicas' bus URL `tls://`, its CA trusted through SSL_CERT_FILE. A call asked on B reaches
    the agent linked to A over it."""
    ca, cert, key = write_tls_files(tmp_path)
    nats = start_nats(tls=(cert, key))
    db_url = f"sqlite:///{tmp_path / 'fleet.db'}"
    env = {**ENV, "FLEETDECK_SERVER": "uvicorn", "SSL_CERT_FILE": str(ca)}
    admin(db_url, "create-org", "acme", "--plan", "max")
    admin(db_url, "create-user", "owner@acme.test", "--org", "acme", "--role", "owner", "--password", PASSWORD)
    server = admin(db_url, "create-server", "web-1", "--org", "acme")
    replicas: list[OwnControlPlane] = []
    agent = None
    try:
        replicas += [start_replica(tmp_path, db_url, nats.url, f"replica-{name}", env) for name in "ab"]
        a, b = replicas
        (tmp_path / "home").mkdir()
        token = httpx.post(f"{b.base_url}/v1/auth/login", json={"email": "owner@acme.test", "password": PASSWORD})
        token = token.json()["token"]
        server_id = str(server["id"])
        home, state = tmp_path / "home", tmp_path / "state"
        agent = AgentProcess(a, server_id, str(server["agent_token"]), home, state, api_token=token)
        wait_until(lambda: _online_on(b, token, server_id), timeout=30)
        with b.http(token) as http:
            listed = http.get(f"/v1/servers/{server_id}/fs/list", params={"scope": "root"})
        assert listed.status_code == 200, listed.text  # relayed to A over TLS
    finally:
        if agent is not None:
            agent.stop()
        for replica in replicas:
            replica.stop()
        nats.stop()
