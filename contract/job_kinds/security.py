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
from contract.job_kinds.base import SYSADMIN, Args, JobKind, NoArgs, Result, kind


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


# --- results -------------------------------------------------------------------------------------


class FirewallPart(Result):
    available: bool = Field(description="nft is installed")
    table: str | None = Field(default=None, description="the agent's nftables table (inet fleetdeck)")
    enabled: bool | None = Field(default=None, description="the firewall is on")
    loaded: bool | None = Field(default=None, description="the table is in the kernel now")
    rules: int | None = Field(default=None, description="how many rules it has")
    error: str | None = Field(default=None, description="why it could not be read (null: it was)")


class Fail2banPart(Result):
    available: bool = Field(description="fail2ban-client is installed")
    running: bool | None = Field(default=None, description="fail2ban answers")
    jails: list[str] | None = Field(default=None, description="its jails' names")
    banned: int | None = Field(default=None, description="addresses banned now, over every jail")
    error: str | None = Field(default=None, description="why it could not be read (null: it was)")


class SshPart(Result):
    available: bool = Field(description="sshd is installed")
    ports: list[int] | None = Field(default=None, description="the ports sshd listens on")
    password_auth: OnOff | None = Field(default=None, description="password logins: on or off")
    kbd_interactive_auth: OnOff | None = Field(default=None, description="keyboard-interactive (PAM) logins")
    root_login: str | None = Field(default=None, description="PermitRootLogin: no, prohibit-password, yes...")
    error: str | None = Field(default=None, description="why its settings could not be read (null: they were)")


class ScanBrief(Result):
    id: str = Field(description="the scan's id")
    finished_at: str = Field(description="when it ended (RFC 3339)")
    infected: int = Field(description="how many infected files it found")


class ScanPart(Result):
    available: bool = Field(description="a ClamAV daemon answers")
    last: ScanBrief | None = Field(description="the last scan (null: none ran yet)")


class SecurityStatus(Result):
    firewall: FirewallPart = Field(description="the agent's firewall")
    fail2ban: Fail2banPart = Field(description="fail2ban")
    ssh: SshPart = Field(description="the SSH server's effective settings")
    scan: ScanPart = Field(description="the malware scanner")


class Quarantined(Result):
    to: str = Field(description="where the file was moved (root's, 0600)")
    uid: int = Field(description="its owner's uid, to put it back")
    gid: int = Field(description="its group's gid")
    mode: str = Field(description="its permission bits, in octal (0644)")


class ScanHit(Result):
    domain: str = Field(description="the site's domain")
    file: str = Field(description="the file, relative to the site's folder")
    path: str = Field(description="the file's absolute path")
    signature: str = Field(description="the ClamAV signature it matched")
    quarantined: Quarantined | None = Field(description="where it was moved (null: not moved)")


class ScanSkip(Result):
    domain: str = Field(description="the site's domain")
    file: str = Field(description="the file, relative to the site's folder")
    path: str = Field(description="the file's absolute path")
    reason: str = Field(description="why it was not scanned")


class MalwareScan(Result):
    id: str = Field(description="the scan's id (security.scan-report shows it again)")
    started_at: str = Field(description="when it started (RFC 3339)")
    finished_at: str = Field(description="when it ended (RFC 3339)")
    sites: list[str] = Field(description="the domains of the sites scanned")
    quarantine: bool = Field(description="infected files were moved to the quarantine")
    signatures: str | None = Field(description="the signature database's version (null: clamd did not say)")
    engine: str = Field(description="ClamAV's version")
    scanned_files: int = Field(description="how many files were scanned")
    infected: list[ScanHit] = Field(description="the infected files")
    not_scanned: list[ScanSkip] = Field(description="the files that could not be scanned")


class FirewallRuleRow(Result):
    id: str = Field(description="the rule's id (security.firewall-delete takes it)")
    action: Literal["allow", "deny"] = Field(description="allow or deny")
    proto: str = Field(description="tcp, udp or any")
    port: int | None = Field(description="the port (null: a range, or every port)")
    port_range: str | None = Field(description="the ports, FIRST-LAST (null: one port, or every port)")
    source: str | None = Field(description="the address or network it applies to (null: anywhere)")
    comment: str | None = Field(description="the rule's comment")


class FirewallList(Result):
    table: str = Field(description="the agent's nftables table (inet fleetdeck)")
    enabled: bool = Field(description="the firewall is on")
    loaded: bool = Field(description="the table is in the kernel now")
    rules: list[FirewallRuleRow] = Field(description="the rules, in the order they apply")
    ssh_ports: list[int] = Field(description="the SSH ports, always allowed")


class FirewallRuleAdded(Result):
    rule: FirewallRuleRow = Field(description="the rule (the existing one when the same rule was there)")
    added: bool = Field(description="the rule was added (false: the same rule exists)")
    enabled: bool = Field(description="the firewall is on (off: the rule applies once it is on)")
    message: str = Field(description="what happened, for a person")


class FirewallRuleDeleted(Result):
    rule: str = Field(description="the rule's id")
    deleted: bool = Field(description="the rule was deleted (false: there was none)")
    message: str = Field(description="what happened, for a person")


class Fail2banJailStatus(Result):
    name: str = Field(description="the jail's name")
    currently_failed: int = Field(description="failures counted now")
    total_failed: int = Field(description="failures since fail2ban started")
    currently_banned: int = Field(description="addresses banned now")
    total_banned: int = Field(description="bans since fail2ban started")
    banned: list[str] = Field(description="the addresses banned now")
    files: list[str] = Field(description="the logs it watches")


class Fail2banStatusResult(Result):
    running: bool = Field(description="fail2ban answers (it fails the job when it does not)")
    jails: list[Fail2banJailStatus] = Field(description="the jails (the one asked for), by name")


_BAN = {"jail": "sshd", "ip": "198.51.100.23"}

# Who runs this domain's mutations, and from which plan (`base.DomainPolicy`).
POLICY = SYSADMIN

KINDS: list[JobKind] = [
    kind("security.status", NoArgs, "Show firewall, fail2ban, SSH and scan status", read=True, example={},
         result=SecurityStatus),
    kind("security.scan", SecurityScan, "Scan sites for malware (optionally quarantining hits)", json=True,
         example={"domain": "example.com", "quarantine": True}, result=MalwareScan),
    kind("security.scan-report", ScanReport, "Show a malware scan report", read=True, example={"id": "scan-9"},
         result=MalwareScan),
    kind("security.firewall-list", NoArgs, "List the firewall rules", read=True, example={}, result=FirewallList),
    kind("security.firewall-allow", FirewallRule, "Allow traffic through the firewall", json=True,
         example={"port": 443, "proto": "tcp", "comment": "https"}, result=FirewallRuleAdded),
    kind("security.firewall-deny", FirewallRule, "Block traffic at the firewall", json=True,
         example={"port_range": "6000-6100", "source": "203.0.113.0/24"}, result=FirewallRuleAdded),
    kind("security.firewall-delete", FirewallDelete, "Delete a firewall rule", positional=("rule",),
         example={"rule": "fw-3"}, result=FirewallRuleDeleted),
    kind("security.firewall-enable", NoArgs, "Turn the firewall on (SSH and the agent stay allowed)", example={}),
    kind("security.firewall-disable", NoArgs, "Turn the firewall off", example={}),
    kind("security.fail2ban-status", Fail2banStatus, "Show fail2ban jails and banned addresses", read=True,
         example={"jail": "sshd"}, result=Fail2banStatusResult),
    kind("security.fail2ban-ban", Fail2banBan, "Ban an address in a jail", positional=("jail", "ip"), example=_BAN),
    kind("security.fail2ban-unban", Fail2banBan, "Lift a ban", positional=("jail", "ip"), example=_BAN),
    kind("security.fail2ban-jail-set", Fail2banJail, "Tune a fail2ban jail", positional=("jail",),
         example={"jail": "sshd", "max_retry": 3, "ban_time_s": 3600}),
    kind("security.ssh-set", SshSet, "Change the SSH server settings",
         example={"password_auth": "off", "root_login": "prohibit-password"}),
]  # fmt: skip
