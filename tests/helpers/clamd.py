"""A clamd of the tests' own (Debian package clamav-daemon, installed without starting its
service): `run_clamd` starts one in the foreground with a configuration file of the test's, its
socket, temporary folder and log in a folder of the test's, its signatures from a folder the test
gives, and stops it at the end.

It runs as the user clamav when that account exists (the package makes it), as on a Debian server:
then it can open no site's file by path, and a scan that finds a file there proves the agent read
it and streamed the bytes. The ClamAV signature mirror is a boundary these machines cannot reach,
so the signatures are the test's own (one hash signature of the EICAR test file, see
`eicar_database`).
"""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.jobs.security.clamd import Clamd, ClamdError
from tests.helpers import wait_until

CLAMD = shutil.which("clamd", path=f"/usr/sbin:{os.environ.get('PATH', '')}")
STARTUP_S = 60.0  # a signature database of one line loads in a second; the machine may be busy

# The EICAR test file (the anti-virus makers' harmless test string), put together at run time so
# that no scanner flags the test sources; and the name ClamAV gives a hit of a database of one's own.
EICAR = b"X5O!P%@AP[4\\PZX54(P^)7CC)7}$" + b"EICAR-STANDARD-ANTIVIRUS-" + b"TEST-FILE!$H+H*"
SIGNATURE = "Fleetdeck-Test-EICAR"
FOUND_AS = f"{SIGNATURE}.UNOFFICIAL"


def eicar_database(folder: Path) -> Path:
    """A signature database folder (made here) holding one hash signature, of `EICAR`."""
    folder.mkdir(mode=0o755)
    (folder / "fleetdeck-test.hdb").write_text(f"{hashlib.md5(EICAR).hexdigest()}:{len(EICAR)}:{SIGNATURE}\n")
    return folder


@dataclass
class ClamdServer:
    socket: Path
    database_dir: Path
    log: Path
    process: subprocess.Popen[bytes]

    def layout(self) -> dict[str, Any]:
        """The host layout's clamav section."""
        return {"socket": str(self.socket), "database_dir": str(self.database_dir)}


def _answers(socket: Path) -> bool:
    try:
        return Clamd(str(socket), 5.0).command("PING") == "PONG"
    except (OSError, ClamdError):
        return False


@contextmanager
def run_clamd(folder: Path, database_dir: Path, *, stream_max_length: str = "25M") -> Iterator[ClamdServer]:
    """A clamd with its files in `folder` (made here) and the signatures of `database_dir`,
    answering at its socket until the end of the block (then stopped, by its pid)."""
    assert CLAMD is not None, "needs clamd (Debian package clamav-daemon)"
    folder.mkdir(mode=0o755)
    lines = [
        f"LocalSocket {folder}/clamd.ctl",
        "Foreground yes",
        f"DatabaseDirectory {database_dir}",
        f"TemporaryDirectory {folder}",
        f"StreamMaxLength {stream_max_length}",
        "LogTime yes",
    ]
    try:
        account = pwd.getpwnam("clamav")
    except KeyError:
        lines.append("User root")  # no clamav account: as the test runs
    else:
        os.chown(folder, account.pw_uid, account.pw_gid)
        lines.append("User clamav")
    conf = folder / "clamd.conf"
    conf.write_text("\n".join(lines) + "\n")
    log = folder / "clamd.log"
    with open(log, "wb") as out:
        process = subprocess.Popen([CLAMD, "-c", str(conf)], stdout=out, stderr=subprocess.STDOUT)
    server = ClamdServer(folder / "clamd.ctl", database_dir, log, process)
    try:
        wait_until(lambda: process.poll() is not None or _answers(server.socket), timeout=STARTUP_S)
        assert process.poll() is None, f"clamd exited with {process.returncode}:\n{log.read_text()}"
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
