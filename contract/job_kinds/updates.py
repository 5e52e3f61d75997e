"""Job kinds of `updates`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from contract.job_kinds.argtypes import Bool, Id, Int, PackageName, Secret
from contract.job_kinds.base import SYSADMIN, Args, JobKind, NoArgs, Result, kind


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


class PendingUpdate(Result):
    name: str = Field(description="the package")
    version: str = Field(description="the version it would update to")
    current_version: str | None = Field(description="the version installed now (None: apt did not say)")
    arch: str = Field(description="its architecture (amd64, all...)")
    suites: list[str] = Field(description="the suites offering it (bookworm-security...)")
    security: bool = Field(description="a security update (a suite of it is a security one)")


class UpdatesList(Result):
    updates: list[PendingUpdate] = Field(description="the pending updates, as of apt's last refresh")
    count: int = Field(description="how many updates are pending")
    security_count: int = Field(description="how many of them are security updates")


HistoryAction = Literal["install", "upgrade", "downgrade", "reinstall", "remove", "purge"]


class HistoryPackage(Result):
    name: str = Field(description="the package")
    arch: str | None = Field(description="its architecture (None: apt's log did not say)")
    version: str | None = Field(description="the version after the change (the removed one for remove/purge)")
    from_version: str | None = Field(default=None, description="the version before (upgrade and downgrade only)")
    automatic: bool = Field(default=False, description="apt chose it as a dependency")


class HistoryEntry(Result):
    start: str = Field(description="when the transaction began (apt's local time, 2025-06-24T14:36:25)")
    end: str | None = Field(description="when it ended (None: it did not record an end)")
    command: str | None = Field(description="the command line that ran it")
    requested_by: str | None = Field(description="the user who ran it, as apt records it")
    error: str | None = Field(description="apt's error (None: none recorded)")
    packages: dict[HistoryAction, list[HistoryPackage]] = Field(description="the packages changed, by action")
    count: int = Field(description="how many packages it changed")


class UpdatesHistoryResult(Result):
    entries: list[HistoryEntry] = Field(description="the transactions, newest first, at most `limit`")
    count: int = Field(description="how many are listed")
    log: str = Field(description="apt's history log read (its rotated copies too)")


class UpdatesStatus(Result):
    pending: int = Field(description="how many updates are pending")
    security_pending: int = Field(description="how many of them are security updates")
    held: list[str] = Field(description="the packages held at their version (apt-mark hold)")
    auto: Literal["off", "security", "all", "distribution"] = Field(
        description="what installs itself: nothing, security updates, everything, or the package's own origins"
    )
    unattended_upgrades_installed: bool = Field(description="the unattended-upgrades package is installed")
    lists_refreshed_at: str | None = Field(description="apt's last list refresh, RFC 3339 (None: never)")
    subscription: None = Field(description="the OS vendor's subscription (always None: Debian needs none)")
    reboot_required: bool = Field(description="an update asks for a reboot (/run/reboot-required)")
    reboot_packages: list[str] = Field(description="the packages that asked for it")


# Who runs this domain's mutations, and from which plan (`base.DomainPolicy`).
POLICY = SYSADMIN

KINDS: list[JobKind] = [
    kind("updates.list", NoArgs, "List the pending OS package updates", read=True, example={}, result=UpdatesList),
    kind("updates.status", NoArgs, "Show update settings, subscription and whether a reboot is needed",
         read=True, example={}, result=UpdatesStatus),
    kind("updates.history", UpdatesHistory, "List past package updates", read=True, example={"limit": 20},
         result=UpdatesHistoryResult),
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
