"""Job kinds of `updates`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from contract.job_kinds.argtypes import Bool, Id, Int, PackageName, Secret
from contract.job_kinds.base import Args, JobKind, NoArgs, kind


class UpdatesHistory(Args):
    limit: Int = Field(default=50, ge=1, le=500)


class UpdatesApply(Args):
    packages: list[PackageName] = Field(default_factory=list, max_length=200)  # empty: everything
    reboot: Bool = False  # reboot afterwards when the update needs it
    simulate: Bool = False  # only show what would be installed (apt-get --simulate): nothing changes


class UpdatesSecurity(Args):
    reboot: Bool = False
    simulate: Bool = False


class UpdatesAuto(Args):
    mode: Literal["off", "security", "all"]


Vendor = Literal["ubuntu-pro", "rhel", "suse"]


class UpdatesSubscribe(Args):
    vendor: Vendor
    token: Secret  # the vendor's subscription / activation token
    organization: Id | None = None  # RHEL organisation id


class UpdatesUnsubscribe(Args):
    vendor: Vendor


class Package(Args):
    package: PackageName


KINDS: list[JobKind] = [
    kind("updates.list", NoArgs, "List the pending OS package updates", read=True, example={}),
    kind("updates.status", NoArgs, "Show update settings, subscription and whether a reboot is needed",
         read=True, example={}),
    kind("updates.history", UpdatesHistory, "List past package updates", read=True, example={"limit": 20}),
    kind("updates.apply", UpdatesApply, "Install pending updates (all, or the given packages)",
         example={"packages": ["openssl", "libssl3"], "reboot": True}),
    kind("updates.security", UpdatesSecurity, "Install pending security updates only", example={"reboot": False}),
    kind("updates.auto-set", UpdatesAuto, "Choose what updates install themselves", positional=("mode",),
         example={"mode": "security"}),
    kind("updates.subscribe", UpdatesSubscribe, "Attach the OS vendor's update subscription",
         positional=("vendor",), example={"vendor": "ubuntu-pro", "token": "C1aBcDeFgHiJkLmNoPqRsTuV"}),
    kind("updates.unsubscribe", UpdatesUnsubscribe, "Detach the OS vendor's update subscription",
         positional=("vendor",), example={"vendor": "ubuntu-pro"}),
    kind("updates.hold", Package, "Keep a package at its installed version", positional=("package",),
         example={"package": "mariadb-server"}),
    kind("updates.unhold", Package, "Let a held package update again", positional=("package",),
         example={"package": "mariadb-server"}),
]  # fmt: skip
