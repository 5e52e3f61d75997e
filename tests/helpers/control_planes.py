"""`fleetdeck serve` processes of a test's own: restartable on the same port and database, and
several on one database (replicas)."""

from __future__ import annotations

import contextlib
import io
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from fleetdeck.launcher import child_environment

# Quick heartbeats: a lost agent or replica is noticed in seconds.
DEFAULT_ENV = {"FLEETDECK_HEARTBEAT_S": "1", "FLEETDECK_JOB_GRACE_S": "30", "FLEETDECK_LOG": "INFO"}


def admin(db_url: str, *args: str) -> dict[str, Any]:
    """`fleetdeck admin ... --json` on the database at `db_url`: the CLI's own entry point (its
    parser, settings and commands), run in this process. The tests make a few hundred orgs, users
    and servers this way; a `python -m fleetdeck` each cost a Python start and the imports, about
    half a second to a second each. tests/fleetdeck/test_settings.py runs the command as a process of its own."""
    from fleetdeck.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["admin", *args, "--db", db_url, "--json"])
    assert code == 0, err.getvalue()
    result: dict[str, Any] = json.loads(out.getvalue())
    return result


class OwnControlPlane:
    """`fleetdeck serve`, restartable on the same port and database: a SQLite file of its own, or
    `db_url` (another's database: replicas of one cluster); `name` tells their logs apart (FOLDER/
    NAME.log); `env` adds to DEFAULT_ENV (a replica's bus: FLEETDECK_BUS_URL)."""

    def __init__(
        self, folder: Path, db_url: str | None = None, name: str = "cp", env: dict[str, str] | None = None
    ) -> None:
        self.folder = folder
        self.db_url = db_url or f"sqlite:///{folder / 'cp.db'}"
        self.log_file = folder / f"{name}.log"
        self.env = {**DEFAULT_ENV, **(env or {})}
        self.process: subprocess.Popen[str] | None = None
        self.port = 0
        self.base_url = ""

    def command(self) -> list[str]:
        """What starts it (again on the port it had: a restart keeps its address)."""
        return [sys.executable, "-m", "fleetdeck", "serve", "--db", self.db_url, "--listen", f"127.0.0.1:{self.port}"]

    def start(self) -> None:
        with open(self.log_file, "a") as stderr:
            self.process = subprocess.Popen(
                self.command(),
                env=child_environment(self.env),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert "control plane at" in line, self.log()
        self.base_url = line.rsplit(" ", 1)[1].strip()
        self.port = int(self.base_url.rsplit(":", 1)[1])

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.kill()

    def admin(self, *args: str) -> dict[str, Any]:
        return admin(self.db_url, *args)

    def http(self, token: str) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=60)

    def log(self) -> str:
        return self.log_file.read_text(errors="replace")
