"""Shared by the benchmarks: a `fleetdeck local` stack in a temporary data dir, and sshd on loopback."""

from __future__ import annotations

import compileall
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from agent.jobs.security.sshd import make_privilege_separation_dir
from fleetdeck.launcher import PROJECT_ROOT, free_port, start_agent
from fleetdeck.launcher import LocalStack as Launcher
from fleetdeck.paths import StackLayout


def compile_bytecode() -> None:
    """The bytecode of the packages an installed fleetdeck holds (pyproject's wheel), as pip makes
    it: where PYTHONDONTWRITEBYTECODE is set (as on this machine), every process the benchmarks
    start would otherwise compile them from source, while their libraries run from bytecode."""
    pyproject = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    for package in pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]:
        compileall.compile_dir(PROJECT_ROOT / package, quiet=1)


@dataclass
class LocalStack:
    data_dir: Path
    base_url: str
    token: str
    server_id: str
    pid: int = 0  # the control plane's process
    agent_pid: int = 0  # the separate agent's process, while `separate_agent` runs

    @property
    def host_layout(self) -> Path:
        """The stack's host layout file (its nginx, PHP-FPM, MariaDB and sites' log folder)."""
        return StackLayout(self.data_dir).host_layout

    def site_log(self, slug: str, name: str) -> Path:
        """The log `name` of the site `slug`, in the stack's sites' log folder (root's, outside the site)."""
        return StackLayout(self.data_dir).site_logs / slug / name

    @contextmanager
    def separate_agent(self, name: str = "bench-agent", *extra: str, ingress: bool = False) -> Iterator[str]:
        """A second server whose agent is its own process (as on a real server), on the same demo
        workspace; yields its server id. `fleetdeck local` runs its agent inside the control
        plane's process, where the two share one core's worth of Python. `extra`: more of the
        agent's options (`start_agent`). `ingress`: the agent serves direct uploads on 127.0.0.1
        (any port)."""
        import httpx

        headers = {"Authorization": f"Bearer {self.token}"}
        created = httpx.post(f"{self.base_url}/v1/servers", json={"name": name, "kind": "full"}, headers=headers).json()
        server_id = created["server"]["id"]
        layout = StackLayout(self.data_dir)
        state = self.data_dir / name
        state.mkdir(exist_ok=True)
        shutil.copy(layout.agent_state / "sites.json", state / "sites.json")
        agent = start_agent(
            self.base_url,
            created["agent_token"],
            layout.home,
            state,
            *extra,
            ingress="127.0.0.1:0" if ingress else None,
            stderr=subprocess.DEVNULL,
        )
        self.agent_pid = agent.pid
        try:
            deadline = time.monotonic() + 20
            while not httpx.get(f"{self.base_url}/v1/servers/{server_id}", headers=headers).json()["agent"]["online"]:
                if time.monotonic() > deadline:
                    raise RuntimeError("the benchmark's agent did not come online")
                time.sleep(0.1)
            yield server_id
        finally:
            agent.terminate()
            agent.wait(10)
            self.agent_pid = 0


@contextmanager
def local_stack(env: dict[str, str] | None = None) -> Iterator[LocalStack]:
    """`fleetdeck local` in a temporary data dir; `env`: more variables for it (`FLEETDECK_*`)."""
    with tempfile.TemporaryDirectory(prefix="fleetdeck-bench-") as folder, Launcher(Path(folder), env=env) as launcher:
        credentials = launcher.credentials
        assert credentials is not None and launcher.process is not None
        try:
            yield LocalStack(
                Path(folder), credentials.base_url, credentials.token, credentials.server_id, launcher.process.pid
            )
        finally:
            if launcher.process.poll() is not None:
                print("\n".join(launcher.log_tail(40)), file=sys.stderr)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (Linux /proc; 0.0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Ssh:
    port: int
    key: Path

    def options(self) -> list[str]:
        """What ssh and scp both need: this key, no host key checks, no prompts."""
        settings = ["StrictHostKeyChecking=no", "UserKnownHostsFile=/dev/null", "LogLevel=ERROR", "BatchMode=yes"]
        return ["-i", str(self.key), *(arg for setting in settings for arg in ("-o", setting))]

    def command(self, remote: str) -> list[str]:
        return ["ssh", "-p", str(self.port), *self.options(), "root@127.0.0.1", remote]

    def scp_from(self, remote: str, local: Path) -> list[str]:
        return ["scp", "-q", "-P", str(self.port), *self.options(), f"root@127.0.0.1:{remote}", str(local)]


@contextmanager
def loopback_sshd() -> Iterator[Ssh | None]:
    """sshd on 127.0.0.1 with a throwaway host key and client key; None where sshd is not installed."""
    sshd = shutil.which("sshd") or ("/usr/sbin/sshd" if Path("/usr/sbin/sshd").exists() else None)
    if sshd is None or shutil.which("ssh") is None:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="fleetdeck-sshd-") as folder:
        base = Path(folder)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(base / "host")], check=True)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(base / "client")], check=True)
        (base / "authorized_keys").write_text((base / "client.pub").read_text())
        os.chmod(base / "authorized_keys", 0o600)
        make_privilege_separation_dir()
        port = free_port()
        config = base / "sshd_config"
        config.write_text(
            f"Port {port}\nListenAddress 127.0.0.1\nHostKey {base / 'host'}\nPermitRootLogin prohibit-password\n"
            f"AuthorizedKeysFile {base / 'authorized_keys'}\nPasswordAuthentication no\nStrictModes no\n"
            f"PidFile {base / 'sshd.pid'}\nUsePAM no\nSubsystem sftp /usr/lib/openssh/sftp-server\n"
        )
        process = subprocess.Popen([sshd, "-D", "-e", "-f", str(config)], stderr=subprocess.DEVNULL)
        try:
            ssh = Ssh(port, base / "client")
            deadline = time.monotonic() + 10
            while subprocess.run(ssh.command("true"), capture_output=True).returncode != 0:
                if time.monotonic() > deadline:
                    yield None
                    return
                time.sleep(0.2)
            yield ssh
        finally:
            process.terminate()
            process.wait(10)
