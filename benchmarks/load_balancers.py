"""Load balancers, side by side in one run: direct to one backend, through nginx, through HAProxy,
each engine's rendered configuration beside a hand-written one.

    python benchmarks/load_balancers.py [--wrk-seconds 2] [--rounds 10] [--runs 7] [--rate 200] [--load-seconds 20]

What it starts (all on 127.0.0.1, all stopped at the end, also on Ctrl+C):

* three static backends: nginx instances (one worker each, their own prefix in a temp dir)
  serving a 1 KiB file, so the backend is never what limits the proxy;
* a local stack (`fleetdeck local`) and two more agents, each its own process with its own port
  map: one serves an nginx load balancer, the other an HAProxy one (an agent maps port 80 once,
  so two engines on one agent would want the same port). Both load balancers are created through
  the API (`client.load_balancers.create`), round robin over the three backends;
* the references: nginx and HAProxy each with a hand-written configuration following its
  documentation's practice (`_hand_nginx_conf`, `_hand_haproxy_conf`), each its own process on
  its own port, over the same three backends.

What it measures:

* throughput: ``wrk -t2 -c64 --latency`` for `--wrk-seconds` against one backend directly, through
  each load balancer and through each reference (requests per second, latency p50 and p99), and the
  CPU time the proxy used meanwhile (per request, a figure less at the mercy of a shared machine);
  `--rounds` rounds over all of them, the order reversed each round so that neither side of a
  comparison is favoured by when it ran; every round is printed, and each engine's ratio
  rendered/hand-written is the median of the rounds' ratios;
* mutation -> active: from sending a `PATCH` of a backend's weight until the API reads the load
  balancer `active` with `applied_revision == revision` (polled every 20 ms), `--runs` times per
  engine, idle; median and range;
* reloads under load: for `--load-seconds`, a paced load on new connections (`--rate` requests
  per second, `Connection: close`) and `--keepalive-clients` keep-alive clients (10 requests per
  second each) that retry a failed request once on a fresh connection, while `--reloads` weight
  changes each cause an apply and a reload. Failed requests are counted per kind; the goal is 0
  on new connections and 0 for keep-alive clients after their one retry.

Limits, said plainly: everything shares the machine's cores (wrk, the proxy, the backends, the
control plane, the agents and this script), so the proxies' figures are what is left for them,
not what they can do alone. wrk cannot pace, so the paced load is this script's own trio client
(a bare HTTP/1.1 reader for `Content-Length` answers): it reports how late its schedule ran;
when that is large, the rate was lower than asked while it lagged. It prints figures; it asserts
nothing.
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.jobs.toolkit.proc import child_pids, read_pid
from api_client import Client
from benchmarks._stack import LocalStack, cpu_seconds, local_stack
from contract.job_kinds.lb import LbHealthCheck
from contract.load_balancers import BackendCreate, BackendPatch, LoadBalancer, LoadBalancerCreate
from fleetdeck.launcher import free_port

ENGINES = ("nginx", "haproxy")
HAND = {"nginx": "nginx_hand", "haproxy": "haproxy_hand"}  # each engine's hand-written reference
LABELS = {
    "direct": "direct (1 backend)",
    "nginx": "nginx",
    "haproxy": "HAProxy",
    "nginx_hand": "nginx, hand-written",
    "haproxy_hand": "HAProxy, hand-written",
}
BACKENDS = 3
STATIC_BODY = b"x" * 1023 + b"\n"  # 1 KiB
POLL_S = 0.02
ACTIVE_TIMEOUT_S = 60.0
REQUEST_TIMEOUT_S = 5.0
KEEPALIVE_RATE_EACH = 10.0  # requests per second per keep-alive client


# --- the static backends -------------------------------------------------------------------------


def _nginx_head(folder: Path, workers: str) -> str:
    """What every nginx of this benchmark starts with: in the foreground, its files in `folder`,
    no access log, up to `http {` and its temporary folders."""
    temp = "\n".join(
        f"    {kind}_temp_path {folder / kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    return f"""daemon off;
worker_processes {workers};
pid {folder / "nginx.pid"};
error_log {folder / "error.log"} warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
{temp}
"""


def _backend_conf(folder: Path, port: int) -> str:
    return (
        _nginx_head(folder, "1")
        + f"""    server {{
        listen 127.0.0.1:{port};
        root {folder / "www"};
        location / {{ index index.html; }}
    }}
}}
"""
    )


def _nginx_argv(folder: Path) -> list[str]:
    """nginx in the foreground (`daemon off;` in its file) on `folder`'s nginx.conf, `folder` its prefix."""
    return [shutil.which("nginx") or "/usr/sbin/nginx", "-c", str(folder / "nginx.conf"), "-p", f"{folder}/"]


@contextmanager
def listening(what: str, launches: Sequence[tuple[list[str], int]]) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Each (argv, port) of `launches` started in its own session (a Ctrl+C reaches this script
    only, which stops them in order) and waited for until it listens on its port; yields the
    processes, stopped (SIGTERM) at the end. `what` names them in an error."""
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for argv, _ in launches:
            processes.append(subprocess.Popen(argv, start_new_session=True, stderr=subprocess.DEVNULL))
        for (_, port), process in zip(launches, processes, strict=True):
            _wait_listening(what, port, process)
        yield processes
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(10)


@contextmanager
def static_backends(count: int) -> Iterator[list[int]]:
    """`count` nginx instances serving a 1 KiB file; yields their ports."""
    with tempfile.TemporaryDirectory(prefix="fleetdeck-lbbench-backends-") as temp:
        os.chmod(temp, 0o755)  # nginx's workers run as nobody when started by root
        launches = []
        for index in range(count):
            folder = Path(temp) / f"backend-{index}"
            (folder / "www").mkdir(parents=True)
            (folder / "www" / "index.html").write_bytes(STATIC_BODY)
            port = free_port()
            (folder / "nginx.conf").write_text(_backend_conf(folder, port))
            launches.append((_nginx_argv(folder), port))
        with listening("the static backend", launches):
            yield [port for _, port in launches]


def _wait_listening(what: str, port: int, process: subprocess.Popen[bytes]) -> None:
    import socket

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} on port {port} exited with {process.returncode}")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"{what} on port {port} did not listen")


# --- the hand-written references -----------------------------------------------------------------
#
# What an administrator following each engine's documentation writes for the same job: round robin
# over the same backends, the same forwarded headers, passive (nginx) or active (HAProxy) checks.
# Neither logs requests: the rendered configurations log none either, and a reference that does
# less can only make the ratio harder (where one logs, nginx's documentation says `access_log ...
# buffer=`).


def _hand_nginx_conf(folder: Path, port: int, backends: Sequence[int]) -> str:
    """nginx's documented practice for a reverse proxy: a worker per core (`worker_processes auto`),
    idle connections to the upstream kept (`keepalive`, which needs `proxy_http_version 1.1` and an
    empty `Connection` header: ngx_http_upstream_module's keepalive section), as many as a worker
    has requests in flight (wrk's 64 connections, twice: a worker over its `keepalive` closes the
    surplus after each answer). Left at their defaults: `reuseport` (it bought nothing measurable
    here) and `keepalive_requests` (the documentation advises against raising it: memory)."""
    servers = "\n".join(f"        server 127.0.0.1:{backend};" for backend in backends)
    return (
        _nginx_head(folder, "auto")
        + f"""    upstream backends {{
{servers}
        keepalive 128;
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://backends;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_set_header X-Forwarded-Proto $scheme;
        }}
    }}
}}
"""
    )


def _hand_haproxy_conf(port: int, backends: Sequence[int]) -> str:
    """HAProxy's documented practice (configuration.txt): a thread per core (`nbthread`), keep-alive
    on both sides (`option http-keep-alive`) and idle server connections shared between requests
    (`http-reuse safe`, "the recommended strategy"), health checks."""
    servers = "\n".join(
        f"    server backend{index} 127.0.0.1:{backend} check" for index, backend in enumerate(backends)
    )
    return f"""global
    nbthread {os.cpu_count() or 1}
defaults
    mode http
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    option http-keep-alive
    http-reuse safe
frontend proxy
    bind 127.0.0.1:{port}
    option forwardfor
    default_backend backends
backend backends
    balance roundrobin
    option httpchk GET /
    default-server inter 2s rise 1 fall 3
{servers}
"""


@dataclass
class Reference:
    engine: str
    port: int
    pid: int  # nginx's master (its workers are its children), HAProxy's single process


@contextmanager
def hand_written(backends: Sequence[int]) -> Iterator[dict[str, Reference]]:
    """Each engine with its hand-written configuration on a free port of its own, over `backends`."""
    with tempfile.TemporaryDirectory(prefix="fleetdeck-lbbench-hand-") as temp:
        os.chmod(temp, 0o755)
        nginx_folder = Path(temp) / "nginx"
        nginx_folder.mkdir()
        nginx_port, haproxy_port = free_port(), free_port()
        (nginx_folder / "nginx.conf").write_text(_hand_nginx_conf(nginx_folder, nginx_port, backends))
        haproxy_cfg = Path(temp) / "haproxy.cfg"
        haproxy_cfg.write_text(_hand_haproxy_conf(haproxy_port, backends))
        haproxy = [shutil.which("haproxy") or "/usr/sbin/haproxy", "-db", "-f", str(haproxy_cfg)]
        launches = [(_nginx_argv(nginx_folder), nginx_port), (haproxy, haproxy_port)]
        with listening("a hand-written reference", launches) as (nginx_process, haproxy_process):
            yield {
                "nginx": Reference("nginx", nginx_port, nginx_process.pid),
                "haproxy": Reference("haproxy", haproxy_port, haproxy_process.pid),
            }


# --- the load balancers' nodes -------------------------------------------------------------------


@dataclass
class Node:
    engine: str
    server_id: str
    port: int  # where its port 80 listens on 127.0.0.1
    lb_root: Path


@contextmanager
def lb_node(stack: LocalStack, engine: str) -> Iterator[Node]:
    """A second agent process (a server of its own) whose load balancers listen on a free port;
    after it stops, its engine's master is stopped too if it outlived the agent (a Ctrl+C that hit
    the agent before it could stop them)."""
    port, tls_port = free_port(), free_port()
    lb_root = stack.data_dir / f"lb-{engine}"
    extra = ("--lb-bind", "127.0.0.1", "--lb-port-map", f"80:{port},443:{tls_port}", "--lb-root", str(lb_root))
    try:
        with stack.separate_agent(f"lb-{engine}", *extra) as server_id:
            yield Node(engine, server_id, port, lb_root)
    finally:
        _stop_leftover_engine(lb_root)


def _stop_leftover_engine(lb_root: Path) -> None:
    """SIGTERM to an nginx/HAProxy master under `lb_root` still running (its pidfile names it, its
    command line names our folder), and wait for it."""
    for pidfile in (lb_root / "nginx" / "nginx.pid", lb_root / "haproxy" / "haproxy.pid"):
        try:
            pid = int(pidfile.read_text().split()[0])
            if str(lb_root) not in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                continue
            os.kill(pid, signal.SIGTERM)
        except (OSError, ValueError, IndexError):
            continue
        deadline = time.monotonic() + 10
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        print(f"stopped the {pidfile.parent.name} its agent left running (pid {pid})", file=sys.stderr)


def engine_cpu_seconds(node: Node) -> float:
    """CPU time the node's engine (its master and live workers) has used so far (Linux /proc)."""
    master = read_pid(node.lb_root / node.engine / f"{node.engine}.pid")
    return 0.0 if master is None else tree_cpu_seconds(master)


def tree_cpu_seconds(master: int) -> float:
    """CPU time `master` and its live children have used so far (Linux /proc)."""
    return sum(cpu_seconds(pid) for pid in {master, *child_pids(master)})


async def create_lb(client: Client, node: Node, backend_server: str, ports: Sequence[int]) -> LoadBalancer:
    spec = LoadBalancerCreate(
        name=f"bench-{node.engine}",
        port=80,
        node_server_id=node.server_id,
        engine=node.engine,  # type: ignore[arg-type]
        health_check=LbHealthCheck(interval_s=2, healthy_threshold=1),
        backends=[BackendCreate(server_id=backend_server, port=port) for port in ports],
    )
    created = await client.load_balancers.create(spec)
    lb = await wait_active(client, created.id, created.revision)
    with trio.move_on_after(ACTIVE_TIMEOUT_S):
        while any(backend.health != "healthy" for backend in lb.backends):
            await trio.sleep(0.2)
            lb = await client.load_balancers.get(lb.id)
    unhealthy = [f"{b.address}:{b.port} {b.health}" for b in lb.backends if b.health != "healthy"]
    if unhealthy:
        print(f"warning: {node.engine}: backends not healthy: {', '.join(unhealthy)}", file=sys.stderr)
    return lb


async def wait_active(client: Client, lb_id: str, revision: int) -> LoadBalancer:
    """The load balancer once the API reads it `active` at `revision` (or later)."""
    with trio.fail_after(ACTIVE_TIMEOUT_S):
        while True:
            lb = await client.load_balancers.get(lb_id)
            if lb.applied_revision is not None and lb.applied_revision >= revision:
                if lb.state == "active" and lb.applied_revision == lb.revision:
                    return lb
                if lb.state == "degraded":
                    raise RuntimeError(f"{lb.name} is degraded: {lb.state_error}")
            await trio.sleep(POLL_S)


async def mutation_to_active(client: Client, lb: LoadBalancer) -> tuple[float, LoadBalancer]:
    """Seconds from sending a `PATCH` of the first backend's weight (1 <-> 2, so the rendered
    configuration really changes) to `active` at the new revision."""
    weight = 2 if lb.backends[0].weight == 1 else 1
    started = time.perf_counter()
    await client.load_balancers.update_backend(lb.id, lb.backends[0].id, BackendPatch(weight=weight))
    lb = await wait_active(client, lb.id, lb.revision + 1)
    return time.perf_counter() - started, lb


# --- wrk -----------------------------------------------------------------------------------------


@dataclass
class WrkResult:
    requests_per_s: float
    requests: int
    p50_ms: float
    p99_ms: float
    errors: str  # wrk's socket errors and non-2xx/3xx answers, "" when none


UNITS_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0}


def _ms(text: str) -> float:
    number, unit = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text).groups()  # type: ignore[union-attr]
    return float(number) * UNITS_MS[unit]


def parse_wrk(output: str) -> WrkResult:
    """The figures of `wrk --latency`'s report."""
    rate = re.search(r"^Requests/sec:\s+([\d.]+)", output, re.M)
    requests = re.search(r"^\s+(\d+) requests in", output, re.M)
    p50 = re.search(r"^\s+50%\s+(\S+)", output, re.M)
    p99 = re.search(r"^\s+99%\s+(\S+)", output, re.M)
    if not (rate and requests and p50 and p99):
        raise ValueError(f"not a wrk --latency report: {output!r}")
    errors = []
    if sockets := re.search(r"Socket errors: (.*)", output):
        errors.append(f"socket errors: {sockets.group(1)}")
    if non_2xx := re.search(r"Non-2xx or 3xx responses: (\d+)", output):
        errors.append(f"{non_2xx.group(1)} non-2xx/3xx")
    figures = (float(rate.group(1)), int(requests.group(1)), _ms(p50.group(1)), _ms(p99.group(1)))
    return WrkResult(*figures, "; ".join(errors))


async def run_wrk(port: int, seconds: int) -> WrkResult:
    argv = ["wrk", "-t2", "-c64", f"-d{seconds}s", "--latency", f"http://127.0.0.1:{port}/"]
    done = await trio.run_process(argv, capture_stdout=True, capture_stderr=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited with {done.returncode}: {done.stderr.decode().strip()}")
    return parse_wrk(done.stdout.decode())


# --- the paced client ----------------------------------------------------------------------------


class RequestFailed(Exception):
    """A request got no complete `200` answer; the message is the reason, counted as is."""


REQUEST = b"GET / HTTP/1.1\r\nHost: bench\r\n%s\r\n"


async def _read_response(stream: trio.SocketStream, buffer: bytearray) -> bool:
    """Read one answer (status 200 with a `Content-Length` body) from `stream`; whether the
    connection stays open after it. `buffer` keeps bytes read past it."""
    while (end := buffer.find(b"\r\n\r\n")) < 0:
        chunk = await stream.receive_some(65536)
        if not chunk:
            raise RequestFailed("closed before the answer" if not buffer else "closed inside the headers")
        buffer += chunk
    head = bytes(buffer[:end]).decode("latin-1").split("\r\n")
    del buffer[: end + 4]
    status = head[0].split(" ", 2)
    headers = {name.strip().lower(): value.strip() for name, _, value in (line.partition(":") for line in head[1:])}
    if "content-length" not in headers:
        raise RequestFailed(f"status {status[1]} without Content-Length")
    length = int(headers["content-length"])
    while len(buffer) < length:
        chunk = await stream.receive_some(65536)
        if not chunk:
            raise RequestFailed("closed inside the body")
        buffer += chunk
    del buffer[:length]
    if status[1] != "200":
        raise RequestFailed(f"status {status[1]}")
    return headers.get("connection", "").lower() != "close"


def _reason(exc: BaseException) -> str:
    if isinstance(exc, RequestFailed):
        return str(exc)
    if isinstance(exc, trio.TooSlowError):
        return f"no answer within {REQUEST_TIMEOUT_S:.0f} s"
    if isinstance(exc, OSError) and exc.errno is not None:
        return os.strerror(exc.errno).lower()
    if isinstance(exc, trio.BrokenResourceError):
        return "connection reset"
    return type(exc).__name__


@dataclass
class LoadResult:
    sent: int = 0
    failed: Counter[str] = field(default_factory=Counter)  # reason -> count (after the retry, if any)
    retried: Counter[str] = field(default_factory=Counter)  # keep-alive: first attempts that failed
    max_late_s: float = 0.0  # how far the schedule ran behind at worst

    def late(self, scheduled: float) -> None:
        self.max_late_s = max(self.max_late_s, trio.current_time() - scheduled)


async def _new_connection_request(port: int, result: LoadResult) -> None:
    try:
        with trio.fail_after(REQUEST_TIMEOUT_S):
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            async with stream:
                await stream.send_all(REQUEST % b"Connection: close\r\n")
                await _read_response(stream, bytearray())
    except (OSError, trio.BrokenResourceError, trio.TooSlowError, RequestFailed) as exc:
        result.failed[_reason(exc)] += 1


async def new_connections(port: int, rate: float, seconds: float, result: LoadResult) -> None:
    """`rate` requests per second, each on a connection of its own, on a fixed schedule."""
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        for index in range(int(rate * seconds)):
            scheduled = start + index / rate
            await trio.sleep_until(scheduled)
            result.late(scheduled)
            result.sent += 1
            nursery.start_soon(_new_connection_request, port, result)


class KeepAliveClient:
    """One connection kept open across requests; a failed request is sent again once on a fresh one."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.stream: trio.SocketStream | None = None
        self.buffer = bytearray()

    async def request(self) -> None:
        with trio.fail_after(REQUEST_TIMEOUT_S):
            if self.stream is None:
                self.stream = await trio.open_tcp_stream("127.0.0.1", self.port)
                self.buffer.clear()
            await self.stream.send_all(REQUEST % b"")
            if not await _read_response(self.stream, self.buffer):
                await self.close()

    async def close(self) -> None:
        if self.stream is not None:
            await self.stream.aclose()
            self.stream = None

    async def run(self, rate: float, seconds: float, offset: float, result: LoadResult) -> None:
        start = trio.current_time() + offset
        try:
            for index in range(int(rate * seconds)):
                scheduled = start + index / rate
                await trio.sleep_until(scheduled)
                result.late(scheduled)
                result.sent += 1
                try:
                    await self.request()
                except (OSError, trio.BrokenResourceError, trio.TooSlowError, RequestFailed) as first:
                    result.retried[_reason(first)] += 1
                    await self.close()
                    try:
                        await self.request()
                    except (OSError, trio.BrokenResourceError, trio.TooSlowError, RequestFailed) as second:
                        result.failed[_reason(second)] += 1
                        await self.close()
        finally:
            await self.close()


@dataclass
class ReloadRun:
    new_connections: LoadResult
    keep_alive: LoadResult
    reloads: int  # revisions the node applied during the load
    to_active: list[float]  # mutation -> active of each, under the load


async def paced_load(
    port: int, args: argparse.Namespace, run: ReloadRun, during: Callable[[float], Awaitable[None]]
) -> None:
    """The paced load on `port` into `run`, with `during(start)` running beside it."""
    started = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(new_connections, port, args.rate, args.load_seconds, run.new_connections)
        for index in range(args.keepalive_clients):
            offset = index / (KEEPALIVE_RATE_EACH * args.keepalive_clients)  # spread over one period
            client = KeepAliveClient(port)
            nursery.start_soon(client.run, KEEPALIVE_RATE_EACH, args.load_seconds, offset, run.keep_alive)
        nursery.start_soon(during, started)


async def reloads_under_load(client: Client, lb: LoadBalancer, port: int, args: argparse.Namespace) -> ReloadRun:
    run = ReloadRun(LoadResult(), LoadResult(), 0, [])
    first_revision = lb.applied_revision or 0

    async def mutate(started: float) -> None:
        nonlocal lb
        gap = args.load_seconds * 0.8 / args.reloads  # the last reload well before the end of the load
        for index in range(args.reloads):
            await trio.sleep_until(started + 1.0 + index * gap)
            seconds, lb = await mutation_to_active(client, lb)
            run.to_active.append(seconds)

    await paced_load(port, args, run, mutate)
    run.reloads = (lb.applied_revision or 0) - first_revision
    return run


async def control_load(port: int, args: argparse.Namespace) -> ReloadRun:
    """The same paced load with no reload: what this client counts as failures on its own."""
    run = ReloadRun(LoadResult(), LoadResult(), 0, [])

    async def nothing(started: float) -> None:
        pass

    await paced_load(port, args, run, nothing)
    return run


# --- the run -------------------------------------------------------------------------------------


@dataclass
class Target:
    """What wrk measures: a port, and the CPU time its proxy has used so far (None: no proxy)."""

    name: str  # a key of LABELS
    port: int
    cpu_seconds: Callable[[], float] | None


@dataclass
class Round:
    """One wrk run of a target, and the CPU seconds its proxy used meanwhile."""

    wrk: WrkResult
    proxy_cpu_s: float | None


def round_order(targets: Sequence[Target], index: int) -> list[Target]:
    """The targets in the order round `index` measures them: as given, then reversed, and so on,
    so that no target always runs first or right after another."""
    return list(targets) if index % 2 == 0 else list(reversed(targets))


async def throughput_rounds(targets: Sequence[Target], args: argparse.Namespace) -> dict[str, list[Round]]:
    """`args.rounds` rounds of wrk over every target; each round printed (stderr) as it ends."""
    rounds: dict[str, list[Round]] = {target.name: [] for target in targets}
    for index in range(args.rounds):
        for target in round_order(targets, index):
            before = target.cpu_seconds() if target.cpu_seconds else 0.0
            wrk = await run_wrk(target.port, args.wrk_seconds)
            used = target.cpu_seconds() - before if target.cpu_seconds else None
            rounds[target.name].append(Round(wrk, used))
        print(round_line(rounds, index, targets), file=sys.stderr)
    return rounds


def round_line(rounds: dict[str, list[Round]], index: int, targets: Sequence[Target]) -> str:
    """Round `index` in one line: each target's req/s in the order run, then rendered/hand-written."""
    figures = [f"{LABELS[t.name]} {rounds[t.name][index].wrk.requests_per_s:,.0f}" for t in round_order(targets, index)]
    ratios = [f"{LABELS[engine]} {ratio:.2f}x" for engine, ratio in round_ratios(rounds, index).items()]
    return f"round {index + 1}: " + ", ".join(figures) + "   rendered/hand-written: " + ", ".join(ratios)


def round_ratios(rounds: dict[str, list[Round]], index: int) -> dict[str, float]:
    """Each engine's rendered req/s over its hand-written configuration's, in round `index`."""
    return {
        engine: rounds[engine][index].wrk.requests_per_s / max(rounds[HAND[engine]][index].wrk.requests_per_s, 1e-9)
        for engine in ENGINES
        if engine in rounds
    }


def median_wrk(rounds: Sequence[Round]) -> WrkResult:
    """The median of each figure over the rounds (requests: all of them), and every error seen."""
    wrks = [r.wrk for r in rounds]
    errors = "; ".join(dict.fromkeys(w.errors for w in wrks if w.errors))
    return WrkResult(
        statistics.median(w.requests_per_s for w in wrks),
        sum(w.requests for w in wrks),
        statistics.median(w.p50_ms for w in wrks),
        statistics.median(w.p99_ms for w in wrks),
        errors,
    )


@dataclass
class Figures:
    """One row of the table."""

    wrk: WrkResult  # medians over the rounds
    proxy_cpu_s: float | None  # CPU seconds the proxy used during all of its wrk rounds (None: no proxy)
    to_active: list[float]  # empty: not a load balancer
    reload: ReloadRun | None  # None: a hand-written reference (no reload is measured on it)


@dataclass
class Results:
    figures: dict[str, Figures]
    rounds: dict[str, list[Round]]
    order: list[str]  # the targets' names in the order the first round ran them


async def measure(
    stack: LocalStack, nodes: list[Node], references: dict[str, Reference], ports: list[int], args: argparse.Namespace
) -> Results:
    async with Client(stack.base_url, token=stack.token) as client:
        lbs = {node.engine: await create_lb(client, node, stack.server_id, ports) for node in nodes}
        print("load balancers active; throughput, rendered and hand-written side by side", file=sys.stderr)
        targets = [Target("direct", ports[0], None)]
        for node in nodes:
            reference = references[node.engine]
            targets.append(Target(node.engine, node.port, functools.partial(engine_cpu_seconds, node)))
            targets.append(
                Target(HAND[node.engine], reference.port, functools.partial(tree_cpu_seconds, reference.pid))
            )
        rounds = await throughput_rounds(targets, args)

        def figures_of(name: str, to_active: list[float], reload: ReloadRun | None) -> Figures:
            used = [r.proxy_cpu_s for r in rounds[name] if r.proxy_cpu_s is not None]
            return Figures(median_wrk(rounds[name]), sum(used) if used else None, to_active, reload)

        print("direct: the paced load with no reload (a control of the client)", file=sys.stderr)
        figures = {"direct": figures_of("direct", [], await control_load(ports[0], args))}
        for node in nodes:
            print(f"{node.engine}: mutation -> active, then reloads under load", file=sys.stderr)
            lb, to_active = lbs[node.engine], []
            for _ in range(args.runs):
                seconds, lb = await mutation_to_active(client, lb)
                to_active.append(seconds)
            reload = await reloads_under_load(client, lb, node.port, args)
            figures[node.engine] = figures_of(node.engine, to_active, reload)
            figures[HAND[node.engine]] = figures_of(HAND[node.engine], [], None)
        return Results(figures, rounds, [t.name for t in targets])


def _spread(values: Sequence[float]) -> str:
    ms = [v * 1000 for v in values]
    return f"{statistics.median(ms):.0f} ms ({min(ms):.0f}-{max(ms):.0f})"


def _failures(result: LoadResult) -> str:
    return f"{sum(result.failed.values())}/{result.sent}"


def report(results: Results, args: argparse.Namespace) -> None:
    figures = results.figures
    print(
        f"machine: {os.cpu_count()} cores shared by wrk, the proxy, the backends, the control plane, the agents"
        " and this script"
    )
    print(
        f"req/s, p50, p99: wrk -t2 -c64 -d{args.wrk_seconds}s, 1 KiB static file, {BACKENDS} nginx backends"
        f" (1 worker); {args.rounds} rounds over every target, the order reversed each round; medians of the rounds"
    )
    print(f"mutation->active: weight PATCH until active at the new revision, {args.runs} runs, idle; median (range)")
    print(
        f"new conn, keep-alive: failed/sent during {args.load_seconds:g} s of {args.rate:g} req/s on new connections"
        f" + {args.keepalive_clients} keep-alive clients x {KEEPALIVE_RATE_EACH:g} req/s (failed after one retry),"
        f" with {args.reloads} reloads; direct: the same load, no reload (a control of the client)"
    )
    print()
    columns = f"{'req/s':>9} {'p50':>9} {'p99':>9}   {'mutation->active':<22} {'new conn':>10} {'keep-alive':>10}"
    header = f"{'':<20} {columns}"
    print(header)
    print("-" * len(header))
    for name, row in figures.items():
        if row.reload is None:
            continue
        wrk, reload = row.wrk, row.reload
        line = f"{LABELS[name]:<20} {wrk.requests_per_s:>9,.0f} {wrk.p50_ms:>7.2f}ms {wrk.p99_ms:>7.2f}ms   "
        line += f"{_spread(row.to_active) if row.to_active else '-':<22}"
        line += f" {_failures(reload.new_connections):>10} {_failures(reload.keep_alive):>10}"
        print(line)
    print()
    report_references(results, args)
    print()
    for name, row in figures.items():
        if row.wrk.errors:
            print(f"{LABELS[name]}: wrk: {row.wrk.errors}")
        if row.proxy_cpu_s is not None:
            cores = row.proxy_cpu_s / (args.wrk_seconds * args.rounds)
            print(
                f"{LABELS[name]}: the proxy used {row.proxy_cpu_s:.1f} CPU s during wrk ({cores:.2f} cores,"
                f" {_cpu_per_request_us(row):.0f} us per request)"
            )
        if row.reload is None:
            continue
        reload = row.reload
        if row.to_active:
            under_load = _spread(reload.to_active) if reload.to_active else "-"
            print(f"  {reload.reloads} reloads during the paced load; mutation->active under load {under_load}")
        else:
            print(f"{LABELS[name]}: the paced load alone, no proxy")
        for kind, result in (("new connections", reload.new_connections), ("keep-alive", reload.keep_alive)):
            details = [f"schedule at worst {result.max_late_s * 1000:.0f} ms late"]
            if result.retried:
                details.append("retried: " + ", ".join(f"{n} {why}" for why, n in result.retried.most_common()))
            if result.failed:
                details.append("failed: " + ", ".join(f"{n} {why}" for why, n in result.failed.most_common()))
            print(f"  {kind}: {'; '.join(details)}")


def _cpu_per_request_us(row: Figures) -> float:
    return (row.proxy_cpu_s or 0.0) / max(row.wrk.requests, 1) * 1e6


def report_references(results: Results, args: argparse.Namespace) -> None:
    """Each engine's rendered configuration beside its hand-written one (the same run, the same
    backends), their ratios, and every round."""
    figures, rounds = results.figures, results.rounds
    print(
        "rendered vs hand-written: each engine's documented practice, its own process on its own port over the"
        f" same backends; ratio: median of the {args.rounds} rounds' rendered/hand-written req/s (range)"
    )
    header = f"{'':<22} {'req/s':>9} {'p50':>9} {'p99':>9} {'CPU/request':>12}"
    print(header)
    print("-" * len(header))
    for engine in ENGINES:
        for name in (engine, HAND[engine]):
            row = figures[name]
            line = f"{LABELS[name] + (', rendered' if name == engine else ''):<22}"
            line += f" {row.wrk.requests_per_s:>9,.0f} {row.wrk.p50_ms:>7.2f}ms {row.wrk.p99_ms:>7.2f}ms"
            print(line + f" {_cpu_per_request_us(row):>10.1f}us")
        ratios = [round_ratios(rounds, index)[engine] for index in range(args.rounds)]
        cpu = _cpu_per_request_us(figures[engine]) / max(_cpu_per_request_us(figures[HAND[engine]]), 1e-9)
        print(
            f"  {LABELS[engine]}: rendered/hand-written {statistics.median(ratios):.2f}x req/s"
            f" ({min(ratios):.2f}-{max(ratios):.2f}; goal >= 0.95x), {cpu:.2f}x CPU per request"
        )
    print("rounds (req/s in the order run):")
    targets = [Target(name, 0, None) for name in results.order]
    for index in range(args.rounds):
        print("  " + round_line(rounds, index, targets))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--wrk-seconds", type=int, default=2, help="each wrk run")
    parser.add_argument("--rounds", type=int, default=10, help="wrk rounds over every target")
    parser.add_argument("--runs", type=int, default=7, help="mutation -> active runs per engine")
    parser.add_argument("--rate", type=float, default=200.0, help="new-connection requests per second")
    parser.add_argument("--keepalive-clients", type=int, default=16)
    parser.add_argument("--load-seconds", type=float, default=20.0)
    parser.add_argument("--reloads", type=int, default=5)
    parser.add_argument(
        "--quick", action="store_true", help="a run of each, a second of load: only checks that it runs"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.wrk_seconds, args.rounds, args.runs, args.rate, args.reloads = 1, 2, 1, 20.0, 1
        args.keepalive_clients, args.load_seconds = 2, 1.0
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed (apt-get install wrk)")
    try:
        results = run(args)
    except* KeyboardInterrupt:  # bare, or from inside a trio nursery
        raise SystemExit("interrupted: the processes this run started are stopped") from None
    report(results, args)


def run(args: argparse.Namespace) -> Results:
    """Start everything, measure, stop everything (a Ctrl+C reaches the agents too: they stop
    their engines; the rest is stopped here)."""
    with ExitStack() as running:
        try:
            ports = running.enter_context(static_backends(BACKENDS))
            stack = running.enter_context(local_stack())
            nodes = [running.enter_context(lb_node(stack, engine)) for engine in ENGINES]
            references = running.enter_context(hand_written(ports))
            results = trio.run(measure, stack, nodes, references, ports, args)
        finally:
            # a second Ctrl+C must not cut the cleanup short (the agents got the first one too)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
    return results


if __name__ == "__main__":
    main()
