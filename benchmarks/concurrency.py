"""Fifty concurrent clients against the control plane, beside a bare Starlette route on the same server.

    python benchmarks/concurrency.py [--rounds 2] [--seconds 10] [--connections 50]
        [--servers uvicorn hypercorn] [--replicas 3]

What it starts, per round and server (`FLEETDECK_SERVER`: uvicorn is `fleetdeck serve`'s default,
hypercorn's trio worker `fleetdeck local`'s):

- the reference: a Starlette app of one route answering a small JSON (`GET /ping`), served by
  `control_plane.serving.serve_asgi`, the very code and settings that serve the product, in a
  process of its own;
- one control plane: `fleetdeck local` (SQLite; its own agent runs in its process, idle) with a
  second server whose agent is its own process (as on a real server), over a home of its own: a
  folder of 20 small files and no site, so that a `site.list` job costs the agent next to
  nothing and the figure is the control plane's (the demo site's 20,000 files would make each
  job a walk of its tree);
- with `--replicas K`: K `fleetdeck serve` replicas on one PostgreSQL database with NATS as their
  bus (as benchmarks/fleet.py and tests/control_plane/replicas start them), one agent process linked
  to the first; the reference is then K bare processes.

What it measures: wrk (one thread, C, with a Lua script) keeps `--connections` keep-alive clients
busy for `--seconds`. The clients cycle through five operations: `GET /v1/servers`, `fs/list` of
the folder, `fs/read` and `fs/stat` of a small file, and a job (`POST .../jobs` of `site.list`, a
read, then `GET /v1/jobs/{id}` until the job has ended; a slot polls the oldest job still running,
else creates one). The same wrk drives the bare route with the same connections, so the ratio of
the two request rates is fair: it is the figure (issue 26: at least 0.5), with every answer a 2xx
(any other, or a socket error, fails the benchmark) and the latency p50/p99 over all requests.
With replicas, one wrk per replica shares the connections out and the rates are summed; about
(K-1)/K of the file and job calls are relayed over the bus to the replica holding the agent's link.
Beside each rate, requests per CPU-second of the serving processes (user + system), which swing
less with the neighbours' load than wall-clock rates do.

Measured (uvicorn, 50 clients, 10 s; this 2-core machine shared with other helpers' runs, load
average 6 to 10): the bare route 1,700-4,800 requests/s; one control plane 124-193 requests/s
before issue 26's changes (ratio 0.03-0.08; 284-365 requests per CPU-second) and 154-347 after
(0.03-0.11; 472-662 per CPU-second); three replicas 112-159 before (130-160 per CPU-second) and
173-211 after (220-289). 0 errors in every run. Once the machine was quiet (load average 2), one pair: one control plane
259 -> 532 requests/s (ratio 0.06 -> 0.13; p50/p99 200/493 -> 106/279 ms; 305 -> 686 per
CPU-second), three replicas 147 -> 330 (0.02 -> 0.04; 132 -> 326 per CPU-second). The ratio stays
far below the 0.5 asked.

Limits, plainly: wrk's latency is over all five kinds at once (wrk's Lua cannot tell one kind's
answer time from another's); a job slot that polls counts each poll as a request; the agent,
PostgreSQL, NATS and wrk share this machine's cores with the control plane, as they would not on
a real deployment, and the bare route has no database, agent or bus to share them with. Absolute
figures move with the neighbours' load; the ratio moves much less. It prints figures; it asserts
nothing but the absence of errors.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from statistics import mean

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._stack import compile_bytecode, cpu_seconds, local_stack
from control_plane.settings import ServerName
from fleetdeck.launcher import child_environment, start_agent

SERVERS: tuple[ServerName, ...] = ("uvicorn", "hypercorn")
FOLDER = "bench"  # in the agent's root scope
FILES = 20
SMALL_FILE = f"{FOLDER}/small-0.txt"
JOB = '{"kind": "site.list", "args": {}}'

# One Lua state per wrk thread (one thread here): `request` builds each request, `response` sees
# each answer in the order they come; a job's answer (create or poll) carries its id and status.
LUA = r"""
local base, server, job_body = "%(base)s", "%(server)s", '%(job)s'
local files = base .. "/v1/servers/" .. server .. "/fs/"
local query = "?scope=root&path="
local plain = {
  base .. "/v1/servers",
  files .. "list" .. query .. "%(folder)s",
  files .. "read" .. query .. "%(small)s",
  files .. "stat" .. query .. "%(small)s",
}
local json = {["Content-Type"] = "application/json"}
local slot, running = 0, {}
created, ended, failed = 0, 0, 0
local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  for name, value in pairs(wrk.headers) do json[name] = value end  -- the token given with -H
end

function request()
  slot = slot %% 5 + 1
  if slot <= 4 then
    return wrk.format("GET", plain[slot])
  end
  if #running > 0 then
    return wrk.format("GET", base .. "/v1/jobs/" .. table.remove(running, 1))
  end
  created = created + 1
  return wrk.format("POST", base .. "/v1/servers/" .. server .. "/jobs", json, job_body)
end

function response(status, headers, body)
  if status >= 300 then
    failed = failed + 1
    if failed <= 3 then io.stderr:write(status .. " " .. body .. "\n") end
    return
  end
  local job = body:match('^{"id":"([^"]+)","server_id"')
  if job == nil then return end
  local state = body:match('"status":"(%%a+)"')
  if state == "queued" or state == "running" then
    table.insert(running, job)
  else
    ended = ended + 1
  end
end

function done(summary, latency, requests)
  local errors, jobs = summary.errors, 0
  for _, thread in ipairs(threads) do jobs = jobs + thread:get("ended") end
  io.write(string.format("FIGURES %%d %%f %%d %%d %%d %%d %%d\n", summary.requests, summary.duration / 1e6,
    latency:percentile(50), latency:percentile(99),
    errors.connect + errors.read + errors.write + errors.timeout, errors.status, jobs))
end
"""


@dataclass
class Run:
    requests: int
    seconds: float
    p50_ms: float
    p99_ms: float
    cpu_s: float
    jobs: int  # jobs seen to end (the bare route: 0)

    @property
    def rate(self) -> float:
        return self.requests / self.seconds

    @property
    def per_cpu_second(self) -> float:
        return self.requests / max(self.cpu_s, 0.01)


def wrk_script(folder: Path, server_id: str | None) -> Path:
    """The Lua script of the mix (`server_id`), or of the bare route (None)."""
    script = folder / f"mix-{server_id or 'bare'}.lua"
    if server_id is None:
        script.write_text(
            "function done(summary, latency, requests)\n  local e = summary.errors\n  io.write(string.format("
            '"FIGURES %d %f %d %d %d %d 0\\n", summary.requests, summary.duration / 1e6, latency:percentile(50), '
            "latency:percentile(99), e.connect + e.read + e.write + e.timeout, e.status))\nend\n"
        )
    else:
        values = {"base": "", "server": server_id, "job": JOB, "folder": FOLDER, "small": SMALL_FILE}
        script.write_text(LUA % values)
    return script


def drive(urls: Sequence[str], script: Path, token: str, connections: int, seconds: float, pids: Sequence[int]) -> Run:
    """wrk on each of `urls` at once, the connections shared out; every answer must be a 2xx."""
    shares = [connections // len(urls) + (1 if n < connections % len(urls) else 0) for n in range(len(urls))]
    cpu = sum(map(cpu_seconds, pids))
    # --timeout: a request slower than wrk's 2 s (a loaded machine) is counted, not a socket error.
    wrk_options = ["wrk", "-t1", f"-d{seconds}s", "--timeout", "10s", "-s", str(script)]
    wrks = [
        subprocess.Popen(
            [*wrk_options, f"-c{share}", "-H", f"Authorization: Bearer {token}", url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for url, share in zip(urls, shares, strict=True)
    ]
    outputs = [wrk.communicate() for wrk in wrks]
    cpu = sum(map(cpu_seconds, pids)) - cpu
    figures = []
    for (out, err), wrk in zip(outputs, wrks, strict=True):
        found = re.search(r"FIGURES (\d+) ([\d.]+) (\d+) (\d+) (\d+) (\d+) (\d+)", out)
        if wrk.returncode != 0 or found is None:
            raise RuntimeError(f"wrk failed ({wrk.returncode}):\n{out}\n{err}")
        requests, elapsed, p50, p99, socket_errors, status_errors, jobs = found.groups()
        if int(socket_errors) or int(status_errors):
            raise RuntimeError(f"wrk: {socket_errors} socket errors, {status_errors} non-2xx answers:\n{out}\n{err}")
        figures.append((int(requests), float(elapsed), int(p50) / 1000, int(p99) / 1000, int(jobs)))
    return Run(
        jobs=sum(f[4] for f in figures),
        requests=sum(f[0] for f in figures),
        seconds=max(f[1] for f in figures),
        p50_ms=mean(f[2] for f in figures),
        p99_ms=max(f[3] for f in figures),
        cpu_s=cpu,
    )


def serve_bare(server: ServerName) -> None:
    """This process serves the bare route with `server` on a free port, and prints its URL."""
    import anyio
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from control_plane.serving import BACKENDS, bind, serve_asgi

    async def ping(request: object) -> JSONResponse:
        return JSONResponse({"status": "ok", "agents_online": 1})

    app = Starlette(routes=[Route("/ping", ping)])
    sock = bind("127.0.0.1", 0)
    host, port = sock.getsockname()[:2]

    async def main() -> None:
        async with anyio.create_task_group() as tasks:
            await tasks.start(lambda task_status: serve_asgi(server, app, sock, task_status=task_status))
            print(f"http://{host}:{port}", flush=True)

    anyio.run(main, backend=BACKENDS[server])


@contextmanager
def bare_routes(server: ServerName, count: int) -> Iterator[tuple[list[str], list[int]]]:
    """`count` processes serving the bare route: their URLs (of the route) and pids."""
    processes = []
    try:
        for _ in range(count):
            processes.append(
                subprocess.Popen(
                    [sys.executable, __file__, "--serve-bare", server],
                    stdout=subprocess.PIPE,
                    text=True,
                    env=child_environment(),
                )
            )
        urls = []
        for process in processes:
            assert process.stdout is not None
            urls.append(process.stdout.readline().strip() + "/ping")
        yield urls, [process.pid for process in processes]
    finally:
        for process in processes:
            process.terminate()
            process.wait(10)


def write_files(home: Path) -> None:
    folder = home / FOLDER
    folder.mkdir(exist_ok=True)
    for n in range(FILES):
        (folder / f"small-{n}.txt").write_text(f"small file {n}\n" * 4)


def wait_online(base_url: str, token: str, server_id: str) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    deadline = time.monotonic() + 60
    while not httpx.get(f"{base_url}/v1/servers/{server_id}", headers=headers).json()["agent"]["online"]:
        if time.monotonic() > deadline:
            raise RuntimeError("the benchmark's agent did not come online")
        time.sleep(0.1)


def warm_up(base_url: str, token: str, server_id: str) -> None:
    """Each kind once, checked: a wrong path would otherwise fail only inside wrk."""
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
        files = f"/v1/servers/{server_id}/fs"
        http.get("/v1/servers").raise_for_status()
        http.get(f"{files}/list", params={"scope": "root", "path": FOLDER}).raise_for_status()
        http.get(f"{files}/read", params={"scope": "root", "path": SMALL_FILE}).raise_for_status()
        http.get(f"{files}/stat", params={"scope": "root", "path": SMALL_FILE}).raise_for_status()
        created = http.post(f"/v1/servers/{server_id}/jobs", content=JOB, headers={"Content-Type": "application/json"})
        created.raise_for_status()
        job = created.json()
        while job["status"] in ("queued", "running"):
            job = http.get(f"/v1/jobs/{job['id']}").raise_for_status().json()
        if job["status"] != "succeeded":
            raise RuntimeError(f"the warm-up job ended {job['status']}: {job}")


@contextmanager
def agent_process(base_url: str, token: str, agent_token: str, server_id: str, folder: Path) -> Iterator[int]:
    """An agent process (as on a real server) over a home of its own holding the folder of small
    files and no site (so `site.list` is the job's bookkeeping, not a walk of a site's tree);
    yields its pid once the control plane lists it online."""
    home, state = folder / "home", folder / "agent-state"
    home.mkdir(parents=True)
    state.mkdir()
    write_files(home)
    agent = start_agent(base_url, agent_token, home, state, stderr=subprocess.DEVNULL)
    try:
        wait_online(base_url, token, server_id)
        yield agent.pid
    finally:
        agent.terminate()
        agent.wait(10)


def one_control_plane(server: ServerName, folder: Path, connections: int, seconds: float) -> tuple[Run, Run]:
    """(bare route, product) with one control plane."""
    with bare_routes(server, 1) as (urls, pids):
        drive(urls, wrk_script(folder, None), "-", connections, 1, [])  # warm up
        bare = drive(urls, wrk_script(folder, None), "-", connections, seconds, pids)
    with local_stack({"FLEETDECK_SERVER": server}) as stack:
        headers = {"Authorization": f"Bearer {stack.token}"}
        created = httpx.post(f"{stack.base_url}/v1/servers", json={"name": "bench", "kind": "full"}, headers=headers)
        server_id = created.raise_for_status().json()["server"]["id"]
        with agent_process(stack.base_url, stack.token, created.json()["agent_token"], server_id, folder / "one"):
            warm_up(stack.base_url, stack.token, server_id)
            script = wrk_script(folder, server_id)
            drive([stack.base_url], script, stack.token, connections, 1, [])
            product = drive([stack.base_url], script, stack.token, connections, seconds, [stack.pid])
    return bare, product


def replicas(server: ServerName, count: int, folder: Path, connections: int, seconds: float) -> tuple[Run, Run]:
    """(bare route in `count` processes, product through `count` replicas)."""
    from tests.helpers.control_planes import admin
    from tests.helpers.postgres_server import PostgresDatabases, start_postgres
    from tests.helpers.replicas import start_nats, start_replica

    with bare_routes(server, count) as (urls, pids):
        drive(urls, wrk_script(folder, None), "-", connections, 1, [])
        bare = drive(urls, wrk_script(folder, None), "-", connections, seconds, pids)
    with ExitStack() as running:
        postgres = start_postgres(folder / "postgres", log_statements=False)
        running.callback(postgres.stop)
        db_url = PostgresDatabases(postgres).create("concurrency")
        nats = start_nats()
        running.callback(nats.stop)
        admin(db_url, "create-org", "acme", "--plan", "max")
        password = "concurrency-password-1"
        admin(db_url, "create-user", "owner@acme.test", "--org", "acme", "--role", "owner", "--password", password)
        created = admin(db_url, "create-server", "web-1", "--org", "acme")
        env = {"FLEETDECK_SERVER": server, "FLEETDECK_LOG": "WARNING"}
        members = []
        for n in range(count):
            replica = start_replica(folder, db_url, nats.url, f"replica-{n}", env)
            running.callback(replica.stop)
            members.append(replica)
        base = members[0].base_url
        token = httpx.post(f"{base}/v1/auth/login", json={"email": "owner@acme.test", "password": password}).json()
        server_id = str(created["id"])
        agent_folder = folder / "replicas"
        running.enter_context(agent_process(base, token["token"], str(created["agent_token"]), server_id, agent_folder))
        for member in members:
            warm_up(member.base_url, token["token"], server_id)
        script = wrk_script(folder, server_id)
        urls = [member.base_url for member in members]
        drive(urls, script, token["token"], connections, 1, [])
        pids = [member.process.pid for member in members if member.process is not None]
        product = drive(urls, script, token["token"], connections, seconds, pids)
    return bare, product


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--servers", nargs="+", choices=SERVERS, default=["uvicorn"])
    parser.add_argument("--replicas", type=int, default=3, help="replicas on PostgreSQL and NATS (0: none)")
    parser.add_argument("--quick", action="store_true", help="one short round, 10 clients: only checks that it runs")
    parser.add_argument("--serve-bare", choices=SERVERS, help=argparse.SUPPRESS)  # the reference's own process
    args = parser.parse_args(argv)
    if args.serve_bare:
        serve_bare(args.serve_bare)
        return
    if args.quick:
        args.rounds, args.seconds, args.connections = 1, 1, 10  # wrk takes whole seconds
    if shutil.which("wrk") is None:
        sys.exit("benchmarks/concurrency.py needs wrk (apt install wrk) to drive the clients")
    compile_bytecode()
    rows: dict[str, list[tuple[Run, Run]]] = {}
    with tempfile.TemporaryDirectory(prefix="fleetdeck-concurrency-") as temp:
        Path(temp).chmod(0o755)  # PostgreSQL's own folder is made inside, by the postgres user
        for round_ in range(args.rounds):
            for server in args.servers:
                folder = Path(temp) / f"{server}-{round_}"
                folder.mkdir(parents=True)
                folder.chmod(0o755)
                rows.setdefault(f"{server}, one control plane", []).append(
                    one_control_plane(server, folder, args.connections, args.seconds)
                )
                if args.replicas > 1:
                    rows.setdefault(f"{server}, {args.replicas} replicas", []).append(
                        replicas(server, args.replicas, folder, args.connections, args.seconds)
                    )
    print(
        f"{args.connections} clients (wrk, keep-alive) for {args.seconds} s, {args.rounds} round(s); the mix: "
        "servers, fs/list, fs/read, fs/stat, site.list job created and polled until it ends"
    )
    header = f"{'':32}{'bare requests/s':>17}{'fleetdeck':>11}{'ratio':>7}{'bare p50/p99 ms':>18}"
    print(header + f"{'fleetdeck p50/p99 ms':>22}{'per CPU-s bare / fleetdeck':>28}")
    for name, runs in rows.items():
        for bare, product in runs:
            print(
                f"{name:32}{bare.rate:>17,.0f}{product.rate:>11,.0f}{product.rate / bare.rate:>7.2f}"
                f"{f'{bare.p50_ms:.1f} / {bare.p99_ms:.1f}':>18}{f'{product.p50_ms:.1f} / {product.p99_ms:.1f}':>22}"
                f"{f'{bare.per_cpu_second:,.0f} / {product.per_cpu_second:,.0f}':>28}"
            )
    print("errors: 0 (any non-2xx answer or socket error fails the run); target: ratio >= 0.50")


if __name__ == "__main__":
    main()
