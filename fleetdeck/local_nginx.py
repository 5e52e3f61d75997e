"""The embedded stack's own nginx: the sites its agent makes are served from its data folder.

The agent's defaults are a Debian server's (server blocks in ``/etc/nginx/sites-enabled``, nginx
reloaded through the init system): right for a node, wrong for a demo a user starts on their own
machine, where a root stack would rewrite and reload the system's nginx. So the local stack hands
its agent a host layout file (`agent.jobs.toolkit.host.LayoutFile`) whose nginx section points into
``<data>/nginx``, and runs that nginx (``daemon off``, a child of the stack that stops with it) on
127.0.0.1 at a free port (`fleetdeck.local_children` runs it). Its PHP sites pass to the stack's
own PHP-FPM (`fleetdeck.local_php`), its databases are on its own MariaDB
(`fleetdeck.local_mariadb`); the other services (PostgreSQL, ...) keep the defaults.

Run as root, its workers run as nginx's own account (``www-data``, as on a Debian server): the
sites' folders grant that account's group, so the workers read them and nothing else of the
data folder, which they only pass through (``0711``, `fleetdeck.paths.PASSABLE`). Their temporary
folders are theirs; the configuration, the sites' server blocks and nginx's own logs stay root's
alone. Run by another account, nginx runs as that account, and all of it is that account's.
"""

from __future__ import annotations

import os
from pathlib import Path

from agent.jobs.toolkit.common import account_by_name, current_account
from agent.jobs.toolkit.host import NginxLayout, ServiceControl
from agent.jobs.toolkit.proc import which
from agent.sites import write_atomically
from fleetdeck.local_children import Child
from fleetdeck.paths import PASSABLE, PRIVATE, private_dir

TEMP_FOLDERS = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
WORKERS_AS_ROOT = ("www-data", "nobody")  # the first that exists: Debian's nginx account, else nobody


def nginx_layout(folder: Path, binary: str, port: int, tls_port: int) -> NginxLayout:
    """Where the stack's nginx keeps its files, and the commands that control it (its PID file's master)."""
    command = [binary, "-c", str(folder / "nginx.conf")]
    return NginxLayout(
        sites_dir=str(folder / "sites-enabled"),
        conf=str(folder / "nginx.conf"),
        listen=f"127.0.0.1:{port}",
        tls_listen=f"127.0.0.1:{tls_port} ssl",
        acme_dir=str(folder / "acme-challenge"),
        user=worker_account(),
        pid_file=str(folder / "nginx.pid"),
        control=ServiceControl(
            unit="nginx",
            commands={"reload": [*command, "-s", "reload"], "restart": [*command, "-s", "reload"]},
        ),
    )


def worker_account() -> str:
    """The account nginx's workers run as: as root, nginx's own (see the module docstring); else the stack's."""
    if os.geteuid() == 0:
        return next((name for name in WORKERS_AS_ROOT if account_by_name(name) is not None), "nobody")
    return current_account().name


def render_conf(nginx: NginxLayout, folder: Path) -> str:
    temp, logs = folder / "temp", folder / "logs"
    user = f"user {nginx.user};\n" if os.geteuid() == 0 else ""
    return f"""# the local stack's own nginx (fleetdeck.local_nginx): written at each start
{user}worker_processes 1;
pid {nginx.pid_file};
error_log {logs / "error.log"};
events {{ worker_connections 256; }}
http {{
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    server_names_hash_bucket_size 128;  # a site's name may be 63 characters and more (64 takes about 50)
    access_log {logs / "access.log"};
{"".join(f"    {name}_temp_path {temp / name};{chr(10)}" for name in TEMP_FOLDERS)}    server {{
        listen {nginx.listen} default_server;
        return 404;
    }}
    include {nginx.sites_dir}/*.conf;
}}
"""


def prepare(folder: Path, port: int, tls_port: int) -> tuple[NginxLayout, list[Child]]:
    """Write the stack's nginx configuration; its layout (the agent's nginx section), and the
    child to run: none when nginx is not installed (the layout still keeps the agent out of
    /etc: a site asks for nginx, Debian package nginx)."""
    binary = which("nginx")
    nginx = nginx_layout(folder, binary or "nginx", port, tls_port)
    _make_folders(folder, nginx.user)
    write_atomically(nginx.conf, render_conf(nginx, folder).encode())
    if binary is None:
        return nginx, []
    argv = [binary, "-c", nginx.conf, "-g", "daemon off;"]
    return nginx, [Child("nginx", argv, nginx.conf, Path(nginx.pid_file), folder / "logs" / "error.log")]


def _make_folders(folder: Path, workers: str) -> None:
    """nginx's folders, each with what may enter it (see the module docstring): the workers pass
    through `folder` to their temporary folders and read the ACME challenges."""
    as_root = os.geteuid() == 0
    for passed in (folder, folder / "temp"):
        private_dir(passed, PASSABLE if as_root else PRIVATE)
    for sub in ("sites-enabled", "logs"):
        private_dir(folder / sub)
    (folder / "acme-challenge").mkdir(exist_ok=True)
    account = account_by_name(workers) if as_root else None
    for name in TEMP_FOLDERS:
        temp = private_dir(folder / "temp" / name)
        if account is not None:
            os.chown(temp, account.uid, account.gid)
