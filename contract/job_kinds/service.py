"""Job kinds of `service`."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from contract.job_kinds.argtypes import Int, ServiceName, listed_by
from contract.job_kinds.base import SYSADMIN, Args, JobKind, NoArgs, Result, kind

SystemService = Annotated[
    ServiceName, listed_by("service.list", "services", "name", noun="services", details=("description",))
]
"""A system service the server has."""


# Services whose loss cuts the server off from its owners: they may be restarted, never stopped.
PROTECTED_SERVICES = frozenset({"ssh", "sshd", "fleetdeck-agent", "systemd-networkd", "networking", "NetworkManager"})


class ServiceArgs(Args):
    name: SystemService


class ServiceStop(Args):
    name: SystemService

    @model_validator(mode="after")
    def _not_protected(self) -> ServiceStop:
        if self.name.removesuffix(".service") in PROTECTED_SERVICES:
            raise ValueError(f"{self.name} keeps the server reachable: restart it instead")
        return self


class ServiceLogs(Args):
    name: SystemService
    lines: Int = Field(default=200, ge=1, le=100_000)


class ServiceRow(Result):
    name: str = Field(description="the unit without .service, or the init script's name")
    active: bool | None = Field(description="running now (None: the init script cannot tell)")
    state: str = Field(description="systemd's ACTIVE (SUB), or running / stopped / unknown")
    enabled: bool | None = Field(default=None, description="started at boot (None: not known)")
    manager: str = Field(description="systemd or sysv")
    loaded: bool | None = Field(default=None, description="the unit file loaded (systemd only)")
    description: str | None = Field(default=None, description="the unit's description (systemd only)")


class ServiceList(Result):
    services: list[ServiceRow] = Field(description="every service unit (systemd) or init script (sysv)")


class ServiceStatus(Result):
    name: str = Field(description="the service asked about")
    active: bool = Field(description="running now")
    state: str = Field(description="systemd's ACTIVE (SUB), or the init script's last status line")
    enabled: bool | None = Field(description="started at boot (None: static, generated or not known)")
    manager: str = Field(description="systemd or sysv")
    description: str | None = Field(default=None, description="the unit's description (systemd only)")
    pid: int | None = Field(default=None, description="the main process's id (systemd only; None: not running)")
    status_code: int | None = Field(
        default=None, description="the init script's status exit code, LSB: 0 running (sysv only)"
    )


_SVC = {"name": "nginx"}

# Who runs this domain's mutations, and from which plan (`base.DomainPolicy`).
POLICY = SYSADMIN

KINDS: list[JobKind] = [
    kind("service.list", NoArgs, "List the system services", read=True, example={}, result=ServiceList),
    kind("service.status", ServiceArgs, "Show a service's state", read=True, positional=("name",), example=_SVC,
         result=ServiceStatus),
    kind("service.start", ServiceArgs, "Start a service", positional=("name",), example=_SVC),
    kind("service.stop", ServiceStop, "Stop a service", positional=("name",), example={"name": "memcached"}),
    kind("service.restart", ServiceArgs, "Restart a service", positional=("name",), example=_SVC),
    kind("service.reload", ServiceArgs, "Reload a service's configuration", positional=("name",), example=_SVC),
    kind("service.enable", ServiceArgs, "Start a service at boot", positional=("name",), example=_SVC),
    kind("service.disable", ServiceStop, "Do not start a service at boot", positional=("name",),
         example={"name": "memcached"}),
    kind("service.logs", ServiceLogs, "Show a service's last journal lines", read=True, positional=("name",),
         json=False, example={"name": "nginx", "lines": 100}),
]  # fmt: skip
