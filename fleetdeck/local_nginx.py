"""The embedded stack's own nginx: the sites its agent makes are served from its data folder.

The agent's defaults are a Debian server's (server blocks in ``/etc/nginx/sites-enabled``, nginx
reloaded through the init system): right for a node, wrong for a demo a user starts on their own
machine, where a root stack would rewrite and reload the system's nginx. So the local stack hands
its agent a host layout file (`agent.jobs.host.LayoutFile`) whose nginx section points into
``<data>/nginx``, and runs that nginx (``daemon off``, a child of the stack that stops with it) on
127.0.0.1 at a free port (`fleetdeck.local_children` runs it). Its PHP sites pass to the stack's
own PHP-FPM (`fleetdeck.local_php`), its databases are on its own MariaDB
(`fleetdeck.local_mariadb`); the other services (PostgreSQL, ...) keep the defaults.
"""

from __future__ import annotations

import os
from pathlib import Path

from agent.jobs.common import current_account
from agent.jobs.host import NginxLayout, ServiceControl
from agent.jobs.proc import which
from agent.sites import write_atomically
from fleetdeck.local_children import Child

TEMP_FOLDERS = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")


def nginx_layout(folder: Path, binary: str, port: int, tls_port: int) -> NginxLayout:
    """Where the stack's nginx keeps its files, and the commands that control it (its PID file's master)."""
    command = [binary, "-c", str(folder / "nginx.conf")]
    return NginxLayout(
        sites_dir=str(folder / "sites-enabled"),
        conf=str(folder / "nginx.conf"),
        listen=f"127.0.0.1:{port}",
        tls_listen=f"127.0.0.1:{tls_port} ssl",
        acme_dir=str(folder / "acme-challenge"),
        user=current_account().name,  # the workers run as the stack's own user: they read its data folder
        pid_file=str(folder / "nginx.pid"),
        control=ServiceControl(
            unit="nginx",
            commands={"reload": [*command, "-s", "reload"], "restart": [*command, "-s", "reload"]},
        ),
    )


def render_conf(nginx: NginxLayout, folder: Path) -> str:
    temp = folder / "temp"
    # As root, nginx would run its workers as `nobody`, who cannot enter the 0700 data folder.
    user = f"user {nginx.user};\n" if os.geteuid() == 0 else ""
    return f"""# the local stack's own nginx (fleetdeck.local_nginx): written at each start
{user}worker_processes 1;
pid {nginx.pid_file};
error_log {folder / "error.log"};
events {{ worker_connections 256; }}
http {{
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    access_log {folder / "access.log"};
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
    for sub in ("sites-enabled", "acme-challenge", *(f"temp/{name}" for name in TEMP_FOLDERS)):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    write_atomically(nginx.conf, render_conf(nginx, folder).encode())
    if binary is None:
        return nginx, []
    argv = [binary, "-c", nginx.conf, "-g", "daemon off;"]
    return nginx, [Child("nginx", argv, nginx.conf, Path(nginx.pid_file), folder / "error.log")]
