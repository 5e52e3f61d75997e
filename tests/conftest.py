"""Fixtures that start the real stack: `fleetdeck local` (control plane + agent + demo) as a
subprocess on 127.0.0.1, plus helpers to run more agents and admin commands against it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parent.parent
STARTUP_TIMEOUT_S = 60.0


def python_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


@pytest.fixture
def anyio_backend() -> str:
    return "trio"


@dataclass
class Stack:
    """A running `fleetdeck local`, and what its credentials file says."""

    process: subprocess.Popen[str]
    data_dir: Path
    base_url: str
    email: str
    password: str
    token: str
    server_id: str
    db_url: str

    def admin(self, *args: str) -> dict[str, object]:
        """Run `fleetdeck admin ... --json` against this stack's database."""
        command = [sys.executable, "-m", "control_plane", "admin", *args, "--db", self.db_url, "--json"]
        done = subprocess.run(command, env=python_env(), capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        result: dict[str, object] = json.loads(done.stdout)
        return result

    def login(self, email: str, password: str) -> str:
        """A session token for another user of this stack."""
        answer = httpx.post(f"{self.base_url}/v1/auth/login", json={"email": email, "password": password})
        answer.raise_for_status()
        token: str = answer.json()["token"]
        return token

    def http(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token or self.token}"}
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=30)


def start_local(data_dir: Path, port: int = 0) -> Stack:
    """Start `fleetdeck local` on `data_dir` and wait until it says it runs (its agent is linked)."""
    # stderr goes to a file: a pipe nobody reads would stall the stack once it fills.
    log = open(data_dir.parent / f"{data_dir.name}-control-plane.log", "a")  # noqa: SIM115 - the process keeps it
    process = subprocess.Popen(
        [sys.executable, "-m", "fleetdeck", "local", "--data-dir", str(data_dir), "--port", str(port)],
        env=python_env(FLEETDECK_HEARTBEAT_S="1", FLEETDECK_JOB_GRACE_S="2", FLEETDECK_LOG="INFO"),
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    log.close()
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    assert process.stdout is not None
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if "running at" in line:
            break
        if not line and process.poll() is not None:
            raise RuntimeError(f"fleetdeck local exited: {control_plane_log(data_dir)[-2000:]}")
    else:
        process.kill()
        raise RuntimeError("fleetdeck local did not start in time")
    credentials = json.loads((data_dir / "demo-credentials.json").read_text())
    return Stack(process=process, data_dir=data_dir, **credentials)


def stop(process: subprocess.Popen[str], timeout: float = 15) -> int:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise


def control_plane_log(data_dir: Path) -> str:
    return (data_dir.parent / f"{data_dir.name}-control-plane.log").read_text(errors="replace")


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    running = start_local(tmp_path_factory.mktemp("local"))
    yield running
    died = running.process.poll()
    stop(running.process)
    # A stack that died mid-session fails every later test with ConnectError: say why, once.
    assert died is None, f"fleetdeck local exited with {died}:\n{control_plane_log(running.data_dir)[-4000:]}"


def start_agent(
    base_url: str,
    token: str,
    home: Path,
    state_dir: Path,
    *extra: str,
    ingress: str | None = None,
    ingress_url: str | None = None,
) -> subprocess.Popen[str]:
    """An agent process; `extra` are more of its options (``--ssh-port``, ...); `ingress`
    (HOST:PORT, port 0 for any) gives it a direct-upload ingress, announced as `ingress_url` when given."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agent",
            "--url",
            base_url,
            "--token",
            token,
            "--home",
            str(home),
            "--state-dir",
            str(state_dir),
            *extra,
            *(["--ingress", ingress] if ingress else []),
            *(["--ingress-url", ingress_url] if ingress_url else []),
        ],
        env=python_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
