"""Job kinds of `security`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from contract.job_kinds.argtypes import (
    Bool,
    Id,
    Int,
    IPAddress,
    IPOrCidr,
    OnOff,
    Port,
    PortRange,
    SafeText,
    SiteDomain,
    Slug,
)
from contract.job_kinds.base import Args, JobKind, NoArgs, kind


class SecurityScan(Args):
    domain: SiteDomain | None = None  # None: every site
    quarantine: Bool = False  # move infected files to the quarantine


class ScanReport(Args):
    id: Id | None = None  # None: the latest scan


class FirewallRule(Args):
    port: Port | None = None
    port_range: PortRange | None = None
    proto: Literal["tcp", "udp", "any"] = "tcp"
    source: IPOrCidr | None = None  # None: anywhere
    comment: SafeText | None = None

    @model_validator(mode="after")
    def _scoped(self) -> FirewallRule:
        if self.port is not None and self.port_range is not None:
            raise ValueError("give port or port_range, not both")
        if self.port is None and self.port_range is None and self.source is None:
            raise ValueError("a rule needs a port, a port range or a source")
        return self


class FirewallDelete(Args):
    rule: Id


class Fail2banStatus(Args):
    jail: Slug | None = None


class Fail2banBan(Args):
    jail: Slug
    ip: IPAddress


class Fail2banJail(Args):
    jail: Slug
    max_retry: Int = Field(default=5, ge=1, le=100)
    ban_time_s: Int = Field(default=600, ge=60, le=31_536_000)
    find_time_s: Int = Field(default=600, ge=60, le=86_400)


class SshSet(Args):
    port: Port | None = None
    password_auth: OnOff | None = None
    root_login: Literal["no", "prohibit-password", "yes"] | None = None

    @model_validator(mode="after")
    def _something(self) -> SshSet:
        if self.port is None and self.password_auth is None and self.root_login is None:
            raise ValueError("nothing to change")
        return self


_BAN = {"jail": "sshd", "ip": "198.51.100.23"}

KINDS: list[JobKind] = [
    kind("security.status", NoArgs, "Show firewall, fail2ban, SSH and scan status", read=True, example={}),
    kind("security.scan", SecurityScan, "Scan sites for malware (optionally quarantining hits)", json=True,
         example={"domain": "example.com", "quarantine": True}),
    kind("security.scan-report", ScanReport, "Show a malware scan report", read=True, example={"id": "scan-9"}),
    kind("security.firewall-list", NoArgs, "List the firewall rules", read=True, example={}),
    kind("security.firewall-allow", FirewallRule, "Allow traffic through the firewall", json=True,
         example={"port": 443, "proto": "tcp", "comment": "https"}),
    kind("security.firewall-deny", FirewallRule, "Block traffic at the firewall", json=True,
         example={"port_range": "6000-6100", "source": "203.0.113.0/24"}),
    kind("security.firewall-delete", FirewallDelete, "Delete a firewall rule", positional=("rule",),
         example={"rule": "fw-3"}),
    kind("security.firewall-enable", NoArgs, "Turn the firewall on (SSH and the agent stay allowed)", example={}),
    kind("security.firewall-disable", NoArgs, "Turn the firewall off", example={}),
    kind("security.fail2ban-status", Fail2banStatus, "Show fail2ban jails and banned addresses", read=True,
         example={"jail": "sshd"}),
    kind("security.fail2ban-ban", Fail2banBan, "Ban an address in a jail", positional=("jail", "ip"), example=_BAN),
    kind("security.fail2ban-unban", Fail2banBan, "Lift a ban", positional=("jail", "ip"), example=_BAN),
    kind("security.fail2ban-jail-set", Fail2banJail, "Tune a fail2ban jail", positional=("jail",),
         example={"jail": "sshd", "max_retry": 3, "ban_time_s": 3600}),
    kind("security.ssh-set", SshSet, "Change the SSH server settings",
         example={"password_auth": "off", "root_login": "prohibit-password"}),
]  # fmt: skip
