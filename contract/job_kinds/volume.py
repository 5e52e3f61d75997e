"""Job kinds of `volume`."""

from __future__ import annotations

from typing import Literal

from contract.job_kinds.argtypes import Bool, DockerName
from contract.job_kinds.base import INFRA, Args, JobKind, NoArgs, kind


class VolumeName(Args):
    name: DockerName


class VolumeCreate(Args):
    name: DockerName
    driver: Literal["local"] = "local"


class VolumeRemove(Args):
    name: DockerName
    force: Bool = False


_VOL = {"name": "uptime-data"}

# Who runs this domain's mutations, and from which plan (`base.DomainPolicy`).
POLICY = INFRA

KINDS: list[JobKind] = [
    kind("volume.list", NoArgs, "List the docker volumes", read=True, example={}),
    kind("volume.inspect", VolumeName, "Show a volume (mount point, size, users)", read=True, positional=("name",),
         example=_VOL),
    kind("volume.create", VolumeCreate, "Create a volume", positional=("name",), example=_VOL),
    kind("volume.remove", VolumeRemove, "Remove a volume", positional=("name",), example={**_VOL, "force": True},
         confirm="name"),
    kind("volume.prune", NoArgs, "Remove every unused volume", example={}),
]  # fmt: skip
