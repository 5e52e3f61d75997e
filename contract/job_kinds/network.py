"""Job kinds of `network`."""

from __future__ import annotations

import ipaddress
from typing import Literal

from pydantic import model_validator

from contract.job_kinds.argtypes import Bool, Cidr, DockerName, IPAddress
from contract.job_kinds.base import INFRA, Args, JobKind, NoArgs, kind


class NetworkName(Args):
    name: DockerName


class NetworkCreate(Args):
    name: DockerName
    driver: Literal["bridge", "overlay", "macvlan"] = "bridge"
    subnet: Cidr | None = None
    gateway: IPAddress | None = None
    internal: Bool = False

    @model_validator(mode="after")
    def _gateway_in_subnet(self) -> NetworkCreate:
        if self.gateway is not None:
            if self.subnet is None:
                raise ValueError("a gateway needs a subnet")
            if ipaddress.ip_address(self.gateway) not in ipaddress.ip_network(self.subnet):
                raise ValueError("the gateway must be inside the subnet")
        return self


class NetworkAttach(Args):
    name: DockerName
    container: DockerName


class NetworkDetach(NetworkAttach):
    force: Bool = False


_NET = {"name": "backend"}

# Who runs this domain's mutations, and from which plan (`base.DomainPolicy`).
POLICY = INFRA

KINDS: list[JobKind] = [
    kind("network.list", NoArgs, "List the docker networks", read=True, example={}),
    kind("network.inspect", NetworkName, "Show a network", read=True, positional=("name",), example=_NET),
    kind("network.create", NetworkCreate, "Create a network", positional=("name",),
         example={"name": "backend", "subnet": "172.30.0.0/24", "gateway": "172.30.0.1", "internal": True}),
    kind("network.remove", NetworkName, "Remove a network", positional=("name",), example=_NET),
    kind("network.connect", NetworkAttach, "Attach a container to a network", positional=("name", "container"),
         example={"name": "backend", "container": "web-1"}),
    kind("network.disconnect", NetworkDetach, "Detach a container from a network", positional=("name", "container"),
         example={"name": "backend", "container": "web-1"}),
    kind("network.prune", NoArgs, "Remove every unused network", example={}),
]  # fmt: skip
