"""Job dispatch end to end: the real control plane, the real agent, real SQLite and PostgreSQL, over 127.0.0.1."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
import trio

from api_client import Client, SSEParser
from contract.errors import AgentOffline
from tests.conftest import AgentProcess, Stack, start_agent, start_local
from tests.helpers import wait_until
from tests.helpers.control_planes import OwnControlPlane
from tests.helpers.databases import is_postgres, query
from tests.helpers.site_logs import logs_layout, write_site_log

pytestmark = pytest.mark.stack_variants("sqlite", "postgresql", "uvicorn")


def code(response: httpx.Response) -> str:
    value: str = response.json()["error"]["code"]
    return value


def run(http: httpx.Client, server_id: str, kind: str, args: dict[str, Any] | None = None, **kw: Any) -> httpx.Response:
    return http.post(f"/v1/servers/{server_id}/jobs", json={"kind": kind, "args": args or {}}, **kw)


def wait_finished(http: httpx.Client, job_id: str, timeout: float = 30) -> dict[str, Any]:
    job: dict[str, Any] = {}

    def finished() -> bool:
        job.update(http.get(f"/v1/jobs/{job_id}").json())
        return job["status"] in ("succeeded", "failed", "interrupted")

    wait_until(finished, timeout=timeout)
    return job


def test_catalog_is_served_with_schemas(stack: Stack) -> None:
    with stack.http() as http:
        kinds = http.get("/v1/job-kinds").json()["kinds"]
    assert len(kinds) >= 120
    by_name = {k["kind"]: k for k in kinds}
    assert by_name["site.create"]["group"] == "content" and not by_name["site.create"]["read"]
    assert by_name["site.list"]["group"] == "observe" and by_name["site.list"]["read"]
    assert by_name["site.create"]["args_schema"]["properties"]["domain"]
    assert any(k["secret_fields"] for k in kinds)
    # Destructive kinds name the argument a client asks to be typed again; the others none.
    assert by_name["site.delete"]["confirm"] == "domain" and by_name["db.drop"]["confirm"] == "name"
    assert by_name["user.delete"]["confirm"] == "username"
    assert by_name["site.create"]["confirm"] is None and by_name["site.disable"]["confirm"] is None


@pytest.mark.parametrize("kind", ["nope.nothing", "Site.List", " site.list", "site.list ", "site list", "SITE.LIST"])
def test_unknown_kinds(stack: Stack, kind: str) -> None:
    with stack.http() as http:
        answer = run(http, stack.server_id, kind)
    assert answer.status_code == 422 and code(answer) == "unknown_kind"


@pytest.mark.parametrize(
    "args",
    [
        {"domain": "-rf.example.com"},
        {"domain": "example.com; rm -rf /"},
        {"domain": "$(reboot).example.com"},
        {"domain": "example.com", "profile": "../x"},
        {"domain": "example.com", "surprise": 1},
        {},
    ],
)
def test_bad_arguments(stack: Stack, args: dict[str, Any]) -> None:
    with stack.http() as http:
        answer = run(http, stack.server_id, "site.create", args)
    assert answer.status_code == 422 and code(answer) == "validation_error", answer.text
    assert answer.json()["error"]["details"]["errors"]


# What the API accepts, the agent accepts: one model decides (measured once: the API took
# "laravel" and "@midnight" and the agent refused them with exit 2; the agent took MON-FRI and
# minute 61, the API refused them).


@pytest.mark.parametrize(
    ("kind", "args"),
    [
        ("site.create", {"domain": "example.com", "profile": "laravel"}),  # no template on the agent
        ("cron.add", {"domain": "example.com", "schedule": "61 * * * *", "command": "/bin/true"}),
    ],
)
def test_what_the_agent_cannot_run_is_refused_by_the_api(stack: Stack, kind: str, args: dict[str, Any]) -> None:
    with stack.http() as http:
        answer = run(http, stack.server_id, kind, args)
    assert answer.status_code == 422 and code(answer) == "validation_error", answer.text


@pytest.mark.parametrize("schedule", ["@midnight", "0 0 * * MON-FRI"])
def test_a_schedule_the_api_accepts_reaches_the_agents_handler(stack: Stack, schedule: str) -> None:
    args = {"domain": "absent.example.org", "schedule": schedule, "command": "/bin/true"}
    with stack.http() as http:
        job = run(http, stack.server_id, "cron.add", args).json()
        done = wait_finished(http, job["id"])
        stream = http.get(f"/v1/jobs/{job['id']}/stream").text
    # The handler ran (and found no such site): the argv was not refused (that would be exit 2).
    assert done["exit_code"] == 1 and "no site absent.example.org on this server" in stream, stream


def test_backup_and_lb_kinds_have_their_own_routes(stack: Stack) -> None:
    with stack.http() as http:
        catalog = http.get("/v1/job-kinds").json()["kinds"]
        routed = {k["kind"]: k["route"] for k in catalog if k["route"] is not None}
        assert {k["domain"] for k in catalog if k["kind"] in routed} == {"backup", "lb"}
        assert routed["lb.apply"] == "/v1/load-balancers"
        assert routed["backup.schedule-list"] == "/v1/servers/{server_id}/backups"
        for kind in routed:
            answer = run(http, stack.server_id, kind, {})
            assert answer.status_code == 422 and code(answer) == "kind_not_allowed", kind


def _org(stack: Stack, plan: str, role: str = "owner") -> tuple[str, str]:
    """A new org on `plan` with a user of `role` and a server; returns (token, server_id)."""
    name = f"org-{uuid.uuid4().hex[:8]}"
    stack.admin("create-org", name, "--plan", plan)
    email = f"{role}@{name}.test"
    stack.admin("create-user", email, "--org", name, "--role", role, "--password", "pw-123456")
    server = stack.admin("create-server", "web-1", "--org", name)
    token = stack.login(email, "pw-123456")
    return token, str(server["id"])


def test_plan_below_the_kind_is_refused_before_the_server(stack: Stack) -> None:
    token, server_id = _org(stack, "plus")
    with stack.http(token) as http:
        pro_kind = next(k for k in http.get("/v1/job-kinds").json()["kinds"] if k["min_plan"] == "pro")
        answer = run(http, server_id, pro_kind["kind"], {})
        assert answer.status_code == 403 and code(answer) == "tier_required"
        assert answer.json()["error"]["details"] == {"required_plan": "pro", "current_plan": "plus"}
        assert http.get(f"/v1/servers/{server_id}/jobs").json()["jobs"] == []


def test_role_without_the_group_is_forbidden(stack: Stack) -> None:
    email = f"member-{uuid.uuid4().hex[:6]}@demo.test"
    stack.admin("create-user", email, "--org", "demo", "--role", "member", "--password", "pw-123456")
    token = stack.login(email, "pw-123456")
    with stack.http(token) as http:
        refused = run(http, stack.server_id, "site.create", {"domain": "member.example.com"})
        assert refused.status_code == 403 and code(refused) == "forbidden"
        refused = run(http, stack.server_id, "service.restart", {"name": "cron"})
        assert refused.status_code == 403 and code(refused) == "forbidden"
        allowed = run(http, stack.server_id, "site.list")
        assert allowed.status_code == 201, allowed.text


def test_other_orgs_servers_and_jobs_are_404(stack: Stack) -> None:
    token, other_server = _org(stack, "max")
    with stack.http() as http:
        mine = run(http, stack.server_id, "system.info").json()["id"]
        assert run(http, other_server, "system.info").status_code == 404
        assert http.get(f"/v1/servers/{other_server}/jobs").status_code == 404
    with stack.http(token) as http:
        for route in (f"/v1/jobs/{mine}", f"/v1/jobs/{mine}/stream"):
            answer = http.get(route)
            assert answer.status_code == 404 and code(answer) == "not_found"
        assert run(http, stack.server_id, "system.info").status_code == 404


def test_lite_server(stack: Stack) -> None:
    with stack.http() as http:
        lite = http.post("/v1/servers", json={"name": f"lite-{uuid.uuid4().hex[:6]}", "kind": "lite"}).json()["server"]
        answer = run(http, lite["id"], "system.info")
    assert answer.status_code == 422 and code(answer) == "lite_server"


def test_idempotency_key_returns_the_first_job(stack: Stack) -> None:
    key = uuid.uuid4().hex
    with stack.http() as http:
        first = run(http, stack.server_id, "system.info", headers={"Idempotency-Key": key})
        again = run(http, stack.server_id, "system.info", headers={"Idempotency-Key": key})
        other = run(http, stack.server_id, "system.info", headers={"Idempotency-Key": key + "x"})
    assert first.status_code == again.status_code == 201
    assert first.json()["id"] == again.json()["id"] != other.json()["id"]


@pytest.mark.anyio
async def test_concurrent_requests_with_one_idempotency_key_get_one_job(stack: Stack) -> None:
    """Sixty requests at once with the same key: every one gets 201 and the same job."""
    key = uuid.uuid4().hex
    answers: list[httpx.Response] = []
    headers = {"Authorization": f"Bearer {stack.token}", "Idempotency-Key": key}
    async with httpx.AsyncClient(base_url=stack.base_url, headers=headers, timeout=60) as http:

        async def create() -> None:
            body = {"kind": "site.list", "args": {}}
            answers.append(await http.post(f"/v1/servers/{stack.server_id}/jobs", json=body))

        async with trio.open_nursery() as nursery:
            for _ in range(60):
                nursery.start_soon(create)
    assert sorted({answer.status_code for answer in answers}) == [201], [a.text for a in answers if a.is_error][:3]
    assert len({answer.json()["id"] for answer in answers}) == 1


def test_an_idempotency_key_reused_with_another_body_is_422(stack: Stack) -> None:
    key = uuid.uuid4().hex
    with stack.http() as http:
        tail = {"domain": "example.com", "log": "error", "lines": 10}
        first = run(http, stack.server_id, "logs.tail", tail, headers={"Idempotency-Key": key})
        other_kind = run(http, stack.server_id, "site.list", headers={"Idempotency-Key": key})
        other_args = run(http, stack.server_id, "logs.tail", {**tail, "lines": 20}, headers={"Idempotency-Key": key})
    assert first.status_code == 201
    for answer in (other_kind, other_args):
        assert answer.status_code == 422
        assert answer.json()["error"]["code"] == "idempotency_mismatch"
        assert answer.json()["error"]["details"] == {"job_id": first.json()["id"]}


def test_a_resume_id_past_any_sequence_number_is_422(stack: Stack) -> None:
    with stack.http() as http:
        job = run(http, stack.server_id, "site.list").json()
        wait_finished(http, job["id"])
        answer = http.get(f"/v1/jobs/{job['id']}/stream", headers={"Last-Event-ID": str(2**63)})
        assert answer.status_code == 422 and answer.json()["error"]["code"] == "validation_error"
        largest = http.get(f"/v1/jobs/{job['id']}/stream", headers={"Last-Event-ID": str(2**63 - 1)})
        assert largest.status_code == 200 and "event: exit" in largest.text and "event: line" not in largest.text


def test_read_job_result_and_history(stack: Stack) -> None:
    with stack.http() as http:
        job = run(http, stack.server_id, "site.list").json()
        done = wait_finished(http, job["id"])
        assert done["status"] == "succeeded" and done["exit_code"] == 0
        assert "example.com" in str(done["result"])
        history = http.get(f"/v1/servers/{stack.server_id}/jobs", params={"limit": 5}).json()["jobs"]
        assert history[0]["id"] == job["id"]
        assert [j["created_at"] for j in history] == sorted((j["created_at"] for j in history), reverse=True)


def test_a_look_up_runs_and_is_audited_but_stays_out_of_the_history(stack: Stack) -> None:
    """A read a client runs for itself (a form's choices) is no job its user ran: the history
    lists it only when asked; a change to the server is never a look-up."""
    with stack.http() as http:
        created = http.post(f"/v1/servers/{stack.server_id}/jobs", json={"kind": "site.list", "lookup": True})
        assert created.status_code == 201, created.text
        looked_up = wait_finished(http, created.json()["id"])
        assert looked_up["status"] == "succeeded" and looked_up["lookup"] is True
        assert "example.com" in str(looked_up["result"])
        mine = run(http, stack.server_id, "site.list").json()
        history = http.get(f"/v1/servers/{stack.server_id}/jobs", params={"limit": 500}).json()["jobs"]
        assert mine["id"] in [j["id"] for j in history] and looked_up["id"] not in [j["id"] for j in history]
        everything = http.get(f"/v1/servers/{stack.server_id}/jobs", params={"limit": 500, "lookups": True})
        assert looked_up["id"] in [j["id"] for j in everything.json()["jobs"]]
        audited = http.get("/v1/audit", params={"action": "jobs.create", "limit": 20}).json()["entries"]
        assert looked_up["id"] in [e["details"]["job_id"] for e in audited]
        write = http.post(
            f"/v1/servers/{stack.server_id}/jobs",
            json={"kind": "site.create", "args": {"domain": "x.test"}, "lookup": True},
        )
        assert write.status_code == 422 and write.json()["error"]["code"] == "validation_error"
        assert write.json()["error"]["details"]["errors"][0]["loc"] == ["lookup"]


def test_unknown_handler_exits_127(stack: Stack) -> None:
    with stack.http() as http:
        agent = http.get(f"/v1/servers/{stack.server_id}").json()["agent"]
        assert "docker.status" not in agent["job_kinds"]
        job = run(http, stack.server_id, "docker.status").json()
        done = wait_finished(http, job["id"])
        events = SSEParser().feed(http.get(f"/v1/jobs/{job['id']}/stream").content)
    assert done["exit_code"] == 127 and done["status"] == "failed"
    # It names the agent and the kind, and promises no update that may not exist.
    assert [(e.data["stream"], e.data["text"]) for e in events if e.event == "line"] == [
        ("stderr", f"this agent (fleetdeck-agent {agent['version']}) has no handler for docker.status")
    ]


BIG = 200_000


@pytest.fixture(scope="module")
def big_log(stack: Stack) -> int:
    log = stack.data_dir / "site-logs" / "example-com" / "access.log"  # the stack's sites_log_dir
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as handle:
        for i in range(BIG):
            handle.write(f'203.0.113.{i % 250} - - [22/Nov/2026] "GET /item/{i} HTTP/1.1" 200 {i}\n')
    return BIG


async def _collect(
    client: Client, job_id: str, *, last_event_id: str | None = None, stop_after: int | None = None
) -> tuple[list[dict[str, Any]], dict[str, Any] | None, str | None]:
    lines: list[dict[str, Any]] = []
    stream = client.jobs.stream(job_id, last_event_id=last_event_id)
    events = stream.__aiter__()
    exit_data = None
    async for event in events:
        if event.event == "line":
            lines.append(event.data)
            if stop_after is not None and len(lines) >= stop_after:
                await events.aclose()  # type: ignore[attr-defined]
                break
        elif event.event == "exit":
            exit_data = event.data
    return lines, exit_data, stream.last_event_id


@pytest.mark.anyio
async def test_200k_lines_arrive_complete_and_resume_after_a_drop(stack: Stack, big_log: int) -> None:
    async with Client(stack.base_url, token=stack.token) as client:
        job = await client.jobs.create(stack.server_id, "logs.tail", {"domain": "example.com", "lines": BIG})
        with trio.fail_after(120):
            first, exit_data, last_id = await _collect(client, job.id, stop_after=50_000)
            assert exit_data is None and last_id == str(first[-1]["seq"])
            rest, exit_data, _ = await _collect(client, job.id, last_event_id=last_id)
        seqs = [line["seq"] for line in first + rest]
        assert seqs == list(range(1, BIG + 1))  # nothing lost, nothing repeated
        assert exit_data == {"exit_code": 0, "status": "succeeded"}
        assert first[0]["text"].startswith("203.0.113.0 ") and rest[-1]["text"].endswith(f" {BIG - 1}")
        # A finished job replays its stored lines, then `exit`.
        replay, exit_again, _ = await _collect(client, job.id)
        assert len(replay) == BIG and exit_again == exit_data
        assert (await client.jobs.get(job.id)).status == "succeeded"


SECRET_JOBS = [
    ("image.pull", {"image": "nginx:1.27", "registry_user": "ci"}, "registry_password"),
    ("deploy.git", {"domain": "example.com", "repo": "https://git.example.com/shop.git"}, "token"),
]


@pytest.mark.parametrize(("kind", "args", "secret_field"), SECRET_JOBS)
def test_secret_arguments_reach_no_storage(
    stack: Stack, kind: str, args: dict[str, Any], secret_field: str, request: pytest.FixtureRequest
) -> None:
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    with stack.http() as http:
        created = run(http, stack.server_id, kind, {**args, secret_field: secret})
        assert created.status_code == 201, created.text
        job = created.json()
        assert job["args"][secret_field] == "***"
        done = wait_finished(http, job["id"])
        stream = http.get(f"/v1/jobs/{job['id']}/stream").text
        audit = http.get("/v1/audit", params={"action": "jobs.create"})
        assert audit.status_code == 200 and job["id"] in audit.text
    assert secret not in str(done) and secret not in stream and secret not in audit.text
    for path in database_files(request, stack.db_url):
        assert secret.encode() not in path.read_bytes(), path


def database_files(request: pytest.FixtureRequest, db_url: str) -> list[Path]:
    """The files that hold the database at `db_url`, all it wrote flushed to them: the SQLite file
    and its WAL, or the PostgreSQL database's folder and the server's WAL."""
    if is_postgres(db_url):
        server = request.getfixturevalue("control_plane_postgres").server
        server.psql("CHECKPOINT")
        oid = server.psql(f"SELECT oid FROM pg_database WHERE datname = '{sa.make_url(db_url).database}'")
        return [p for folder in ("base/" + oid, "pg_wal") for p in (server.data / folder).rglob("*") if p.is_file()]
    database = Path(sa.make_url(db_url).database or "")
    query(db_url, "PRAGMA wal_checkpoint(FULL)")
    return list(database.parent.glob(database.name + "*"))


# --- the agent goes away ----------------------------------------------------------------------


@pytest.fixture
def own_agent(stack: Stack, tmp_path: Path) -> Any:
    """A second server with its own agent process, which a test may kill."""
    with stack.http() as http:
        created = http.post("/v1/servers", json={"name": f"jobs-{tmp_path.name[-8:]}", "kind": "full"}).json()
    home, state = tmp_path / "home", tmp_path / "state"
    (home / "site-a").mkdir(parents=True)
    layout, logs = logs_layout(tmp_path)
    write_site_log(logs, "site-a", "access.log", "".join(f"line {i}\n" for i in range(100)))
    state.mkdir()
    (state / "sites.json").write_text('{"sites": [{"domain": "a.example.com", "slug": "site-a"}]}')
    server_id, token = created["server"]["id"], created["agent_token"]

    agent = AgentProcess(stack, server_id, token, home, state, "--host-layout", str(layout))
    yield agent
    agent.stop()


def test_offline_reads_answer_cached_and_mutations_409(stack: Stack, own_agent: Any) -> None:
    server_id = own_agent.server_id
    args = {"domain": "a.example.com", "lines": 10}
    with stack.http() as http:
        live = run(http, server_id, "logs.tail", args).json()
        wait_finished(http, live["id"])
        listed = run(http, server_id, "site.list").json()
        listed_done = wait_finished(http, listed["id"])
        own_agent.kill()
        cached = run(http, server_id, "site.list")
        assert cached.status_code == 200, cached.text
        assert cached.json()["cached"] is True and cached.json()["cached_at"]
        assert cached.json()["result"] == listed_done["result"]
        never_seen = run(http, server_id, "logs.tail", {"domain": "a.example.com", "lines": 11})
        assert never_seen.status_code == 409 and code(never_seen) == "agent_offline"
        mutation = run(http, server_id, "site.create", {"domain": "b.example.com"})
        assert mutation.status_code == 409 and code(mutation) == "agent_offline"


@pytest.mark.anyio
async def test_offline_client_error_class(stack: Stack, own_agent: Any) -> None:
    await trio.to_thread.run_sync(own_agent.kill)
    async with Client(stack.base_url, token=stack.token) as client:
        with pytest.raises(AgentOffline):
            await client.jobs.create(own_agent.server_id, "site.create", {"domain": "c.example.com"})


def test_lb_kinds_are_made_only_through_the_load_balancer_routes(stack: Stack, own_agent: Any) -> None:
    """A plain `lb.apply` took any backend address and any org's server ids: an operator published
    a loopback-only service of the node, or rewrote a managed load balancer behind the control
    plane's back. The load-balancer routes are the only way in; an apply they dispatch while the
    node is offline queues and runs when its agent returns."""
    node = own_agent.server_id
    spec = {"id": "lb_test1", "name": "web", "revision": 1, "port": 80, "engine": "nginx",
            "backends": [{"id": "be_1", "server_id": "srv_other_org", "address": "127.0.0.1", "port": 22}]}  # fmt: skip
    named = {"id": "lb_test1", "name": "web", "engine": "nginx"}
    with stack.http() as http:
        for kind, args in (("lb.apply", spec), ("lb.remove", named), ("lb.status", named)):
            refused = run(http, node, kind, args)
            assert (refused.status_code, code(refused)) == (422, "kind_not_allowed"), refused.text
            assert refused.json()["error"]["details"] == {"kind": kind, "route": "/v1/load-balancers"}
        assert http.get(f"/v1/servers/{node}/jobs").json()["jobs"] == []
        own_agent.kill()
        body = {"name": f"q{uuid.uuid4().hex[:6]}", "port": 80, "node_server_id": node, "engine": "nginx"}
        created = http.post("/v1/load-balancers", json=body)
        assert created.status_code == 201, created.text
        [queued] = http.get(f"/v1/servers/{node}/jobs").json()["jobs"]
        assert (queued["kind"], queued["status"]) == ("lb.apply", "queued")
        own_agent.restart()
        done = wait_finished(http, queued["id"])
        assert done["status"] in ("succeeded", "failed") and done["exit_code"] is not None
        assert http.delete(f"/v1/load-balancers/{created.json()['id']}").status_code == 204


needs_cron_as_root = pytest.mark.skipif(
    shutil.which("crontab") is None or os.geteuid() != 0,
    reason="needs crontab (Debian: cron) and root, for a real site user's long-running cron job",
)


def _long_job(http: httpx.Client, server_id: str, domain: str) -> str:
    """Start a job that runs for a while: a site of its own, a cron entry that sleeps, run now."""
    site = run(http, server_id, "site.create", {"domain": domain})
    assert wait_finished(http, site.json()["id"])["status"] == "succeeded"
    add = run(http, server_id, "cron.add", {"domain": domain, "schedule": "@daily", "command": "/bin/sleep 60"})
    assert wait_finished(http, add.json()["id"])["status"] == "succeeded"
    listed = wait_finished(http, run(http, server_id, "cron.list", {"domain": domain}).json()["id"])
    entries = listed["result"]["entries"] if isinstance(listed["result"], dict) else listed["result"]
    entry = entries[0]["id"]
    job = run(http, server_id, "cron.run", {"id": entry}).json()
    wait_until(lambda: http.get(f"/v1/jobs/{job['id']}").json()["status"] == "running", timeout=10)
    return str(job["id"])


@pytest.fixture
def long_job_site(stack: Stack, own_agent: Any) -> Any:
    """A fresh domain for `_long_job`; its site (and system user) is deleted afterwards."""
    domain = f"int-{uuid.uuid4().hex[:6]}.example.com"
    yield domain
    # The killed agent's `sleep` outlives it, as the site user; userdel refuses a user with processes.
    subprocess.run(["pkill", "-KILL", "-u", domain.replace(".", "-")], check=False)
    if not own_agent.online():
        own_agent.restart()
    with stack.http() as http:
        wait_finished(http, run(http, own_agent.server_id, "site.delete", {"domain": domain}).json()["id"])


@needs_cron_as_root
def test_agent_killed_mid_job_ends_interrupted(stack: Stack, own_agent: Any, long_job_site: str) -> None:
    with stack.http() as http:
        job_id = _long_job(http, own_agent.server_id, long_job_site)
        own_agent.kill()
        done = wait_finished(http, job_id, timeout=20)  # the stack's grace period is 2 s
        assert done["status"] == "interrupted" and done["exit_code"] is None
        stream = http.get(f"/v1/jobs/{job_id}/stream").text
        assert 'event: exit\ndata: {"exit_code":null,"status":"interrupted"}' in stream
        own_agent.restart()
        # A job run after the restart has been dispatched and finished: the interrupted one was not run again.
        wait_finished(http, run(http, own_agent.server_id, "site.list").json()["id"])
        assert http.get(f"/v1/jobs/{job_id}").json()["status"] == "interrupted"


@needs_cron_as_root
def test_agent_restarted_within_the_grace_period_also_interrupts(
    stack: Stack, own_agent: Any, long_job_site: str
) -> None:
    with stack.http() as http:
        job_id = _long_job(http, own_agent.server_id, long_job_site)
        own_agent.process.send_signal(signal.SIGKILL)
        own_agent.process.wait()
        own_agent.restart()  # back within 2 s, but a new process: the run is gone
        done = wait_finished(http, job_id, timeout=20)
        assert done["status"] == "interrupted"


@pytest.mark.anyio
async def test_client_sends_the_idempotency_key(stack: Stack) -> None:
    key = uuid.uuid4().hex
    async with Client(stack.base_url, token=stack.token) as client:
        first = await client.jobs.create(stack.server_id, "system.info", idempotency_key=key)
        again = await client.jobs.create(stack.server_id, "system.info", idempotency_key=key)
        other = await client.jobs.create(stack.server_id, "system.info")
    assert first.id == again.id != other.id


# --- the control plane restarts mid-job -------------------------------------------------------


# Prints a line every 0.1 s for about 6 s, as the site's user: long enough to outlive a restart.
COUNT_SCRIPT = 'i=1\nwhile [ $i -le 60 ]; do echo "line $i"; i=$((i+1)); sleep 0.1; done\n'


@pytest.fixture
def restartable(tmp_path: Path, database_url: str) -> Any:
    """A control plane of its own (on each kind of database) with one server, its agent, and a
    site with a counting script."""
    cp = OwnControlPlane(tmp_path, database_url)
    cp.start()
    cp.admin("create-org", "restarts", "--plan", "max")
    cp.admin("create-user", "o@example.com", "--org", "restarts", "--role", "owner", "--password", "pw-restarts-1")
    agent_token = str(cp.admin("create-server", "web", "--org", "restarts")["agent_token"])
    home, state = tmp_path / "home", tmp_path / "state"
    home.mkdir()
    state.mkdir()
    token = httpx.post(
        f"{cp.base_url}/v1/auth/login", json={"email": "o@example.com", "password": "pw-restarts-1"}
    ).json()["token"]

    class Setup:
        def __init__(self) -> None:
            self.cp = cp
            self.token = token
            self.domain = f"rs-{uuid.uuid4().hex[:6]}.example.com"
            self.agent = self.start_agent()

        def http(self) -> httpx.Client:
            return httpx.Client(base_url=cp.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=30)

        def start_agent(self) -> subprocess.Popen[str]:
            with open(tmp_path / "agent.log", "a") as log:  # the child has its own copy of the file
                return start_agent(cp.base_url, agent_token, home, state, stderr=log)

        def server_id(self) -> str:
            with self.http() as http:
                servers = http.get("/v1/servers").json()["servers"]
            return str(next(s["id"] for s in servers if s["name"] == "web"))

        def online(self) -> bool:
            try:
                with self.http() as http:
                    return bool(http.get(f"/v1/servers/{self.server_id()}").json()["agent"]["online"])
            except httpx.TransportError:
                return False

    setup = Setup()
    try:
        wait_until(setup.online, timeout=30)
        yield setup
    finally:
        subprocess.run(["pkill", "-KILL", "-u", setup.domain.replace(".", "-")], check=False)
        if setup.online():
            with setup.http() as http:
                wait_finished(http, run(http, setup.server_id(), "site.delete", {"domain": setup.domain}).json()["id"])
        setup.agent.kill()
        setup.agent.wait()
        if cp.process is not None:
            cp.process.kill()
            cp.process.wait()


def _counting_job(setup: Any, http: httpx.Client) -> str:
    """A running cron.run of the counting script, once its first lines reached the control plane."""
    server_id = setup.server_id()
    if not any(s["domain"] == setup.domain for s in _sites(http, server_id)):
        site = run(http, server_id, "site.create", {"domain": setup.domain})
        assert wait_finished(http, site.json()["id"])["status"] == "succeeded", site.text
    folder = Path(setup.cp.folder / "home" / setup.domain.replace(".", "-"))
    (folder / "count.sh").write_text(COUNT_SCRIPT)
    (folder / "count.sh").chmod(0o644)
    add = run(
        http, server_id, "cron.add", {"domain": setup.domain, "schedule": "@daily", "command": "/bin/sh count.sh"}
    )
    assert wait_finished(http, add.json()["id"])["status"] == "succeeded"
    listed = wait_finished(http, run(http, server_id, "cron.list", {"domain": setup.domain}).json()["id"])
    entry = listed["result"]["entries"][-1]["id"]
    job_id = str(run(http, server_id, "cron.run", {"id": entry}).json()["id"])
    with http.stream("GET", f"/v1/jobs/{job_id}/stream") as stream:
        events = SSEParser()
        for chunk in stream.iter_bytes():
            if any(event.event == "line" and event.data["seq"] >= 5 for event in events.feed(chunk)):
                break
    return job_id


def _sites(http: httpx.Client, server_id: str) -> list[dict[str, Any]]:
    listed = wait_finished(http, run(http, server_id, "site.list").json()["id"])
    return list(listed["result"]["sites"])


def _stream(http: httpx.Client, job_id: str) -> list[Any]:
    return SSEParser().feed(http.get(f"/v1/jobs/{job_id}/stream").content)


@needs_cron_as_root
def test_a_control_plane_restart_does_not_interrupt_a_job(restartable: Any) -> None:
    setup = restartable
    with setup.http() as http:
        job_id = _counting_job(setup, http)
    setup.cp.kill()  # mid-job: the agent keeps running it
    setup.cp.start()
    with setup.http() as http:
        done = wait_finished(http, job_id, timeout=60)
        assert (done["status"], done["exit_code"]) == ("succeeded", 0), done
        events = _stream(http, job_id)
        lines = [event.data for event in events if event.event == "line"]
        assert [line["text"] for line in lines] == [f"line {i}" for i in range(1, 61)]  # each exactly once
        assert [line["seq"] for line in lines] == list(range(1, 61))
        assert events[-1].event == "exit" and events[-1].data == {"exit_code": 0, "status": "succeeded"}

        # The agent restarted too (a new process): its run is gone, and the job is not run again.
        job_id = _counting_job(setup, http)
    setup.cp.kill()
    setup.agent.kill()
    setup.agent.wait()
    setup.cp.start()
    setup.agent = setup.start_agent()
    with setup.http() as http:
        done = wait_finished(http, job_id, timeout=60)
        assert (done["status"], done["exit_code"]) == ("interrupted", None), done


# --- the output one job keeps is capped ---------------------------------------------------------

CAP_MB = 0.0625  # 64 KiB


@pytest.fixture(scope="module")
def capped_stack(tmp_path_factory: pytest.TempPathFactory) -> Any:
    running = start_local(tmp_path_factory.mktemp("capped"), env={"FLEETDECK_JOB_OUTPUT_CAP_MB": str(CAP_MB)})
    yield running
    running.stop()


def test_the_output_a_job_keeps_is_capped_and_ends_with_what_was_left_out(capped_stack: Stack) -> None:
    texts = [f'203.0.113.{i % 250} - - [22/Nov/2026] "GET /item/{i} HTTP/1.1" 200 {i} é' for i in range(20_000)]
    log = capped_stack.data_dir / "site-logs" / "example-com" / "access.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("".join(f"{text}\n" for text in texts))
    with capped_stack.http() as http:
        job = run(http, capped_stack.server_id, "logs.tail", {"domain": "example.com", "lines": len(texts)}).json()
        done = wait_finished(http, job["id"], timeout=60)
        assert (done["status"], done["exit_code"]) == ("succeeded", 0)
        events = _stream(http, job["id"])  # the replay of the finished job: what was stored
    lines = [event.data for event in events if event.event == "line"]
    kept, note = lines[:-1], lines[-1]
    cap = int(CAP_MB * 1024 * 1024)
    kept_bytes = sum(len(line["text"].encode()) + 1 for line in kept)
    assert [line["text"] for line in kept] == texts[: len(kept)] and cap - 200 < kept_bytes <= cap
    left_out = texts[len(kept) :]
    left_out_bytes = sum(len(text.encode()) + 1 for text in left_out)
    assert note["stream"] == "stderr" and note["seq"] == len(texts) + 1
    assert f"{len(left_out):,} lines ({left_out_bytes:,} bytes) left out" in note["text"]
    assert events[-1].event == "exit" and events[-1].data == {"exit_code": 0, "status": "succeeded"}
    sql = "SELECT sum(length(lines)) FROM job_output WHERE job_id = :job_id"
    stored = query(capped_stack.db_url, sql, job_id=job["id"])[0][0]
    assert stored < 2 * cap  # the text as JSON runs: nowhere near the 1.6 MB printed


def _crontab(user: str) -> str:
    done = subprocess.run(["crontab", "-u", user, "-l"], capture_output=True, text=True)
    return done.stdout if done.returncode == 0 else ""


@needs_cron_as_root
def test_cron_entry_made_through_the_api_can_be_edited_paused_resumed_and_deleted(stack: Stack) -> None:
    domain = f"cron-{uuid.uuid4().hex[:6]}.example.com"
    user = domain.replace(".", "-")
    with stack.http() as http:

        def job(kind: str, args: dict[str, Any]) -> dict[str, Any]:
            done = wait_finished(http, run(http, stack.server_id, kind, args).json()["id"])
            assert done["status"] == "succeeded", (kind, http.get(f"/v1/jobs/{done['id']}/stream").text)
            return done

        job("site.create", {"domain": domain})
        try:
            # cron turns an unescaped % into a newline: the crontab says \%, which cron runs as %.
            job("cron.add", {"domain": domain, "schedule": "*/5 * * * *", "command": "/bin/date +%Y-%m-%d"})
            entry = job("cron.list", {"domain": domain})["result"]["entries"][0]["id"]
            folder = stack.data_dir / "home" / user
            crontab = _crontab(user)  # the command between its run records (see cron.history)
            assert f"*/5 * * * * cd {folder} || exit; " in crontab
            assert "; /bin/date +\\%Y-\\%m-\\%d; r=$?; " in crontab

            job("cron.edit", {"id": entry, "schedule": "0 4 * * *", "command": "/bin/echo 100%"})
            assert f"0 4 * * * cd {folder} || exit; " in _crontab(user)
            assert "; /bin/echo 100\\%; r=$?; " in _crontab(user)
            assert "*/5" not in _crontab(user)
            job("cron.pause", {"id": entry})
            assert "/bin/echo" not in _crontab(user)
            job("cron.resume", {"id": entry})
            assert "/bin/echo 100\\%" in _crontab(user)
            listed = job("cron.list", {"domain": domain})["result"]["entries"]
            assert [(e["schedule"], e["command"], e["paused"]) for e in listed] == [
                ("0 4 * * *", "/bin/echo 100%", False)
            ]

            job("cron.delete", {"id": entry})
            assert "fleetdeck" not in _crontab(user) and "/bin/echo" not in _crontab(user)
            assert job("cron.list", {"domain": domain})["result"]["entries"] == []
            gone = wait_finished(http, run(http, stack.server_id, "cron.delete", {"id": entry}).json()["id"])
            assert gone["status"] == "failed"
        finally:
            job("site.delete", {"domain": domain})
    assert _crontab(user) == ""


def test_jobs_that_name_a_path_are_scoped_like_the_file_routes(stack: Stack) -> None:
    """storage.usage of the home listed every folder of /home (sites or not) to any member,
    who gets 403 on fs/list?scope=root: a path of the home is for owners and super-admins only;
    other roles name a site, and the agent measures inside that site's folder."""
    tokens = {"owner": stack.token}
    for role in ("admin", "operator", "member"):
        email = f"{role}-{uuid.uuid4().hex[:6]}@demo.test"
        stack.admin("create-user", email, "--org", "demo", "--role", role, "--password", "pw-123456")
        tokens[role] = stack.login(email, "pw-123456")
    (stack.data_dir / "home" / "not-a-site").mkdir(exist_ok=True)
    for role, token in tokens.items():
        with stack.http(token) as http:
            home = run(http, stack.server_id, "storage.usage", {"path": "", "depth": 1})
            largest = run(http, stack.server_id, "storage.largest", {"path": "not-a-site"})
            if role == "owner":
                done = wait_finished(http, home.json()["id"])
                assert "not-a-site" in [e["path"] for e in done["result"]["entries"]]
                assert largest.status_code == 201
            else:
                assert (home.status_code, code(home)) == (403, "forbidden"), role
                assert (largest.status_code, code(largest)) == (403, "forbidden"), role
            site = run(http, stack.server_id, "storage.usage", {"domain": "example.com", "depth": 1})
            assert site.status_code == 201, (role, site.text)
            done = wait_finished(http, site.json()["id"])
            assert done["status"] == "succeeded" and done["result"]["domain"] == "example.com", role
            assert "not-a-site" not in [e["path"] for e in done["result"]["entries"]]
            escape = run(http, stack.server_id, "storage.usage", {"domain": "example.com", "path": "../not-a-site"})
            assert escape.status_code == 422, role
    with stack.http(tokens["admin"]) as http:  # a sysadmin kind, but the archive lies in the home
        archive = {"archive": "backup.tar.gz", "format": "cpanel"}
        assert code(run(http, stack.server_id, "migrate.import", archive)) == "forbidden"
