"""Jobs through `/v1` in tests: run one and wait for its end."""

from __future__ import annotations

from typing import Any

import httpx

from tests.helpers import wait_until


def finished_job(http: httpx.Client, server_id: str, kind: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run a job through `/v1` and wait for its end."""
    created = http.post(f"/v1/servers/{server_id}/jobs", json={"kind": kind, "args": args or {}})
    assert created.status_code == 201, created.text
    job: dict[str, Any] = created.json()

    def finished() -> bool:
        job.update(http.get(f"/v1/jobs/{job['id']}").json())
        return job["status"] in ("succeeded", "failed", "interrupted")

    wait_until(finished, timeout=30)
    return job
