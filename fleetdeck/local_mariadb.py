"""The embedded stack's own MariaDB: the databases its agent makes live in its data folder.

The agent's default is the machine's server (``/run/mysqld/mysqld.sock``, as root): a demo's
``db.create`` would make databases and accounts in the user's own MariaDB. So the host layout's
mariadb section points at a ``mariadbd`` of the stack's (a child of it, `fleetdeck.local_children`)
with its data in ``<data>/mariadb``, on a socket in the stack's short runtime folder
(`agent.unix_sockets.runtime_dir`), with no TCP port; its data folder is made by
``mariadb-install-db`` at the first start. The agent acts as the stack's own account over that
socket (unix_socket authentication: ``mariadb-install-db`` makes root and that account so).
It is small (`SERVER_OPTIONS`): about 55 MB resident, ready 0.1 s after its start, which the
stack does not wait for; nor for ``mariadb-install-db`` at the first start (0.7-1.6 s of CPU),
which starts only once the stack is ready, so that it does not delay the server list.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from functools import partial
from pathlib import Path

from agent.jobs.toolkit.common import current_account
from agent.jobs.toolkit.host import MariaDbLayout, ServiceControl
from agent.jobs.toolkit.proc import which
from fleetdeck.local_children import Child

log = logging.getLogger("fleetdeck.local")

# A demo's few small databases: the defaults' caches (a 128 MB buffer pool, 128 MB of Aria pages,
# a 16 MB log buffer...) would take 90 MB of memory at rest, these 53 MB.
SERVER_OPTIONS = [
    "--innodb-buffer-pool-size=8M",
    "--innodb-log-file-size=8M",
    "--innodb-log-buffer-size=1M",
    "--aria-pagecache-buffer-size=1M",
    "--key-buffer-size=64K",
    "--performance-schema=OFF",
]
INSTALL_TIMEOUT_S = 120.0


def mariadb_layout(sockets: Path) -> MariaDbLayout:
    """The stack's server as the agent reaches it (its socket in `sockets`), and the commands that control it."""
    socket, user = sockets / "mysqld.sock", current_account().name
    admin = [which("mariadb-admin") or "mariadb-admin", "--no-defaults", f"--socket={socket}", f"--user={user}"]
    commands = {"status": [*admin, "ping"], "reload": [*admin, "reload"]}
    return MariaDbLayout(socket=str(socket), user=user, control=ServiceControl(unit="mariadb", commands=commands))


def prepare(folder: Path, sockets: Path) -> tuple[MariaDbLayout, list[Child]]:
    """The layout (the agent's mariadb section) and the server to run, its data folder made
    first if need be: none when MariaDB is not installed (Debian package mariadb-server).
    `sockets`: the folder of its socket (made already)."""
    mariadb = mariadb_layout(sockets)
    server, install = which("mariadbd"), which("mariadb-install-db")
    data = folder / "data"
    if server is None or install is None:
        return mariadb, []
    argv = [server, "--no-defaults", f"--datadir={data}", f"--socket={mariadb.socket}", "--skip-networking"]
    argv += [f"--pid-file={folder / 'mariadbd.pid'}", f"--log-error={folder / 'mariadbd.log'}", *SERVER_OPTIONS]
    if os.geteuid() == 0:
        argv.append("--user=root")  # else mariadbd refuses to run as root
    made = partial(_installed, install, data, mariadb.user)
    return mariadb, [Child("MariaDB", argv, str(data), folder / "mariadbd.pid", folder / "mariadbd.log", setup=made)]


def _installed(install: str, data: Path, user: str) -> bool:
    """Make the data folder the first time (`user` and root may log in over the socket): in a
    folder beside it, renamed once complete, so that a start cut short is made again."""
    if data.is_dir():
        return True
    made = data.with_name(f"{data.name}.new")
    shutil.rmtree(made, ignore_errors=True)
    made.parent.mkdir(parents=True, exist_ok=True)
    argv = [install, "--no-defaults", f"--datadir={made}", f"--user={user}", "--skip-test-db"]
    argv += ["--auth-root-authentication-method=socket", *SERVER_OPTIONS]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False)
    if done.returncode != 0:
        said = " ".join((done.stderr or done.stdout).split())[-500:]
        log.warning("the stack runs no MariaDB: mariadb-install-db failed (exit %s): %s", done.returncode, said)
        return False
    made.rename(data)
    return True
