"""The TUI's local stack outlives the TUI: the next start joins it, two starts make one, it exits
by itself once idle with no TUI attached, and `fleetdeck local --stop` stops it.

Each "TUI start" here is a process doing what `fleetdeck` does before its server list
(`SharedStack.connect`), staying attached until the test closes its stdin: the stack is then no
child of the test, as it is no child of a TUI that has quit.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fleetdeck import running
from fleetdeck.paths import StackLayout
from fleetdeck.running import stop_running
from tests.conftest import STACK_ENV, python_env
from tests.helpers import wait_until
from tests.helpers.stacks import stack_processes, stop_stacks

STARTUP_TIMEOUT_S = 90

TUI_START = """
import json, sys
from pathlib import Path
from fleetdeck.launcher import LocalStack
from fleetdeck.running import SharedStack

def new_launcher(data_dir, idle_minutes):
    return LocalStack(data_dir, idle_minutes=idle_minutes, log_file=data_dir.parent / "stack.log", startup_timeout=60)

stack = SharedStack(Path(sys.argv[1]), float(sys.argv[2]), new_launcher)
credentials = stack.connect()
print(json.dumps({"base_url": credentials.base_url, "token": credentials.token, "reused": stack.reused}), flush=True)
sys.stdin.read()  # attached until the test closes stdin
"""


class TuiStart:
    """A process that joins or starts the data dir's stack and stays attached until `leave`;
    `server`: the control plane's (`FLEETDECK_SERVER`) in a stack it starts."""

    def __init__(self, data_dir: Path, idle_minutes: float, server: str = "hypercorn") -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", TUI_START, str(data_dir), str(idle_minutes)],
            env=python_env(**STACK_ENV, FLEETDECK_SERVER=server),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def connected(self) -> dict[str, Any]:
        """What it connected to: base_url, token, and whether it joined a running stack."""
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line, f"the start failed (exit code {self.process.wait(STARTUP_TIMEOUT_S)})"
        result: dict[str, Any] = json.loads(line)
        return result

    def leave(self) -> None:
        """Quit, as the TUI does: the stack is left running (or stops, when idle for 0 minutes)."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        assert self.process.wait(STARTUP_TIMEOUT_S) == 0

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "local"
    yield folder
    stop_running(folder)  # what a TUI leaves running, the user stops with `fleetdeck local --stop`
    assert stop_stacks(tmp_path) == [], "a stack that --stop did not stop"


def stack_pid(data_dir: Path) -> int:
    run = running.read_run_file(StackLayout(data_dir).run_file)
    assert run is not None, "no run file"
    return run.pid


def answers(base_url: str, token: str) -> bool:
    try:
        return httpx.get(f"{base_url}/v1/me", headers={"Authorization": f"Bearer {token}"}, timeout=10).is_success
    except httpx.TransportError:
        return False


def stop_command(data_dir: Path, exit_code: int = 0) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "fleetdeck", "local", "--stop", "--data-dir", str(data_dir)],
        env=python_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == exit_code, done.stderr
    return (done.stdout + done.stderr).strip()


# The stack's start, stop and idle exit hold under both servers (`FLEETDECK_SERVER`).
SERVERS = pytest.mark.parametrize("server", ["hypercorn", "uvicorn"])


@SERVERS
def test_a_tui_start_joins_the_stack_a_previous_tui_left_and_stop_stops_it(data_dir: Path, server: str) -> None:
    first = TuiStart(data_dir, idle_minutes=10, server=server)
    started = first.connected()
    first.leave()
    assert not started["reused"]
    assert httpx.get(f"{started['base_url']}/v1/health").headers["server"].startswith(server)
    pid = stack_pid(data_dir)
    assert running.process_lives(pid) and answers(started["base_url"], started["token"])

    second = TuiStart(data_dir, idle_minutes=10)
    try:
        joined = second.connected()
        assert joined["reused"] and joined["base_url"] == started["base_url"]
        assert answers(joined["base_url"], joined["token"])
        assert stack_processes(data_dir) == [pid] == [stack_pid(data_dir)]  # no second control plane
    finally:
        second.leave()
    foreground = subprocess.run(
        [sys.executable, "-m", "fleetdeck", "local", "--data-dir", str(data_dir)],
        env=python_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert foreground.returncode == 1 and f"already runs in {data_dir} at {started['base_url']}" in foreground.stderr

    assert stop_command(data_dir) == f"Stopped the local stack at {started['base_url']} (pid {pid})."
    assert not running.process_lives(pid) and stack_processes(data_dir) == []
    assert not StackLayout(data_dir).run_file.exists()
    assert stop_command(data_dir) == f"No local stack is running in {data_dir}."


def test_a_run_file_naming_a_dead_process_leads_to_a_fresh_start(data_dir: Path) -> None:
    first = TuiStart(data_dir, idle_minutes=10)
    crashed = first.connected()
    first.leave()
    dead = stack_pid(data_dir)
    os.kill(dead, signal.SIGKILL)  # as a crash would: its run file stays behind
    assert running.wait_for_exit(dead, 30)
    assert stack_pid(data_dir) == dead

    second = TuiStart(data_dir, idle_minutes=10)
    try:
        fresh = second.connected()
        assert not fresh["reused"] and fresh["base_url"] != crashed["base_url"]
        assert stack_pid(data_dir) != dead and stack_processes(data_dir) == [stack_pid(data_dir)]
        assert answers(fresh["base_url"], fresh["token"])
    finally:
        second.leave()


def test_a_run_file_naming_another_live_process_is_neither_joined_nor_stopped(data_dir: Path) -> None:
    """The pid of a stack that died may be taken by another process: it is no stack to join, and
    `--stop` must not kill it."""
    stranger = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        data_dir.mkdir()
        run = running.RunFile("http://127.0.0.1:9", stranger.pid, running.stack_version())
        StackLayout(data_dir).run_file.write_text(run.to_json())
        said = stop_command(data_dir, exit_code=1)
        assert f"process {stranger.pid} named in {data_dir}'s run file does not answer" in said
        assert stranger.poll() is None

        start = TuiStart(data_dir, idle_minutes=10)
        try:
            assert not start.connected()["reused"]
            assert stack_pid(data_dir) != stranger.pid and stranger.poll() is None
        finally:
            start.leave()
    finally:
        stranger.kill()
        stranger.wait()


def test_two_tui_starts_at_once_make_one_stack(data_dir: Path) -> None:
    starts = [TuiStart(data_dir, idle_minutes=10), TuiStart(data_dir, idle_minutes=10)]
    try:
        results = [start.connected() for start in starts]
        assert sorted(result["reused"] for result in results) == [False, True]
        assert results[0]["base_url"] == results[1]["base_url"]
        assert stack_processes(data_dir) == [stack_pid(data_dir)]
    finally:
        for start in starts:
            start.leave()


@SERVERS
def test_the_stack_exits_once_idle_with_no_tui_attached_and_leaves_no_process(data_dir: Path, server: str) -> None:
    idle_minutes = 0.01  # 0.6 s
    first, second = TuiStart(data_dir, idle_minutes, server), TuiStart(data_dir, idle_minutes, server)
    try:
        one, other = first.connected(), second.connected()
        assert httpx.get(f"{one['base_url']}/v1/health").headers["server"].startswith(server)
        pid = stack_pid(data_dir)
        first.leave()
        assert answers(other["base_url"], other["token"])  # the other TUI still holds it
    finally:
        first.kill()
        second.leave()
    wait_until(lambda: not running.process_lives(pid), timeout=60)
    assert stack_processes(data_dir) == [] and not StackLayout(data_dir).run_file.exists()
    assert not answers(one["base_url"], one["token"])
    assert "no TUI attached: stopping" in (data_dir.parent / "stack.log").read_text()


def test_with_zero_idle_minutes_the_stack_stops_with_its_last_tui(data_dir: Path) -> None:
    start = TuiStart(data_dir, idle_minutes=0)
    try:
        start.connected()
        pid = stack_pid(data_dir)
    finally:
        start.leave()
    assert running.wait_for_exit(pid, 60)
    assert stack_processes(data_dir) == [] and not StackLayout(data_dir).run_file.exists()
