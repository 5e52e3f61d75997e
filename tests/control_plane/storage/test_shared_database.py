"""Correctness with several control planes on one database comes from the database, not from a
process's memory: two `fleetdeck serve` processes on one PostgreSQL database, asked at the same
moment, make one job of one Idempotency-Key and give each load-balancer change a revision of its
own; and a job's output seqs are stored once, whoever writes them (on both kinds of database).
Without its driver, a PostgreSQL URL is one clear line.

The load-balancer changes need no agent (their `lb.apply` queues for its node), so those two
processes share nothing but the database. A job on the plain jobs route needs its server's
agent online: for the Idempotency-Key, an agent is linked to the first of two processes that
also share a bus (NATS), the second passing its job on; the one job still comes from the
database's unique key, not from the bus.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from control_plane.clock import now_iso
from control_plane.jobs import store as job_store
from control_plane.jobs.lines import Run
from control_plane.replicas import store as replica_store
from control_plane.storage import Database
from control_plane.storage.schema import job_output, orgs, servers
from control_plane.storage.schema import replicas as replica_rows
from tests.conftest import AgentProcess, python_env
from tests.helpers import wait_until
from tests.helpers.control_planes import OwnControlPlane
from tests.helpers.postgres_server import PostgresDatabases
from tests.helpers.replicas import start_nats

OWNER, PASSWORD = "owner@replicas.example", "pw-replicas-1"
PROXY = "127.0.0.9"


class Replicas:
    """Two control planes on one PostgreSQL database (and `env`: a bus), an org with an owner, and its token."""

    def __init__(self, folder: Path, db_url: str, env: dict[str, str] | None = None) -> None:
        # The second is behind a proxy at PROXY (its X-Forwarded-For is believed there, only).
        proxied = {**(env or {}), "FLEETDECK_TRUSTED_PROXIES": PROXY}
        self.planes = [
            OwnControlPlane(folder, db_url, "first", env),
            OwnControlPlane(folder, db_url, "second", proxied),
        ]
        for plane in self.planes:
            plane.start()  # one after the other: the first migrates, the second finds it done
        first = self.planes[0]
        first.admin("create-org", "replicas", "--plan", "max")
        first.admin("create-user", OWNER, "--org", "replicas", "--role", "owner", "--password", PASSWORD)
        login = httpx.post(f"{first.base_url}/v1/auth/login", json={"email": OWNER, "password": PASSWORD})
        self.token = login.json()["token"]

    def http(self, index: int) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.token}"}
        return httpx.Client(base_url=self.planes[index].base_url, headers=headers, timeout=60)

    def online_on(self, index: int, server_id: str) -> bool:
        with self.http(index) as http:
            return bool(http.get(f"/v1/servers/{server_id}").json()["agent"]["online"])

    def server(self, kind: str) -> str:
        server_id, _agent_token = self.server_and_token(kind)
        return server_id

    def server_and_token(self, kind: str) -> tuple[str, str | None]:
        name = f"{kind}-{uuid.uuid4().hex[:8]}"
        with self.http(0) as http:
            answer = http.post("/v1/servers", json={"name": name, "kind": kind, "address": "127.0.0.1"})
        assert answer.status_code == 201, answer.text
        return answer.json()["server"]["id"], answer.json().get("agent_token")

    def stop(self) -> None:
        for plane in self.planes:
            plane.stop()


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory, control_plane_postgres: PostgresDatabases) -> Iterator[Replicas]:
    started = Replicas(tmp_path_factory.mktemp("replicas"), control_plane_postgres.create("replicas"))
    yield started
    started.stop()


@dataclass
class LinkedReplicas:
    """`Replicas` sharing a bus, and a full server whose agent is linked to the first."""

    replicas: Replicas
    server_id: str
    agent: AgentProcess


@pytest.fixture(scope="module")
def linked(
    tmp_path_factory: pytest.TempPathFactory, control_plane_postgres: PostgresDatabases
) -> Iterator[LinkedReplicas]:
    folder = tmp_path_factory.mktemp("linked")
    nats = start_nats()
    started = None
    agent = None
    try:
        env = {"FLEETDECK_BUS_URL": nats.url}
        started = Replicas(folder, control_plane_postgres.create("linked"), env)
        server_id, agent_token = started.server_and_token("full")
        assert agent_token is not None
        (folder / "home").mkdir()
        plane = started.planes[0]
        agent = AgentProcess(plane, server_id, agent_token, folder / "home", folder / "state", api_token=started.token)
        wait_until(lambda: started.online_on(1, server_id))  # the second sees it through the bus
        yield LinkedReplicas(started, server_id, agent)
    finally:
        if agent is not None:
            agent.stop()
        if started is not None:
            started.stop()
        nats.stop()


def at_once(calls: list[Callable[[], httpx.Response]]) -> list[httpx.Response]:
    """Run the calls in threads of their own, released together; their answers in order."""
    barrier = threading.Barrier(len(calls))

    def released(call: Callable[[], httpx.Response]) -> httpx.Response:
        barrier.wait()
        return call()

    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(released, calls))


def test_one_idempotency_key_sent_to_two_replicas_at_once_makes_one_job(linked: LinkedReplicas) -> None:
    node, rounds = linked.server_id, 8
    with linked.replicas.http(0) as first, linked.replicas.http(1) as second:
        made = []
        for _ in range(rounds):
            headers = {"Idempotency-Key": uuid.uuid4().hex}
            body = {"kind": "site.list", "args": {}}
            url = f"/v1/servers/{node}/jobs"
            answers = at_once([partial(http.post, url, json=body, headers=headers) for http in (first, second)])
            assert [a.status_code for a in answers] == [201, 201], [a.text for a in answers]
            assert answers[0].json()["id"] == answers[1].json()["id"]
            made.append(answers[0].json()["id"])
        jobs = first.get(f"/v1/servers/{node}/jobs", params={"limit": 100}).json()["jobs"]
    assert sorted(job["id"] for job in jobs) == sorted(made) and len(set(made)) == rounds


def test_load_balancer_changes_on_two_replicas_at_once_each_get_a_revision(replicas: Replicas) -> None:
    node, backend = replicas.server("full"), replicas.server("lite")
    with replicas.http(0) as first, replicas.http(1) as second:
        body = {"name": f"web-{uuid.uuid4().hex[:8]}", "port": 80, "node_server_id": node, "engine": "nginx"}
        created = first.post("/v1/load-balancers", json={**body, "backends": [{"server_id": backend}]})
        assert created.status_code == 201, created.text
        lb = created.json()
        assert lb["revision"] == 1
        path = f"/v1/load-balancers/{lb['id']}/backends/{lb['backends'][0]['id']}"
        changes = 12
        replicas_in_turn = [first, second] * (changes // 2)
        patches = [partial(http.patch, path, json={"weight": n + 1}) for n, http in enumerate(replicas_in_turn)]
        answers = at_once(patches)
        assert {a.status_code for a in answers} == {200}, [a.text for a in answers]
        assert first.get(f"/v1/load-balancers/{lb['id']}").json()["revision"] == changes + 1
        audit = first.get("/v1/audit", params={"action": "load_balancers.backend_update", "limit": 100}).json()
        revisions = [e["details"]["revision"] for e in audit["entries"] if e["details"]["lb_id"] == lb["id"]]
        assert sorted(revisions) == list(range(2, changes + 2))
        applies = first.get(f"/v1/servers/{node}/jobs", params={"limit": 100}).json()["jobs"]
    queued = [job["args"]["revision"] for job in applies if job["status"] == "queued"]
    assert queued == [changes + 1]  # the older applies were superseded, whichever replica took them
    assert len(applies) == changes + 1


def _login(plane: OwnControlPlane, email: str, password: str, source: str, forwarded: str | None = None) -> int:
    """A login's status, sent from `source` (any of 127.0.0.0/8), with `forwarded` as its X-Forwarded-For."""
    headers = {"X-Forwarded-For": forwarded} if forwarded else {}
    with httpx.Client(transport=httpx.HTTPTransport(local_address=source), timeout=30) as http:
        body = {"email": email, "password": password}
        return http.post(f"{plane.base_url}/v1/auth/login", json=body, headers=headers).status_code


def test_login_failures_count_on_every_replica_and_through_the_proxy(replicas: Replicas) -> None:
    """The failures are counted in the database: ten on one replica throttle that source on the
    other. Behind the trusted proxy, the source is the address it forwards (the rightmost one:
    what a client writes left of it proves nothing); elsewhere the header is never believed."""
    first, second = replicas.planes
    email, password = f"door-{uuid.uuid4().hex[:8]}@replicas.example", "pw-door-1"
    first.admin("create-user", email, "--org", "replicas", "--role", "member", "--password", password)
    attacker, owner = "127.0.0.20", "127.0.0.21"
    assert [_login(first, email, "guess", attacker) for _ in range(10)] == [401] * 10
    assert _login(second, email, password, attacker) == 429
    assert _login(second, email, password, owner) == 200
    assert _login(second, email, password, PROXY, forwarded=attacker) == 429
    assert _login(second, email, password, PROXY, forwarded=f"{attacker}, {owner}") == 200
    assert _login(first, email, password, attacker, forwarded=owner) == 429  # not a proxy: not believed
    assert _login(first, email, password, "127.0.0.22", forwarded=attacker) == 200
    with replicas.http(1) as http:
        entries = http.get("/v1/audit", params={"action": "auth.throttled"}).json()["entries"]
    assert [e["details"]["source"] for e in entries if e["target"] == email] == [attacker]


# --- job output: one row per seq, whoever writes ---------------------------------------------


@pytest.fixture
def job_db(database_url: str) -> Iterator[tuple[Database, str]]:
    """A migrated database of each kind with one job."""
    db = Database(database_url)
    db.migrate()
    with db.engine.begin() as conn:
        conn.execute(orgs.insert().values(id="org_1", name="one", plan="max", created_at=now_iso()))
        conn.execute(servers.insert().values(id="srv_1", org_id="org_1", name="s", kind="full", created_at=now_iso()))
        job = job_store.create_job(
            conn,
            org_id="org_1",
            server_id="srv_1",
            kind="system.info",
            args={},
            argv=["true"],
            created_by=None,
            idempotency_key=None,
        )
    yield db, job["id"]
    db.dispose()


def runs_of(first: int, last: int, size: int) -> list[list[Run]]:
    """Lines `first`..`last` as batches of `size` lines, one run each (what one writer stores at a time)."""
    at = now_iso()
    return [
        [Run(seq, "stdout", at, [f"line {n}" for n in range(seq, min(seq + size, last + 1))])]
        for seq in range(first, last + 1, size)
    ]


def test_two_writers_of_one_jobs_output_store_each_seq_once(job_db: tuple[Database, str]) -> None:
    """Two writers (two replicas during a relink) store the same lines, cut differently, at once."""
    db, job_id = job_db
    last = 600
    writers = [runs_of(1, last, 7), runs_of(1, last, 11)]
    barrier = threading.Barrier(len(writers))

    def write(batches: list[list[Run]]) -> None:
        barrier.wait()
        for batch in batches:
            db.run_sync(job_store.insert_lines, job_id, batch)

    with ThreadPoolExecutor(len(writers)) as pool:
        list(pool.map(write, writers))
    rows = db.run_sync(
        lambda conn: conn.execute(
            sa.select(job_output.c.first_seq, job_output.c.last_seq)
            .where(job_output.c.job_id == job_id)
            .order_by(job_output.c.first_seq)
        ).all()
    )
    assert [first for first, _ in rows] == [1] + [row_last + 1 for _, row_last in rows[:-1]]  # no overlap, no gap
    assert rows[-1][1] == last
    stored = [line for run in db.run_sync(job_store.lines_through, job_id, last) for line in run.lines()]
    assert [line["text"] for line in stored] == [f"line {n}" for n in range(1, last + 1)]


def test_a_chunk_of_a_seq_stored_already_is_refused_by_the_key(job_db: tuple[Database, str]) -> None:
    db, job_id = job_db
    row = {"job_id": job_id, "first_seq": 1, "last_seq": 1, "lines": b"[]"}
    db.run_sync(lambda conn: conn.execute(job_output.insert(), row))
    with pytest.raises(sa.exc.IntegrityError):
        db.run_sync(lambda conn: conn.execute(job_output.insert(), {**row, "last_seq": 5}))


# --- the driver ------------------------------------------------------------------------------

# The child runs `fleetdeck` as if the `postgres` extra were not installed: psycopg cannot be imported.
WITHOUT_PSYCOPG = (
    "import sys; sys.modules['psycopg'] = None; from fleetdeck.cli import main; sys.exit(main(sys.argv[1:]))"
)
NO_SERVER = "postgresql+psycopg://fleetdeck:pw@127.0.0.1:9/fleetdeck"


@pytest.mark.parametrize(
    "command",
    [
        ["serve", "--db", NO_SERVER, "--listen", "127.0.0.1:0"],
        ["admin", "create-org", "x", "--plan", "max", "--db", NO_SERVER],
        ["local", "--db", NO_SERVER],
    ],
    ids=["serve", "admin", "local"],
)
def test_a_postgresql_url_without_the_driver_says_which_extra_in_one_line(command: list[str], tmp_path: Path) -> None:
    if command[0] == "local":
        command = [*command, "--data-dir", str(tmp_path / "local")]
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_PSYCOPG, *command], env=python_env(), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "fleetdeck[postgres]" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_a_postgresql_url_naming_no_driver_means_psycopg(control_plane_postgres: PostgresDatabases) -> None:
    url = control_plane_postgres.create("plain").replace("postgresql+psycopg://", "postgresql://")
    db = Database(url)
    try:
        db.migrate()
        assert db.engine.dialect.driver == "psycopg"
    finally:
        db.dispose()


def test_two_replicas_creating_one_server_name_at_once_answer_201_and_409(replicas: Replicas) -> None:
    with replicas.http(0) as first, replicas.http(1) as second:
        for _ in range(6):
            body = {"name": f"same-{uuid.uuid4().hex[:8]}", "kind": "lite"}
            answers = at_once([partial(http.post, "/v1/servers", json=body) for http in (first, second)])
            assert sorted(a.status_code for a in answers) == [201, 409], [a.text for a in answers]


def test_reads_of_one_kind_and_args_ending_at_once_keep_one_cached_result(job_db: tuple[Database, str]) -> None:
    db, job_id = job_db
    for round_ in range(10):
        key = f"args-{round_}"
        barrier = threading.Barrier(2)

        def remember(result: str, key: str = key, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            db.run_sync(job_store.remember_read, "srv_1", "system.info", key, job_id, result)

        with ThreadPoolExecutor(2) as pool:
            list(pool.map(remember, ["one", "two"]))
        cached = db.run_sync(job_store.cached_read, "srv_1", "system.info", key)
        assert cached is not None and cached["result"] in ('"one"', '"two"')


def test_a_presence_event_waits_for_the_one_before_it_to_commit(control_plane_postgres: PostgresDatabases) -> None:
    """Presence feeds read "events after the last id seen" on every replica: an event whose lower
    id committed after a higher one would never be read. So a second writer waits (here: gives up
    after its lock timeout) while the first has not committed, and then gets the next id. (On
    SQLite one transaction writes at a time, so only PostgreSQL needs saying so.)"""
    db = Database(control_plane_postgres.create("events"))
    db.migrate()
    try:
        with db.engine.begin() as first:
            replica_store.add_presence_event(first, "org-1", {"n": 1})
            with pytest.raises(sa.exc.OperationalError, match="lock timeout"), db.engine.begin() as second:
                second.execute(sa.text("SET LOCAL lock_timeout = '300ms'"))
                replica_store.add_presence_event(second, "org-1", {"n": 2})
        db.run_sync(replica_store.add_presence_event, "org-1", {"n": 3})
        events = db.run_sync(replica_store.presence_events_after, 0)
        assert [payload["n"] for _id, _org, payload in events] == [1, 3]
    finally:
        db.dispose()


def test_a_replica_beating_while_another_takes_it_for_dead_keeps_its_links(
    control_plane_postgres: PostgresDatabases,
) -> None:
    """A replica late with its heartbeat (starved in a relink storm) beats just as another takes it
    for dead. Either its row and its links stay, or both go and its next beat says so (it claims
    its links again): never its links released while its row stays, which left its agents offline
    on every other replica for good. Here its beat holds the row when the reaper comes: the reaper
    waits, sees the fresh heartbeat, and releases nothing. Late for real, it is reaped in full."""
    db = Database(control_plane_postgres.create("reap"))
    db.migrate()
    try:
        with db.engine.begin() as conn:
            conn.execute(orgs.insert().values(id="org_1", name="one", plan="max", created_at=now_iso()))
            conn.execute(
                servers.insert().values(id="srv_1", org_id="org_1", name="s", kind="full", created_at=now_iso())
            )
            stale = time.time() - 60
            conn.execute(replica_rows.insert().values(id="rpl_late", started_at=now_iso(), heartbeat_at=stale))
            replica_store.claim_link(conn, "srv_1", "rpl_late", "rpl_late.1")
        with ThreadPoolExecutor(1) as pool:
            with db.engine.begin() as beating:
                assert replica_store.beat(beating, "rpl_late")  # the row is its own until it commits
                reaped = pool.submit(db.run_sync, replica_store.reap_dead_links, 5.0)
                wait_until(lambda: db.run_sync(_waiting_for_a_lock) > 0)
            assert reaped.result(timeout=30) == 0
        assert db.run_sync(replica_store.link_holders, ["srv_1"]) == {"srv_1": "rpl_late"}

        with db.engine.begin() as conn:
            conn.execute(replica_rows.update().where(replica_rows.c.id == "rpl_late").values(heartbeat_at=stale))
        last = db.run_sync(replica_store.last_presence_event)
        assert db.run_sync(replica_store.reap_dead_links, 5.0) == 1
        assert db.run_sync(replica_store.link_holders, ["srv_1"]) == {}
        events = db.run_sync(replica_store.presence_events_after, last)
        assert [(org, event["server_id"], event["online"]) for _id, org, event in events] == [("org_1", "srv_1", False)]
        assert db.run_sync(replica_store.beat, "rpl_late") is False  # back: told to claim its links again
    finally:
        db.dispose()


def _waiting_for_a_lock(conn: sa.engine.Connection) -> int:
    query = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
    return int(conn.execute(sa.text(query)).scalar_one())
