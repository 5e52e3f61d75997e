"""Job kinds of `extension` (pro)."""

from __future__ import annotations

from contract.job_kinds.argtypes import SemVer, Slug
from contract.job_kinds.base import INFRA_PRO, Args, JobKind, NameArgs, NoArgs, kind


class ExtensionInstall(Args):
    name: Slug
    version: SemVer | None = None


# Who runs this domain's mutations, and from which plan (`base.DomainPolicy`).
POLICY = INFRA_PRO

KINDS: list[JobKind] = [
    kind("extension.list", NoArgs, "List the installed extensions", read=True, example={}),
    kind("extension.available", NoArgs, "List the extensions that can be installed", read=True, example={}),
    kind("extension.info", NameArgs, "Show an extension", read=True, positional=("name",),
         example={"name": "imunify"}),
    kind("extension.install", ExtensionInstall, "Install an extension", positional=("name",),
         example={"name": "imunify", "version": "1.2.0"}),
    kind("extension.update", ExtensionInstall, "Update an extension", positional=("name",),
         example={"name": "imunify"}),
    kind("extension.remove", NameArgs, "Remove an extension", positional=("name",), example={"name": "imunify"}),
    kind("extension.enable", NameArgs, "Enable an installed extension", positional=("name",),
         example={"name": "imunify"}),
    kind("extension.disable", NameArgs, "Disable an extension without removing it", positional=("name",),
         example={"name": "imunify"}),
]  # fmt: skip
