"""The wire shapes of load balancers (CONTRACT.md § B), and what a load-balancer node reports.

The definition lives in the control plane's database; what a node renders is the `lb.apply`
spec (`contract.job_kinds.lb.LbApply`), whose health check model is also the wire
model's `health_check` here: one definition of each shape.

What a node says back (`LbApplyOutcome`, `LbHealthReport`) is the result of its job kinds, so it
is modelled beside them in `contract.job_kinds.lb`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field, model_validator

from contract.job_kinds.argtypes import DomainName
from contract.job_kinds.lb import Algorithm, BackendHealth, BackendRuntime, BackendStats, Engine, LbHealthCheck
from contract.models import RequestModel, WireModel

ENGINE_NAMES: dict[Engine, str] = {"nginx": "nginx", "haproxy": "HAProxy"}
"""Each engine as a user reads it, in the order offered."""
ALGORITHM_NAMES: dict[Algorithm, str] = {
    "round_robin": "round robin",
    "least_conn": "least connections",
    "ip_hash": "IP hash",
}
"""Each algorithm as a user reads it, in the order offered."""
LbState = Literal["pending_apply", "active", "degraded"]

NAME_PATTERN = r"^[a-z0-9-]+$"
DEFAULT_BACKEND_PORT = 8080
MIN_WEIGHT, MAX_WEIGHT = 1, 256


class Backend(WireModel):
    id: str
    server_id: str
    address: str
    port: int = DEFAULT_BACKEND_PORT
    weight: int = 1
    health: BackendHealth
    drained: bool = False
    last_check_at: datetime | None = None
    stats: BackendStats | None = None
    runtime: BackendRuntime | None = None  # what the engine says of it now (None: not reported yet)


class LoadBalancer(WireModel):
    id: str
    name: str
    port: Literal[80, 443]
    tls: bool
    hostname: str | None = None  # the name clients use; the certificate's name when tls
    node_server_id: str
    engine: Engine
    algorithm: Algorithm
    health_check: LbHealthCheck
    backends: list[Backend]
    state: LbState
    state_error: str | None = None
    listen_port: int | None = None  # the port the node really listens on (a port map's); None: not reported yet
    revision: int
    applied_revision: int | None = None
    applied_at: datetime | None = None
    created_at: datetime
    updated_at: datetime


class LbSummary(WireModel):
    """The summary strip: how many, how many applied, healthy backends of all backends."""

    total: int
    applied: int
    healthy_backends: int
    total_backends: int


class LoadBalancerList(WireModel):
    load_balancers: list[LoadBalancer]
    summary: LbSummary


class Revisioned(RequestModel):
    """A change of a load balancer made over what its author read: with `if_revision`, the change
    is refused with 409 `conflict` (`details.revision`: the current one) when the definition is
    no longer at that revision, instead of silently undoing a change made meanwhile."""

    if_revision: int | None = Field(default=None, ge=1)


class BackendCreate(RequestModel):
    server_id: str = Field(min_length=1, max_length=64)
    port: int = Field(default=DEFAULT_BACKEND_PORT, ge=1, le=65535)
    weight: int = Field(default=1, ge=MIN_WEIGHT, le=MAX_WEIGHT)


class BackendAdd(BackendCreate, Revisioned):
    """`POST /v1/load-balancers/{id}/backends`: a backend, and the revision it is added over."""


class BackendPatch(Revisioned):
    drained: bool | None = None
    port: int | None = Field(default=None, ge=1, le=65535)
    weight: int | None = Field(default=None, ge=MIN_WEIGHT, le=MAX_WEIGHT)


class LoadBalancerCreate(RequestModel):
    name: str = Field(min_length=1, max_length=63, pattern=NAME_PATTERN)
    port: Literal[80, 443]
    tls: bool = False
    hostname: DomainName | None = None
    node_server_id: str = Field(min_length=1, max_length=64)
    engine: Engine
    algorithm: Algorithm = "round_robin"
    health_check: LbHealthCheck = Field(default_factory=LbHealthCheck)
    backends: list[BackendCreate] = Field(default_factory=list, max_length=256)

    @model_validator(mode="after")
    def _tls(self) -> LoadBalancerCreate:
        if self.port == 443:
            self.tls = True
        if self.tls and self.hostname is None:
            raise ValueError("a load balancer with TLS needs a hostname (the certificate's name)")
        pairs = [(backend.server_id, backend.port) for backend in self.backends]
        if len(set(pairs)) != len(pairs):
            raise ValueError("a backend is a (server, port) pair: the same one is given twice")
        return self


class HealthCheckPatch(RequestModel):
    path: str | None = None  # validated as LbHealthCheck.path when merged
    interval_s: int | None = Field(default=None, ge=2, le=3600)
    healthy_threshold: int | None = Field(default=None, ge=1, le=10)
    unhealthy_threshold: int | None = Field(default=None, ge=1, le=10)


class LoadBalancerPatch(Revisioned):
    """Any of these; `engine` and `node_server_id` are refused with 422 `immutable_field`
    (the route checks them before this model, so the error names the right code)."""

    name: str | None = Field(default=None, min_length=1, max_length=63, pattern=NAME_PATTERN)
    algorithm: Algorithm | None = None
    port: Literal[80, 443] | None = None
    tls: bool | None = None
    hostname: DomainName | None = None
    health_check: HealthCheckPatch | None = None


class ApplyStarted(WireModel):
    job_id: str
