"""A MariaDB server of the test session's own (Debian's mariadb-server), in a folder of its own.

`mariadb-install-db` makes the data folder (root authenticates over the socket with
unix_socket, as on a Debian server), then `mariadbd` runs on the folder's socket and on
127.0.0.1 at a free port (the accounts the tests make log in over TCP there). It is small (a
16 MB buffer pool, no performance schema) and stopped with SIGTERM, a clean shutdown.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetdeck.launcher import free_port
from tests.helpers.pebble import running, wait_for

MARIADBD = shutil.which("mariadbd", path="/usr/sbin:/usr/bin") or "/usr/sbin/mariadbd"
SERVER_OPTIONS = ["--innodb-buffer-pool-size=16M", "--innodb-log-file-size=8M", "--performance-schema=OFF"]


def mariadb_installed() -> bool:
    return all(shutil.which(tool) for tool in ("mariadb", "mariadb-dump", "mariadb-install-db")) and os.path.exists(
        MARIADBD
    )


@dataclass(frozen=True)
class MariaDb:
    socket: Path
    port: int
    log_file: Path

    def client(
        self, sql: str, *, user: str = "root", password: str | None = None, database: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run `sql` with the `mariadb` client: as root over the socket, or (with a password) as
        `user` over TCP, the password in MYSQL_PWD (never in argv)."""
        argv = ["mariadb", "--no-defaults", "--batch", "--skip-column-names", f"--user={user}"]
        env = {"PATH": os.environ["PATH"]}
        if password is None:
            argv += ["--protocol=socket", f"--socket={self.socket}"]
        else:
            argv += ["--protocol=tcp", "--host=127.0.0.1", f"--port={self.port}"]
            env["MYSQL_PWD"] = password
        if database is not None:
            argv.append(f"--database={database}")
        return subprocess.run(argv, input=sql, capture_output=True, text=True, env=env, timeout=60, check=False)

    def sql(self, sql: str, database: str | None = None) -> str:
        """`sql` as root; its output (tab-separated rows), or an assertion with the server's error."""
        done = self.client(sql, database=database)
        assert done.returncode == 0, f"{sql}: {done.stderr}"
        return done.stdout

    def layout(self) -> dict[str, Any]:
        """This server as the agent's host layout describes it (`agent.jobs.toolkit.host.MariaDbLayout`)."""
        admin = ["mariadb-admin", "--no-defaults", f"--socket={self.socket}", "--user=root"]
        commands = {"status": [*admin, "ping"], "reload": [*admin, "reload"], "stop": [*admin, "shutdown"]}
        return {"socket": str(self.socket), "control": {"unit": "mariadb", "commands": commands}}


def _ping(socket: Path) -> None:
    done = subprocess.run(
        ["mariadb-admin", "--no-defaults", f"--socket={socket}", "--user=root", "ping"],
        capture_output=True,
        timeout=10,
        check=False,
    )
    if done.returncode != 0:
        raise ConnectionRefusedError(done.stderr.decode(errors="replace"))


@contextmanager
def run_mariadb(folder: Path) -> Iterator[MariaDb]:
    """A MariaDB server with its data in `folder` (made here); stopped on exit."""
    data, socket = folder / "data", folder / "mysqld.sock"
    folder.mkdir(parents=True)
    log_file = folder / "mariadbd.log"
    install = ["mariadb-install-db", "--no-defaults", f"--datadir={data}", "--user=root", "--skip-test-db"]
    install += ["--auth-root-authentication-method=socket", *SERVER_OPTIONS]
    done = subprocess.run(install, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"mariadb-install-db failed:\n{done.stdout}\n{done.stderr}"
    port = free_port()
    argv = [MARIADBD, "--no-defaults", f"--datadir={data}", "--user=root", f"--socket={socket}"]
    argv += [f"--port={port}", "--bind-address=127.0.0.1", "--skip-name-resolve", f"--pid-file={folder / 'pid'}"]
    argv += SERVER_OPTIONS
    with running(argv, log_file) as process:
        wait_for(lambda: _ping(socket), "mariadbd", process, log_file)
        yield MariaDb(socket, port, log_file)
