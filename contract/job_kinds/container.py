"""Job kinds of `container`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from contract.job_kinds.argtypes import Bool, DockerName, Duration, ImageRef, Int, PortMapping, VolumeMount
from contract.job_kinds.base import INFRA, Args, JobKind, kind


class ContainerList(Args):
    all: Bool = False  # stopped ones too


class ContainerId(Args):
    id: DockerName


class ContainerStats(Args):
    id: DockerName | None = None


class ContainerLogs(Args):
    id: DockerName
    lines: Int = Field(default=200, ge=1, le=100_000)
    since: Duration | None = None
    timestamps: Bool = False


class ContainerStop(Args):
    id: DockerName
    timeout: Int = Field(default=10, ge=0, le=600)


class ContainerRemove(Args):
    id: DockerName
    force: Bool = False
    volumes: Bool = False


class ContainerRename(Args):
    id: DockerName
    name: DockerName


class ContainerRun(Args):
    name: DockerName
    image: ImageRef
    publish: list[PortMapping] = Field(default_factory=list, max_length=64)
    volumes: list[VolumeMount] = Field(default_factory=list, max_length=64)
    network: DockerName | None = None
    restart: Literal["no", "always", "unless-stopped", "on-failure"] = "unless-stopped"
    memory_mb: Int | None = Field(default=None, ge=6, le=1_048_576)
    cpus: Int | None = Field(default=None, ge=1, le=256)


_C = {"id": "web-1"}

# Who runs this domain's mutations, and from which plan (`base.DomainPolicy`).
POLICY = INFRA

KINDS: list[JobKind] = [
    kind("container.list", ContainerList, "List the containers", read=True, example={"all": True}),
    kind("container.inspect", ContainerId, "Show a container", read=True, positional=("id",), example=_C),
    kind("container.logs", ContainerLogs, "Show the last lines a container printed", read=True, positional=("id",),
         json=False, example={"id": "web-1", "lines": 100, "since": "15m"}),
    kind("container.stats", ContainerStats, "Show CPU, memory and I/O of containers", read=True, example=_C),
    kind("container.run", ContainerRun, "Create and start a container from an image", positional=("name",),
         json=True,
         example={"name": "uptime", "image": "louislam/uptime-kuma:1", "publish": ["3001:3001"],
                  "volumes": ["uptime-data:/app/data"], "memory_mb": 512}),
    kind("container.start", ContainerId, "Start a container", positional=("id",), example=_C),
    kind("container.stop", ContainerStop, "Stop a container", positional=("id",),
         example={"id": "web-1", "timeout": 30}),
    kind("container.restart", ContainerId, "Restart a container", positional=("id",), example=_C),
    kind("container.pause", ContainerId, "Pause a container's processes", positional=("id",), example=_C),
    kind("container.unpause", ContainerId, "Resume a paused container", positional=("id",), example=_C),
    kind("container.rename", ContainerRename, "Rename a container", positional=("id", "name"),
         example={"id": "web-1", "name": "web-old"}),
    kind("container.remove", ContainerRemove, "Remove a container", positional=("id",),
         example={"id": "web-1", "force": True}),
]  # fmt: skip
