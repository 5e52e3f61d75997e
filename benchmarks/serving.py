"""The same control plane under hypercorn's trio worker and under uvicorn on asyncio, side by side.

    python benchmarks/serving.py [--rounds 2] [--seconds 5] [--connections 8]

Each round starts `fleetdeck local` once per server (`FLEETDECK_SERVER`), with a second agent in
its own process for the streams (as on a real server), and measures:

- plain JSON requests per second: `GET /v1/health` (no database) and `GET /v1/servers` (a
  session check and a query), `--connections` concurrent keep-alive clients driven by wrk;
- SSE: lines per second of a 100,000-line job's output to an API client (`benchmarks/job_stream.py`);
- download: MiB/s of a 128 MiB file through `fs/download` (agent → control plane → client);
- the same SSE and download with `fleetdeck local`'s own agent, which runs in the control plane's
  process (on its trio loop under hypercorn, on a thread of its own under uvicorn);
- the control plane's RSS at rest after start, and its peak at the end (VmHWM). The process also
  runs the embedded agent, idle but for the two figures above;
- one file RPC through the separate agent: `GET fs/stat` and `GET fs/read` of a small file,
  `--calls` sequential calls on one keep-alive connection after 50 of warm-up, p50 and p99 in
  ms, beside `GET /v1/health` measured the same way; and, once per run, the same stat over an
  SSH connection already open (`ssh -o ControlMaster`, the loopback sshd: the tool an
  administrator would otherwise use). Targets (issue 26): p50 ≤ 2 ms, p99 ≤ 5 ms.

Beside each rate, the same work per CPU-second of the control plane's process (user + system):
on a machine shared with other work, wall-clock rates swing with the neighbours' load; CPU cost
per request swings much less.

The machine is shared: each server runs `--rounds` times, alternating; every run is printed, and
the last column is the ratio of the means.
It prints figures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from statistics import mean

import httpx
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from api_client import Client
from benchmarks._stack import LocalStack, cpu_seconds, local_stack, loopback_sshd
from benchmarks.job_stream import through_api, write_log
from contract.models import Scope

SERVERS = ("hypercorn", "uvicorn")
SSE_LINES = 100_000
DOWNLOAD = 128 * 1024 * 1024
SITE = Scope(scope="site", domain="example.com")
Figures = dict[str, float]


def wrk_requests(stack: LocalStack, path: str, connections: int, seconds: float) -> tuple[int, float]:
    """(requests answered, seconds) of wrk on `path`; every answer must be a 200."""
    # --timeout: a request slower than wrk's 2 s (a loaded machine) is counted, not a socket error.
    command = [
        "wrk",
        "-t1",
        f"-c{connections}",
        f"-d{seconds}s",
        "--timeout",
        "10s",
        "-H",
        f"Authorization: Bearer {stack.token}",
    ]
    done = subprocess.run([*command, stack.base_url + path], capture_output=True, text=True, check=True)
    if "Non-2xx" in done.stdout or "Socket errors" in done.stdout:
        raise RuntimeError(f"wrk {path}: not every answer was a 200:\n{done.stdout}")
    found = re.search(r"(\d+) requests in ([\d.]+)(m?s)", done.stdout)
    assert found is not None, done.stdout
    return int(found.group(1)), float(found.group(2)) / (1000 if found.group(3) == "ms" else 1)


async def download_seconds(stack: LocalStack, server_id: str, name: str) -> float:
    async with Client(stack.base_url, token=stack.token) as client:
        started = time.perf_counter()
        received = 0
        async for chunk in client.files.download(server_id, SITE, name):
            received += len(chunk)
        elapsed = time.perf_counter() - started
    assert received == DOWNLOAD, f"received {received} of {DOWNLOAD} bytes"
    return elapsed


RPC_FILE = "public_html/index.php"  # the demo site's small PHP file
RPC_WARM_UP = 50


def percentiles(samples: list[float]) -> tuple[float, float]:
    """(p50, p99) of `samples`, in milliseconds."""
    ordered = sorted(samples)
    return ordered[len(ordered) // 2] * 1000, ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000


def rpc_latencies(stack: LocalStack, path: str, params: dict[str, str], calls: int) -> tuple[float, float]:
    """(p50, p99) ms of `calls` sequential GETs of `path` on one keep-alive connection."""
    headers = {"Authorization": f"Bearer {stack.token}"}
    with httpx.Client(base_url=stack.base_url, headers=headers) as http:
        samples = []
        for call in range(RPC_WARM_UP + calls):
            started = time.perf_counter()
            answer = http.get(path, params=params)
            elapsed = time.perf_counter() - started
            if answer.status_code != 200:
                raise RuntimeError(f"GET {path}: {answer.status_code} {answer.text}")
            if call >= RPC_WARM_UP:
                samples.append(elapsed)
    return percentiles(samples)


def ssh_stat_latencies(site: Path, calls: int) -> tuple[float, float] | None:
    """(p50, p99) ms of `stat` of the same file over an SSH connection already open (a control
    master, as `ssh -o ControlMaster=auto -o ControlPersist` keeps one); None without sshd."""
    with loopback_sshd() as ssh, tempfile.TemporaryDirectory(prefix="fleetdeck-ssh-mux-") as folder:
        if ssh is None:
            return None
        mux = ["-o", "ControlMaster=auto", "-o", f"ControlPath={folder}/mux", "-o", "ControlPersist=60"]
        command = ssh.command(f"stat {site / RPC_FILE}")
        command[1:1] = mux
        samples = []
        for call in range(RPC_WARM_UP // 5 + calls):  # the first opens the master
            started = time.perf_counter()
            subprocess.run(command, capture_output=True, check=True)
            if call >= RPC_WARM_UP // 5:
                samples.append(time.perf_counter() - started)
        subprocess.run([*command[:1], *mux, "-O", "exit", *command[1:-1]], capture_output=True)
        return percentiles(samples)


def per_cpu_second(amount: float, cpu: float) -> float:
    """`amount` per CPU-second; the kernel counts CPU time in ticks (10 ms), so a quick run's
    small transfer may have used none that was counted: then one tick is the bound."""
    return amount / max(cpu, 1 / os.sysconf("SC_CLK_TCK"))


def memory_mib(pid: int, field: str) -> float:
    """A /proc/PID/status figure (VmRSS now, VmHWM the peak), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return 0.0


def measure(server: str, connections: int, seconds: float, calls: int) -> Figures:
    figures: Figures = {}
    with local_stack({"FLEETDECK_SERVER": server}) as stack:
        figures["RSS at rest (MiB)"] = memory_mib(stack.pid, "VmRSS")
        site = stack.data_dir / "home" / "example-com"
        write_log(stack.site_log("example-com", "access.log"), SSE_LINES)
        (site / "public_html" / "download.bin").write_bytes(os.urandom(DOWNLOAD))
        wrk_requests(stack, "/v1/health", connections, 1)  # warm up
        for path in ("/v1/health", "/v1/servers"):
            cpu = cpu_seconds(stack.pid)
            requests, elapsed = wrk_requests(stack, path, connections, seconds)
            cpu = cpu_seconds(stack.pid) - cpu
            figures[f"GET {path} (requests/s)"] = requests / elapsed
            figures[f"  {path.rsplit('/', 1)[1]} per CPU-second"] = per_cpu_second(requests, cpu)
        with stack.separate_agent("bench-agent", "--host-layout", str(stack.host_layout)) as server_id:
            small = {"scope": "site", "domain": "example.com", "path": RPC_FILE}
            files = f"/v1/servers/{server_id}/fs"
            rpcs: dict[str, tuple[str, dict[str, str]]] = {
                "health": ("/v1/health", {}),
                "fs/stat": (f"{files}/stat", small),
                "fs/read": (f"{files}/read", small),
            }
            for name, (path, params) in rpcs.items():
                p50, p99 = rpc_latencies(stack, path, params, calls)
                figures[f"{name} p50 (ms), one call at a time"] = p50
                figures[f"{name} p99 (ms)"] = p99
            trio.run(through_api, stack.base_url, stack.token, server_id, 1000)  # warm up
            cpu = cpu_seconds(stack.pid)
            elapsed, _, received, _ = trio.run(through_api, stack.base_url, stack.token, server_id, SSE_LINES)
            cpu = cpu_seconds(stack.pid) - cpu
            assert received == SSE_LINES, f"received {received} of {SSE_LINES} lines"
            figures["job output over SSE (lines/s)"] = SSE_LINES / elapsed
            figures["  lines per CPU-second"] = per_cpu_second(SSE_LINES, cpu)
            mib = DOWNLOAD / 1024 / 1024
            cpu = cpu_seconds(stack.pid)
            elapsed = trio.run(download_seconds, stack, server_id, "public_html/download.bin")
            cpu = cpu_seconds(stack.pid) - cpu
            figures["download (MiB/s)"] = mib / elapsed
            figures["  MiB per CPU-second"] = per_cpu_second(mib, cpu)
        # `fleetdeck local`'s own agent runs in the control plane's process: on its trio loop under
        # hypercorn, on a thread of its own under uvicorn, the two sharing the interpreter's lock.
        elapsed, _, received, _ = trio.run(through_api, stack.base_url, stack.token, stack.server_id, SSE_LINES)
        assert received == SSE_LINES, f"received {received} of {SSE_LINES} lines"
        figures["SSE, the agent in-process (lines/s)"] = SSE_LINES / elapsed
        elapsed = trio.run(download_seconds, stack, stack.server_id, "public_html/download.bin")
        figures["download, the agent in-process (MiB/s)"] = DOWNLOAD / 1024 / 1024 / elapsed
        figures["RSS peak (MiB)"] = memory_mib(stack.pid, "VmHWM")
    return figures


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--servers", nargs="+", choices=SERVERS, default=SERVERS)
    parser.add_argument("--calls", type=int, default=300, help="sequential calls per RPC latency figure")
    parser.add_argument(
        "--quick", action="store_true", help="one short round, small transfers: only checks that it runs"
    )
    args = parser.parse_args(argv)
    if args.quick:
        global SSE_LINES, DOWNLOAD  # the sizes every measure() uses
        args.rounds, args.seconds, SSE_LINES, DOWNLOAD = 1, 1, 1_000, 1024 * 1024  # wrk takes whole seconds
        args.calls = 20
    if shutil.which("wrk") is None:
        sys.exit("benchmarks/serving.py needs wrk (apt install wrk) to drive the JSON requests")
    servers: list[str] = args.servers
    runs: dict[str, list[Figures]] = {server: [] for server in servers}
    for _ in range(args.rounds):
        for server in servers:
            runs[server].append(measure(server, args.connections, args.seconds, args.calls))
    print(f"{args.rounds} runs of each, alternating; {args.connections} connections for {args.seconds:g} s per path")
    both = len(servers) == len(SERVERS)
    print(f"{'':40}" + "".join(f"{server:>26}" for server in servers) + (f"{'uvicorn/hypercorn':>20}" if both else ""))
    for name in runs[servers[0]][0]:
        cells = {server: [run[name] for run in runs[server]] for server in servers}
        row = "".join(f"{' / '.join(_figure(value) for value in cells[server]):>26}" for server in servers)
        ratio = f"{mean(cells['uvicorn']) / mean(cells['hypercorn']):>19.2f}x" if both else ""
        print(f"{name:40}{row}{ratio}")
    with tempfile.TemporaryDirectory(prefix="fleetdeck-ssh-stat-") as folder:
        (Path(folder) / RPC_FILE).parent.mkdir(parents=True)
        (Path(folder) / RPC_FILE).write_text("<?php echo 'hello';\n")
        over_ssh = ssh_stat_latencies(Path(folder), args.calls)
    if over_ssh is None:
        print("stat over an open SSH connection: no sshd here")
    else:
        print(f"{'stat over an open SSH connection (ms)':40}{f'p50 {over_ssh[0]:.2f} / p99 {over_ssh[1]:.2f}':>26}")


def _figure(value: float) -> str:
    return f"{value:,.2f}" if value < 100 else f"{value:,.0f}"


if __name__ == "__main__":
    main()
