"""A fleet in one process: N simulated agents linked to one control plane, figures side by side.

    python benchmarks/fleet.py [--sizes 1000,5000,10000] [--simulators 2] [--quiet-seconds 30]
    python benchmarks/fleet.py --replicas 3 [--kill one|all] ...

For each N (a fresh database each time: SQLite for one control plane; for `--replicas`, PostgreSQL
started the way the tests start it, as a shared SQLite file between processes is not what anyone
would run at scale):

* the database gets an organisation, an owner with an API token and N full servers, straight
  through the control plane's own store functions (N admin subprocesses would take minutes);
* one control plane, `fleetdeck serve` on 127.0.0.1, starts on it; or with `--replicas K`, K of
  them on one PostgreSQL database with a NATS server of the run's own as their bus, each agent
  given all K URLs (rotated, so the fleet spreads evenly over the replicas);
* `--simulators` processes link N agents between them (this script again, `--simulate`): each
  agent is the agent's own link code (`AgentLink`, trio + trio-websocket), thousands of them in
  one trio process, each serving the agent's real file handlers (`FileHandlers`) on one tiny
  shared home, idle apart from its heartbeats.

What it prints per N, each beside its goal:

* memory: the control plane's RSS once all N are linked, minus its RSS before the first link,
  over N; and its total RSS (replicas: summed over them);
* CPU at rest: the control plane's CPU seconds over a quiet window (`--quiet-seconds`, at least
  30 s by default) with all N linked and idle, as % of one core (replicas: summed);
* RPC round trip: `--rpcs` sequential `GET /v1/servers/{id}/fs/stat?scope=root` to a random
  server through the public API (authentication, the server's row, one agent call to the real
  `fs.stat` handler); p50 and p99. With replicas, each asked of a random replica, so about
  (K-1)/K of them are relayed over the bus to the replica holding the agent's link;
* relink: the control plane is killed (SIGKILL) and started again on the same port and database;
  the time from the kill until every agent it held has been welcomed again (their full-jitter
  backoff spreads the storm), and how many had not come back by `--relink-timeout` ("gave up":
  the link code never stops retrying, so any is a failure). The API then confirms all N online.
  With replicas, `--kill one` kills the first replica (its agents move on to the others at once)
  and `--kill all` kills all of them (every agent relinks, as with one control plane). What the
  link code logged is counted by kind (the turns it was given, 503 and Retry-After, among them;
  a failed dial by its error), and the relink's welcomes are printed by 5 s after the kill: what
  spread the storm, and where it stalled;
* presence after the relink: every control plane (each replica) must list all N servers online
  within `--presence-timeout` of the last agent's new welcome; the time it took is printed.

Limits, said plainly: the control plane, the simulators and this script share this machine's
cores (and other people's work on it), so CPU figures are what was measured under that load.
The simulators' own RSS and CPU are printed too, as context. Our packages' bytecode is made
first (`compile_bytecode`), as an installed control plane has it, so that a restart does not
compile them from source where PYTHONDONTWRITEBYTECODE is set. It asserts one thing, the
presence after the relink: it exits non-zero when a control plane lists fewer than N servers
online (or a size could not be measured at all); the other figures are printed beside their goals.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.link.client import link_url
from benchmarks._stack import compile_bytecode, cpu_seconds
from fleetdeck.launcher import child_environment, free_port

GOAL_MEMORY_BYTES = 512 * 1024**2  # for 10,000 idle agents (issue 26)
GOAL_FLEET = 10_000
GOAL_CPU_PERCENT = 5.0
GOAL_RELINK_S = 30.0
GOAL_PRESENCE_S = 10.0  # from the last relink until every replica lists every agent online
START_TIMEOUT_S = 60.0
POLL_S = 0.25
TIMELINE_STEP_S = 5.0  # the relink's welcomes are counted by steps of this many seconds after the kill
ORG = "fleet-bench"


# --- the database ---------------------------------------------------------------------------------


@dataclass
class Provisioned:
    api_token: str
    server_ids: list[str]
    agent_tokens: list[str]


def provision(db_url: str, n: int) -> Provisioned:
    """An org, an owner with an API token and `n` full servers, written with the control plane's
    own store functions (in one transaction) before any control plane runs on the database."""
    from control_plane.auth import store as accounts
    from control_plane.auth.passwords import hash_password
    from control_plane.servers import store as server_store
    from control_plane.storage import Database

    db = Database(db_url)
    db.migrate()
    try:
        with db.engine.begin() as conn:
            org = accounts.create_org(conn, ORG, "max")
            user = accounts.create_user(conn, "owner@fleet.bench", "owner", hash_password("not used"))
            accounts.add_membership(conn, user["id"], org["id"], "owner")
            _, api_token = accounts.create_api_token(conn, user["id"], org["id"], "fleet benchmark")
            servers = [server_store.create_server(conn, org["id"], f"sim-{i:05d}", "full", None) for i in range(n)]
    finally:
        db.dispose()
    tokens = [token for _, token in servers]
    assert all(tokens)
    return Provisioned(api_token, [row["id"] for row, _ in servers], [t for t in tokens if t])


# --- processes ------------------------------------------------------------------------------------


def raise_open_files(wanted: int) -> None:
    """RLIMIT_NOFILE to at least `wanted` (children inherit it); root may raise the hard limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= wanted:
        return
    if hard != resource.RLIM_INFINITY and hard < wanted:
        hard = wanted  # only root may; otherwise setrlimit says so
    resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


class ControlPlane:
    """`fleetdeck serve` on 127.0.0.1:`port` and `db_url`; killed and started again at will.
    `env`: more of its environment (a replica's bus); `name` tells the logs apart."""

    def __init__(self, db_url: str, folder: Path, name: str = "control-plane", env: dict[str, str] | None = None):
        self.db_url = db_url
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = folder / f"{name}.log"
        self.env = env or {}
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self) -> None:
        argv = [sys.executable, "-m", "fleetdeck", "serve", "--db", self.db_url, "--listen", f"127.0.0.1:{self.port}"]
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(argv, env=child_environment(self.env), stdout=log, stderr=log)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"the control plane exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                if httpx.get(f"{self.url}/v1/health", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the control plane did not answer within {START_TIMEOUT_S:.0f} s")
            time.sleep(0.1)

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


@dataclass
class SimulatorStatus:
    links: int  # agents this simulator runs
    welcomed: int  # of them, welcomed at or after the time asked about
    last_welcome: float  # time.monotonic() of the latest of those welcomes (0.0: none)
    events: dict[str, int]  # what the link code logged, by message
    linked_to: dict[str, int]  # welcomed agents by the link URL they are on (or last were)
    timeline: dict[str, int]  # of the welcomed, how many in each TIMELINE_STEP_S after the time asked about


class Simulator:
    """A simulator process (this script, `--simulate`): its agents' tokens in a file, then
    questions ("status SINCE", one line each) on its stdin answered with a JSON line on its
    stdout. Its agents are given all `urls` (replicas), each agent's list rotated by one more."""

    def __init__(self, urls: Sequence[str], tokens: Path, home: Path, state: Path, ramp_per_s: float) -> None:
        argv = [sys.executable, __file__, "--simulate", ",".join(urls), "--tokens", str(tokens)]
        argv += ["--home", str(home), "--state", str(state), "--ramp", str(ramp_per_s)]
        self.process = subprocess.Popen(
            argv, env=child_environment(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self._in: IO[str] = self.process.stdin
        self._out: IO[str] = self.process.stdout

    @property
    def pid(self) -> int:
        return self.process.pid

    def status(self, since: float = 0.0) -> SimulatorStatus:
        self._in.write(f"status {since!r}\n")
        self._in.flush()
        line = self._out.readline()
        if not line:
            raise RuntimeError(f"simulator {self.pid} exited with {self.process.wait()}")
        return SimulatorStatus(**json.loads(line))

    def stop(self) -> None:
        """Its stdin closed, it stops its agents and exits; killed if it does not."""
        try:
            self._in.close()
            self.process.wait(30)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()


@dataclass
class FleetStatus:
    welcomed: int
    last_welcome: float
    events: Counter[str] = field(default_factory=Counter)
    linked_to: Counter[str] = field(default_factory=Counter)
    timeline: Counter[int] = field(default_factory=Counter)  # welcomes by step since the time asked about


def fleet_status(simulators: Sequence[Simulator], since: float = 0.0) -> FleetStatus:
    total = FleetStatus(0, 0.0)
    for simulator in simulators:
        status = simulator.status(since)
        total.welcomed += status.welcomed
        total.last_welcome = max(total.last_welcome, status.last_welcome)
        total.events.update(status.events)
        total.linked_to.update(status.linked_to)
        total.timeline.update({int(step): n for step, n in status.timeline.items()})
    return total


def wait_welcomed(simulators: Sequence[Simulator], n: int, since: float, timeout: float) -> FleetStatus:
    """Poll until all `n` agents were welcomed at or after `since`, or `timeout` passed."""
    deadline = time.monotonic() + timeout
    while True:
        status = fleet_status(simulators, since)
        if status.welcomed >= n or time.monotonic() > deadline:
            return status
        time.sleep(POLL_S)


# --- the measurements -----------------------------------------------------------------------------


@dataclass
class Figures:
    n: int
    simulators: int
    rss_before: int
    rss_linked: int
    link_s: float  # from the first simulator's start until all N were welcomed
    link_cpu_s: float  # the control plane's CPU seconds meanwhile
    cpu_s: float  # the control plane's, over the quiet window
    quiet_s: float
    simulators_cpu_s: float  # all simulators', over the same window
    simulators_rss: int
    rpc_ms: list[float]
    rpc_failures: Counter[str]
    relink_s: float | None  # None: not all came back
    relink_cpu_s: float  # the new control plane's CPU seconds until then (its start included)
    gave_up: int  # agents not welcomed again by the relink timeout
    online_after_relink: list[int]  # as the API of each control plane lists them
    presence_s: float | None  # from the last new welcome until all listed all N online (None: never)
    link_events: Counter[str]  # what the link code logged while the fleet first linked
    relink_events: Counter[str]
    relink_timeline: Counter[int] = field(default_factory=Counter)  # the relink's welcomes by TIMELINE_STEP_S
    replicas: int = 1  # control planes (memory and CPU are their sums)
    killed: int = 1  # of them, killed and started again for the relink
    relinked: int = 0  # links they held, which had to come back
    spread: list[int] = field(default_factory=list)  # agents per control plane before the kill
    restart_s: float = 0.0  # from the kill until the killed answered again (their start)

    @property
    def bytes_per_link(self) -> float:
        return (self.rss_linked - self.rss_before) / self.n

    @property
    def cpu_percent(self) -> float:
        return 100.0 * self.cpu_s / self.quiet_s


def measure(n: int, args: argparse.Namespace) -> Figures:
    """One row: provision, start the control plane(s) and the simulators, measure, stop them all."""
    raise_open_files(n + 4096)
    replicas = getattr(args, "replicas", 1)
    with tempfile.TemporaryDirectory(prefix="fleetdeck-fleet-") as temp, ExitStack() as running:
        folder = Path(temp)
        folder.chmod(0o755)  # PostgreSQL's own folder is made inside, by the postgres user
        home, state = folder / "home", folder / "state"
        home.mkdir()
        state.mkdir()
        (home / "hello.txt").write_text("a tiny shared home\n")
        env = control_plane_environment(args)
        if replicas > 1:
            db_url, bus_url = start_cluster_services(folder, running)
            env["FLEETDECK_BUS_URL"] = bus_url
            control_planes = [ControlPlane(db_url, folder, f"replica-{i}", env) for i in range(replicas)]
        else:
            db_url = f"sqlite:///{folder / 'fleet.db'}"
            control_planes = [ControlPlane(db_url, folder, env=env)]
        progress(f"N={n}: provisioning the database")
        fleet = provision(db_url, n)
        for control_plane in control_planes:
            running.callback(control_plane.stop)
            control_plane.start()
        time.sleep(1.0)  # let their start settle before the baseline
        pids = [cp.pid for cp in control_planes]
        rss_before = sum(map(rss_bytes, pids))
        cpu_at_start = sum(map(cpu_seconds, pids))
        count = min(args.simulators, n)
        progress(f"N={n}: linking {n} agents from {count} simulator processes to {replicas} control plane(s)")
        started = time.monotonic()
        simulators = []
        for index in range(count):
            tokens = folder / f"tokens-{index}"
            tokens.write_text("".join(f"{token}\n" for token in fleet.agent_tokens[index::count]))
            urls = [cp.url for cp in control_planes]
            simulator = Simulator(urls, tokens, home, state, args.ramp / count)
            running.callback(simulator.stop)
            simulators.append(simulator)
        ramp_s = n / args.ramp if args.ramp > 0 else 0.0
        linked = wait_welcomed(simulators, n, 0.0, args.relink_timeout + ramp_s)
        if linked.welcomed < n:
            raise RuntimeError(f"only {linked.welcomed} of {n} agents linked: {dict(linked.events)}")
        link_s = linked.last_welcome - started
        link_cpu_s = sum(map(cpu_seconds, pids)) - cpu_at_start
        apis = [
            httpx.Client(base_url=cp.url, headers={"Authorization": f"Bearer {fleet.api_token}"}, timeout=60)
            for cp in control_planes
        ]
        for api in apis:
            running.callback(api.close)
        wait_online(apis[0], n, args.relink_timeout)
        time.sleep(min(args.settle_seconds, args.quiet_seconds))  # the last presence writes, the first heartbeats
        rss_linked = sum(map(rss_bytes, pids))
        progress(f"N={n}: all linked in {link_s:.1f} s; {args.quiet_seconds:g} s at rest")
        cpu_before = sum(map(cpu_seconds, pids))
        sims_before = sum(cpu_seconds(s.pid) for s in simulators)
        quiet_start = time.monotonic()
        time.sleep(args.quiet_seconds)
        quiet_s = time.monotonic() - quiet_start
        cpu_s = sum(map(cpu_seconds, pids)) - cpu_before
        sims_cpu = sum(cpu_seconds(s.pid) for s in simulators) - sims_before
        sims_rss = sum(rss_bytes(s.pid) for s in simulators)
        progress(f"N={n}: {args.rpcs} RPCs")
        rpc_ms, rpc_failures = round_trips(apis, fleet.server_ids, args.rpcs)
        victims = control_planes[:1] if getattr(args, "kill", "all") == "one" else control_planes
        held = fleet_status(simulators).linked_to
        expected = sum(held[link_url(victim.url)] for victim in victims)
        progress(f"N={n}: killing {len(victims)} of {replicas} control plane(s), holding {expected} links; relink")
        survivors = [cp for cp in control_planes if cp not in victims]
        cpu_before_kill = sum(cpu_seconds(cp.pid) for cp in survivors)
        for victim in victims:
            victim.kill()
        killed = time.monotonic()
        for victim in victims:
            victim.start()
        restart_s = time.monotonic() - killed
        relinked = wait_welcomed(simulators, expected, killed, args.relink_timeout)
        relink_cpu_s = sum(cpu_seconds(cp.pid) for cp in control_planes) - cpu_before_kill
        relink_s = relinked.last_welcome - killed if relinked.welcomed >= expected else None
        online, presence_s = wait_all_online(apis, n, relinked.last_welcome, args.presence_timeout)
        return Figures(
            n=n,
            simulators=count,
            rss_before=rss_before,
            rss_linked=rss_linked,
            link_s=link_s,
            link_cpu_s=link_cpu_s,
            cpu_s=cpu_s,
            quiet_s=quiet_s,
            simulators_cpu_s=sims_cpu,
            simulators_rss=sims_rss,
            rpc_ms=rpc_ms,
            rpc_failures=rpc_failures,
            relink_s=relink_s,
            relink_cpu_s=relink_cpu_s,
            gave_up=max(0, expected - relinked.welcomed),
            online_after_relink=online,
            presence_s=presence_s,
            link_events=linked.events,
            relink_events=relinked.events - linked.events,
            relink_timeline=relinked.timeline,
            replicas=replicas,
            killed=len(victims),
            relinked=expected,
            restart_s=restart_s,
            spread=sorted(held.values()),
        )


def control_plane_environment(args: argparse.Namespace) -> dict[str, str]:
    """What the options say of the control planes' environment: heartbeat and server."""
    env = {}
    if getattr(args, "heartbeat", None):
        env["FLEETDECK_HEARTBEAT_S"] = str(args.heartbeat)
    if getattr(args, "server", None):
        env["FLEETDECK_SERVER"] = args.server
    return env


def start_cluster_services(folder: Path, running: ExitStack) -> tuple[str, str]:
    """PostgreSQL (as the tests start it, with no statement logged) with a fresh database, and a
    NATS server: the replicas' database URL and bus URL; both stopped by `running`."""
    from tests.helpers.postgres_server import PostgresDatabases, start_postgres
    from tests.helpers.replicas import start_nats

    server = start_postgres(folder / "postgres", log_statements=False)
    running.callback(server.stop)
    db_url = PostgresDatabases(server).create("fleet")
    nats = start_nats()
    running.callback(nats.stop)
    return db_url, nats.url


def wait_all_online(
    apis: Sequence[httpx.Client], n: int, since: float, timeout: float
) -> tuple[list[int], float | None]:
    """How many servers each API lists online, once every one lists all `n` or `timeout` passed
    since `since` (time.monotonic()); and how long after `since` they all did (None: not all)."""
    deadline = since + timeout
    while True:
        online = [wait_online(api, n, 0.0) for api in apis]
        if min(online) >= n:
            return online, time.monotonic() - since
        if time.monotonic() > deadline:
            return online, None
        time.sleep(1.0)


def wait_online(api: httpx.Client, n: int, timeout: float) -> int:
    """How many servers the API lists online, once all `n` are or `timeout` passed."""
    deadline = time.monotonic() + timeout
    while True:
        servers = api.get("/v1/servers", timeout=60).raise_for_status().json()["servers"]
        online = sum(1 for server in servers if server["agent"]["online"])
        if online >= n or time.monotonic() > deadline:
            return online
        time.sleep(1.0)


def round_trips(
    apis: Sequence[httpx.Client], server_ids: Sequence[str], count: int
) -> tuple[list[float], Counter[str]]:
    """`count` sequential stats of the home's root on random servers, each asked of a random
    control plane (replicas relay most of them): milliseconds each."""
    times: list[float] = []
    failures: Counter[str] = Counter()
    pick = random.Random(13)
    for _ in range(count):
        server_id, api = pick.choice(server_ids), pick.choice(apis)
        start = time.perf_counter()
        response = api.get(f"/v1/servers/{server_id}/fs/stat", params={"scope": "root", "path": "hello.txt"})
        elapsed = (time.perf_counter() - start) * 1000
        if response.status_code == 200 and response.json().get("name") == "hello.txt":
            times.append(elapsed)
        else:
            failures[f"HTTP {response.status_code}"] += 1
    return times, failures


# --- the report -----------------------------------------------------------------------------------


def percentile(values: Sequence[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def _mib(n: float) -> str:
    return f"{n / 1024**2:,.0f} MiB"


def report(rows: Sequence[Figures], args: argparse.Namespace) -> None:
    print(
        f"machine: {os.cpu_count()} cores shared by the control plane, the simulators and this script"
        " (and whatever else runs on it)"
    )
    replicas = rows[0].replicas if rows else 1
    setup = (
        f"{replicas} replicas of `fleetdeck serve` on one PostgreSQL database, NATS between them"
        if replicas > 1
        else "one `fleetdeck serve` on SQLite"
    )
    print(
        f"control plane: {setup}, {args.server or 'uvicorn'}, heartbeat every {heartbeat_s(args):g} s;"
        f" CPU at rest over {args.quiet_seconds:g} s; RPC: {args.rpcs} sequential GET .../fs/stat?scope=root"
        f" to a random agent (fs.stat)" + (", each asked of a random replica" if replicas > 1 else "")
    )
    if replicas > 1:
        print(
            "memory and CPU are summed over the replicas; relink: "
            + (
                "one replica killed and started again, the time until its agents are all linked again"
                if rows and rows[0].killed == 1
                else "all replicas killed and started again"
            )
        )
    goal_per_link = GOAL_MEMORY_BYTES / GOAL_FLEET
    print(
        f"goals (10,000 idle agents): under {_mib(GOAL_MEMORY_BYTES)} ({goal_per_link / 1024:.0f} KiB a link),"
        f" under {GOAL_CPU_PERCENT:g} % of one core, all relinked within {GOAL_RELINK_S:g} s, none gives up"
    )
    print()
    header = (
        f"{'agents':>7} {'cps':>3} {'sims':>4} {'KiB/link':>9} {'total RSS':>10} {'CPU rest':>9}"
        f" {'RPC p50':>8} {'RPC p99':>8} {'relink':>8} {'gave up':>7}"
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        relink = f"{row.relink_s:.1f} s" if row.relink_s is not None else "-"
        p50 = f"{percentile(row.rpc_ms, 50):.1f}ms" if row.rpc_ms else "-"
        p99 = f"{percentile(row.rpc_ms, 99):.1f}ms" if row.rpc_ms else "-"
        print(
            f"{row.n:>7,} {row.replicas:>3} {row.simulators:>4} {row.bytes_per_link / 1024:>9.1f}"
            f" {_mib(row.rss_linked):>10} {row.cpu_percent:>8.1f}% {p50:>8} {p99:>8} {relink:>8} {row.gave_up:>7}"
        )
    print(
        f"{'goal':>7} {'':>3} {'':>4} {goal_per_link / 1024:>9.1f} {_mib(GOAL_MEMORY_BYTES):>10}"
        f" {GOAL_CPU_PERCENT:>8.1f}% {'':>8} {'':>8} {GOAL_RELINK_S:>6.0f} s {0:>7}"
    )
    print()
    for row in rows:
        scaled = row.rss_before + row.bytes_per_link * GOAL_FLEET
        print(
            f"N={row.n:,}: RSS {_mib(row.rss_before)} before the first link; all linked in {row.link_s:.1f} s;"
            f" at 10,000 this would be {_mib(scaled)}"
        )
        lists = " and ".join(f"{online:,}" for online in row.online_after_relink)
        took = f"{row.presence_s:.1f} s after the last relink" if row.presence_s is not None else "never"
        print(
            f"  after the relink the API of each control plane lists {lists} online: all {row.n:,} on every one"
            f" {took} (goal: within {GOAL_PRESENCE_S:g} s)" + ("" if presence_complete(row) else "  << WRONG")
        )
        print(
            f"  control plane CPU: {1000 * row.link_cpu_s / row.n:.1f} ms a link while the fleet first linked;"
            f" {row.relink_cpu_s:.1f} s from the kill until the {row.relinked:,} links of the {row.killed} killed"
            f" came back; from the kill until they answered again: {row.restart_s:.1f} s"
        )
        if row.replicas > 1:
            print(f"  agents per replica before the kill: {row.spread}")
        print(
            f"  simulators: {_mib(row.simulators_rss)} RSS, {100 * row.simulators_cpu_s / row.quiet_s:.1f} % of one"
            f" core at rest; RPCs: {len(row.rpc_ms)} ok"
            + (f", failed: {dict(row.rpc_failures)}" if row.rpc_failures else "")
        )
        if row.link_events:
            print(
                "  while linking the link code logged: "
                + ", ".join(f"{n} x {what!r}" for what, n in row.link_events.most_common())
            )
        if row.relink_events:
            print(
                "  during the relink the link code logged: "
                + ", ".join(f"{n} x {what!r}" for what, n in row.relink_events.most_common())
            )
        if row.relink_timeline:
            steps = range(max(row.relink_timeline) + 1)
            print(
                f"  welcomed again, by {TIMELINE_STEP_S:g} s after the kill: "
                + ", ".join(f"{row.relink_timeline[step]:,}" for step in steps)
            )


def presence_complete(row: Figures) -> bool:
    """Every control plane lists every agent online after the relink (what the run asserts)."""
    return min(row.online_after_relink) >= row.n


def heartbeat_s(args: argparse.Namespace) -> float:
    from control_plane.settings import Settings

    given: float | None = getattr(args, "heartbeat", None)
    return given or Settings(db_url="").heartbeat_s


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --- the simulator process ------------------------------------------------------------------------


# What the link code logs at INFO that is counted too: a 503 with a time to come back (a turn).
_COUNTED_INFO = ("the control plane at %s said to come back in %d s",)


class _LogCounter(logging.Handler):
    """Counts what the link code logs, by message template (one line of output per kind, not
    one per agent): its warnings, and the turns it was given (`_COUNTED_INFO`)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.counts: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.WARNING or record.msg in _COUNTED_INFO:
            kind = str(record.msg).split(":")[0].split(" (")[0].replace("%s", "…")
            args = record.args if isinstance(record.args, tuple) else ()
            code = getattr(args[0], "code", None) if args else None
            if code is not None:  # a close: which code
                kind = f"{kind} {code}"
            elif len(args) == 2 and isinstance(args[1], BaseException):  # a failed dial: why
                errno = f" {args[1].errno}" if isinstance(args[1], OSError) else ""
                kind = f"{kind} ({type(args[1]).__name__}{errno})"
            self.counts[kind] += 1


def simulate(urls: str, tokens_file: str, home: str, state: str, ramp_per_s: float) -> None:
    """The simulator's main: link an agent per token in `tokens_file` (to the comma-separated
    `urls`, rotated by one per agent), answer status questions from stdin until it closes."""
    import trio

    from agent import __version__
    from agent.files.handlers import FileHandlers
    from agent.link.client import AgentLink
    from agent.sites import SiteRegistry

    tokens = Path(tokens_file).read_text().split()
    count = len(tokens)
    raise_open_files(count + 1024)
    counter = _LogCounter()
    logger = logging.getLogger("fleetdeck.agent")
    logger.addHandler(counter)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    handlers = FileHandlers(home, SiteRegistry(state)).handlers()  # the real ones, shared by all
    welcomed_at = [0.0] * count

    def on_welcome(index: int) -> Any:
        def welcomed(_welcome: dict[str, Any]) -> None:
            welcomed_at[index] = time.monotonic()

        return welcomed

    replicas = urls.split(",")
    links = [
        AgentLink(
            replicas[index % len(replicas) :] + replicas[: index % len(replicas)],
            token,
            handlers,
            version=__version__,
            hostname=f"sim-{index}",
            on_welcome=on_welcome(index),
        )
        for index, token in enumerate(tokens)
    ]

    async def answer(stdin: trio.lowlevel.FdStream) -> None:
        buffer = b""
        while True:
            chunk = await stdin.receive_some(4096)
            if not chunk:
                return
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                since = float(line.split()[1])
                recent = [t for t in welcomed_at if t and t >= since]
                status = {
                    "links": count,
                    "welcomed": len(recent),
                    "last_welcome": max(recent, default=0.0),
                    "events": dict(counter.counts),
                    "linked_to": Counter(link.url for link, t in zip(links, welcomed_at, strict=True) if t),
                    "timeline": Counter(int((t - since) // TIMELINE_STEP_S) for t in recent),
                }
                sys.stdout.write(json.dumps(status) + "\n")
                sys.stdout.flush()

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for link in links:
                nursery.start_soon(link.run)
                if ramp_per_s > 0:
                    await trio.sleep(1 / ramp_per_s)
            await answer(trio.lowlevel.FdStream(os.dup(sys.stdin.fileno())))
            nursery.cancel_scope.cancel()  # stdin closed: the benchmark is done with us

    trio.run(main)


# --- the run --------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000,5000,10000", help="comma-separated numbers of agents")
    parser.add_argument("--simulators", type=int, default=2, help="simulator processes (agents split evenly)")
    parser.add_argument("--quiet-seconds", type=float, default=30.0, help="the window CPU at rest is measured over")
    parser.add_argument("--settle-seconds", type=float, default=15.0, help="wait once all are linked, before it")
    parser.add_argument("--rpcs", type=int, default=300)
    parser.add_argument("--ramp", type=float, default=1000.0, help="agents started per second, in all (0: at once)")
    parser.add_argument("--relink-timeout", type=float, default=300.0)
    parser.add_argument(
        "--presence-timeout", type=float, default=60.0, help="after the relink, until every API lists all online"
    )
    parser.add_argument("--replicas", type=int, default=1, help="control planes on one PostgreSQL database, with NATS")
    parser.add_argument("--kill", choices=("one", "all"), default="all", help="replicas killed for the relink")
    parser.add_argument("--heartbeat", type=float, help="the control planes' FLEETDECK_HEARTBEAT_S (default: serve's)")
    parser.add_argument("--server", choices=("uvicorn", "hypercorn"), help="their FLEETDECK_SERVER (default: serve's)")
    parser.add_argument("--simulate", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--tokens", help=argparse.SUPPRESS)
    parser.add_argument("--home", help=argparse.SUPPRESS)
    parser.add_argument("--state", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="20 agents, short windows: only checks that it runs")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.rpcs, args.ramp = "20", 10, 0.0
        args.quiet_seconds, args.settle_seconds, args.relink_timeout = 1.0, 0.5, 120.0
    if args.simulate:
        simulate(args.simulate, args.tokens, args.home, args.state, args.ramp)
        return
    sizes = [int(size) for size in args.sizes.split(",")]
    compile_bytecode()  # a restarted control plane imports from bytecode, as an installed one does
    rows = []
    failed = []
    try:
        for n in sizes:
            try:
                rows.append(measure(n, args))
            except RuntimeError as exc:  # one size failed: say so, and measure the others
                print(f"N={n}: {exc}", flush=True)
                failed.append(f"N={n} could not be measured")
                continue
            report(rows[-1:], args)  # each row as soon as it is measured (a long run may be cut short)
    except KeyboardInterrupt:
        raise SystemExit("interrupted: the processes this run started are stopped") from None
    print("\nall sizes:")
    report(rows, args)
    failed += [f"N={row.n}: listed online {row.online_after_relink}" for row in rows if not presence_complete(row)]
    if failed:
        raise SystemExit("FAILED: " + "; ".join(failed))


if __name__ == "__main__":
    main()
