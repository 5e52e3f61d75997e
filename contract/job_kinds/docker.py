"""Job kinds of `docker`."""

from __future__ import annotations

from contract.job_kinds.argtypes import Bool
from contract.job_kinds.base import INFRA, Args, JobKind, NoArgs, kind


class DockerPrune(Args):
    images: Bool = False  # every unused image, not only dangling ones
    volumes: Bool = False
    build_cache: Bool = False


# Who runs this domain's mutations, and from which plan (`base.DomainPolicy`).
POLICY = INFRA

KINDS: list[JobKind] = [
    kind("docker.status", NoArgs, "Show whether the docker engine runs, with counts", read=True, example={}),
    kind("docker.info", NoArgs, "Show the docker engine's version and configuration", read=True, example={}),
    kind("docker.disk-usage", NoArgs, "Show the disk used by images, containers, volumes and cache", read=True,
         example={}),
    kind("docker.prune", DockerPrune, "Remove stopped containers and unused data",
         example={"images": True, "build_cache": True}),
    kind("docker.restart", NoArgs, "Restart the docker engine", example={}),
]  # fmt: skip
