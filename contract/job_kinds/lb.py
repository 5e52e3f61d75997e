"""Job kinds of load balancers (`lb.*`): each carries the whole self-contained spec (CONTRACT.md § B).

`LbApply` IS the spec a load-balancer node renders: the control plane builds it from its rows
(backend addresses resolved, so the node looks nothing up) and the agent parses it back from the
argv. `LbHealthCheck` is also the wire model's `health_check` (`contract.load_balancers`).

What a node says back is modelled here too, as the kinds' results, so that agent and control
plane read the same shape:

- `LbApplyOutcome`: the JSON line `lb.apply --json` prints last (the job's result), with the
  revision it applied. A report of an older revision than the newest never marks it active.
- `LbHealthReport`: per load balancer, the health and stats of its backends, as the streamed
  RPC `lb.watch` sends them (one report per load balancer on open, then one whenever something
  in it changes) and as `lb.status` prints them.

They are wire models (unknown fields ignored), not `Result`s: a control plane reads the reports
of agents older and newer than itself. `LbRemoved`, which only a job's reader sees, is a `Result`."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field, model_validator

from contract.job_kinds.argtypes import Bool, DomainName, Host, Id, Int, Port, Slug, UrlPath
from contract.job_kinds.base import Args, DomainPolicy, JobKind, Result, kind
from contract.models import WireModel

Engine = Literal["nginx", "haproxy"]
"""The engines a load-balancer node runs (agent/load_balancers/nginx.py, haproxy.py)."""
Algorithm = Literal["round_robin", "least_conn", "ip_hash"]
"""How a load balancer spreads requests over its backends."""


class LbHealthCheck(Args):
    """How backends are checked: HAProxy's active checks, or the agent's prober under nginx."""

    path: UrlPath = "/"
    interval_s: Int = Field(default=10, ge=2, le=3600)
    healthy_threshold: Int = Field(default=2, ge=1, le=10)
    unhealthy_threshold: Int = Field(default=3, ge=1, le=10)


class LbBackend(Args):
    id: Id
    server_id: Id
    address: Host
    port: Port = 8080
    weight: Int = Field(default=1, ge=1, le=256)
    drained: Bool = False


class LbApply(Args):
    id: Id
    name: Slug
    revision: Int = Field(ge=1, le=2**53)
    port: Literal[80, 443]
    tls: Bool = False
    hostname: DomainName | None = None  # the name clients use: the certificate's name when tls
    engine: Engine
    algorithm: Algorithm = "round_robin"
    health_check: LbHealthCheck = Field(default_factory=LbHealthCheck)
    backends: list[LbBackend] = Field(default_factory=list, max_length=256)

    @model_validator(mode="after")
    def _consistent(self) -> LbApply:
        if self.port == 443:
            self.tls = True  # the contract: port 443 turns tls on
        if self.tls and self.hostname is None:
            raise ValueError("a load balancer with TLS needs a hostname (the certificate's name)")
        ids = [backend.id for backend in self.backends]
        if len(set(ids)) != len(ids):
            raise ValueError("backend ids must be unique")
        return self


class LbRemove(Args):
    id: Id
    name: Slug
    engine: Engine


# --- what a node reports ---------------------------------------------------------------------

BackendHealth = Literal["healthy", "unhealthy", "draining"]


class BackendStats(WireModel):
    """Real traffic figures from HAProxy's stats socket (``show stat``); the nginx engine has none
    (null). The fields after `request_rate` came later: an older agent leaves them null."""

    current_sessions: int = Field(description="sessions open now")
    total_requests: int = Field(description="requests (or sessions, in TCP mode) since HAProxy started")
    request_rate: float = Field(description="requests per second, as HAProxy measures it")
    max_sessions: int | None = Field(default=None, description="the most sessions open at once (smax)")
    bytes_in: int | None = Field(default=None, description="bytes received from clients (bin)")
    bytes_out: int | None = Field(default=None, description="bytes sent to clients (bout)")
    connection_errors: int | None = Field(default=None, description="failed connections to the backend (econ)")
    response_errors: int | None = Field(default=None, description="responses aborted or refused (eresp)")


BackendStatus = Literal["UP", "DOWN", "DRAIN", "MAINT", "NOLB"]
"""A backend's state in its engine's words (hatop's): UP and DOWN by its checks, DRAIN (no new
requests), MAINT (out of service by an administrator), NOLB (HAProxy: up, taking no new ones)."""


class BackendRuntime(WireModel):
    """What the node's engine says of a backend now, beyond healthy or not (hatop's columns).

    HAProxy: its stats socket (``show stat``, ``show servers state``). nginx has no runtime state
    to ask: `status`, `changed_at`, `check_failures` and `down_count` are the agent prober's, and
    `weight` and `drift` are null (the file is all there is)."""

    status: BackendStatus = Field(description="UP, DOWN, DRAIN, MAINT or NOLB")
    going: Literal["up", "down"] | None = Field(
        default=None, description="between states: checks on their way to up or down (HAProxy's `UP 1/3`)"
    )
    changed_at: datetime | None = Field(default=None, description="when the status last changed")
    check_failures: int | None = Field(default=None, description="failed checks since the engine started")
    down_count: int | None = Field(default=None, description="times it went from up to down")
    weight: int | None = Field(default=None, description="the weight the engine applies now (null: nginx)")
    drift: str | None = Field(
        default=None, description="how the engine differs from the definition it serves (a change behind its back)"
    )


class LbApplyOutcome(WireModel):
    """The result of `lb.apply`: `active` when render, validate and reload succeeded, else
    `degraded` with the validator's or the reload's own text (the previous configuration still
    serving)."""

    id: str = Field(description="the load balancer")
    revision: int = Field(description="the revision applied (or, exit 4, the newer one the node already has)")
    state: Literal["active", "degraded"] = Field(description="active: serving this revision; degraded: not")
    error: str | None = Field(default=None, description="why it is degraded: the validator's or reload's text")


class BackendReport(WireModel):
    id: str = Field(description="the backend")
    health: BackendHealth = Field(description="healthy, unhealthy, or draining (no new requests)")
    last_check_at: datetime | None = Field(default=None, description="its last health check (None: none yet)")
    stats: BackendStats | None = Field(default=None, description="its traffic (None: the nginx engine has none)")
    runtime: BackendRuntime | None = Field(default=None, description="its state in the engine (None: an older agent)")


class LbHealthReport(WireModel):
    id: str = Field(description="the load balancer")
    revision: int = Field(description="the revision the node is serving")
    listen_port: int | None = Field(
        default=None, description="the port it really listens on (a port map's, or 80/443; None: an older agent)"
    )
    backends: list[BackendReport] = Field(description="each backend's health and traffic")


class LbRemoved(Result):
    """The result of `lb.remove` (idempotent: removing what is gone succeeds)."""

    id: str = Field(description="the load balancer")
    removed: bool = Field(description="its configuration was removed (False: this node had none already)")


# Who runs this domain's mutations, and from which plan (`base.DomainPolicy`).
POLICY = DomainPolicy("infra", "free", route="/v1/load-balancers")

KINDS: list[JobKind] = [
    kind("lb.apply", LbApply, "Write and reload a load balancer from its whole spec", positional=("id",), json=True,
         example={"id": "lb-1", "name": "web", "revision": 3, "port": 443, "hostname": "shop.example.com",
                  "engine": "haproxy",
                  "algorithm": "least_conn", "health_check": {"path": "/healthz", "interval_s": 5},
                  "backends": [{"id": "be-1", "server_id": "srv-a", "address": "10.0.0.11"},
                               {"id": "be-2", "server_id": "srv-b", "address": "fd00::12", "port": 8081,
                                "weight": 2, "drained": True}]}, result=LbApplyOutcome),
    kind("lb.remove", LbRemove, "Remove a load balancer's configuration", positional=("id",),
         example={"id": "lb-1", "name": "web", "engine": "haproxy"}, result=LbRemoved),
    kind("lb.status", LbRemove, "Show backend health and traffic of a load balancer", read=True, positional=("id",),
         example={"id": "lb-1", "name": "web", "engine": "haproxy"}, result=LbHealthReport),
]  # fmt: skip
