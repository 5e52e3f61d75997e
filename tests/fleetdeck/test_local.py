"""`fleetdeck local`: starts, writes its credentials, answers, and stops cleanly on a signal."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import closing
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from agent import unix_sockets
from agent.jobs.toolkit.host import php_fpm_versions
from agent.jobs.toolkit.php_fpm import fpm_processes, workers
from fleetdeck import local_mariadb
from fleetdeck.paths import PASSABLE
from tests.conftest import STACK_ENV, Stack, python_env, start_local
from tests.helpers import wait_until

# Both servers the control plane runs under (`FLEETDECK_SERVER`), and the `server` header each answers with.
SERVERS = pytest.mark.parametrize("server", ["hypercorn", "uvicorn"])
SERVER_HEADERS = {"hypercorn": "hypercorn-h11", "uvicorn": "uvicorn"}


def _launch(data_dir: Path, server: str) -> subprocess.Popen[str]:
    # Through the `fleetdeck` console script when it is installed, else its module.
    script = shutil.which("fleetdeck")
    command = [script] if script else [sys.executable, "-m", "fleetdeck"]
    return subprocess.Popen(
        [*command, "local", "--data-dir", str(data_dir)],
        env=python_env(FLEETDECK_SERVER=server),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_url(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if "running at" in line:
            return line.split("running at", 1)[1].strip()
        assert line or process.poll() is None, process.stderr.read() if process.stderr else ""
    raise AssertionError("no URL printed")


@SERVERS
@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_local_starts_answers_and_stops(tmp_path: Path, stop_signal: signal.Signals, server: str) -> None:
    process = _launch(tmp_path, server)
    try:
        url = _wait_for_url(process)
        credentials_file = tmp_path / "demo-credentials.json"
        assert stat.S_IMODE(credentials_file.stat().st_mode) == 0o600
        credentials = json.loads(credentials_file.read_text())
        assert set(credentials) == {"base_url", "email", "password", "token", "server_id", "db_url", "lb_ports"}
        assert set(credentials["lb_ports"]) == {"80", "443"}
        assert all(0 < port < 65536 for port in credentials["lb_ports"].values())
        assert credentials["base_url"] == url and url.startswith("http://127.0.0.1:")
        answer = httpx.get(f"{url}/v1/health")
        assert answer.headers["server"] == SERVER_HEADERS[server]
        health = answer.json()
        assert health["status"] == "ok" and health["agents_online"] == 1
        me = httpx.get(f"{url}/v1/me", headers={"Authorization": f"Bearer {credentials['token']}"})
        assert me.json()["org"]["plan"] == "max" and me.json()["role"] == "owner"
        assert (tmp_path / "home" / "example-com" / "public_html" / "index.php").is_file()
        process.send_signal(stop_signal)
        assert process.wait(timeout=20) == 0
        assert not (tmp_path / "run.json").exists(), "the run file goes with the stack"
        with pytest.raises(httpx.TransportError):
            httpx.get(f"{url}/v1/health", timeout=2)
    finally:
        process.kill()
        process.wait()


@SERVERS
def test_serve_alone_starts_and_stops(tmp_path: Path, server: str) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    db_url = f"sqlite:///{tmp_path / 'data' / 'cp.db'}"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fleetdeck",
            "serve",
            "--db",
            db_url,
            "--listen",
            f"127.0.0.1:{port}",
            "--server",
            server,
        ],
        env=python_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert f"127.0.0.1:{port}" in process.stdout.readline()
        answer = httpx.get(f"http://127.0.0.1:{port}/v1/health")
        assert answer.headers["server"] == SERVER_HEADERS[server]
        health = answer.json()
        assert health == {
            "status": "ok",
            "version": health["version"],
            "agents_online": 0,
            "database": "ok",
            "bus": None,
        }
        assert _mode(tmp_path / "data") == 0o700
        assert {path.name: _mode(path) for path in (tmp_path / "data").iterdir()} == {
            "cp.db": 0o600,
            "cp.db-wal": 0o600,
            "cp.db-shm": 0o600,
        }
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
    finally:
        process.kill()
        process.wait()


# What each server logs of the broken connection below, in one line.
BROKEN_CONNECTION_LOGS = {
    "hypercorn": ("broke the HTTP protocol", "a connection failed"),
    "uvicorn": ("connection rejected",),  # the upgrade to a plain route is refused: 403, then closed
}


@SERVERS
def test_one_broken_connection_does_not_take_the_control_plane_down(tmp_path: Path, server: str) -> None:
    """A WebSocket upgrade with a stray byte after its head makes hypercorn's h11 protocol raise in
    that connection's task (hypercorn #225); unguarded, that ended the whole server."""
    from tests.conftest import start_local

    stack = start_local(tmp_path / "data", env={"FLEETDECK_SERVER": server})
    try:
        host, port = stack.base_url.removeprefix("http://").rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as raw:
            raw.sendall(
                b"GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
                b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: bKdPyn3u98cTfZJSh4TNeQ==\r\n\r\nx\n"
            )
            raw.recv(65536)  # the connection's task has run: it answered, or closed the connection
        assert stack.process.poll() is None, "the control plane exited"
        assert httpx.get(f"{stack.base_url}/v1/health", timeout=10).status_code == 200
        wait_until(lambda: any(line in stack.log() for line in BROKEN_CONNECTION_LOGS[server]))
        assert "Traceback" not in stack.log(), "a client's broken bytes are one line in the log, not a traceback"
        with stack.http() as http:
            assert http.get(f"/v1/servers/{stack.server_id}").json()["agent"]["online"]
    finally:
        stack.stop()


def test_a_send_that_meets_the_connections_close_is_a_closed_connection() -> None:
    """The app sending its answer while hypercorn half-closes the connection (a client broke its
    request off) met trio's BusyResourceError: an unhandled error, a traceback in the log. Trio
    picks which of the two runnable tasks goes first, so the race is run many times: unpatched,
    some runs meet the error; patched, none does and each ends with the connection closed."""
    from hypercorn.config import Config
    from hypercorn.events import Closed, RawData
    from hypercorn.trio.tcp_server import TCPServer

    from control_plane.serving import install_server_fixes

    install_server_fixes()
    patched = TCPServer.protocol_send
    unpatched = patched.__wrapped__  # type: ignore[attr-defined]

    class Protocol:
        def __init__(self) -> None:
            self.events: list[object] = []

        async def handle(self, event: object) -> None:
            self.events.append(event)

    async def race(send: Any) -> str:
        left, right = trio.socket.socketpair()
        server = TCPServer(None, Config(), None, None, trio.SocketStream(left))  # type: ignore[arg-type]
        server.protocol = protocol = Protocol()  # type: ignore[assignment]
        met_busy = False
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(server._close)
                nursery.start_soon(send, server, RawData(b"the answer"))
        except* trio.BusyResourceError:
            met_busy = True
        finally:
            right.close()
        if met_busy:
            return "busy"
        return "closed" if protocol.events == [Closed()] else repr(protocol.events)

    assert "busy" in {trio.run(race, unpatched) for _ in range(200)}, "the race did not happen"
    assert {trio.run(race, patched) for _ in range(200)} == {"closed"}


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def _private_files(data_dir: Path) -> dict[str, int]:
    """The modes of the data folder, its database files and everything in the agent's state.

    Inside the load balancers' folder (itself 0700, so kept to its owner) nginx and HAProxy
    write their own files (pidfiles, configurations) with their own modes: it counts as one."""
    agent = data_dir / "agent"
    lb = agent / "lb"
    found = {".": _mode(data_dir), "agent": _mode(agent)}
    found |= {path.name: _mode(path) for path in data_dir.glob("fleetdeck.db*")}
    found |= {
        str(path.relative_to(data_dir)): _mode(path)
        for path in agent.rglob("*")
        if not path.is_symlink() and lb not in path.parents
    }
    return found


def _owners_only(data_dir: Path, found: dict[str, int]) -> dict[str, int]:
    """The modes `_private_files` must find: the owner's alone, but for a root stack's data folder,
    which its sites' users pass through (never list)."""
    passed = PASSABLE if os.geteuid() == 0 else 0o700
    return {name: passed if name == "." else 0o700 if (data_dir / name).is_dir() else 0o600 for name in found}


def test_a_fresh_stack_keeps_its_data_to_its_owner(stack: Stack) -> None:
    found = _private_files(stack.data_dir)
    assert {"fleetdeck.db", "fleetdeck.db-wal", "fleetdeck.db-shm", "agent/sites.json", "agent/agent-token"} <= set(
        found
    )
    assert found == _owners_only(stack.data_dir, found)


def _finished(http: httpx.Client, job_id: str) -> dict[str, Any]:
    job: dict[str, Any] = {}

    def done() -> bool:
        job.update(http.get(f"/v1/jobs/{job_id}").json())
        return job["status"] in ("succeeded", "failed", "interrupted")

    wait_until(done, timeout=60)
    return job


def _system_pools() -> dict[str, tuple[int, int, int]]:
    """The machine's own PHP-FPM pools (``/etc/php/<v>/fpm/pool.d``), which a stack leaves alone.
    Only there: another test may install a PHP extension meanwhile, which writes in /etc/php."""
    return {
        f"{folder}/{name}": stat
        for folder in Path("/etc/php").glob("*/fpm/pool.d")
        for name, stat in _listing(folder).items()
    }


def _host_layout(data_dir: Path) -> dict[str, Any]:
    """The host layout the stack gave its agent: where its services keep their files and sockets."""
    layout: dict[str, Any] = json.loads((data_dir / "host-layout.json").read_text())
    return layout


def _mentions(folder: Path, words: tuple[str, ...]) -> list[str]:
    """The files under `folder` whose name or text has one of `words`."""
    return [
        str(path)
        for path in folder.rglob("*")
        if path.is_file() and any(word in path.name or word in path.read_text(errors="replace") for word in words)
    ]


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("nginx", path="/usr/sbin:/usr/bin") is None,
    reason="needs root (a site is a system user) and nginx (Debian package nginx)",
)
def test_a_site_of_the_local_stack_is_served_by_its_own_nginx_and_leaves_the_systems_alone(stack: Stack) -> None:
    domain = f"own-{uuid.uuid4().hex[:6]}.test"
    slug = domain.replace(".", "-")
    nginx = _host_layout(stack.data_dir)["nginx"]
    with stack.http() as http:
        jobs = f"/v1/servers/{stack.server_id}/jobs"
        created = http.post(jobs, json={"kind": "site.create", "args": {"domain": domain}})
        assert created.status_code == 201, created.text
        try:
            job = _finished(http, created.json()["id"])
            assert job["status"] == "succeeded", job
            assert [p.name for p in (stack.data_dir / "nginx" / "sites-enabled").iterdir()] == [
                f"fleetdeck-{slug}.conf"
            ]
            assert _mentions(Path("/etc/nginx"), (domain, slug)) == []  # before, its server block went there
            page = httpx.get(f"http://{nginx['listen']}/", headers={"Host": domain})
            assert page.status_code == 200 and domain in page.text  # served by the stack's own nginx
        finally:
            deleted = http.post(jobs, json={"kind": "site.delete", "args": {"domain": domain}})
            assert _finished(http, deleted.json()["id"])["status"] == "succeeded"
    assert list((stack.data_dir / "nginx" / "sites-enabled").iterdir()) == []


MARIADB_INSTALLED = all(shutil.which(tool, path="/usr/sbin:/usr/bin") for tool in ("mariadbd", "mariadb-install-db"))
NEEDS_WEB_AND_PHP = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("nginx", path="/usr/sbin:/usr/bin") is None or not php_fpm_versions(),
    reason="needs root (a site is a system user; or to run a stack as nobody), nginx and PHP-FPM",
)


def _listing(folder: Path) -> dict[str, tuple[int, int, int]]:
    """Every path under `folder`: its mode, size and modification time."""
    found = {}
    for path in sorted(folder.rglob("*")):
        st = path.lstat()
        found[str(path.relative_to(folder))] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return found


@NEEDS_WEB_AND_PHP
def test_a_php_site_of_the_local_stack_gets_its_pool_on_the_stacks_own_php_fpm_and_leaves_etc_php_alone(
    stack: Stack,
) -> None:
    """Before, its pool went to /etc/php/<v>/fpm/pool.d and the system's PHP-FPM was reloaded."""
    domain = f"php-{uuid.uuid4().hex[:6]}.test"
    slug = domain.replace(".", "-")
    before = _system_pools()
    with stack.http() as http:
        jobs = f"/v1/servers/{stack.server_id}/jobs"
        created = http.post(jobs, json={"kind": "site.create", "args": {"domain": domain, "profile": "php"}})
        assert created.status_code == 201, created.text
        try:
            job = _finished(http, created.json()["id"])
            assert job["status"] == "succeeded", job
            pools = list((stack.data_dir / "php").glob(f"*/fpm/pool.d/fleetdeck-{slug}.conf"))
            assert len(pools) == 1
            socket_file = Path(_host_layout(stack.data_dir)["php"]["run_dir"]) / f"fleetdeck-{slug}.sock"
            assert socket_file.is_socket()  # opened by the stack's PHP-FPM, reloaded by the agent
            block = (stack.data_dir / "nginx" / "sites-enabled" / f"fleetdeck-{slug}.conf").read_text()
            assert f"fastcgi_pass unix:{socket_file};" in block
            assert _system_pools() == before
        finally:
            deleted = http.post(jobs, json={"kind": "site.delete", "args": {"domain": domain}})
            assert _finished(http, deleted.json()["id"])["status"] == "succeeded"
    assert list((stack.data_dir / "php").glob(f"*/fpm/pool.d/fleetdeck-{slug}.conf")) == []
    assert _system_pools() == before


@pytest.mark.skipif(not MARIADB_INSTALLED, reason="needs MariaDB (Debian package mariadb-server)")
def test_a_database_of_the_local_stack_is_made_on_its_own_mariadb_and_leaves_the_systems_alone(stack: Stack) -> None:
    """Before, db.create went to the machine's server (`/run/mysqld/mysqld.sock`), or failed without one."""
    name = f"demo_{uuid.uuid4().hex[:6]}"
    system = Path("/var/lib/mysql")
    before = _listing(system) if system.is_dir() else {}
    # The stack does not wait for its server (made at its first start, ready 0.1 s after): this test may come first.
    wait_until(lambda: Path(_host_layout(stack.data_dir)["mariadb"]["socket"]).is_socket())
    with stack.http() as http:
        jobs = f"/v1/servers/{stack.server_id}/jobs"
        created = http.post(jobs, json={"kind": "db.create", "args": {"name": name}})
        assert created.status_code == 201, created.text
        try:
            job = _finished(http, created.json()["id"])
            assert job["status"] == "succeeded", job
            assert (stack.data_dir / "mariadb" / "data" / name).is_dir()
        finally:
            dropped = http.post(jobs, json={"kind": "db.drop", "args": {"name": name}})
            assert _finished(http, dropped.json()["id"])["status"] == "succeeded"
    assert not (stack.data_dir / "mariadb" / "data" / name).exists()
    assert (_listing(system) if system.is_dir() else {}) == before


def _launch_as(account: pwd.struct_passwd, data_dir: Path, log_file: Path) -> subprocess.Popen[str]:
    """`fleetdeck local` run by another account (its own HOME, its stderr to `log_file`)."""
    setpriv = ["setpriv", f"--reuid={account.pw_uid}", f"--regid={account.pw_gid}", "--clear-groups", "--"]
    name = account.pw_name
    env = python_env(**STACK_ENV, HOME=str(data_dir.parent), USER=name, LOGNAME=name)
    with log_file.open("w") as log:
        command = [*setpriv, sys.executable, "-m", "fleetdeck", "local", "--data-dir", str(data_dir)]
        return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=log, text=True)


@NEEDS_WEB_AND_PHP
def test_a_php_site_of_an_unprivileged_local_stack_answers_a_php_page_run_by_its_own_php_fpm() -> None:
    """A user's own demo: the site's PHP runs as the stack's account, on the stack's PHP-FPM,
    behind its nginx. Before, the agent could not even write the pool into /etc/php."""
    account = pwd.getpwnam("nobody")
    folder = Path(tempfile.mkdtemp(prefix="fleetdeck-local-php-"))  # outside pytest's folder, private to root
    folder.chmod(0o755)
    os.chown(folder, account.pw_uid, account.pw_gid)
    data_dir = folder / "local"
    before = _system_pools()
    process = _launch_as(account, data_dir, folder / "stack.log")
    try:
        _wait_for_url(process)
        credentials = json.loads((data_dir / "demo-credentials.json").read_text())
        masters = _fpm_pids(data_dir)
        domain = f"php-{uuid.uuid4().hex[:6]}.test"
        slug = domain.replace(".", "-")
        http = httpx.Client(
            base_url=credentials["base_url"], headers={"Authorization": f"Bearer {credentials['token']}"}
        )
        with http:
            jobs = f"/v1/servers/{credentials['server_id']}/jobs"
            created = http.post(jobs, json={"kind": "site.create", "args": {"domain": domain, "profile": "php"}})
            assert created.status_code == 201, created.text
            job = _finished(http, created.json()["id"])
            assert job["status"] == "succeeded", job
            (pool,) = (data_dir / "php").glob(f"*/fpm/pool.d/fleetdeck-{slug}.conf")
            version = pool.parts[-4]
            listen = _host_layout(data_dir)["nginx"]["listen"]
            page = httpx.get(f"http://{listen}/", headers={"Host": domain})
            assert page.status_code == 200, page.text
            assert f"<h1>{domain}</h1><p>PHP {version}." in page.text  # the profile's index.php, run
            pools = workers(fpm_processes(), masters[version])
            assert f"fleetdeck-{slug}" in pools  # run by a worker of the stack's own master
        assert _system_pools() == before
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
        assert not any(_alive(pid) for pid in masters.values())  # no PHP-FPM of the stack is left
    finally:
        process.kill()
        process.wait()
        shutil.rmtree(folder, ignore_errors=True)


def _run_job(http: httpx.Client, server_id: str, kind: str, **args: Any) -> None:
    """Run a job and see it succeed (else an assertion with what it printed)."""
    created = http.post(f"/v1/servers/{server_id}/jobs", json={"kind": kind, "args": args})
    assert created.status_code == 201, created.text
    job = _finished(http, created.json()["id"])
    assert job["status"] == "succeeded", http.get(f"/v1/jobs/{job['id']}/stream").text


WHO_AM_I = "<?php echo posix_getpwuid(posix_geteuid())['name'];"


@NEEDS_WEB_AND_PHP
@pytest.mark.skipif(not MARIADB_INSTALLED, reason="needs MariaDB (Debian package mariadb-server)")
def test_a_root_stack_in_a_long_data_folder_serves_a_php_site_as_its_own_user_and_keeps_its_secrets() -> None:
    """Before, a root stack's PHP pages answered "File not found." (its sites' users could not pass
    its 0700 data folder), and a data folder this long took the sockets past the kernel's 107
    bytes: nginx refused the whole configuration at site.create."""
    folder = Path(tempfile.mkdtemp(prefix="fleetdeck-local-root-"))
    folder.chmod(0o711)  # as /var/lib, where a root stack keeps its data: others pass through, never list
    data_dir = folder / ("long-data-folder-" * 6) / "local"
    assert len(os.fsencode(str(data_dir))) > unix_sockets.MAX_SOCKET_PATH
    domain = f"{'long-' * 10}{uuid.uuid4().hex[:6]}.test"  # a 56-character folder name
    process = _launch(data_dir, "hypercorn")
    try:
        _wait_for_url(process)
        credentials = json.loads((data_dir / "demo-credentials.json").read_text())
        server_id = credentials["server_id"]
        layout = _host_layout(data_dir)
        http = httpx.Client(
            base_url=credentials["base_url"], headers={"Authorization": f"Bearer {credentials['token']}"}, timeout=30
        )
        with http:
            _run_job(http, server_id, "site.create", domain=domain, profile="php")
            try:
                page = {"scope": "site", "domain": domain, "path": "public_html/who.php", "content": WHO_AM_I}
                assert http.put(f"/v1/servers/{server_id}/fs/write", json=page).status_code == 200
                user = pwd.getpwuid((data_dir / "home" / domain.replace(".", "-")).stat().st_uid).pw_name
                answer = httpx.get(f"http://{layout['nginx']['listen']}/who.php", headers={"Host": domain})
                assert (answer.status_code, answer.text) == (200, user)  # run by the site's own FPM pool
                wait_until(lambda: Path(layout["mariadb"]["socket"]).is_socket())
                name = f"long_{uuid.uuid4().hex[:6]}"
                _run_job(http, server_id, "db.create", name=name)
                _run_job(http, server_id, "db.drop", name=name)
                sockets = [*Path(layout["php"]["run_dir"]).iterdir(), Path(layout["mariadb"]["socket"])]
                assert sockets and all(unix_sockets.fits(path) and path.is_socket() for path in sockets)
                listed = subprocess.run(
                    ["setpriv", f"--reuid={user}", "--init-groups", "ls", str(data_dir)], check=False
                )
                assert listed.returncode != 0  # passed through, never listed
            finally:
                _run_job(http, server_id, "site.delete", domain=domain)
        found = _private_files(data_dir)
        assert found == _owners_only(data_dir, found)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
        assert not Path(layout["php"]["run_dir"]).exists()  # the stack's sockets folder goes with it
    finally:
        process.kill()
        process.wait()
        shutil.rmtree(folder, ignore_errors=True)


def _nginx_pid(data_dir: Path) -> int:
    return _pid_in(data_dir / "nginx" / "nginx.pid")


def _mariadb_pids(data_dir: Path) -> list[int]:
    """The stack's MariaDB server, when MariaDB is installed."""
    return [_pid_in(data_dir / "mariadb" / "mariadbd.pid")] if MARIADB_INSTALLED else []


def _services(data_dir: Path) -> list[int]:
    """The masters of the stack's services: its nginx, its PHP-FPM, its MariaDB (those installed)."""
    return [_nginx_pid(data_dir), *_fpm_pids(data_dir).values(), *_mariadb_pids(data_dir)]


def _fpm_pids(data_dir: Path) -> dict[str, int]:
    """The stack's PHP-FPM masters, by version (one per version installed)."""
    return {version: _pid_in(data_dir / "php" / version / "php-fpm.pid") for version in php_fpm_versions()}


def _pid_in(pid_file: Path) -> int:
    wait_until(lambda: pid_file.exists() and pid_file.read_text().strip() != "")
    return int(pid_file.read_text())


@pytest.mark.skipif(shutil.which("nginx", path="/usr/sbin:/usr/bin") is None, reason="needs nginx")
def test_the_stacks_services_end_with_it_even_killed_and_ones_left_are_quit_at_the_next_start(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "local"
    first = start_local(data_dir)
    serving = _services(data_dir)
    first.process.kill()  # no time to stop its services: the kernel tells them (setpriv --pdeathsig)
    first.process.wait()
    wait_until(lambda: not any(_alive(pid) for pid in serving))

    # as a stack without setpriv would leave them: masters of the stack's configuration, daemonized
    conf = data_dir / "nginx" / "nginx.conf"
    subprocess.run([shutil.which("nginx", path="/usr/sbin:/usr/bin") or "nginx", "-c", str(conf)], check=True)
    for version in php_fpm_versions():
        php = data_dir / "php" / version
        fpm = [f"/usr/sbin/php-fpm{version}", "--daemonize", "-y", str(php / "fpm" / "php-fpm.conf")]
        subprocess.run([*fpm, "-c", str(php / "fpm" / "php.ini")], check=True, capture_output=True)
    sockets = unix_sockets.runtime_dir(data_dir)
    servers = local_mariadb.prepare(data_dir / "mariadb", sockets)[1]  # its command line; mariadbd has no daemon mode
    mariadb = [subprocess.Popen(server.argv, start_new_session=True) for server in servers]
    left = _services(data_dir)
    second = start_local(data_dir)
    try:
        assert not any(_alive(pid) for pid in left)  # quit before the stack's own started
        serving = _services(data_dir)
        assert not set(serving) & set(left) and all(_alive(pid) for pid in serving)
    finally:
        second.stop()
        for process in mariadb:
            process.wait(timeout=20)
    assert not any(_alive(pid) for pid in serving)  # a stack that stops stops its services


def test_a_killed_stacks_sockets_folder_goes_when_its_launcher_stops(tmp_path: Path) -> None:
    """A stack that is killed cannot remove its short sockets folder (in /run/fleetdeck as root,
    a folder per data folder, which would pile up); its services die with it, and the launcher
    that started it removes the folder they left empty when it stops."""
    data_dir = tmp_path / "local"
    stack = start_local(data_dir)
    sockets = unix_sockets.runtime_path(data_dir)
    assert sockets.is_dir()
    stack.process.kill()
    stack.process.wait()
    wait_until(lambda: not any(sockets.iterdir()))  # its services died with it, their sockets with them
    stack.stop()
    assert not sockets.exists()


def test_a_stack_sweeps_the_sockets_folders_of_killed_stacks_as_it_starts(tmp_path: Path) -> None:
    """A stack killed with nobody left to remove its short sockets folder (its launcher killed too)
    leaves it in /run/fleetdeck; the next stack to start removes it, since no process holds it."""
    killed = start_local(tmp_path / "killed")
    sockets = unix_sockets.runtime_path(tmp_path / "killed")
    killed.process.kill()
    killed.process.wait()
    wait_until(lambda: not any(sockets.iterdir()))  # its services died with it (a live one would keep it)
    following = start_local(tmp_path / "following")
    try:
        assert not sockets.exists()
        assert unix_sockets.runtime_path(tmp_path / "following").is_dir()  # its own, held while it runs
    finally:
        following.stop()
        killed.stop()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not Path(f"/proc/{pid}/stat").read_text().split(") ")[-1].startswith("Z")


def test_a_data_folder_open_to_others_is_tightened_on_start(tmp_path: Path) -> None:
    """A data folder of an older version: 0755 folders, 0644 database (with its WAL open) and state."""
    data_dir = tmp_path / "data"
    (data_dir / "agent").mkdir(parents=True)
    (data_dir / "agent" / "sites.json").write_text('{"sites": []}\n')
    with closing(sqlite3.connect(data_dir / "fleetdeck.db")) as older:
        older.execute("PRAGMA journal_mode=WAL")
        older.execute("CREATE TABLE older (x)")
        older.execute("INSERT INTO older VALUES (1)")
        older.commit()
        for path in [data_dir, data_dir / "agent"]:
            path.chmod(0o755)
        for path in [*data_dir.glob("fleetdeck.db*"), data_dir / "agent" / "sites.json"]:
            path.chmod(0o644)
        assert len(list(data_dir.glob("fleetdeck.db*"))) == 3
        running = start_local(data_dir)
        try:
            found = _private_files(data_dir)
            assert found == _owners_only(data_dir, found)
            log = running.log()
            assert f"{data_dir / 'fleetdeck.db'} was open to other accounts (mode 0644): tightened to 0600" in log
            assert f"{data_dir / 'agent' / 'sites.json'} was open to other accounts" in log
        finally:
            running.stop()


def test_connections_accepted_on_the_bound_socket_send_without_delay() -> None:
    """asyncio (uvicorn) sets TCP_NODELAY on accepted connections only when the listening socket
    names its protocol; without it every answer on a kept-alive connection waited ~40 ms for a
    delayed ACK. The connection asyncio accepts on our socket must have it."""
    import asyncio

    from control_plane.serving import bind

    async def accepted_nodelay() -> int:
        found: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def connected(transport: asyncio.BaseTransport) -> None:
            accepted = transport.get_extra_info("socket")
            found.set_result(accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))

        class Probe(asyncio.Protocol):
            connection_made = staticmethod(connected)  # type: ignore[assignment]

        server = await asyncio.get_running_loop().create_server(Probe, sock=bind("127.0.0.1", 0))
        async with server:
            host, port = server.sockets[0].getsockname()[:2]
            _, writer = await asyncio.open_connection(host, port)
            try:
                return await found
            finally:
                writer.close()

    assert asyncio.run(accepted_nodelay()) != 0
