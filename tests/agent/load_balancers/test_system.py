"""The production path of load balancers: no port map, so the node's own nginx and HAProxy from
Debian, their files in /etc, started and reloaded through Debian's init scripts (PID 1 is no
systemd), port 80 of all addresses, and apt installing them on first use.

Tests may only listen on 127.0.0.1 and must leave the machine's files alone, so the tests marked
`inside` run in a private PID, network and mount namespace:
`test_the_production_path_in_a_private_namespace` runs this module again under ``unshare``,
where /etc, /usr and /var are copy-on-write overlays (on a tmpfs of the namespace), /run is a
tmpfs and port 80 of every address is the namespace's own loopback. Its PID 1 reaps the daemons
(tests/helpers/reaping_init.py); when it ends, the kernel ends every process of the namespace
(nginx, HAProxy) and the namespace's mounts go with it. The tests inside run in file order:
nginx first, then HAProxy on the same port 80 once nginx gave it back (both at the agent level,
jobs run as the agent runs them; each ends with a load balancer on port 443 whose certificate
pebble, run in the namespace, issues after validating over port 80), and last the whole product: a control plane and a
production-mode agent process. apt installs from its cache (nginx) or, as on a fresh image with
no package lists, from a mirror on loopback (HAProxy): the namespace has no network.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import ssl
import stat
import subprocess
import sys
import threading
import uuid
import warnings
from collections import Counter
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx
import pytest
import trio
from cryptography.hazmat.primitives import serialization

from agent import __version__
from agent.jobs.toolkit.base import JobContext
from agent.jobs.toolkit.proc import read_pid
from agent.load_balancers.acme import current_certificate
from agent.load_balancers.engine import ipv6_available
from agent.load_balancers.haproxy import (
    SYSTEM_MASTER_SOCKET,
    SYSTEM_STATS_SOCKET,
    master_command,
    parse_show_proc,
    parse_show_stat,
)
from agent.load_balancers.node import LbNode
from agent.load_balancers.settings import LbSettings
from agent.sites import SiteRegistry
from fleetdeck.launcher import child_environment
from tests.conftest import ROOT, Stack
from tests.helpers import eventually, wait_until
from tests.helpers.http_backends import Backend, start_backends, stop_backends
from tests.helpers.load_balancers import Node, Org, https_get
from tests.helpers.pebble import Pebble, pebble_installed, run_pebble

INSIDE_ENV = "LB_SYSTEM_TEST_NAMESPACE"  # set (to a scratch folder) by the outer test for the run inside
INSIDE = os.environ.get(INSIDE_ENV)
inside = pytest.mark.skipif(not INSIDE, reason="runs inside the private namespace of the test below")
NAMESPACE_RUN_TIMEOUT_S = 600
REAPING_INIT = ROOT / "tests" / "helpers" / "reaping_init.py"  # PID 1 of the namespace

NGINX_CONF_D = Path("/etc/nginx/conf.d")
DEFAULT_SITE = Path("/etc/nginx/sites-enabled/default")
NGINX_PIDFILE = Path("/run/nginx.pid")
HAPROXY_CONF_D = Path("/etc/haproxy/conf.d")


# --- the run inside the namespace -----------------------------------------------------------------


def test_the_production_path_in_a_private_namespace(tmp_path: Path) -> None:
    if INSIDE:
        pytest.skip("this is the run inside")
    if os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("ip")):
        pytest.skip("needs root, unshare and ip (a private namespace for the node's own nginx and HAProxy)")
    if not (shutil.which("nginx") and shutil.which("haproxy")):
        pytest.skip("needs Debian's nginx and haproxy (scripts/test installs them)")
    probe = subprocess.run(["unshare", "--pid", "--fork", "--net", "--mount", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"this container does not allow namespaces: {probe.stderr.decode().strip()}")
    scratch = tmp_path / "namespace"
    scratch.mkdir()
    argv = ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "--net", "--mount"]
    argv += ["--propagation", "private", "--", sys.executable, str(REAPING_INIT)]
    argv += [sys.executable, "-m", "pytest", "-q", "-x", "-rs"]
    argv += ["-p", "no:cacheprovider", f"--basetemp={tmp_path / 'inside'}", __file__]
    run = subprocess.run(
        argv,
        cwd=ROOT,
        env={**os.environ, INSIDE_ENV: str(scratch)},
        capture_output=True,
        text=True,
        timeout=NAMESPACE_RUN_TIMEOUT_S,
    )
    report = run.stdout + run.stderr
    assert run.returncode == 0 and " passed" in report, report
    for line in report.splitlines():  # -rs: a test skipped inside (the apt one without its .deb) is said
        if line.startswith("SKIPPED") and "this is the run inside" not in line:
            warnings.warn(f"inside the namespace: {line}", stacklevel=1)
    namespace = (scratch / "net-namespace").read_text()
    assert processes_in(namespace) == [], "processes left in the test's namespace"


def processes_in(net_namespace: str) -> list[int]:
    """The processes whose network namespace is `net_namespace` (``net:[inode]``)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and os.readlink(entry / "ns" / "net") == net_namespace:
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.fixture(scope="module")
def private_system() -> Path:
    """This process's namespace made a throwaway copy of the machine (see the module's docstring)."""
    assert INSIDE is not None
    scratch = Path(INSIDE)
    (scratch / "net-namespace").write_text(os.readlink("/proc/self/ns/net"))
    run("ip", "link", "set", "lo", "up")
    layers = scratch / "layers"
    layers.mkdir()
    run("mount", "-t", "tmpfs", "tmpfs", str(layers))
    for top in ("etc", "usr", "var"):
        upper, work = layers / f"{top}.upper", layers / f"{top}.work"
        upper.mkdir()
        work.mkdir()
        options = f"lowerdir=/{top},upperdir={upper},workdir={work}"
        run("mount", "-t", "overlay", "overlay", "-o", options, f"/{top}")
    run("mount", "-t", "tmpfs", "tmpfs", "/run")
    # A container image's policy-rc.d (Docker's exits 101) keeps dpkg from stopping and starting
    # services, which a server's does; only the copy's goes.
    Path("/usr/sbin/policy-rc.d").unlink(missing_ok=True)
    as_debian_installs_them()
    return scratch


def as_debian_installs_them() -> None:
    """The copies of nginx's and HAProxy's folders as the packages leave them: only the default
    site enabled, no conf.d file (the machine's own may hold what other tests are doing)."""
    for folder in (Path("/etc/nginx/sites-enabled"), NGINX_CONF_D, Path("/etc/haproxy/conf.d")):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
    DEFAULT_SITE.symlink_to("/etc/nginx/sites-available/default")


def run(*argv: str) -> str:
    done = subprocess.run(argv, capture_output=True, text=True)
    assert done.returncode == 0, f"{' '.join(argv)}: {done.stdout}{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def backends(private_system: Path) -> Iterator[list[Backend]]:
    started = start_backends("alpha", "beta", "gamma")
    yield started
    stop_backends(started)


def system_node(engine: str, state: Path, **settings: Any) -> Node:
    """The agent's load balancers as in production: no port map, no listen address."""
    lb = LbNode(LbSettings(broken_render_hook=True, **settings), str(state))
    ctx = JobContext(str(state), str(state), SiteRegistry(str(state)), __version__, lb=lb)
    return Node(engine, lb, ctx, 80, lb.root)


@pytest.fixture(scope="module")
def nginx_node(private_system: Path, tmp_path_factory: pytest.TempPathFactory) -> Node:
    return system_node("nginx", tmp_path_factory.mktemp("nginx-node"))


@pytest.fixture(scope="module")
def haproxy_node(private_system: Path, tmp_path_factory: pytest.TempPathFactory) -> Node:
    return system_node("haproxy", tmp_path_factory.mktemp("haproxy-node"))


@pytest.fixture(scope="module")
def pebble(private_system: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pebble]:
    """The ACME CA in the namespace: its HTTP-01 validations go to port 80 of the namespace's
    loopback, where the node's own engine answers them (as Let's Encrypt reaches a node's port 80)."""
    if not pebble_installed():
        pytest.skip("pebble is not installed (Debian package: pebble)")
    with run_pebble(tmp_path_factory.mktemp("pebble"), http_port=80) as running:
        yield running


async def answers(node: Node, n: int, host: str = "anything.example") -> Counter[str]:
    """Which backend answered each of `n` requests to port 80 (any name: the catch-all)."""
    return await node.spread(n, host)


def conf_file(node: Node) -> Path:
    return node.node.engines[node.engine].path("lb-web")


def default_site_enabled() -> bool:
    return DEFAULT_SITE.is_symlink()


def enable_the_default_site_edited() -> None:
    """Debian's default site enabled again, with a line of the admin's own: no longer the package's file."""
    available = Path("/etc/nginx/sites-available/default")
    available.write_text(available.read_text() + "# the admin's own line\n")
    DEFAULT_SITE.symlink_to(available)


def lb_files(folder: Path) -> list[Path]:
    return list(folder.glob("fleetdeck-lb-*"))


def command_line(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().rstrip("\0").replace("\0", " ")


def cached_debs(package: str, version: str) -> list[Path]:
    return list(Path("/var/cache/apt/archives").glob(f"{package}_{version.replace(':', '%3a')}_*.deb"))


# --- nginx: the node's own, through /etc/init.d/nginx ---------------------------------------------


@inside
@pytest.mark.anyio
async def test_nginx_takes_port_80_from_debians_default_site(nginx_node: Node, backends: list[Backend]) -> None:
    assert default_site_enabled() and read_pid(NGINX_PIDFILE) is None  # as Debian installs it, not running
    code, outcome, out = await nginx_node.apply(**nginx_node.spec(backends))
    assert code == 0 and outcome["state"] == "active", out.err
    assert any("disabled Debian's default site" in line for line in out.err), out.err
    assert not default_site_enabled()
    assert conf_file(nginx_node).parent == NGINX_CONF_D
    assert "listen 80 default_server;" in conf_file(nginx_node).read_text()
    assert read_pid(NGINX_PIDFILE) is not None  # started by the init script
    # Debian's nginx runs a worker per core: the pool's round robin is shared by them all.
    assert await answers(nginx_node, 30) == Counter({"alpha": 10, "beta": 10, "gamma": 10})
    assert set(await answers(nginx_node, 6, host="localhost")) == {"alpha", "beta", "gamma"}
    if ipv6_available():  # all addresses: [::] too
        assert over_ipv6() in {"alpha", "beta", "gamma"}


@inside
@pytest.mark.anyio
async def test_nginx_drain_and_undrain_are_reloads_of_the_same_master(
    nginx_node: Node, backends: list[Backend]
) -> None:
    master = read_pid(NGINX_PIDFILE)
    code, _, out = await nginx_node.apply(**nginx_node.spec(backends, drained={"beta"}))
    assert code == 0, out.err
    assert " down;  # beta" in conf_file(nginx_node).read_text()
    assert set(await answers(nginx_node, 30)) == {"alpha", "gamma"}
    code, _, out = await nginx_node.apply(**nginx_node.spec(backends))
    assert code == 0, out.err
    assert set(await answers(nginx_node, 30)) == {"alpha", "beta", "gamma"}
    assert read_pid(NGINX_PIDFILE) == master  # reloaded, never restarted


@inside
@pytest.mark.anyio
async def test_nginx_stopped_by_the_admin_is_started_again_by_the_next_apply(
    nginx_node: Node, backends: list[Backend]
) -> None:
    run("service", "nginx", "stop")
    with pytest.raises(httpx.ConnectError):
        nginx_node.get()
    code, _, out = await nginx_node.apply(**nginx_node.spec(backends))
    assert code == 0, out.err
    assert set(await answers(nginx_node, 30)) == {"alpha", "beta", "gamma"}


@inside
@pytest.mark.anyio
async def test_nginx_refused_config_keeps_the_last_good_one(nginx_node: Node, backends: list[Backend]) -> None:
    good = conf_file(nginx_node).read_text()
    hook = nginx_node.root / "test-hook-nginx.conf"
    hook.write_text("this_is_no_directive on;\n")
    try:
        code, outcome, _ = await nginx_node.apply(**nginx_node.spec(backends[:1]))
    finally:
        hook.unlink()
    assert code == 3 and 'unknown directive "this_is_no_directive"' in outcome["error"], outcome
    assert conf_file(nginx_node).read_text() == good
    assert set(await answers(nginx_node, 30)) == {"alpha", "beta", "gamma"}


@inside
@pytest.mark.anyio
async def test_nginx_leaves_a_default_site_the_admin_edited(nginx_node: Node, backends: list[Backend]) -> None:
    enable_the_default_site_edited()
    try:
        code, outcome, out = await nginx_node.apply(**nginx_node.spec(backends[:2]))
        assert code == 3 and "duplicate default server" in outcome["error"], outcome
        assert str(DEFAULT_SITE) in outcome["error"] and default_site_enabled()
        assert not any("disabled Debian's default site" in line for line in out.err), out.err
    finally:
        os.unlink(DEFAULT_SITE)
    assert set(await answers(nginx_node, 30)) == {"alpha", "beta", "gamma"}  # the last good one


@inside
@pytest.mark.anyio
async def test_two_nginx_load_balancers_without_a_name_are_refused_in_words(
    nginx_node: Node, backends: list[Backend]
) -> None:
    code, outcome, _ = await nginx_node.apply("other", **nginx_node.spec(backends[:1]))
    assert code == 3, outcome
    assert outcome["error"] == (
        "port 80 is already served by web (nginx) for every name without a load balancer of its own on this node"
    )
    code, _, out = await nginx_node.apply("other", hostname="other.example", **nginx_node.spec(backends[:1]))
    assert code == 0, out.err
    assert await nginx_node.spread(6, "other.example") == Counter({"alpha": 6})
    assert set(await answers(nginx_node, 30)) == {"alpha", "beta", "gamma"}


@inside
@pytest.mark.anyio
async def test_nginx_remove_gives_port_80_back(nginx_node: Node) -> None:
    for lb in ("web", "other"):
        code, out = await nginx_node.job("lb.remove", {"id": f"lb-{lb}", "name": lb, "engine": "nginx"})
        assert code == 0, out.err
    assert lb_files(NGINX_CONF_D) == []
    with pytest.raises(httpx.ConnectError):
        nginx_node.get()


@inside
@pytest.mark.anyio
async def test_nginx_is_installed_with_apt_on_first_use(nginx_node: Node, backends: list[Backend]) -> None:
    version = run("dpkg-query", "-W", "-f=${Version}", "nginx")
    if not cached_debs("nginx", version):  # the namespace has no network: apt can only install from its cache
        pytest.skip(f"no nginx {version} in apt's cache to install offline")
    run("dpkg", "--remove", "nginx")  # in the namespace's copy of /usr, /etc, /var only; stops it
    assert shutil.which("nginx") is None and read_pid(NGINX_PIDFILE) is None
    code, outcome, out = await nginx_node.apply(**nginx_node.spec(backends))
    assert code == 0 and outcome["state"] == "active", out.err
    assert any("installing the nginx package with apt-get" in line for line in out.err), out.err
    assert shutil.which("nginx") == "/usr/sbin/nginx"
    assert set(await answers(nginx_node, 30)) == {"alpha", "beta", "gamma"}
    code, out = await nginx_node.job("lb.remove", {"id": "lb-web", "name": "web", "engine": "nginx"})
    assert code == 0, out.err  # port 80 is HAProxy's next


@inside
@pytest.mark.anyio
async def test_nginx_on_443_serves_a_certificate_from_the_acme_ca(
    pebble: Pebble, backends: list[Backend], tmp_path: Path
) -> None:
    await serves_https_from_the_acme_ca(pebble, "nginx", backends, tmp_path)


# --- HAProxy: installed by apt on first use, the node's own, through /etc/init.d/haproxy ----------


@inside
@pytest.mark.anyio
async def test_haproxy_is_installed_with_apt_on_a_fresh_image(haproxy_node: Node, backends: list[Backend]) -> None:
    """As on a fresh cloud image: no package lists and nothing cached; the apt source is a mirror
    on loopback (the namespace has no network) holding the package apt-get downloads."""
    version = run("dpkg-query", "-W", "-f=${Version}", "haproxy")
    debs = cached_debs("haproxy", version)
    if not debs:
        pytest.skip(f"no haproxy {version} in apt's cache to put on the loopback mirror")
    mirror = LoopbackMirror(Path(INSIDE or "") / "mirror", debs[0])
    try:
        run("dpkg", "--remove", "haproxy")  # in the namespace's copy of /usr, /etc, /var only
        assert shutil.which("haproxy") is None
        code, outcome, out = await haproxy_node.apply(**haproxy_node.spec(backends))
    finally:
        mirror.stop()
    assert code == 0 and outcome["state"] == "active", out.err
    assert any("installing the haproxy package with apt-get" in line for line in out.err), out.err
    assert any("refreshing the package lists (apt-get update)" in line for line in out.err), out.err
    assert shutil.which("haproxy") == "/usr/sbin/haproxy"
    assert {"Packages", debs[0].name} <= set(mirror.served), mirror.served  # apt-get update, then the download


class LoopbackMirror:
    """A Debian repository of one package on 127.0.0.1, made apt's only source, with apt's lists
    and cache of it emptied (a fresh image)."""

    def __init__(self, folder: Path, deb: Path) -> None:
        folder.mkdir()
        shutil.copy(deb, folder / deb.name)
        stanza = run("dpkg-deb", "-f", str(folder / deb.name)).rstrip("\n")
        stanza += f"\nFilename: ./{deb.name}\nSize: {deb.stat().st_size}\nSHA256: {sha256(deb)}\n"
        (folder / "Packages").write_text(stanza)
        packages = folder / "Packages"
        release = ["Suite: test", "Codename: test", "Architectures: amd64", "SHA256:"]
        release.append(f" {sha256(packages)} {packages.stat().st_size} Packages")
        (folder / "Release").write_text("\n".join(release) + "\n")
        self.served: list[str] = []
        served = self.served

        class Handler(SimpleHTTPRequestHandler):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, directory=str(folder), **kwargs)

            def do_GET(self) -> None:
                served.append(Path(unquote(self.path)).name)
                super().do_GET()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        port = self.server.server_address[1]
        shutil.rmtree("/etc/apt/sources.list.d")
        Path("/etc/apt/sources.list.d").mkdir()
        Path("/etc/apt/sources.list.d/mirror.list").write_text(f"deb [trusted=yes] http://127.0.0.1:{port}/ ./\n")
        for stale in [*Path("/var/lib/apt/lists").glob("*_*"), deb]:
            stale.unlink()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@inside
@pytest.mark.anyio
async def test_haproxy_serves_through_debians_files_and_sockets(haproxy_node: Node, backends: list[Backend]) -> None:
    async with trio.open_nursery() as nursery:  # the health monitor, as the agent runs it before any apply
        await nursery.start(haproxy_node.node.monitor.run)
        code, _, out = await haproxy_node.apply(**haproxy_node.spec(backends))
        assert code == 0, out.err
        assert conf_file(haproxy_node) == Path("/etc/haproxy/conf.d/fleetdeck-lb-lb-web.cfg")
        proc = parse_show_proc(await master_command(SYSTEM_MASTER_SOCKET, "show proc"))
        assert proc.workers, proc  # master-worker under the init script, thanks to EXTRAOPTS
        assert set(await answers(haproxy_node, 30)) == {"alpha", "beta", "gamma"}
        if ipv6_available():  # all addresses: [::] too
            assert over_ipv6() in {"alpha", "beta", "gamma"}

        def all_healthy_with_stats() -> bool:  # read from Debian's stats socket
            report = haproxy_node.node.status("lb-web")
            return report is not None and all(
                b.health == "healthy" and b.stats is not None and b.stats.total_requests > 0 for b in report.backends
            )

        await eventually(all_healthy_with_stats, within=30)
        nursery.cancel_scope.cancel()
    assert SYSTEM_STATS_SOCKET.is_socket()
    # started by /etc/init.d/haproxy with what the agent added to /etc/default/haproxy
    assert f"-W -S {SYSTEM_MASTER_SOCKET} -f /etc/haproxy/conf.d " in command_line(proc.master_pid) + " "


@inside
@pytest.mark.anyio
async def test_haproxy_drain_goes_through_debians_admin_socket_and_other_changes_reload_through_the_master(
    haproxy_node: Node, backends: list[Backend]
) -> None:
    code, _, out = await haproxy_node.apply(**haproxy_node.spec(backends))
    assert code == 0, out.err
    before = parse_show_proc(await master_command(SYSTEM_MASTER_SOCKET, "show proc"))
    code, _, out = await haproxy_node.apply(**haproxy_node.spec(backends, drained={"beta"}))
    assert code == 0, out.err
    after = parse_show_proc(await master_command(SYSTEM_MASTER_SOCKET, "show proc"))
    assert after.workers == before.workers, (before, after)  # no reload: the runtime API, at once
    rows = parse_show_stat(await master_command(SYSTEM_STATS_SOCKET, "show stat"))
    assert [r["status"] for r in rows if r["pxname"] == "fleetdeck_lb_lb-web" and r["svname"] == "beta"] == ["DRAIN"]
    assert set(await answers(haproxy_node, 30)) == {"alpha", "gamma"}
    # Not weights and drains alone: a reload through the master, which undrains beta too.
    code, _, out = await haproxy_node.apply(**haproxy_node.spec(backends, algorithm="least_conn"))
    assert code == 0, out.err
    reloaded = parse_show_proc(await master_command(SYSTEM_MASTER_SOCKET, "show proc"))
    assert reloaded.master_pid == before.master_pid and reloaded.took(after), (after, reloaded)
    assert set(await answers(haproxy_node, 30)) == {"alpha", "beta", "gamma"}


@inside
@pytest.mark.anyio
async def test_haproxy_stopped_by_the_admin_is_started_by_the_next_apply_once_its_port_is_free(
    haproxy_node: Node, backends: list[Backend]
) -> None:
    run("service", "haproxy", "stop")
    with pytest.raises(httpx.ConnectError):
        haproxy_node.get()
    with socket.create_server(("0.0.0.0", 80)):  # another program holds the port meanwhile
        code, outcome, _ = await haproxy_node.apply(**haproxy_node.spec(backends))
    assert code == 3 and "cannot bind socket" in outcome["error"] and ":80]" in outcome["error"], outcome
    code, _, out = await haproxy_node.apply(**haproxy_node.spec(backends))
    assert code == 0, out.err
    assert set(await answers(haproxy_node, 30)) == {"alpha", "beta", "gamma"}


@inside
@pytest.mark.anyio
async def test_haproxy_refused_config_keeps_the_last_good_one(haproxy_node: Node, backends: list[Backend]) -> None:
    good = conf_file(haproxy_node).read_text()
    hook = haproxy_node.root / "test-hook-haproxy.conf"
    hook.write_text("    this_is_no_keyword on\n")
    try:
        code, outcome, _ = await haproxy_node.apply(**haproxy_node.spec(backends[:1]))
    finally:
        hook.unlink()
    assert code == 3 and "this_is_no_keyword" in outcome["error"], outcome
    assert conf_file(haproxy_node).read_text() == good
    assert set(await answers(haproxy_node, 30)) == {"alpha", "beta", "gamma"}


@inside
@pytest.mark.anyio
async def test_haproxy_remove_stops_serving(haproxy_node: Node) -> None:
    code, out = await haproxy_node.job("lb.remove", {"id": "lb-web", "name": "web", "engine": "haproxy"})
    assert code == 0, out.err
    assert not conf_file(haproxy_node).exists()
    with pytest.raises(httpx.ConnectError):
        haproxy_node.get()


@inside
@pytest.mark.anyio
async def test_haproxy_on_443_serves_a_certificate_from_the_acme_ca(
    pebble: Pebble, backends: list[Backend], tmp_path: Path
) -> None:
    await serves_https_from_the_acme_ca(pebble, "haproxy", backends, tmp_path)


async def serves_https_from_the_acme_ca(pebble: Pebble, engine: str, backends: list[Backend], state: Path) -> None:
    """A load balancer on port 443 of the node's own `engine`: its certificate is asked of `pebble`
    while the engine's port 80 answers the HTTP-01 challenge; the key is made and kept on the node.
    Ports 80 and 443 are given back at the end (the next tests take port 80)."""
    node = system_node(engine, state, acme_directory=pebble.directory_url, acme_ca_bundle=str(pebble.ca_bundle))
    hostname = f"shop-{engine}.fleetdeck.test"
    async with trio.open_nursery() as nursery:
        await nursery.start(node.node.run)  # the HTTP-01 responder the engine's port 80 sends pebble to
        try:
            code, outcome, out = await node.apply("shop", **node.spec(backends, port=443, hostname=hostname))
            assert code == 0 and outcome["state"] == "active", (outcome, out.err, pebble.log())
            cert = current_certificate(node.node.acme, hostname)
            assert cert is not None and cert.key.resolve().is_relative_to(state)  # where production keeps it
            for secret in (cert.key, cert.bundle):
                assert stat.S_IMODE(secret.stat().st_mode) == 0o600, secret
            config = node.node.engines[engine].path("lb-shop")
            assert config.parent in (NGINX_CONF_D, HAPROXY_CONF_D) and "PRIVATE KEY" not in config.read_text()
            root = (await trio.to_thread.run_sync(pebble.root)).public_bytes(serialization.Encoding.PEM).decode()
            context = ssl.create_default_context(cadata=root)
            # One round robin for the pool, though the node's own nginx has a worker per core.
            seen = Counter([await trio.to_thread.run_sync(https_get, 443, hostname, context) for _ in range(30)])
            assert seen == Counter({"alpha": 10, "beta": 10, "gamma": 10})
        finally:
            code, out = await node.job("lb.remove", {"id": "lb-shop", "name": "shop", "engine": engine})
            nursery.cancel_scope.cancel()
    assert code == 0, out.err
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", 443), timeout=10)


# --- the whole product: a production-mode agent process linked to a control plane ------------------


@inside
def test_a_production_agent_applies_through_the_api_and_its_stop_leaves_the_nodes_nginx_serving(
    stack: Stack, backends: list[Backend], tmp_path: Path
) -> None:
    name = f"prod-{uuid.uuid4().hex[:8]}"
    stack.admin("create-org", name, "--plan", "max")
    stack.admin("create-user", f"owner@{name}.test", "--org", name, "--role", "owner", "--password", "pw-123456")
    token = stack.login(f"owner@{name}.test", "pw-123456")
    with stack.http(token) as http:
        apps = http.post("/v1/servers", json={"name": "apps", "kind": "lite", "address": "127.0.0.1"})
        edge = http.post("/v1/servers", json={"name": "edge", "kind": "full"})
    assert apps.status_code == 201 and edge.status_code == 201, (apps.text, edge.text)
    org = Org(stack, token, apps.json()["server"]["id"])
    server_id = edge.json()["server"]["id"]
    agent = production_agent(stack, edge.json()["agent_token"], tmp_path)
    try:
        wait_until(lambda: org_server(org, server_id)["agent"]["online"], timeout=20)
        body = {"name": "shop", "port": 80, "node_server_id": server_id, "engine": "nginx"}
        body["backends"] = [{"server_id": org.host, "port": b.port} for b in backends]
        with org.http() as http:
            created = http.post("/v1/load-balancers", json=body)
        assert created.status_code == 201, created.text
        lb = org.wait_applied(created.json()["id"])
        assert lb["state_error"] is None, lb
        assert {port_80_answer() for _ in range(30)} == {"alpha", "beta", "gamma"}
    finally:
        agent.terminate()
        agent.wait(15)
    assert agent.returncode == 0
    assert port_80_answer() in {"alpha", "beta", "gamma"}  # the node's own nginx serves on without its agent


def production_agent(stack: Stack, token: str, folder: Path) -> subprocess.Popen[bytes]:
    """``python -m agent`` as on a node: no ``--lb-bind``/``--lb-port-map`` (which `start_agent`
    always adds, so that no test takes the machine's ports: here they are the namespace's)."""
    home, state = folder / "home", folder / "state"
    home.mkdir()
    state.mkdir()
    argv = [sys.executable, "-m", "agent", "--url", stack.base_url, "--token", token]
    argv += ["--home", str(home), "--state-dir", str(state)]
    with (folder / "agent.log").open("wb") as log:
        return subprocess.Popen(argv, env=child_environment(), stdin=subprocess.DEVNULL, stdout=log, stderr=log)


def org_server(org: Org, server_id: str) -> dict[str, Any]:
    with org.http() as http:
        answer = http.get(f"/v1/servers/{server_id}")
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()
    return found


def over_ipv6() -> str:
    answer = httpx.get("http://[::1]/", headers={"Host": "anything.example"}, timeout=10)
    assert answer.status_code == 200, answer.text
    return answer.text


def port_80_answer() -> str:
    answer = httpx.get("http://127.0.0.1/", timeout=10)
    assert answer.status_code == 200, answer.text
    return answer.text
