"""Job kinds of containers: docker, container, image, volume, network, stack."""

from __future__ import annotations

import ipaddress
from typing import Literal

from pydantic import Field, model_validator

from contract.job_kinds.argtypes import (
    Bool,
    Cidr,
    DockerName,
    DomainName,
    Duration,
    ImageRef,
    Int,
    IPAddress,
    PortMapping,
    RegistryUser,
    Secret,
    ServiceName,
    Slug,
    VolumeMount,
)
from contract.job_kinds.base import Args, JobKind, NoArgs, kind

# --- docker ----------------------------------------------------------------------------------------


class DockerPrune(Args):
    images: Bool = False  # every unused image, not only dangling ones
    volumes: Bool = False
    build_cache: Bool = False


DOCKER = [
    kind("docker.status", NoArgs, "Show whether the docker engine runs, with counts", read=True, example={}),
    kind("docker.info", NoArgs, "Show the docker engine's version and configuration", read=True, example={}),
    kind("docker.disk-usage", NoArgs, "Show the disk used by images, containers, volumes and cache", read=True,
         example={}),
    kind("docker.prune", DockerPrune, "Remove stopped containers and unused data",
         example={"images": True, "build_cache": True}),
    kind("docker.restart", NoArgs, "Restart the docker engine", example={}),
]  # fmt: skip

# --- container -------------------------------------------------------------------------------------


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

CONTAINER = [
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

# --- image -----------------------------------------------------------------------------------------


class ImageArgs(Args):
    image: ImageRef


class ImagePull(Args):
    image: ImageRef
    registry_user: RegistryUser | None = None
    registry_password: Secret | None = None

    @model_validator(mode="after")
    def _login_pair(self) -> ImagePull:
        if (self.registry_user is None) != (self.registry_password is None):
            raise ValueError("registry_user and registry_password go together")
        return self


class ImageRemove(Args):
    image: ImageRef
    force: Bool = False


class ImagePrune(Args):
    all: Bool = False  # every unused image, not only dangling ones


class ImageTag(Args):
    source: ImageRef
    target: ImageRef


IMAGE = [
    kind("image.list", NoArgs, "List the images", read=True, example={}),
    kind("image.inspect", ImageArgs, "Show an image", read=True, positional=("image",),
         example={"image": "nginx:1.27"}),
    kind("image.pull", ImagePull, "Pull an image (logging in to a private registry if given)",
         positional=("image",),
         example={"image": "ghcr.io/acme/api:2.1.0", "registry_user": "acme-bot",
                  "registry_password": "ghp_pulltoken"}),
    kind("image.remove", ImageRemove, "Remove an image", positional=("image",), example={"image": "nginx:1.25"}),
    kind("image.prune", ImagePrune, "Remove unused images", example={"all": True}),
    kind("image.tag", ImageTag, "Tag an image", positional=("source", "target"),
         example={"source": "ghcr.io/acme/api:2.1.0", "target": "acme/api:stable"}),
]  # fmt: skip

# --- volume ----------------------------------------------------------------------------------------


class VolumeName(Args):
    name: DockerName


class VolumeCreate(Args):
    name: DockerName
    driver: Literal["local"] = "local"


class VolumeRemove(Args):
    name: DockerName
    force: Bool = False


_VOL = {"name": "uptime-data"}

VOLUME = [
    kind("volume.list", NoArgs, "List the docker volumes", read=True, example={}),
    kind("volume.inspect", VolumeName, "Show a volume (mount point, size, users)", read=True, positional=("name",),
         example=_VOL),
    kind("volume.create", VolumeCreate, "Create a volume", positional=("name",), example=_VOL),
    kind("volume.remove", VolumeRemove, "Remove a volume", positional=("name",), example={**_VOL, "force": True}),
    kind("volume.prune", NoArgs, "Remove every unused volume", example={}),
]  # fmt: skip

# --- network ---------------------------------------------------------------------------------------


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

NETWORK = [
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

# --- stack (compose projects from the template catalog) --------------------------------------------


class StackName(Args):
    name: Slug


class StackCreate(Args):
    name: Slug
    template: Slug
    domain: DomainName | None = None  # the site that proxies to the stack's web service


class StackDown(Args):
    name: Slug
    volumes: Bool = False


class StackRestart(Args):
    name: Slug
    service: ServiceName | None = None


class StackLogs(Args):
    name: Slug
    service: ServiceName | None = None
    lines: Int = Field(default=200, ge=1, le=100_000)


_S = {"name": "monitoring"}

STACK = [
    kind("stack.list", NoArgs, "List the stacks", read=True, example={}),
    kind("stack.templates", NoArgs, "List the stack templates that can be created", read=True, example={}),
    kind("stack.inspect", StackName, "Show a stack and its services", read=True, positional=("name",), example=_S),
    kind("stack.create", StackCreate, "Create a stack from a template", positional=("name",),
         example={"name": "monitoring", "template": "uptime-kuma", "domain": "status.example.com"}),
    kind("stack.delete", StackDown, "Delete a stack", positional=("name",), example={**_S, "volumes": True}),
    kind("stack.up", StackName, "Start a stack", positional=("name",), example=_S),
    kind("stack.down", StackDown, "Stop a stack", positional=("name",), example=_S),
    kind("stack.restart", StackRestart, "Restart a stack or one of its services", positional=("name",),
         example={**_S, "service": "app"}),
    kind("stack.pull", StackName, "Pull newer images for a stack and recreate it", positional=("name",), example=_S),
    kind("stack.logs", StackLogs, "Show the last lines a stack printed", read=True, positional=("name",), json=False,
         example={**_S, "service": "app", "lines": 100}),
]  # fmt: skip

KINDS: list[JobKind] = [*DOCKER, *CONTAINER, *IMAGE, *VOLUME, *NETWORK, *STACK]
