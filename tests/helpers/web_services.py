"""The hosting server's web services, as the tests run them: an nginx and a PHP-FPM of their own.

Both run from the Debian packages' binaries, as root masters with their own configuration,
PID file and logs in a folder of the session, so they never touch the system's instances: nginx
listens on 127.0.0.1 at a free port and reads one file per site from `sites_dir`; each installed
PHP version's FPM reads the pools in its `pool_dir` (its main file holds one idle pool of its own,
as PHP-FPM will not start without one) with a copy of Debian's ini folders, and puts the pools'
sockets in its `run_dir`. The
layout section each one adds tells the agent where they are and the exact commands that control
them (reload is ``nginx -s reload``, PHP-FPM's ``SIGUSR2``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetdeck.launcher import free_port
from tests.helpers import wait_until

NGINX = "/usr/sbin/nginx"


@dataclass(frozen=True)
class Nginx:
    folder: Path
    conf: Path
    sites_dir: Path
    port: int
    tls_port: int  # the sites' TLS server blocks listen here (once they have a certificate)

    @property
    def pid_file(self) -> Path:
        return self.folder / "nginx.pid"

    @property
    def acme_dir(self) -> Path:
        return self.folder / "acme-challenge"

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def layout(self) -> dict[str, Any]:
        command = [NGINX, "-c", str(self.conf)]
        return {
            "sites_dir": str(self.sites_dir),
            "conf": str(self.conf),
            "listen": f"127.0.0.1:{self.port}",
            "pid_file": str(self.pid_file),
            "tls_listen": f"127.0.0.1:{self.tls_port} ssl",
            "acme_dir": str(self.acme_dir),
            "control": {
                "unit": "nginx",
                "commands": {
                    "start": command,
                    "stop": [*command, "-s", "quit"],
                    "reload": [*command, "-s", "reload"],
                    "restart": [*command, "-s", "reload"],
                },
            },
        }


def start_nginx(folder: Path) -> Nginx:
    folder.mkdir(parents=True)
    sites = folder / "sites"
    sites.mkdir()
    for temporary in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (folder / "temp" / temporary).mkdir(parents=True)
    nginx = Nginx(folder, folder / "nginx.conf", sites, free_port(), free_port())
    temp = folder / "temp"
    nginx.conf.write_text(
        f"""user www-data;
worker_processes 1;
pid {nginx.pid_file};
error_log {folder}/error.log;
events {{ worker_connections 256; }}
http {{
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    access_log {folder}/access.log;
    client_body_temp_path {temp}/client_body;
    proxy_temp_path {temp}/proxy;
    fastcgi_temp_path {temp}/fastcgi;
    uwsgi_temp_path {temp}/uwsgi;
    scgi_temp_path {temp}/scgi;
    server {{
        listen 127.0.0.1:{nginx.port} default_server;
        return 404;
    }}
    include {sites}/*.conf;
}}
"""
    )
    subprocess.run([NGINX, "-c", str(nginx.conf)], check=True, capture_output=True)
    wait_until(lambda: _pid(nginx.pid_file) is not None)
    return nginx


def stop_nginx(nginx: Nginx) -> None:
    pid = _pid(nginx.pid_file)
    subprocess.run([NGINX, "-c", str(nginx.conf), "-s", "quit"], capture_output=True)
    if pid is not None:
        wait_until(lambda: not _alive(pid), timeout=20)


# --- PHP-FPM -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PhpFpm:
    """One PHP version's FPM, in ``<root>/<version>/``: each installed version has its own there,
    as Debian gives each its own ``/etc/php/<version>``, so one layout with ``{version}`` in its
    paths describes them all and ``php.set`` moves a site between two real FPMs."""

    root: Path
    version: str  # 8.2

    @property
    def folder(self) -> Path:
        return self.root / self.version

    @property
    def conf(self) -> Path:
        return self.folder / "php-fpm.conf"

    @property
    def pool_dir(self) -> Path:
        return self.folder / "pool.d"

    @property
    def ini_dir(self) -> Path:  # holds fpm/ and cli/, copies of /etc/php/<version>/...
        return self.folder / "ini"

    @property
    def run_dir(self) -> Path:
        return self.folder / "run"

    @property
    def binary(self) -> str:
        return f"/usr/sbin/php-fpm{self.version}"

    @property
    def pid_file(self) -> Path:
        return self.folder / "php-fpm.pid"

    def start_argv(self) -> list[str]:
        scan = f"PHP_INI_SCAN_DIR={self.ini_dir / 'fpm' / 'conf.d'}"
        return ["env", scan, self.binary, "-y", str(self.conf), "-c", str(self.ini_dir / "fpm" / "php.ini")]

    def layout(self) -> dict[str, Any]:
        """The layout's php section, for every version under `root` (``{version}`` in each path)."""
        template = PhpFpm(self.root, "{version}")
        signal_master = ["pkill", "--pidfile", str(template.pid_file)]
        return {
            "pool_dir": str(template.pool_dir),
            "ini_dir": str(template.ini_dir),
            "run_dir": str(template.run_dir),
            "fpm_conf": str(template.conf),
            "control": {
                "unit": "php{version}-fpm",
                "commands": {
                    "start": template.start_argv(),
                    "stop": [*signal_master, "--signal", "QUIT"],
                    "reload": [*signal_master, "--signal", "USR2"],
                    "restart": [*signal_master, "--signal", "USR2"],
                },
            },
        }


def start_php_fpm(root: Path, version: str) -> PhpFpm:
    fpm = PhpFpm(root, version)
    fpm.folder.mkdir(parents=True)
    fpm.pool_dir.mkdir()
    fpm.run_dir.mkdir()
    for part in ("fpm", "cli"):
        shutil.copytree(f"/etc/php/{version}/{part}", fpm.ini_dir / part, symlinks=True)
    fpm.conf.write_text(
        f"""[global]
pid = {fpm.pid_file}
error_log = {fpm.folder}/php-fpm.log
daemonize = yes
include = {fpm.pool_dir}/*.conf

; PHP-FPM will not start without a pool: this one stays idle
[fleetdeck-idle]
user = www-data
group = www-data
listen = {fpm.run_dir}/idle.sock
pm = ondemand
pm.max_children = 1
"""
    )
    done = subprocess.run(fpm.start_argv(), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    wait_until(lambda: _pid(fpm.pid_file) is not None)
    return fpm


def stop_php_fpm(fpm: PhpFpm) -> None:
    pid = _pid(fpm.pid_file)
    if pid is not None:
        os.kill(pid, 3)  # SIGQUIT: a graceful stop
        wait_until(lambda: not _alive(pid), timeout=20)


# --- processes -----------------------------------------------------------------------------------


def _pid(pid_file: Path) -> int | None:
    try:
        text = pid_file.read_text().strip()
    except FileNotFoundError:
        return None
    return int(text) if text.isdigit() and _alive(int(text)) else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
