"""Job kinds of `image`."""

from __future__ import annotations

from pydantic import model_validator

from contract.job_kinds.argtypes import Bool, ImageRef, RegistryUser, Secret
from contract.job_kinds.base import INFRA, Args, JobKind, NoArgs, kind


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


# Who runs this domain's mutations, and from which plan (`base.DomainPolicy`).
POLICY = INFRA

KINDS: list[JobKind] = [
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
