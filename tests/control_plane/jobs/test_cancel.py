"""Cancelling a job through the API (`POST /v1/jobs/{id}/cancel`): the real control plane, the
hosting server's real root agent, a real long-running `cron.run` whose process group is stopped.

The job is a site's script run by `cron.run`: a parent that TERM stops and a child that ignores
TERM, so only the KILL after the grace period stops all of it. Every process of the site's user
is gone once the job has ended `cancelled`, and its output is kept.
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from api_client import Client, SSEParser
from contract.errors import NotRunning
from tests.conftest import AgentProcess, Stack
from tests.helpers import wait_until
from tests.helpers.hosting import Hosting

pytestmark = [
    pytest.mark.skipif(shutil.which("crontab") is None, reason="needs crontab (Debian package cron)"),
    pytest.mark.stack_variants("sqlite", "postgresql"),
]

STUBBORN_SCRIPT = """#!/bin/sh
(trap '' TERM; echo "child ignores TERM"; exec sleep 300) &
echo "parent started"
sleep 301
"""


def code(response: httpx.Response) -> str:
    value: str = response.json()["error"]["code"]
    return value


def live_processes_of(uid: int) -> list[int]:
    """The processes running as `uid` that are not zombies."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = dict(line.split(":", 1) for line in (entry / "status").read_text().splitlines() if ":" in line)
        except OSError:
            continue
        if int(status["Uid"].split()[0]) == uid and not status["State"].strip().startswith("Z"):
            found.append(int(entry.name))
    return found


class Site:
    def __init__(self, hosting: Hosting, domain: str) -> None:
        self.domain = domain
        self.folder = hosting.home / domain.replace(".", "-")
        self.uid = self.folder.stat().st_uid


@pytest.fixture(scope="module")
def site(hosting: Hosting) -> Iterator[Site]:
    """A site with the stubborn script and a cron entry that runs it."""
    domain = f"cancel{secrets.token_hex(3)}.example.test"
    hosting.run("site.create", domain=domain, profile="static").ok()
    made = Site(hosting, domain)
    (made.folder / "stubborn.sh").write_text(STUBBORN_SCRIPT)
    (made.folder / "stubborn.sh").chmod(0o755)
    yield made
    hosting.run("site.delete", domain=domain).ok()


@pytest.fixture(scope="module")
def entry(hosting: Hosting, site: Site) -> str:
    hosting.run("cron.add", domain=site.domain, schedule="@daily", command="./stubborn.sh").ok()
    entries = hosting.run("cron.list", domain=site.domain).ok().result["entries"]
    entry_id: str = next(e["id"] for e in entries if e["command"] == "./stubborn.sh")
    return entry_id


def test_cancel_stops_the_process_group_and_the_job_ends_cancelled_with_its_output(
    hosting: Hosting, site: Site, entry: str
) -> None:
    job = hosting.post("cron.run", id=entry).json()
    lines: list[str] = []
    parser = SSEParser()
    with hosting.http() as http, httpx.Client(base_url=hosting.stack.base_url, timeout=60) as follower:
        headers = {"Authorization": f"Bearer {hosting.token}"}
        with follower.stream("GET", f"/v1/jobs/{job['id']}/stream", headers=headers) as stream:
            events = (event for chunk in stream.iter_bytes() for event in parser.feed(chunk))
            started = next(events)  # said before any line: a follower knows it runs
            assert (started.event, started.data) == ("status", {"status": "running"}), started
            for event in events:
                assert event.event == "line", event
                lines.append(event.data["text"])
                if {"parent started", "child ignores TERM"} <= set(lines):
                    break
            assert len(live_processes_of(site.uid)) >= 3  # the shell, its sleep, the child's sleep
            cancelled = http.post(f"/v1/jobs/{job['id']}/cancel")
            assert cancelled.status_code == 202, cancelled.text
            assert cancelled.json()["id"] == job["id"] and cancelled.json()["status"] in ("running", "cancelled")
            exit_event = next(event for event in events if event.event == "exit")
        assert exit_event.data == {"exit_code": None, "status": "cancelled"}
        done = http.get(f"/v1/jobs/{job['id']}").json()
        assert (done["status"], done["exit_code"]) == ("cancelled", None) and done["finished_at"]
        replay = http.get(f"/v1/jobs/{job['id']}/stream").text
        assert "parent started" in replay and "child ignores TERM" in replay
        # The child that ignored TERM was killed after the grace period: nothing of the job is left.
        wait_until(lambda: live_processes_of(site.uid) == [], timeout=10)

        again = http.post(f"/v1/jobs/{job['id']}/cancel")
        assert again.status_code == 409 and code(again) == "not_running"
        assert again.json()["error"]["details"] == {"status": "cancelled"}
        audit = http.get("/v1/audit", params={"action": "jobs.cancel"}).json()["entries"]
    [logged] = [e for e in audit if e["details"].get("job_id") == job["id"]]
    assert (logged["outcome"], logged["target"], logged["server_id"]) == ("ok", "cron.run", hosting.server_id)
    assert logged["details"]["was"] == "running"


@pytest.mark.anyio
async def test_the_client_cancels_and_says_not_running_once_ended(hosting: Hosting, site: Site) -> None:
    async with Client(hosting.stack.base_url, token=hosting.token) as client:
        listed = await client.jobs.create(hosting.server_id, "site.list")
        async for _event in client.jobs.stream(listed.id):
            pass
        with pytest.raises(NotRunning) as info:
            await client.jobs.cancel(listed.id)
    assert info.value.status_code == 409 and info.value.details == {"status": "succeeded"}


def test_another_orgs_job_is_404_and_a_role_that_may_not_run_it_is_403(
    stack: Stack, hosting: Hosting, site: Site
) -> None:
    job = hosting.post("site.list").json()
    with stack.http() as other_org:  # the demo org's owner
        answer = other_org.post(f"/v1/jobs/{job['id']}/cancel")
        assert answer.status_code == 404 and code(answer) == "not_found"
        assert other_org.post(f"/v1/jobs/job_{uuid.uuid4().hex}/cancel").status_code == 404
    with hosting.http() as http:
        org_name = http.get("/v1/me").json()["org"]["name"]
        jobs = http.get(f"/v1/servers/{hosting.server_id}/jobs", params={"limit": 500}).json()["jobs"]
    site_create = next(j for j in jobs if j["kind"] == "site.create")
    email = f"member-{uuid.uuid4().hex[:6]}@{org_name}.test"
    stack.admin("create-user", email, "--org", org_name, "--role", "member", "--password", "pw-123456")
    with stack.http(stack.login(email, "pw-123456")) as member:  # may read, not change: site.create is not its
        refused = member.post(f"/v1/jobs/{site_create['id']}/cancel")
        assert refused.status_code == 403 and code(refused) == "forbidden"


# --- an agent of its own, which a test kills ----------------------------------------------------


@pytest.fixture
def own_agent(stack: Stack, tmp_path: Path) -> Iterator[AgentProcess]:
    """A second server whose agent a test may kill; its site runs the stubborn script as nobody,
    from a cron entry written into the agent's state (`stub`)."""
    with stack.http() as http:
        created = http.post("/v1/servers", json={"name": f"cancel-{tmp_path.name[-8:]}", "kind": "full"}).json()
    tmp_path.chmod(0o755)  # nobody reaches its site's folder
    home, state = tmp_path / "home", tmp_path / "state"
    folder = home / "site-s"
    (folder / "logs").mkdir(parents=True)
    (folder / "stubborn.sh").write_text(STUBBORN_SCRIPT.replace('"parent started"', '"parent $$ started"'))
    (folder / "stubborn.sh").chmod(0o755)
    nobody = pwd.getpwnam("nobody")
    for path in (folder, folder / "logs"):
        os.chown(path, nobody.pw_uid, nobody.pw_gid)
    state.mkdir()
    (state / "sites.json").write_text(json.dumps({"sites": [{"domain": "s.example.com", "slug": "site-s"}]}))
    entry = {"id": "stub", "domain": "s.example.com", "schedule": "@daily", "command": "./stubborn.sh", "paused": True}
    (state / "cron.json").write_text(json.dumps({"entries": [entry]}))
    agent = AgentProcess(stack, created["server"]["id"], created["agent_token"], home, state)
    yield agent
    agent.stop()


def test_a_queued_job_is_cancelled_without_running(stack: Stack, own_agent: AgentProcess) -> None:
    server_id = own_agent.server_id
    with stack.http() as http:
        own_agent.kill()
        # A load balancer made while its node is offline: its lb.apply waits, queued, for the node.
        body = {"name": f"cancel-{uuid.uuid4().hex[:6]}", "port": 80, "node_server_id": server_id, "engine": "nginx"}
        created = http.post("/v1/load-balancers", json=body)
        assert created.status_code == 201, created.text
        [queued] = http.get(f"/v1/servers/{server_id}/jobs").json()["jobs"]
        assert (queued["kind"], queued["status"]) == ("lb.apply", "queued")
        cancelled = http.post(f"/v1/jobs/{queued['id']}/cancel")
        assert cancelled.status_code == 202, cancelled.text
        assert (cancelled.json()["status"], cancelled.json()["exit_code"]) == ("cancelled", None)
        stream = http.get(f"/v1/jobs/{queued['id']}/stream").text
        assert "cancelled before it started" in stream
        assert 'event: exit\ndata: {"exit_code":null,"status":"cancelled"}' in stream
        own_agent.restart()
        # A job created after the agent's return has run: the cancelled one was not started with it.
        after = http.post(f"/v1/servers/{server_id}/jobs", json={"kind": "site.list", "args": {}}).json()
        wait_until(lambda: http.get(f"/v1/jobs/{after['id']}").json()["status"] == "succeeded")
        assert http.get(f"/v1/jobs/{queued['id']}").json()["status"] == "cancelled"
        audit = http.get("/v1/audit", params={"action": "jobs.cancel", "server_id": server_id}).json()["entries"]
        assert http.delete(f"/v1/load-balancers/{created.json()['id']}").status_code == 204
    assert [e["details"] for e in audit] == [{"job_id": queued["id"], "was": "queued"}]


def test_a_running_job_whose_agent_is_away_cannot_be_cancelled(stack: Stack, own_agent: AgentProcess) -> None:
    with stack.http() as http:
        job = http.post(f"/v1/servers/{own_agent.server_id}/jobs", json={"kind": "cron.run", "args": {"id": "stub"}})
        job_id = job.json()["id"]
        wait_until(lambda: http.get(f"/v1/jobs/{job_id}").json()["status"] == "running")
        own_agent.kill()
        # The killed agent's script runs on without it; its group is stopped by the test.
        try:
            refused = http.post(f"/v1/jobs/{job_id}/cancel")
            assert refused.status_code == 409 and code(refused) == "agent_offline", refused.text
            wait_until(lambda: http.get(f"/v1/jobs/{job_id}").json()["status"] == "interrupted")
        finally:
            for pid in live_processes_of(pwd.getpwnam("nobody").pw_uid):
                if Path(f"/proc/{pid}/cwd").resolve() == own_agent_folder(own_agent):
                    os.kill(pid, signal.SIGKILL)


def own_agent_folder(agent: AgentProcess) -> Path:
    return (Path(str(agent.log_file)).parent / "home" / "site-s").resolve()
