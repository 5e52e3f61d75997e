"""A real sshd for cross-server copies: 127.0.0.1 on a free port, with a host key and an
authorized_keys file of its own, into which the destination agent puts a transfer's key (and from
which it takes it out again). Agents point at it with `Sshd.agent_options()`."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agent.files.remote_copy import SshSettings
from agent.jobs.security.sshd import make_privilege_separation_dir
from fleetdeck.launcher import free_port
from tests.helpers import wait_until

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
ORIGINAL_KEYS = (
    b"# kept as it is\nssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ0e6FJQxVjRnxS4iYzYhWrMTvSxPtfiS6e0ZyFq9hWo keep\n"
)
# Why a module using it is skipped (None: it runs).
MISSING = (
    None
    if os.path.exists(SSHD) and shutil.which("ssh") and shutil.which("ssh-keygen")
    else "needs OpenSSH (sshd, ssh, ssh-keygen): scripts/test installs openssh-server"
)


@dataclass
class Sshd:
    port: int
    folder: Path
    authorized_keys: Path
    host_key_pub: Path
    log: Path

    def agent_options(self) -> list[str]:
        return [
            "--ssh-port",
            str(self.port),
            "--ssh-authorized-keys",
            str(self.authorized_keys),
            "--ssh-host-key",
            str(self.host_key_pub),
        ]

    def settings(self, **changes: Any) -> SshSettings:
        fields: dict[str, Any] = {
            "port": self.port,
            "host": "127.0.0.1",
            "authorized_keys": str(self.authorized_keys),
            "host_keys": (str(self.host_key_pub),),
            **changes,
        }
        return SshSettings(**fields)


@contextmanager
def copy_sshd(folder: Path) -> Iterator[Sshd]:
    """A real sshd on 127.0.0.1 with its own host key and authorized_keys file (ORIGINAL_KEYS),
    its files in `folder`; the test is skipped if sshd will not start here."""
    host_key = folder / "host_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key)], check=True)
    keys = folder / "authorized_keys"
    keys.write_bytes(ORIGINAL_KEYS)
    keys.chmod(0o600)
    port = free_port()
    config = folder / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {host_key}\nPidFile {folder / 'sshd.pid'}\n"
        f"AuthorizedKeysFile {keys}\nStrictModes no\nUsePAM no\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nPubkeyAuthentication yes\nPermitRootLogin forced-commands-only\n"
        "LogLevel VERBOSE\n"
    )
    if os.geteuid() == 0:
        make_privilege_separation_dir()
    log = folder / "sshd.log"
    with log.open("w") as out:
        process = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: "Server listening" in log.read_text() or process.poll() is not None, timeout=15)
        if process.poll() is not None:
            pytest.skip(f"sshd would not start here: {log.read_text()[-500:]}")
        yield Sshd(port, folder, keys, folder / "host_ed25519.pub", log)
    finally:
        process.terminate()
        process.wait(10)
