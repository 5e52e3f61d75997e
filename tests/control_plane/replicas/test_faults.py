"""Faults of a cluster: three `fleetdeck serve` replicas on one PostgreSQL database with NATS as
their bus, behind the project's own HAProxy load balancer (area B), all started by the README's
"Running at scale" commands (`tests/helpers/scale_readme.py`: a README that drifts fails here).
The PostgreSQL server is the module's own, so that it can be stopped and started again.

The load balancer's node links to the replicas directly; three more agents and the test's clients
go through the load balancer. Each test kills (SIGKILL) the replica holding the link of the agent
it works with, in the middle of a download, a job's output stream or an upload, then starts it
again: the agents relink to the others, the job runs on and its output reaches the client
complete and once, a cut transfer fails with an error and its retry succeeds, and the database
holds each thing once.

Then the services under them: PostgreSQL and NATS are stopped for five seconds and started
again while jobs stream, agents are linked and file calls cross the replicas. Nothing is
restarted by hand, nothing answers 500, the job loses and repeats no line, and requests made
meanwhile answer `503 unavailable` (nothing done). A single `serve` on PostgreSQL rides out the
same restart with a job running.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import sqlalchemy as sa

from api_client import Client, Event, SSEParser
from contract.errors import Unavailable
from fleetdeck.launcher import child_environment, free_port, start_agent
from tests.helpers import wait_until
from tests.helpers.control_planes import DEFAULT_ENV, OwnControlPlane
from tests.helpers.postgres_server import PostgresDatabases, PostgresServer, start_postgres
from tests.helpers.scale_readme import CommandReplica, command, exported, scale_section, substitute

RELINK_TIMEOUT_S = 60.0  # generous: a dead replica is noticed after 5 s without its heartbeat
# What a call answers when its agent's link is lost under it (CONTRACT: errors).
AGENT_LOST = {(409, "agent_offline"), (504, "agent_timeout")}
WEB_AGENTS = ("web-1", "web-2", "web-3")
# How long the database or the bus is away in the outage tests ("a 5-second PostgreSQL restart").
OUTAGE_S = 5.0
# The load's rhythm between its rounds of calls. Unpaced, it kept three replicas' event loops busy
# answering 503s as fast as they could during a bus outage; on a loaded machine a replica then
# answered no agent for 3 s (the tests' link heartbeat limit), the agent dropped its link, and a
# call for it got 409 agent_offline (the agent's log: "no word from the control plane for 3.0 s").
LOAD_ROUND_PAUSE_S = 0.1


def count_script(lines: int) -> str:
    """Prints `lines` lines, one every 0.1 s, as the site's user: 80 outlive a kill, 200 an outage."""
    return f'i=1\nwhile [ $i -le {lines} ]; do echo "line $i"; i=$((i+1)); sleep 0.1; done\n'


needs_cron_as_root = pytest.mark.skipif(
    shutil.which("crontab") is None or os.geteuid() != 0,
    reason="needs crontab (Debian: cron) and root, for a real site user's long-running cron job",
)


@dataclass
class Agent:
    server_id: str
    home: Path
    process: subprocess.Popen[str]
    launch: Callable[[], subprocess.Popen[str]] | None = None  # starts it again as it was started

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(15)

    def restart(self) -> None:
        assert self.launch is not None
        self.stop()
        self.process = self.launch()


@dataclass
class Nats:
    """The cluster's bus, started by the README's line; stopped and started again on its port."""

    line: str
    folder: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        _, argv = command(self.line)
        with open(self.folder / "nats.log", "ab") as log:
            self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(15)


@dataclass
class Cluster:
    replicas: list[CommandReplica]
    db: sa.engine.Engine
    lb_url: str  # the load balancer's port on its node: what agents and clients use
    token: str
    lb_id: str
    node: Agent
    postgres: PostgresServer
    nats: Nats
    agents: dict[str, Agent] = field(default_factory=dict)

    def http(self) -> httpx.Client:
        """A client of the cluster, through its load balancer."""
        headers = {"Authorization": f"Bearer {self.token}"}
        return httpx.Client(base_url=self.lb_url, headers=headers, timeout=60)

    def holder(self, server_id: str) -> str | None:
        """The replica holding the server's agent link (the database says)."""
        with self.db.connect() as db:
            row = db.execute(sa.text("SELECT agent_replica_id FROM servers WHERE id = :id"), {"id": server_id}).first()
        return None if row is None else row[0]

    def replica_holding(self, server_id: str) -> CommandReplica:
        holder = self.holder(server_id)
        found = [replica for replica in self.replicas if replica.replica_id() == holder]
        assert found, f"no live replica holds the link of {server_id} ({holder})"
        return found[0]

    def online(self, server_id: str) -> bool:
        with self.http() as http:
            answer = http.get(f"/v1/servers/{server_id}")
        return answer.status_code == 200 and bool(answer.json()["agent"]["online"])

    def linked_to_a_live_replica(self, server_id: str) -> bool:
        live = {replica.replica_id() for replica in self.replicas if replica.process and replica.process.poll() is None}
        return self.holder(server_id) in live and self.online(server_id)

    def all_linked(self) -> bool:
        return all(self.linked_to_a_live_replica(a.server_id) for a in [self.node, *self.agents.values()])

    def restart(self, replica: CommandReplica) -> None:
        """A killed replica starts again; every agent is linked to a live one."""
        replica.start()
        wait_until(self.all_linked, timeout=RELINK_TIMEOUT_S)


def _run_admin(line: str, env: dict[str, str]) -> dict[str, Any]:
    extra, argv = command(line)
    done = subprocess.run(
        [*argv, "--json"], env=child_environment({**env, **extra}), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, f"{line}: {done.stderr}"
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _start_agent(
    line: str, token_name: str, token: str, folder: Path, *extra: str
) -> tuple[Path, Callable[[], subprocess.Popen[str]]]:
    """The agent of a README line, in `folder`: its home, and how to start it (again)."""
    env, argv = command(line)
    assert env == {"FLEETDECK_AGENT_TOKEN": token_name}, line
    home, state = folder / "home", folder / "state"
    home.mkdir(parents=True)
    # Where this machine's folders would be on a real server: given here, one per agent.
    argv += ["--home", str(home), "--state-dir", str(state), *extra]

    def launch() -> subprocess.Popen[str]:
        with open(folder / "agent.log", "a") as log:
            return subprocess.Popen(
                argv,
                env=child_environment({"FLEETDECK_AGENT_TOKEN": token}),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                text=True,
            )

    return home, launch


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _lb_ready(http: httpx.Client, lb_id: str) -> bool:
    lb = http.get(f"/v1/load-balancers/{lb_id}").json()
    healthy = all(b["health"] == "healthy" for b in lb["backends"])
    return bool(lb["applied_revision"] == lb["revision"] and lb["state"] == "active" and healthy)


@pytest.fixture(scope="module")
def cluster_postgres() -> Iterator[PostgresDatabases]:
    """A PostgreSQL server of this module's own (its tests stop it), in a folder the `postgres`
    user can reach (pytest's own is private to root)."""
    folder = Path(tempfile.mkdtemp(prefix="fleetdeck-faults-pg-"))
    folder.chmod(0o755)
    server = start_postgres(folder / "server", log_statements=False)
    try:
        yield PostgresDatabases(server)
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, cluster_postgres: PostgresDatabases) -> Iterator[Cluster]:
    folder = tmp_path_factory.mktemp("faults")
    db_url = cluster_postgres.create("faults")
    section = scale_section()
    nats_port, lb_port, lb_tls_port = free_port(), free_port(), free_port()
    replica_ports = [free_port() for _ in range(3)]
    replacements = [
        ("postgresql+psycopg://fleetdeck:SECRET@10.0.0.4:5432/fleetdeck", db_url),
        ("10.0.0.5 -p 4222", f"127.0.0.1 -p {nats_port}"),
        ("10.0.0.5:4222", f"127.0.0.1:{nats_port}"),
        *((f"10.0.0.1{n}:8080", f"127.0.0.1:{port}") for n, port in enumerate(replica_ports, 1)),
        ("http://10.0.0.20", f"http://127.0.0.1:{lb_port}"),
        *((f"10.0.0.1{n}", "127.0.0.1") for n in (1, 2, 3)),  # the replicas' servers: their address
    ]
    lines = [substitute(line, replacements) for line in section.lines]
    assert lines[0].startswith("nats-server ") and lines[1].startswith("pip install 'fleetdeck[postgres,replicas]'")
    env = exported(lines)
    assert set(env) == {"FLEETDECK_DB", "FLEETDECK_BUS_URL"}, env
    nats = Nats(lines[0], folder)
    nats.start()
    started: list[Any] = [nats]
    db = sa.create_engine(db_url, pool_pre_ping=True)  # the tests restart its server
    try:
        wait_until(lambda: _listening(nats_port), timeout=RELINK_TIMEOUT_S)
        replicas = []
        for n, line in enumerate([line for line in lines if line.startswith("fleetdeck serve ")], 1):
            replica = CommandReplica(folder, db_url, f"replica-{n}", command(line)[1], {**DEFAULT_ENV, **env})
            started.append(replica)
            replica.start()  # one after the other: the first makes the tables, the next find them
            replicas.append(replica)
        assert len(replicas) == 3
        made = {}
        for line in [line for line in lines if line.startswith("fleetdeck admin ")]:
            result = _run_admin(line, env)
            made[line.split()[3]] = result
        for name in WEB_AGENTS[1:]:  # more agents than the README's one: made by its own line
            made[name] = _run_admin(next(x for x in lines if "create-server web-1 " in x).replace("web-1", name), env)
        owner = shlex.split(next(line for line in lines if "create-user" in line))
        login = {"email": owner[3], "password": owner[owner.index("--password") + 1]}
        token = httpx.post(f"{replicas[0].base_url}/v1/auth/login", json=login).json()["token"]

        node_line, web_line = section_agents(lines)
        # The node links to the replicas themselves (three --url), never through the load balancer
        # it runs: while that is not applied yet, or broken by a bad revision, its agent could not
        # reach a control plane to apply a good one. Its HAProxy listens on a port of the test's
        # own on 127.0.0.1, as the README's port 80 of lb-1.
        node_home, node_launch = _start_agent(
            node_line, "LB_1_TOKEN", made["lb-1"]["agent_token"], folder / "lb-1",
            "--lb-bind", "127.0.0.1", "--lb-port-map", f"80:{lb_port},443:{lb_tls_port}",
        )  # fmt: skip
        node = Agent(str(made["lb-1"]["id"]), node_home, node_launch(), node_launch)
        started.append(node)

        body = json.dumps(section.lb_body)
        body = body.replace("LB_1_ID", str(made["lb-1"]["id"]))
        for n in (1, 2, 3):
            body = body.replace(f"REPLICA_{n}_ID", str(made[f"replica-{n}"]["id"]))
        lb_body = json.loads(body)
        assert [b["port"] for b in lb_body["backends"]] == [8080] * 3
        for backend, port in zip(lb_body["backends"], replica_ports, strict=True):
            backend["port"] = port
        (folder / "fleet-lb.json").write_text(json.dumps(lb_body))
        curl = [line for line in lines if line.startswith("curl ")]
        assert len(curl) == 1
        posted = subprocess.run(
            ["bash", "-c", curl[0]], cwd=folder, env=child_environment({"TOKEN": token}),
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert posted.returncode == 0, posted.stderr
        lb_id = json.loads(posted.stdout)["id"]
        cluster = Cluster(
            replicas, db, f"http://127.0.0.1:{lb_port}", token, lb_id, node, cluster_postgres.server, nats
        )
        with replicas[0].http(token) as http:
            wait_until(lambda: _lb_ready(http, lb_id), timeout=RELINK_TIMEOUT_S)

        for name in WEB_AGENTS:
            home, launch = _start_agent(web_line, "WEB_1_TOKEN", made[name]["agent_token"], folder / name)
            agent = cluster.agents[name] = Agent(str(made[name]["id"]), home, launch(), launch)
            started.append(agent)
            # One link at a time, and no other request through the load balancer meanwhile (the
            # database is asked): round robin gives each agent the next replica.
            wait_until(lambda: cluster.holder(agent.server_id) is not None, timeout=RELINK_TIMEOUT_S)  # noqa: B023
        wait_until(cluster.all_linked, timeout=RELINK_TIMEOUT_S)
        yield cluster
    finally:
        for running in reversed(started):
            if isinstance(running, subprocess.Popen):
                running.terminate()
                running.wait(15)
            else:
                running.stop()
        db.dispose()


def section_agents(lines: list[str]) -> tuple[str, str]:
    """The README's two agent lines: the node's (several --url, the replicas) and another's (the LB)."""
    agents = [line for line in lines if " fleetdeck agent " in f" {line}"]
    assert len(agents) == 2, agents
    node, web = agents
    assert node.count("--url") == 3 and web.count("--url") == 1, agents
    return node, web


# What the fixture does with each shell line of the README's section: a line of another shape
# would go untested, so it fails `test_the_readme_section_has_only_lines_this_module_runs`.
RUN_BY_THE_FIXTURE = (
    "nats-server ",
    "export ",
    "fleetdeck serve ",
    "fleetdeck admin ",
    "FLEETDECK_AGENT_TOKEN=",
    "curl ",
)
INSTALL = "pip install 'fleetdeck[postgres,replicas]'"  # the test runs in the installed project
CLIENT = "fleetdeck --url "  # the TUI: its options are checked against `fleetdeck --help`


def test_the_readme_section_has_only_lines_this_module_runs() -> None:
    lines = scale_section().lines
    unknown = [line for line in lines if not line.startswith((*RUN_BY_THE_FIXTURE, INSTALL, CLIENT))]
    assert not unknown, f"README lines the fault test does not run: {unknown}"
    clients = [line for line in lines if line.startswith(CLIENT)]
    assert len(clients) == 1, clients
    _, argv = command(clients[0])
    helped = subprocess.run([argv[0], "--help"], capture_output=True, text=True, timeout=60, env=child_environment())
    assert helped.returncode == 0, helped.stderr
    for option in [word for word in argv if word.startswith("--")]:
        assert f"{option} " in helped.stdout, f"fleetdeck --help does not name {option}"


def test_the_readme_cluster_spreads_its_agents_over_the_replicas_behind_the_load_balancer(cluster: Cluster) -> None:
    holders = {cluster.holder(agent.server_id) for agent in cluster.agents.values()}
    assert len(holders) >= 2, f"the load balancer sent every agent to one replica: {holders}"
    with cluster.http() as http:
        health = http.get("/v1/health")
        assert health.status_code == 200, health.text
        lb = http.get(f"/v1/load-balancers/{cluster.lb_id}").json()
    assert [b["health"] for b in lb["backends"]] == ["healthy"] * 3


def test_a_replica_killed_during_a_download_cuts_it_with_an_error_and_a_retry_succeeds(cluster: Cluster) -> None:
    agent = cluster.agents["web-1"]
    data = os.urandom(32 * 1024 * 1024)
    (agent.home / "large.bin").write_bytes(data)
    params = {"scope": "root", "path": "large.bin"}
    holder = cluster.replica_holding(agent.server_id)
    with cluster.http() as http, http.stream("GET", f"/v1/servers/{agent.server_id}/fs/download", params=params) as got:
        assert got.status_code == 200
        chunks = got.iter_bytes()
        assert next(chunks)  # the transfer runs
        holder.kill()
        with pytest.raises(httpx.HTTPError):  # cut short, never completed with wrong bytes
            received = sum(len(chunk) for chunk in chunks)
            pytest.fail(f"the download ended normally after {received} more bytes")
    wait_until(lambda: cluster.linked_to_a_live_replica(agent.server_id), timeout=RELINK_TIMEOUT_S)
    with cluster.http() as http, http.stream("GET", f"/v1/servers/{agent.server_id}/fs/download", params=params) as got:
        assert got.status_code == 200
        assert hashlib.sha256(b"".join(got.iter_bytes())).digest() == hashlib.sha256(data).digest()
    cluster.restart(holder)


def test_a_replica_killed_during_an_upload_fails_it_cleanly_and_a_retry_succeeds(cluster: Cluster) -> None:
    agent = cluster.agents["web-2"]
    inbox = agent.home / f"inbox-{uuid.uuid4().hex[:6]}"
    inbox.mkdir()
    holder = cluster.replica_holding(agent.server_id)
    data = os.urandom(4 * 1024 * 1024)
    params = {"scope": "root", "path": f"{inbox.name}/upload.bin"}

    def body() -> Iterator[bytes]:
        yield data[: 1024 * 1024]
        wait_until(lambda: any(inbox.iterdir()), timeout=30)  # the agent's temporary file
        holder.kill()
        yield data[1024 * 1024 :]

    with cluster.http() as http:
        try:
            answer = http.put(f"/v1/servers/{agent.server_id}/fs/upload", params=params, content=body())
        except httpx.HTTPError:
            pass  # the connection was cut: an error, as it must be
        else:
            assert _cut_cleanly(answer), answer.text
    # No half file on the agent's side: its temporary file is dropped, the target never made.
    wait_until(lambda: not any(inbox.iterdir()), timeout=RELINK_TIMEOUT_S)
    wait_until(lambda: cluster.linked_to_a_live_replica(agent.server_id), timeout=RELINK_TIMEOUT_S)
    with cluster.http() as http:
        answer = http.put(f"/v1/servers/{agent.server_id}/fs/upload", params=params, content=data)
        assert answer.status_code == 200, answer.text
    assert (inbox / "upload.bin").read_bytes() == data
    with cluster.db.connect() as db:
        rows = db.execute(
            sa.text("SELECT outcome FROM audit_log WHERE action = 'fs.upload' AND server_id = :id AND target = :path"),
            {"id": agent.server_id, "path": params["path"]},
        ).all()
    outcomes = sorted(row[0] for row in rows)
    # The retry once; the cut upload once as an error if a live replica served it, else not at all.
    assert outcomes in (["ok"], ["error", "ok"]), outcomes
    cluster.restart(holder)


def _cut_cleanly(answer: httpx.Response) -> bool:
    """The answer to a request whose replica or agent died under it: the load balancer's 502 (the
    replica serving it died before answering), or a live replica's contract error for an agent
    whose link was lost, in words."""
    if answer.status_code == 502 and answer.headers.get("content-type", "").startswith("text/html"):
        return True
    return answer.headers.get("content-type") == "application/json" and (
        (answer.status_code, answer.json()["error"]["code"]) in AGENT_LOST
    )


def _finished(http: httpx.Client, job_id: str) -> dict[str, Any]:
    job: dict[str, Any] = {}

    def ended() -> bool:
        job.update(http.get(f"/v1/jobs/{job_id}").json())
        return job["status"] not in ("queued", "running")

    wait_until(ended, timeout=RELINK_TIMEOUT_S)
    return job


def _run(http: httpx.Client, server_id: str, kind: str, args: dict[str, Any]) -> dict[str, Any]:
    answer = http.post(f"/v1/servers/{server_id}/jobs", json={"kind": kind, "args": args})
    assert answer.status_code == 201, answer.text
    return _finished(http, answer.json()["id"])


async def _follow_on_every_replica(lb_url: str, token: str, job_id: str, kill: Callable[[], None]) -> list[list[Event]]:
    """The job's stream read by three clients through the load balancer, as the product's client
    reads it (`api_client` resumes with Last-Event-ID after a drop). Opened one after the other
    with nothing else through the load balancer, round robin puts one on each replica: whichever
    replica `kill` kills, one of them is cut and resumes on another. `kill` (or another fault) is
    called once line 5 is in, in a thread; each stream is read to its exit event."""
    seen: list[list[Event]] = [[], [], []]
    opened = [anyio.Event() for _ in seen]
    fifth_line = anyio.Event()

    async def follow(n: int) -> None:
        async with Client(lb_url, token=token) as client:
            async for event in client.jobs.stream(job_id):
                seen[n].append(event)
                opened[n].set()
                if event.event == "line" and event.data["seq"] >= 5:
                    fifth_line.set()

    with anyio.fail_after(RELINK_TIMEOUT_S * 2):
        async with anyio.create_task_group() as streams:
            for n in range(len(seen)):
                streams.start_soon(follow, n)
                await opened[n].wait()
            await fifth_line.wait()
            await anyio.to_thread.run_sync(kill)  # the streams are read meanwhile
    return seen


def _counting_request(http: httpx.Client, agent: Agent, site: str, lines: int) -> dict[str, Any]:
    """The body of a job request that runs `count_script(lines)` in `site` (a cron entry run now)."""
    script = agent.home / site.replace(".", "-") / "count.sh"
    script.write_text(count_script(lines))
    script.chmod(0o644)  # the site's user reads it
    cron = {"domain": site, "schedule": "@daily", "command": "/bin/sh count.sh"}
    assert _run(http, agent.server_id, "cron.add", cron)["status"] == "succeeded"
    entry = _run(http, agent.server_id, "cron.list", {"domain": site})["result"]["entries"][-1]["id"]
    return {"kind": "cron.run", "args": {"id": entry}}


@pytest.fixture
def site(cluster: Cluster) -> Iterator[str]:
    """A site on web-3 (its user runs the cron job), deleted afterwards whatever happened."""
    server_id = cluster.agents["web-3"].server_id
    domain = f"faults-{uuid.uuid4().hex[:6]}.example.com"
    with cluster.http() as http:
        created = _run(http, server_id, "site.create", {"domain": domain})
    assert created["status"] == "succeeded", created
    try:
        yield domain
    finally:
        deleted = _delete_site_offline(cluster.agents["web-3"].home, domain)
        assert deleted.returncode == 0, deleted.stdout + deleted.stderr


def _delete_site_offline(home: Path, domain: str) -> subprocess.CompletedProcess[str]:
    """On the agent's machine, as its job would (a broken cluster must not leave the site's nginx
    server block behind: it would fail every later `nginx -t` on this machine)."""
    subprocess.run(["pkill", "-KILL", "-u", domain.replace(".", "-")], check=False)
    argv = [str(Path(sys.executable).parent / "fleetdeck"), "agent", "run", "--home", str(home)]
    argv += ["--state-dir", str(home.parent / "state"), "site", "delete", domain]
    return subprocess.run(argv, env=child_environment(), capture_output=True, text=True, timeout=120)


@needs_cron_as_root
def test_a_replica_killed_during_a_job_stream_loses_and_repeats_no_output(cluster: Cluster, site: str) -> None:
    agent = cluster.agents["web-3"]
    key = uuid.uuid4().hex
    with cluster.http() as http:
        request = _counting_request(http, agent, site, 80)
        created = http.post(f"/v1/servers/{agent.server_id}/jobs", json=request, headers={"Idempotency-Key": key})
        assert created.status_code == 201, created.text
        job_id = created.json()["id"]
        holder = cluster.replica_holding(agent.server_id)
        streams = anyio.run(_follow_on_every_replica, cluster.lb_url, cluster.token, job_id, holder.kill)
        wait_until(lambda: cluster.linked_to_a_live_replica(agent.server_id), timeout=RELINK_TIMEOUT_S)
        for events in streams:
            lines = [e.data for e in events if e.event == "line"]
            assert [line["text"] for line in lines] == [f"line {i}" for i in range(1, 81)]  # each exactly once
            assert [(e.event, e.data["exit_code"]) for e in events if e.event == "exit"] == [("exit", 0)], events[-3:]
        done = _finished(http, job_id)
        assert (done["status"], done["exit_code"]) == ("succeeded", 0), done
        # The same request again (a client unsure it went through): the same job, not a second one.
        again = http.post(f"/v1/servers/{agent.server_id}/jobs", json=request, headers={"Idempotency-Key": key})
        assert again.status_code in (200, 201) and again.json()["id"] == job_id, again.text
    with cluster.db.connect() as db:
        stored = db.execute(
            sa.text("SELECT first_seq, last_seq FROM job_output WHERE job_id = :id ORDER BY first_seq"),
            {"id": job_id},
        ).all()
        runs = db.execute(
            sa.text("SELECT count(*) FROM jobs WHERE server_id = :id AND kind = 'cron.run'"), {"id": agent.server_id}
        ).scalar_one()
        audited = db.execute(
            sa.text("SELECT count(*) FROM audit_log WHERE action = 'jobs.create' AND details LIKE :job"),
            {"job": f'%"{job_id}"%'},
        ).scalar_one()
    seqs = [seq for first, last in stored for seq in range(first, last + 1)]
    assert seqs == list(range(1, len(seqs) + 1)) and len(seqs) >= 80, stored  # contiguous, each once
    assert (runs, audited) == (1, 1)
    cluster.restart(holder)


# --- outages of the database and the bus ------------------------------------------------------


def _health(url: str) -> tuple[int, str, str, str | None]:
    """`/v1/health` of one replica: its status code, `status`, `database`, `bus`."""
    answer = httpx.get(f"{url}/v1/health", timeout=30)
    body = answer.json()
    return answer.status_code, body["status"], body["database"], body["bus"]


def _refused_for_now(answer: httpx.Response, part: str) -> bool:
    """The contract's 503 while the database or the bus (`part`) is away, with its Retry-After."""
    if answer.status_code != 503 or answer.headers.get("content-type") != "application/json":
        return False
    error = answer.json()["error"]
    return (error["code"], error["details"]["part"]) == ("unavailable", part) and answer.headers[
        "Retry-After"
    ].isdigit()


class CrossCalls(threading.Thread):
    """Load: file calls (`fs/stat`) to every web agent through every replica, round after round,
    until stopped; most cross the bus to the replica holding the agent's link. Keeps each answer:
    the agent's name, its status, and what a 503 of the contract said was away."""

    def __init__(self, cluster: Cluster) -> None:
        super().__init__(daemon=True)
        self.cluster = cluster
        self.answers: list[tuple[str, int, str | None]] = []
        self.stopping = threading.Event()
        for agent in cluster.agents.values():
            (agent.home / "probe.txt").write_text("probed\n")

    def run(self) -> None:
        clients = [replica.http(self.cluster.token) for replica in self.cluster.replicas]
        try:
            # Once stopped, one more round, begun after the stop: the test stops the load when
            # every replica says it is whole again, so that round is what a client sees then
            # (a round begun before may have crossed to a replica still reconnecting).
            while True:
                last_round = self.stopping.is_set()
                for http in clients:
                    for name, agent in self.cluster.agents.items():
                        params = {"scope": "root", "path": "probe.txt"}
                        answer = http.get(f"/v1/servers/{agent.server_id}/fs/stat", params=params)
                        part = next((p for p in ("database", "bus") if _refused_for_now(answer, p)), None)
                        self.answers.append((name, answer.status_code, part))
                if last_round:
                    break
                self.stopping.wait(LOAD_ROUND_PAUSE_S)
        finally:
            for http in clients:
                http.close()

    def __enter__(self) -> CrossCalls:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stopping.set()
        self.join(60)

    def refused_by(self, restarted: str | None = None) -> set[str | None]:
        """What the 503s said was away; every other answer was a 200 (never a 500), or, for the
        agent `restarted` meanwhile, a 409 agent_offline; the last round all 200."""
        allowed = {(name, 409) for name in [restarted] if name}
        assert all(status in (200, 503) or (name, status) in allowed for name, status, _ in self.answers), (
            self.answers,
            _links_dropped_for_silence(self.cluster),
        )
        last_round = len(self.cluster.agents) * len(self.cluster.replicas)
        assert all(status == 200 for _, status, _ in self.answers[-last_round:]), self.answers[-20:]
        return {part for _, status, part in self.answers if status == 503}


def _links_dropped_for_silence(cluster: Cluster) -> list[str]:
    """The log lines of agents and replicas that gave a link up for silence: a 409 agent_offline
    then comes from a starved process (a loaded machine), not from the fault under test."""
    logs = [agent.home.parent / "agent.log" for agent in cluster.agents.values()]
    lines = [line for path in logs for line in path.read_text(errors="replace").splitlines()]
    lines += [line for replica in cluster.replicas for line in replica.log().splitlines()]
    return [line for line in lines if "no word from the control plane" in line or "dropping its link" in line]


def _log_marks(cluster: Cluster) -> list[int]:
    return [len(replica.log()) for replica in cluster.replicas]


def _logged_since(cluster: Cluster, marks: list[int], text: str) -> list[int]:
    """How many lines with `text` each replica logged since `marks`."""
    return [replica.log()[mark:].count(text) for replica, mark in zip(cluster.replicas, marks, strict=True)]


def _every_agent_online_on_every_replica(cluster: Cluster) -> bool:
    wanted = {agent.server_id for agent in [cluster.node, *cluster.agents.values()]}
    for replica in cluster.replicas:
        with replica.http(cluster.token) as http:
            servers = http.get("/v1/servers").json()["servers"]
        if not wanted <= {server["id"] for server in servers if server["agent"]["online"]}:
            return False
    return True


def _created_with(cluster: Cluster, key: str) -> int:
    with cluster.db.connect() as db:
        query = sa.text("SELECT count(*) FROM jobs WHERE idempotency_key = :key")
        return int(db.execute(query, {"key": key}).scalar_one())


def _through_the_load_balancer(cluster: Cluster) -> str:
    """`/v1/health` through the load balancer: "serving" (a replica's 200), "unavailable" (a
    replica's own 503, sent before the checks noticed), or "out" (the load balancer's own 503:
    its checks took every replica out of rotation)."""
    answer = httpx.get(f"{cluster.lb_url}/v1/health", timeout=30)
    if answer.status_code == 200:
        return "serving"
    assert answer.status_code == 503, answer.text
    return "unavailable" if answer.headers.get("content-type") == "application/json" else "out"


def _database_away(cluster: Cluster, refused_key: str) -> None:
    """PostgreSQL stopped for OUTAGE_S (`pg_ctl stop -m fast`), then started on the same port and
    data: meanwhile every replica says so on `/v1/health` (503), a job request answers 503 and
    makes nothing, and the client's `health()` names the database."""
    cluster.postgres.stop()
    stopped = time.monotonic()
    try:
        for replica in cluster.replicas:
            wait_until(lambda: _health(replica.base_url) == (503, "unavailable", "unavailable", "ok"), timeout=30)  # noqa: B023
        # The load balancer's checks (the README's, on /v1/health) took every replica out: it
        # answers in its own words that no server is available.
        wait_until(lambda: _through_the_load_balancer(cluster) == "out", timeout=30)
        web = cluster.agents["web-1"]
        with cluster.replicas[0].http(cluster.token) as http:
            request = {"kind": "system.info", "args": {}}
            refused = http.post(
                f"/v1/servers/{web.server_id}/jobs", json=request, headers={"Idempotency-Key": refused_key}
            )
        assert _refused_for_now(refused, "database"), (refused.status_code, refused.text)

        async def said_by_the_client() -> None:
            async with Client(cluster.replicas[1].base_url, token=cluster.token) as client:
                with pytest.raises(Unavailable) as away:
                    await client.health()
                assert away.value.details["part"] == "database"

        anyio.run(said_by_the_client)
        # An agent restarted meanwhile: its old link's end and its new link are stored once the
        # database is back (the new link is told to come back until its token can be checked).
        cluster.agents["web-1"].restart()
        time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - stopped)))  # the outage itself, not a wait
    finally:
        cluster.postgres.start()


@needs_cron_as_root
def test_a_postgres_restart_under_load_loses_no_job_and_needs_no_restart(cluster: Cluster, site: str) -> None:
    agent = cluster.agents["web-3"]
    processes = [replica.process for replica in cluster.replicas]
    holders = {name: cluster.holder(a.server_id) for name, a in cluster.agents.items()}
    marks = _log_marks(cluster)
    refused_key = uuid.uuid4().hex
    with cluster.http() as http:
        created = http.post(f"/v1/servers/{agent.server_id}/jobs", json=_counting_request(http, agent, site, 200))
    assert created.status_code == 201, created.text
    job_id = created.json()["id"]
    with CrossCalls(cluster) as load:

        def outage() -> None:
            _database_away(cluster, refused_key)

        streams = anyio.run(_follow_on_every_replica, cluster.lb_url, cluster.token, job_id, outage)
        for replica in cluster.replicas:  # back in service by itself
            wait_until(lambda: _health(replica.base_url) == (200, "ok", "ok", "ok"), timeout=RELINK_TIMEOUT_S)  # noqa: B023
        wait_until(lambda: _through_the_load_balancer(cluster) == "serving", timeout=RELINK_TIMEOUT_S)  # in again
        wait_until(lambda: _every_agent_online_on_every_replica(cluster), timeout=RELINK_TIMEOUT_S)
    assert load.refused_by(restarted="web-1") == {"database"}

    # The job ran on through the outage: every stream has each line once and its exit.
    for events in streams:
        lines = [e.data["text"] for e in events if e.event == "line"]
        assert lines == [f"line {i}" for i in range(1, 201)]
        assert [(e.event, e.data["exit_code"]) for e in events if e.event == "exit"] == [("exit", 0)], events[-3:]
    with cluster.http() as http:
        done = _finished(http, job_id)
    assert (done["status"], done["exit_code"]) == ("succeeded", 0), done
    assert _created_with(cluster, refused_key) == 0  # the request refused during the outage made nothing

    # Nothing was restarted, no link moved but the restarted agent's, and every replica serves: a
    # job through each one on each agent runs (none stuck queued), whichever replica holds its link.
    assert [replica.process for replica in cluster.replicas] == processes
    assert all(process is not None and process.poll() is None for process in processes)
    del holders["web-1"]
    assert {name: cluster.holder(a.server_id) for name, a in cluster.agents.items() if name in holders} == holders
    for replica in cluster.replicas:
        with replica.http(cluster.token) as http:
            for web in cluster.agents.values():
                job = _run(http, web.server_id, "system.info", {})
                assert job["status"] == "succeeded", job
    # One line when the outage began and one when it ended, on each replica: not one per retry.
    assert _logged_since(cluster, marks, "the database is away") == [1, 1, 1]
    assert _logged_since(cluster, marks, "the database is back") == [1, 1, 1]
    assert _logged_since(cluster, marks, "Traceback") == [0, 0, 0]


def test_a_nats_restart_fails_calls_across_replicas_at_once_and_they_work_again(cluster: Cluster) -> None:
    agent = cluster.agents["web-1"]
    holder = cluster.replica_holding(agent.server_id)
    other = next(replica for replica in cluster.replicas if replica is not holder)
    holders = {name: cluster.holder(a.server_id) for name, a in cluster.agents.items()}
    marks = _log_marks(cluster)
    (agent.home / "large.bin").write_bytes(os.urandom(32 * 1024 * 1024))
    stat = {"scope": "root", "path": "large.bin"}
    refused_key = uuid.uuid4().hex
    with CrossCalls(cluster) as load:
        with other.http(cluster.token) as http:
            with http.stream("GET", f"/v1/servers/{agent.server_id}/fs/download", params=stat) as download:
                assert download.status_code == 200
                chunks = download.iter_bytes()
                assert next(chunks)  # relayed over the bus from the replica holding the link
                cluster.nats.stop()
                with pytest.raises(httpx.HTTPError):  # cut when the bus went, never a short file
                    received = sum(len(chunk) for chunk in chunks)
                    pytest.fail(f"the download ended normally after {received} more bytes")
            stopped = time.monotonic()
            for replica in cluster.replicas:
                wait_until(lambda: _health(replica.base_url) == (503, "unavailable", "ok", "unavailable"), timeout=30)  # noqa: B023
            # A call that needs the bus fails at once (not at its 30 s timeout); the replica holding
            # the link still serves it; a job request that needs the bus makes nothing.
            asked = time.monotonic()
            across = http.get(f"/v1/servers/{agent.server_id}/fs/stat", params=stat)
            assert _refused_for_now(across, "bus") and time.monotonic() - asked < 10, across.text
            request = {"kind": "system.info", "args": {}}
            refused = http.post(
                f"/v1/servers/{agent.server_id}/jobs", json=request, headers={"Idempotency-Key": refused_key}
            )
            assert _refused_for_now(refused, "bus"), refused.text
        with holder.http(cluster.token) as http:
            assert http.get(f"/v1/servers/{agent.server_id}/fs/stat", params=stat).status_code == 200
        time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - stopped)))  # the outage itself, not a wait
        cluster.nats.start()
        for replica in cluster.replicas:
            wait_until(lambda: _health(replica.base_url) == (200, "ok", "ok", "ok"), timeout=RELINK_TIMEOUT_S)  # noqa: B023
    assert load.refused_by() == {"bus"}
    assert _created_with(cluster, refused_key) == 0

    with other.http(cluster.token) as http:
        again = http.get(f"/v1/servers/{agent.server_id}/fs/stat", params=stat)
        assert again.status_code == 200, (again.text, _links_dropped_for_silence(cluster))
        job = _run(http, agent.server_id, "system.info", {})  # handed over the bus again
    assert job["status"] == "succeeded", job
    assert {name: cluster.holder(a.server_id) for name, a in cluster.agents.items()} == holders
    assert _logged_since(cluster, marks, "bus: disconnected") == [1, 1, 1]
    assert _logged_since(cluster, marks, "bus: connected again") == [1, 1, 1]
    assert _logged_since(cluster, marks, "Traceback") == [0, 0, 0]


@needs_cron_as_root
def test_a_single_serve_on_postgres_rides_out_a_restart_with_a_job_running(
    cluster: Cluster, cluster_postgres: PostgresDatabases, tmp_path: Path
) -> None:
    """One `fleetdeck serve` (no bus) on the same PostgreSQL server, its own agent and site: the
    same restart while a job runs. (The cluster above rides it out too.)"""
    cp = OwnControlPlane(tmp_path, cluster_postgres.create("single"))
    cp.start()
    home, state = tmp_path / "home", tmp_path / "state"
    home.mkdir()
    state.mkdir()
    domain = f"single-{uuid.uuid4().hex[:6]}.example.com"
    cp.admin("create-org", "single", "--plan", "max")
    cp.admin("create-user", "o@single.example", "--org", "single", "--role", "owner", "--password", "pw-single-1")
    made = cp.admin("create-server", "web", "--org", "single")
    server_id = str(made["id"])
    login = {"email": "o@single.example", "password": "pw-single-1"}
    token = httpx.post(f"{cp.base_url}/v1/auth/login", json=login).json()["token"]
    with open(tmp_path / "agent.log", "a") as log:
        agent = Agent(server_id, home, start_agent(cp.base_url, str(made["agent_token"]), home, state, stderr=log))
    try:
        with cp.http(token) as http:
            wait_until(lambda: http.get(f"/v1/servers/{server_id}").json()["agent"]["online"], timeout=30)
            assert _run(http, server_id, "site.create", {"domain": domain})["status"] == "succeeded"
            job_id = http.post(
                f"/v1/servers/{server_id}/jobs", json=_counting_request(http, agent, domain, 100)
            ).json()["id"]
            wait_until(lambda: http.get(f"/v1/jobs/{job_id}").json()["status"] == "running", timeout=30)
        cluster_postgres.server.stop()
        try:
            wait_until(lambda: _health(cp.base_url) == (503, "unavailable", "unavailable", None), timeout=30)
            with cp.http(token) as http:
                assert _refused_for_now(http.get(f"/v1/jobs/{job_id}"), "database")
            time.sleep(OUTAGE_S)  # the outage itself, not a wait
        finally:
            cluster_postgres.server.start()
        wait_until(lambda: _health(cp.base_url) == (200, "ok", "ok", None), timeout=RELINK_TIMEOUT_S)
        with cp.http(token) as http:
            done = _finished(http, job_id)
            assert (done["status"], done["exit_code"]) == ("succeeded", 0), done
            events = SSEParser().feed(http.get(f"/v1/jobs/{job_id}/stream").content)
            assert [e.data["text"] for e in events if e.event == "line"] == [f"line {i}" for i in range(1, 101)]
            assert _run(http, server_id, "system.info", {})["status"] == "succeeded"  # and the next one runs
        assert cp.process is not None and cp.process.poll() is None
        assert "Traceback" not in cp.log() and cp.log().count("the database is away") == 1
    finally:
        _delete_site_offline(home, domain)
        agent.stop()
        cp.stop()
