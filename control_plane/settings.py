"""Control plane settings: given by whoever starts it (`fleetdeck serve`, `fleetdeck local`).

The control plane reads no environment: the composition root (`fleetdeck.settings`) does.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from ipaddress import IPv4Network, IPv6Network
from typing import Literal, get_args

# The HTTP server that serves the app (`control_plane.serving`): hypercorn's trio worker, or
# uvicorn on asyncio.
ServerName = Literal["hypercorn", "uvicorn"]
SERVERS: tuple[ServerName, ...] = get_args(ServerName)
Network = IPv4Network | IPv6Network


@dataclass(frozen=True)
class Settings:
    db_url: str
    server: ServerName = "hypercorn"
    session_ttl: timedelta = timedelta(days=30)
    # The agent says "alive" (and pings its WebSocket) every `heartbeat_s`; a link silent for 3x
    # that is dropped. With 10,000 idle agents at 30 s, the control plane spent 12.7 % of a core
    # when it answered each ping with a message of its own, and 5.4-6.2 % since its server answers
    # the WebSocket ping without the app (benchmarks/fleet.py); a shorter period costs in
    # proportion. The price of a long one is that an agent lost without a word (its machine gone,
    # the network cut) shows offline after 90 s, not 30 (an agent that stops or crashes closes
    # its connection and shows offline at once).
    heartbeat_s: float = 30.0
    agent_call_timeout_s: float = 30.0
    # A cross-server copy is one agent call that lasts as long as its bytes take.
    transfer_timeout_s: float = 6 * 3600.0
    # How long a running job waits for its agent to come back before it ends `interrupted`.
    job_grace_s: float = 30.0
    # What one job's output may take in the database and in memory; the rest is counted, not kept.
    job_output_cap_bytes: int = 16 * 1024 * 1024
    # The NATS server replicas on one database talk through (None: this process is the only one).
    bus_url: str | None = None
    # Proxies in front of this process (the project's HAProxy load balancer): a request from one of
    # these is the client's as their X-Forwarded-For says (`auth.throttle.source_address`). None
    # by default: the header is then never read, since any client can write it.
    trusted_proxies: tuple[Network, ...] = ()
