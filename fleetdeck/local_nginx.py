"""The embedded stack's own nginx: the sites its agent makes are served from its data folder.

The agent's defaults are a Debian server's (server blocks in ``/etc/nginx/sites-enabled``, nginx
reloaded through the init system): right for a node, wrong for a demo a user starts on their own
machine, where a root stack would rewrite and reload the system's nginx. So the local stack hands
its agent a host layout file (`agent.jobs.host.LayoutFile`) whose nginx section points into
``<data>/nginx``, and runs that nginx (``daemon off``, a child of the stack that stops with it) on
127.0.0.1 at a free port. The other services (PHP-FPM, MariaDB, ...) keep the defaults.
"""

from __future__ import annotations

import getpass
import logging
import os
import signal
import subprocess
from pathlib import Path

import anyio
import anyio.abc

from agent.jobs.host import HostLayout, NginxLayout, ServiceControl
from agent.jobs.proc import pid_alive, read_pid, which
from agent.sites import write_atomically

log = logging.getLogger("fleetdeck.local")

TEMP_FOLDERS = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
QUIT_WAIT_S = 10.0  # then it is killed
LEFT_OVER_WAIT_S = 10.0


def nginx_layout(folder: Path, binary: str, port: int, tls_port: int) -> NginxLayout:
    """Where the stack's nginx keeps its files, and the commands that control it (its PID file's master)."""
    command = [binary, "-c", str(folder / "nginx.conf")]
    return NginxLayout(
        sites_dir=str(folder / "sites-enabled"),
        conf=str(folder / "nginx.conf"),
        listen=f"127.0.0.1:{port}",
        tls_listen=f"127.0.0.1:{tls_port} ssl",
        acme_dir=str(folder / "acme-challenge"),
        user=getpass.getuser(),  # the workers run as the stack's own user: they read its data folder
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


def prepare(folder: Path, layout_file: Path, port: int, tls_port: int) -> NginxLayout | None:
    """Write the stack's nginx configuration and the agent's layout file pointing at it; the
    layout, or None when nginx is not installed (the layout still keeps the agent out of /etc:
    a site asks for nginx, Debian package nginx)."""
    binary = which("nginx")
    nginx = nginx_layout(folder, binary or "nginx", port, tls_port)
    for sub in ("sites-enabled", "acme-challenge", *(f"temp/{name}" for name in TEMP_FOLDERS)):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    write_atomically(nginx.conf, render_conf(nginx, folder).encode())
    write_atomically(str(layout_file), HostLayout(nginx=nginx).model_dump_json(indent=2).encode())
    return nginx if binary is not None else None


async def run_nginx(nginx: NginxLayout, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
    """Run the stack's nginx until cancelled (then its master is told to quit, and waited for).
    A stack killed outright cannot tell it: util-linux's ``setpriv --pdeathsig`` has the kernel
    send the master SIGQUIT when the stack dies; an nginx left all the same is quit at the next start.

    The kernel sends that signal when the *thread* that started nginx ends, not the process. So
    nginx is started here, on the stack's own event-loop thread, which lives as long as the stack:
    `anyio.open_process` under trio starts it on a worker thread, whose end (idle for 10 s) quit
    nginx under a running stack."""
    await _stop_left_over(nginx)
    argv = [nginx.control.commands["reload"][0], "-c", nginx.conf, "-g", "daemon off;"]
    setpriv = which("setpriv")
    if setpriv is not None:
        argv = [setpriv, "--pdeathsig", "QUIT", "--", *argv]
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL)  # noqa: ASYNC220 (on this thread: see above)
    task_status.started()
    try:
        code = await anyio.to_thread.run_sync(process.wait, abandon_on_cancel=True)
        log.warning("the stack's nginx exited %s: see %s", code, Path(nginx.conf).parent / "error.log")
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGQUIT)  # a graceful stop, as `nginx -s quit`
            with anyio.CancelScope(shield=True):
                try:
                    await anyio.to_thread.run_sync(process.wait, QUIT_WAIT_S)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


async def _stop_left_over(nginx: NginxLayout) -> None:
    """Quit the nginx of an earlier run of this stack that was killed (its master outlives it),
    known by its PID file and its configuration file."""
    pid = await anyio.to_thread.run_sync(read_pid, Path(nginx.pid_file))
    if pid is None or not _runs_conf(pid, nginx.conf):
        return
    log.info("quitting the nginx (pid %s) a stopped run of this stack left behind", pid)
    os.kill(pid, signal.SIGQUIT)
    with anyio.move_on_after(LEFT_OVER_WAIT_S):
        while pid_alive(pid):  # noqa: ASYNC110 (not our child: no exit to wait on)
            await anyio.sleep(0.05)


def _runs_conf(pid: int, conf: str) -> bool:
    """Whether `pid` runs with `conf` (an nginx master rewrites its title: "nginx: master process ... -c CONF")."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return conf.encode() in f.read()
    except OSError:
        return False
