"""A PostgreSQL server of the test session's own: initdb'd in a folder under the hosting server's
services folder by the ``postgres`` system user (Debian's package makes it), listening on a unix
socket folder of its own and on 127.0.0.1 and ::1 (IPv6 stands for a remote client: the server's
own pg_hba.conf rules let TCP logins in from 127.0.0.1 only; a connection to ::1 comes from ::1,
whereas one to another 127.x address would still come from 127.0.0.1), on a free port.

Every statement is logged (``log_statement = all``), so a test can check that no password reached
the server in plain text; a server for the control plane's own databases (`PostgresDatabases`)
logs none.
"""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from fleetdeck.launcher import free_port

OS_USER = "postgres"
SUPERUSER = "postgres"
LOCAL_ADDRESS = "127.0.0.1"  # TCP logins from here pass pg_hba.conf's base rules
REMOTE_ADDRESS = "::1"  # ... and from here only through an entry of the agent's allowlist
BASE_HBA = f"""# the test server's own rules
local   all     all                     peer
host    all     all     {LOCAL_ADDRESS}/32    scram-sha-256
"""
START_TIMEOUT_S = 60


def bin_dir() -> Path | None:
    """The newest PostgreSQL server installed (``/usr/lib/postgresql/<major>/bin``), or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[-3]))
    return Path(found[-1]).parent if found else None


def has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind((REMOTE_ADDRESS, 0))
    except OSError:
        return False
    return True


@dataclass
class PostgresServer:
    folder: Path
    bin: Path
    port: int

    @property
    def data(self) -> Path:
        return self.folder / "data"

    @property
    def socket_dir(self) -> Path:
        return self.folder / "run"

    @property
    def hba_file(self) -> Path:
        return self.data / "pg_hba.conf"

    @property
    def log_file(self) -> Path:
        return self.folder / "server.log"

    def layout(self) -> dict[str, object]:
        """The agent's ``postgres`` layout section for this server."""
        return {"host": str(self.socket_dir), "port": self.port, "superuser": SUPERUSER, "os_user": OS_USER}

    def psql(self, sql: str, database: str = "postgres") -> str:
        """Run `sql` as the superuser over the socket (peer authentication); its unaligned rows."""
        done = subprocess.run(
            [str(self.bin / "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", str(self.socket_dir),
             "-p", str(self.port), "-U", SUPERUSER, "-d", database, "-f", "-"],
            input=sql, capture_output=True, text=True, user=OS_USER, cwd="/", check=False,
        )  # fmt: skip
        assert done.returncode == 0, f"psql failed ({done.returncode}): {done.stderr}"
        return done.stdout.strip()

    def login(
        self, user: str, password: str, database: str, sql: str = "SELECT 1", address: str = LOCAL_ADDRESS
    ) -> subprocess.CompletedProcess[str]:
        """`sql` as `user` over TCP to `address`, with `password` (PGPASSWORD, not the argv)."""
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PGPASSWORD": password, "PGCONNECT_TIMEOUT": "10"}
        return subprocess.run(
            [str(self.bin / "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-w", "-h", address,
             "-p", str(self.port), "-U", user, "-d", database, "-c", sql],
            capture_output=True, text=True, env=env, check=False,
        )  # fmt: skip

    def session(self, database: str, *first: str) -> subprocess.Popen[str]:
        """A superuser session held open in `database` (until the caller kills it), once the server
        counts it asleep: after the statements `first`, each its own command (a lock it then holds)."""
        from tests.helpers import wait_until

        commands = [arg for statement in (*first, "SELECT pg_sleep(600)") for arg in ("-c", statement)]
        held = subprocess.Popen(
            [str(self.bin / "psql"), "-X", "-q", "-h", str(self.socket_dir), "-p", str(self.port), "-U", SUPERUSER,
             "-d", database, *commands],
            user=OS_USER, cwd="/", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        count = f"SELECT count(*) FROM pg_stat_activity WHERE datname = '{database}' AND wait_event = 'PgSleep'"
        wait_until(lambda: self.psql(count) == "1")
        return held

    def release(self, held: subprocess.Popen[str], database: str) -> None:
        """End a `session` of `database`: its client, and its backend (which sleeps on, holding its
        locks, after its client died)."""
        held.kill()
        held.wait()
        self.psql(f"SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity WHERE datname = '{database}'"
                  " AND wait_event = 'PgSleep'")  # fmt: skip

    def as_postgres(self, *argv: str) -> None:
        subprocess.run([str(self.bin / argv[0]), *argv[1:]], user=OS_USER, cwd="/", check=True, capture_output=True)

    def start(self) -> None:
        """Start the server (again: on the same port and data folder), once it takes connections."""
        self.as_postgres(
            "pg_ctl", "start", "-D", str(self.data), "-l", str(self.log_file), "-w", "-t", str(START_TIMEOUT_S)
        )

    def stop(self) -> None:
        """Stop it as an operator restarting it would (`-m fast`: sessions are cut, not waited for)."""
        if (self.data / "postmaster.pid").exists():
            self.as_postgres("pg_ctl", "stop", "-D", str(self.data), "-m", "fast", "-w")


@dataclass
class PostgresDatabases:
    """Fresh databases on `server`, all owned by one login role (not a superuser): what a control
    plane gets, a database of its own each."""

    server: PostgresServer
    role: str = "fleetdeck"
    password: str = field(default_factory=lambda: secrets.token_hex(16))
    made: int = 0

    def __post_init__(self) -> None:
        self.server.psql(f"CREATE ROLE {self.role} LOGIN PASSWORD '{self.password}'")

    def create(self, prefix: str) -> str:
        """A new empty database; its SQLAlchemy URL (psycopg 3, over TCP to 127.0.0.1)."""
        self.made += 1
        name = f"{prefix}_{self.made}"
        self.server.psql(f"CREATE DATABASE {name} OWNER {self.role}")
        return f"postgresql+psycopg://{self.role}:{self.password}@{LOCAL_ADDRESS}:{self.server.port}/{name}"


def start_postgres(folder: Path, *, log_statements: bool = True) -> PostgresServer:
    """initdb and start a server in `folder` (made here, owned by the postgres user)."""
    found = bin_dir()
    if found is None or shutil.which("psql") is None:
        raise RuntimeError("PostgreSQL is not installed (Debian package postgresql)")
    account = pwd.getpwnam(OS_USER)
    server = PostgresServer(folder, found, free_port())
    for made in (folder, server.socket_dir):
        made.mkdir(mode=0o700)
        os.chown(made, account.pw_uid, account.pw_gid)
    server.as_postgres(
        "initdb", "-D", str(server.data), "-U", SUPERUSER, "--auth-local=peer", "--auth-host=scram-sha-256",
        "--encoding=UTF8", "--locale=C.UTF-8", "--no-sync",
    )  # fmt: skip
    settings = {
        "listen_addresses": f"'{LOCAL_ADDRESS},{REMOTE_ADDRESS}'",
        "port": str(server.port),
        "unix_socket_directories": f"'{server.socket_dir}'",
        "fsync": "off",
        "log_statement": "'all'" if log_statements else "'none'",
        "max_connections": "200",  # stacks and `serve` processes of a session, each with its pool
    }
    with open(server.data / "postgresql.conf", "a") as conf:
        conf.write("".join(f"{name} = {value}\n" for name, value in settings.items()))
    server.hba_file.write_text(BASE_HBA)
    server.start()
    return server
