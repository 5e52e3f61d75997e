"""`system.processes` shows every process's command line: a member (no `sysadmin`) sees the
secret-looking arguments masked, in the job's result and in its output stream; an owner sees
them as they are. A real process carries the secrets in its argv."""

from __future__ import annotations

import secrets
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import Stack
from tests.helpers import wait_until


@pytest.fixture
def process_with_secrets() -> Iterator[tuple[subprocess.Popen[bytes], list[str]]]:
    """A process that calls itself mysql (its argv[0]), with secrets in its arguments."""
    found = [secrets.token_hex(8) for _ in range(4)]
    argv = [
        "mysql",
        "-c",
        "import time; time.sleep(600)",
        f"-p{found[0]}",
        f"--password={found[1]}",
        "--api-token",
        found[2],
        f"https://bob:{found[3]}@db.example.com/shop",
    ]
    process = subprocess.Popen(argv, executable=sys.executable)
    yield process, found
    process.kill()
    process.wait()


def _finished_job(http: httpx.Client, server_id: str) -> dict[str, Any]:
    created = http.post(f"/v1/servers/{server_id}/jobs", json={"kind": "system.processes", "args": {"limit": 500}})
    assert created.status_code == 201, created.text
    job: dict[str, Any] = {}

    def finished() -> bool:
        job.update(http.get(f"/v1/jobs/{created.json()['id']}").json())
        return job["status"] not in ("queued", "running")

    wait_until(finished, timeout=60)
    assert job["status"] == "succeeded", job
    return job


def _seen(http: httpx.Client, job_id: str, pid: int) -> tuple[str, str]:
    """The process's command line in the job's result, and the job's whole output stream."""
    result = http.get(f"/v1/jobs/{job_id}").json()["result"]
    [command] = [p["command"] for p in result["processes"] if p["pid"] == pid]
    return command, http.get(f"/v1/jobs/{job_id}/stream").text


def test_a_member_sees_secrets_in_command_lines_masked_and_an_owner_sees_them(
    stack: Stack, process_with_secrets: tuple[subprocess.Popen[bytes], list[str]]
) -> None:
    process, found = process_with_secrets
    email = f"member-{uuid.uuid4().hex[:6]}@demo.test"
    stack.admin("create-user", email, "--org", "demo", "--role", "member", "--password", "pw-member-1")
    with stack.http() as owner, stack.http(stack.login(email, "pw-member-1")) as member:
        for job in (_finished_job(owner, stack.server_id), _finished_job(member, stack.server_id)):
            command, stream = _seen(member, job["id"], process.pid)
            assert command == (
                "mysql -c import time; time.sleep(600) -p*** --password=*** --api-token *** "
                "https://bob:***@db.example.com/shop"
            )
            assert not any(secret in stream for secret in found) and "--password=***" in stream
            command, stream = _seen(owner, job["id"], process.pid)
            assert all(secret in command for secret in found) and all(secret in stream for secret in found)
