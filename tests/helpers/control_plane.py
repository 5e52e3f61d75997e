"""A control plane of a test's own: `fleetdeck serve` as a subprocess that a test may kill and restart."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from fleetdeck.launcher import child_environment


class OwnControlPlane:
    """`fleetdeck serve` on a SQLite file of its own, restartable on the same port and database.

    `db_url` shares another's database instead (replicas of one cluster); `name` tells their logs
    apart (FOLDER/NAME.log)."""

    def __init__(self, folder: Path, *, db_url: str | None = None, name: str = "cp") -> None:
        self.folder = folder
        self.db_url = db_url or f"sqlite:///{folder / 'cp.db'}"
        self.log = folder / f"{name}.log"
        self.process: subprocess.Popen[str] | None = None
        self.port = 0
        self.base_url = ""

    def start(self) -> None:
        env = {"FLEETDECK_HEARTBEAT_S": "1", "FLEETDECK_JOB_GRACE_S": "30", "FLEETDECK_LOG": "INFO"}
        command = [sys.executable, "-m", "fleetdeck", "serve", "--db", self.db_url]
        with open(self.log, "a") as stderr:
            self.process = subprocess.Popen(
                [*command, "--listen", f"127.0.0.1:{self.port}"],
                env=child_environment(env),
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert "control plane at" in line, self.log.read_text()
        self.base_url = line.rsplit(" ", 1)[1].strip()
        self.port = int(self.base_url.rsplit(":", 1)[1])

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def admin(self, *args: str) -> dict[str, Any]:
        command = [sys.executable, "-m", "fleetdeck", "admin", *args, "--db", self.db_url, "--json"]
        done = subprocess.run(command, env=child_environment(), capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        result: dict[str, Any] = json.loads(done.stdout)
        return result
