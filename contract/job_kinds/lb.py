"""Job kinds of load balancers (`lb.*`): each carries the whole self-contained spec (CONTRACT.md § B).

`LbApply` IS the spec a load-balancer node renders: the control plane builds it from its rows
(backend addresses resolved, so the node looks nothing up) and the agent parses it back from the
argv. `LbHealthCheck` is also the wire model's `health_check` (`contract.load_balancers`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from contract.job_kinds.argtypes import Bool, DomainName, Host, Id, Int, Port, Slug, UrlPath
from contract.job_kinds.base import Args, JobKind, kind

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


KINDS: list[JobKind] = [
    kind("lb.apply", LbApply, "Write and reload a load balancer from its whole spec", positional=("id",), json=True,
         example={"id": "lb-1", "name": "web", "revision": 3, "port": 443, "hostname": "shop.example.com",
                  "engine": "haproxy",
                  "algorithm": "least_conn", "health_check": {"path": "/healthz", "interval_s": 5},
                  "backends": [{"id": "be-1", "server_id": "srv-a", "address": "10.0.0.11"},
                               {"id": "be-2", "server_id": "srv-b", "address": "fd00::12", "port": 8081,
                                "weight": 2, "drained": True}]}),
    kind("lb.remove", LbRemove, "Remove a load balancer's configuration", positional=("id",),
         example={"id": "lb-1", "name": "web", "engine": "haproxy"}),
    kind("lb.status", LbRemove, "Show backend health and traffic of a load balancer", read=True, positional=("id",),
         example={"id": "lb-1", "name": "web", "engine": "haproxy"}),
]  # fmt: skip
