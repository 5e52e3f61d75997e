"""A supervisord of the tests' own (its own socket, pid file, log and ``conf.d`` in a folder of
theirs), for the daemon kinds: `start_supervisor` starts one, `Supervisor.stop` stops it."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.helpers import wait_until

SUPERVISORD = shutil.which("supervisord")

SUPERVISORD_CONF = """[unix_http_server]
file={folder}/supervisor.sock
chmod=0700

[supervisord]
logfile={folder}/supervisord.log
pidfile={folder}/supervisord.pid
childlogdir={folder}/log

[rpcinterface:supervisor]
supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface

[supervisorctl]
serverurl=unix://{folder}/supervisor.sock

[include]
files = {folder}/conf.d/*.conf
"""


@dataclass
class Supervisor:
    conf: Path
    conf_dir: Path
    log_dir: Path
    pid: int = 0

    def ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["supervisorctl", "-c", str(self.conf), *args], capture_output=True, text=True)

    def layout(self) -> dict[str, Any]:
        """The host layout's supervisor section."""
        return {"conf_dir": str(self.conf_dir), "supervisord_conf": str(self.conf), "log_dir": str(self.log_dir)}

    def stop(self) -> None:
        self.ctl("shutdown")
        wait_until(lambda: not Path(f"/proc/{self.pid}").exists(), timeout=30)


def start_supervisor(folder: Path) -> Supervisor:
    """A supervisord with its files in `folder` (made here), answering once it runs."""
    assert SUPERVISORD is not None, "needs supervisor (Debian package supervisor)"
    started = Supervisor(folder / "supervisord.conf", folder / "conf.d", folder / "log")
    for made in (started.conf_dir, started.log_dir):
        made.mkdir(parents=True)
    started.conf.write_text(SUPERVISORD_CONF.format(folder=folder))
    subprocess.run([SUPERVISORD, "-c", str(started.conf)], check=True)
    wait_until(lambda: started.ctl("status").returncode in (0, 3))  # 3: some program is not running
    started.pid = int((folder / "supervisord.pid").read_text())
    return started
