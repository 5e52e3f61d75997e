"""An sshd of the test's own: 127.0.0.1 on a free port, its configuration in a folder of the
session (it includes the folder's drop-ins first, as Debian's does), PAM on (so an expired
account is refused, as on a server). The agent's layout points its ``ssh`` section there, with a
reload that signals this sshd."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent.jobs.security.sshd import make_privilege_separation_dir, parse_effective
from fleetdeck.launcher import free_port
from tests.helpers import wait_until
from tests.helpers.hosting import Hosting

CLIENT_OPTIONS = [
    "-F", "/dev/null", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
    "-o", "ConnectTimeout=5", "-o", "IdentitiesOnly=yes",
]  # fmt: skip


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False)


@dataclass
class Sshd:
    config: Path
    dropins: Path
    port: int

    def effective(self) -> dict[str, object]:
        """What ``sshd -T`` says its configuration is now."""
        return parse_effective(_run("sshd", "-T", "-f", str(self.config)).stdout)

    def login(self, user: str, identity: str | None = None) -> subprocess.CompletedProcess[str]:
        """A real login attempt running ``id -un`` (with the private key `identity`, if given)."""
        keys = ["-i", identity] if identity else []
        return _run("ssh", *CLIENT_OPTIONS, *keys, "-p", str(self.port), f"{user}@127.0.0.1", "id", "-un")

    def methods(self) -> str:
        """The login methods sshd offers, as a refused login attempt shows them."""
        said = self.login("nobody").stderr.strip()
        return said.splitlines()[-1] if said else ""


def running_sshd(hosting: Hosting) -> Iterator[Sshd]:
    """Start one (for a module's fixture), describe it in the layout; stop it at the end."""
    if shutil.which("sshd") is None or shutil.which("ssh") is None:
        pytest.skip("needs openssh-server and openssh-client")
    folder = hosting.folder / f"ssh-{uuid.uuid4().hex[:6]}"
    dropins = folder / "sshd_config.d"
    dropins.mkdir(parents=True)
    _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(folder / "host_key"))
    port, pidfile = free_port(), folder / "sshd.pid"
    config = folder / "sshd_config"
    config.write_text(
        f"Include {dropins}/*.conf\nPort {port}\nListenAddress 127.0.0.1\nHostKey {folder / 'host_key'}\n"
        f"PidFile {pidfile}\nUsePAM yes\nKbdInteractiveAuthentication no\n"
    )
    make_privilege_separation_dir()  # as ssh's service does before it starts sshd
    started = _run(shutil.which("sshd") or "sshd", "-f", str(config))  # sshd re-executes itself: a full path
    assert started.returncode == 0, started.stderr
    wait_until(lambda: pidfile.exists() and pidfile.read_text().strip())
    pid = pidfile.read_text().strip()
    hosting.configure(
        "ssh",
        {
            "sshd_config": str(config),
            "dropin_dir": str(dropins),
            "control": {"unit": "ssh", "commands": {"reload": ["kill", "-HUP", pid]}},
        },
    )
    yield Sshd(config, dropins, port)
    os.kill(int(pid), signal.SIGTERM)
