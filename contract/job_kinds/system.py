"""Job kinds of the machine: system, updates, storage, service, daemon, cron, user, security, waf, logs,
metrics, quota, plan, tuning, extension."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from contract.job_kinds.allowlists import SYSCTL, allowed_values, value_of_its_key
from contract.job_kinds.argtypes import (
    Bool,
    CommandLine,
    CronCommand,
    CronSchedule,
    DomainName,
    Duration,
    Email,
    HostName,
    Id,
    Int,
    IPAddress,
    IPOrCidr,
    Locale,
    OnOff,
    PackageName,
    Port,
    PortRange,
    RelativePath,
    SafeText,
    SearchText,
    Secret,
    SemVer,
    ServiceName,
    Slug,
    SshFingerprint,
    SshPublicKey,
    SysctlKey,
    SysctlValue,
    Timezone,
    Username,
)
from contract.job_kinds.base import Args, JobKind, NoArgs, ScopedPath, kind


class DomainArgs(Args):
    domain: DomainName


class OptionalDomain(Args):
    domain: DomainName | None = None


class NameArgs(Args):
    name: Slug


class IdArgs(Args):
    id: Id


_D = {"domain": "example.com"}

# --- system ----------------------------------------------------------------------------------------


class Processes(Args):
    sort: Literal["cpu", "memory"] = "cpu"
    limit: Int = Field(default=25, ge=1, le=500)


class Reboot(Args):
    delay_min: Int = Field(default=0, ge=0, le=1440)
    confirm: SafeText | None = None  # the server's host name, typed again: anything else refuses


class HostnameSet(Args):
    hostname: HostName


class TimezoneSet(Args):
    timezone: Timezone


class LocaleSet(Args):
    locale: Locale


class SwapSet(Args):
    size_mb: Int = Field(ge=0, le=65536)  # 0: no swap file


SYSTEM = [
    kind("system.info", NoArgs, "Show the server: OS, kernel, CPU, memory, uptime, load", read=True, example={}),
    kind("system.processes", Processes, "List the busiest processes", read=True,
         example={"sort": "memory", "limit": 10}),
    kind("system.reboot", Reboot, "Reboot the server", example={"delay_min": 5, "confirm": "web1.example.com"}),
    kind("system.hostname-set", HostnameSet, "Set the host name", positional=("hostname",),
         example={"hostname": "web1.example.com"}),
    kind("system.timezone-set", TimezoneSet, "Set the time zone", positional=("timezone",),
         example={"timezone": "Europe/Berlin"}),
    kind("system.locale-set", LocaleSet, "Set the system locale", positional=("locale",),
         example={"locale": "en_US.UTF-8"}),
    kind("system.swap-set", SwapSet, "Size the swap file", positional=("size_mb",), example={"size_mb": 2048}),
    kind("system.ntp-sync", NoArgs, "Synchronise the clock now", example={}),
    kind("system.cache-drop", NoArgs, "Drop the kernel's page cache, dentries and inodes", example={}),
]  # fmt: skip

# --- updates ---------------------------------------------------------------------------------------


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


UPDATES = [
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

# --- storage ---------------------------------------------------------------------------------------


class StorageUsage(Args):
    domain: DomainName | None = None  # the path is in this site; None: in the home (owners only)
    path: RelativePath = ""
    depth: Int = Field(default=1, ge=1, le=5)


class StorageLargest(Args):
    domain: DomainName | None = None  # as in StorageUsage
    path: RelativePath = ""
    limit: Int = Field(default=50, ge=1, le=1000)


class StorageCleanup(Args):
    targets: list[Literal["tmp", "logs", "cache", "trash", "packages", "docker"]] = Field(min_length=1, max_length=6)
    older_than_days: Int = Field(default=7, ge=0, le=3650)
    dry_run: Bool = False


STORAGE = [
    kind("storage.usage", StorageUsage, "Show disk usage under a folder of a site or of the home", read=True,
         example={"path": "example-com/uploads", "depth": 2}, paths=(ScopedPath("path", site="domain"),)),
    kind("storage.disks", NoArgs, "Show the file systems and their free space", read=True, example={}),
    kind("storage.inodes", NoArgs, "Show inode usage of the file systems", read=True, example={}),
    kind("storage.largest", StorageLargest, "List the largest files under a folder of a site or of the home", read=True,
         example={"path": "example-com", "limit": 20}, paths=(ScopedPath("path", site="domain"),)),
    kind("storage.cleanup", StorageCleanup, "Delete temporary files, old logs, caches and unused packages", json=True,
         example={"targets": ["tmp", "logs"], "older_than_days": 14, "dry_run": True}),
]  # fmt: skip

# --- service ---------------------------------------------------------------------------------------

# Services whose loss cuts the server off from its owners: they may be restarted, never stopped.
PROTECTED_SERVICES = frozenset({"ssh", "sshd", "fleetdeck-agent", "systemd-networkd", "networking", "NetworkManager"})


class ServiceArgs(Args):
    name: ServiceName


class ServiceStop(Args):
    name: ServiceName

    @model_validator(mode="after")
    def _not_protected(self) -> ServiceStop:
        if self.name.removesuffix(".service") in PROTECTED_SERVICES:
            raise ValueError(f"{self.name} keeps the server reachable: restart it instead")
        return self


class ServiceLogs(Args):
    name: ServiceName
    lines: Int = Field(default=200, ge=1, le=100_000)


_SVC = {"name": "nginx"}

SERVICE = [
    kind("service.list", NoArgs, "List the system services", read=True, example={}),
    kind("service.status", ServiceArgs, "Show a service's state", read=True, positional=("name",), example=_SVC),
    kind("service.start", ServiceArgs, "Start a service", positional=("name",), example=_SVC),
    kind("service.stop", ServiceStop, "Stop a service", positional=("name",), example={"name": "memcached"}),
    kind("service.restart", ServiceArgs, "Restart a service", positional=("name",), example=_SVC),
    kind("service.reload", ServiceArgs, "Reload a service's configuration", positional=("name",), example=_SVC),
    kind("service.enable", ServiceArgs, "Start a service at boot", positional=("name",), example=_SVC),
    kind("service.disable", ServiceStop, "Do not start a service at boot", positional=("name",),
         example={"name": "memcached"}),
    kind("service.logs", ServiceLogs, "Show a service's last journal lines", read=True, positional=("name",),
         json=False, example={"name": "nginx", "lines": 100}),
]  # fmt: skip

# --- daemon (supervised long-running processes of a site) ------------------------------------------


class DaemonCreate(Args):
    name: Slug
    domain: DomainName
    command: CommandLine
    directory: RelativePath = ""  # the working folder inside the site
    instances: Int = Field(default=1, ge=1, le=16)


class DaemonLogs(Args):
    name: Slug
    lines: Int = Field(default=200, ge=1, le=100_000)


_DMN = {"name": "queue-worker"}

DAEMON = [
    kind("daemon.list", NoArgs, "List the daemons", read=True, example={}),
    kind("daemon.status", NameArgs, "Show a daemon's processes", read=True, positional=("name",), example=_DMN),
    kind("daemon.create", DaemonCreate, "Run a command as a supervised daemon of a site", positional=("name",),
         example={"name": "queue-worker", "domain": "example.com", "command": "php artisan queue:work --tries=3",
                  "instances": 2}, paths=(ScopedPath("directory", site="domain"),)),
    kind("daemon.delete", NameArgs, "Stop and delete a daemon", positional=("name",), example=_DMN),
    kind("daemon.start", NameArgs, "Start a daemon", positional=("name",), example=_DMN),
    kind("daemon.stop", NameArgs, "Stop a daemon", positional=("name",), example=_DMN),
    kind("daemon.restart", NameArgs, "Restart a daemon", positional=("name",), example=_DMN),
    kind("daemon.logs", DaemonLogs, "Show the last lines a daemon printed", read=True, positional=("name",),
         json=False, example={"name": "queue-worker", "lines": 50}),
]  # fmt: skip

# --- cron ------------------------------------------------------------------------------------------


class CronAdd(Args):
    domain: DomainName
    schedule: CronSchedule
    command: CronCommand


class CronEdit(Args):
    id: Id
    schedule: CronSchedule | None = None  # None: unchanged
    command: CronCommand | None = None

    @model_validator(mode="after")
    def _something(self) -> CronEdit:
        if self.schedule is None and self.command is None:
            raise ValueError("nothing to change: give a schedule, a command or both")
        return self


class CronHistory(Args):
    id: Id
    limit: Int = Field(default=20, ge=1, le=1000)


_CRON = {"id": "c-12"}

CRON = [
    kind("cron.list", OptionalDomain, "List the cron jobs", read=True, example=_D),
    kind("cron.add", CronAdd, "Add a cron job to a site", positional=("domain",),
         example={"domain": "example.com", "schedule": "*/5 * * * *",
                  "command": "/usr/bin/php /home/example-com/artisan schedule:run"}),
    kind("cron.pause", IdArgs, "Pause a cron job", positional=("id",), example=_CRON),
    kind("cron.resume", IdArgs, "Resume a paused cron job", positional=("id",), example=_CRON),
    kind("cron.run", IdArgs, "Run a cron job now", positional=("id",), example=_CRON),
    kind("cron.edit", CronEdit, "Change a cron job's schedule or command", positional=("id",),
         example={"id": "c-12", "schedule": "0 4 * * *"}),
    kind("cron.delete", IdArgs, "Delete a cron job", positional=("id",), example=_CRON),
    kind("cron.history", CronHistory, "List a cron job's last runs", read=True, positional=("id",),
         example={"id": "c-12", "limit": 5}),
]  # fmt: skip

# --- user ------------------------------------------------------------------------------------------


class UserArgs(Args):
    username: Username


class UserCreate(Args):
    username: Username
    shell: Literal["bash", "sh", "zsh", "nologin"] = "bash"
    sudo: Bool = False
    password: Secret | None = None  # None: key-only login


class UserDelete(Args):
    username: Username
    keep_home: Bool = False


class SshKeyAdd(Args):
    username: Username
    key: SshPublicKey


class SshKeyRemove(Args):
    username: Username
    fingerprint: SshFingerprint


class PasswordSet(Args):
    username: Username
    password: Secret


class SudoSet(Args):
    username: Username
    state: OnOff


class KeyAudit(Args):
    username: Username | None = None  # None: every login user and site user


_U = {"username": "deploy"}
_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl jo@laptop"

USER = [
    kind("user.list", NoArgs, "List the login users", read=True, example={}),
    kind("user.inspect", UserArgs, "Show a user (groups, keys, sudo, last login)", read=True,
         positional=("username",), example=_U),
    kind("user.create", UserCreate, "Create a login user", positional=("username",),
         example={"username": "deploy", "shell": "bash", "sudo": True}),
    kind("user.delete", UserDelete, "Delete a login user", positional=("username",),
         example={"username": "deploy", "keep_home": True}),
    kind("user.ssh-key-list", UserArgs, "List a user's authorised SSH keys", read=True, positional=("username",),
         example=_U),
    kind("user.ssh-key-add", SshKeyAdd, "Authorise an SSH public key for a user", positional=("username",),
         example={"username": "deploy", "key": _KEY}),
    kind("user.ssh-key-remove", SshKeyRemove, "Remove an authorised SSH key", positional=("username", "fingerprint"),
         example={"username": "deploy", "fingerprint": "SHA256:" + "a" * 43}),
    kind("user.password-set", PasswordSet, "Set a user's password", positional=("username",),
         example={"username": "deploy", "password": "correct-horse-battery"}),
    kind("user.lock", UserArgs, "Lock a user out", positional=("username",), example=_U),
    kind("user.unlock", UserArgs, "Let a locked user log in again", positional=("username",), example=_U),
    kind("user.sudo-set", SudoSet, "Grant or take away sudo", positional=("username", "state"),
         example={"username": "deploy", "state": "off"}),
    kind("user.key-audit", KeyAudit, "Audit authorised SSH keys: weak ones and ones not added here", read=True,
         example=_U),
]  # fmt: skip

# --- security --------------------------------------------------------------------------------------


class SecurityScan(Args):
    domain: DomainName | None = None  # None: every site
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

SECURITY = [
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

# --- waf -------------------------------------------------------------------------------------------


class WafEnable(Args):
    domain: DomainName
    mode: Literal["detect", "block"] = "block"


class WafRule(Args):
    domain: DomainName
    rule_id: Int = Field(ge=1, le=99_999_999)


class WafAllow(Args):
    domain: DomainName
    source: IPOrCidr


class WafParanoia(Args):
    domain: DomainName
    level: Int = Field(ge=1, le=4)


class WafEvents(Args):
    domain: DomainName
    limit: Int = Field(default=100, ge=1, le=1000)


WAF = [
    kind("waf.status", OptionalDomain, "Show the web application firewall per site", read=True, example=_D),
    kind("waf.enable", WafEnable, "Turn the WAF on for a site", positional=("domain",),
         example={"domain": "example.com", "mode": "detect"}),
    kind("waf.disable", DomainArgs, "Turn the WAF off for a site", positional=("domain",), example=_D),
    kind("waf.rule-list", DomainArgs, "List the WAF rules and their state for a site", read=True,
         positional=("domain",), example=_D),
    kind("waf.rule-enable", WafRule, "Re-enable a WAF rule", positional=("domain", "rule_id"),
         example={"domain": "example.com", "rule_id": 942100}),
    kind("waf.rule-disable", WafRule, "Disable a WAF rule (a false positive)", positional=("domain", "rule_id"),
         example={"domain": "example.com", "rule_id": 942100}),
    kind("waf.allowlist-add", WafAllow, "Exempt an address from the WAF", positional=("domain", "source"),
         example={"domain": "example.com", "source": "192.0.2.0/24"}),
    kind("waf.allowlist-remove", WafAllow, "Remove a WAF exemption", positional=("domain", "source"),
         example={"domain": "example.com", "source": "192.0.2.0/24"}),
    kind("waf.paranoia-set", WafParanoia, "Set the OWASP CRS paranoia level of a site",
         positional=("domain", "level"), example={"domain": "example.com", "level": 2}),
    kind("waf.events", WafEvents, "List the latest blocked or flagged requests", read=True, positional=("domain",),
         example={"domain": "example.com", "limit": 20}),
]  # fmt: skip

# --- logs ------------------------------------------------------------------------------------------

LogName = Literal["access", "error"]


class LogsTail(Args):
    domain: DomainName
    log: LogName = "access"
    lines: Int = Field(default=200, ge=1, le=1_000_000)


class LogsSearch(Args):
    domain: DomainName
    text: SearchText  # a fixed string, not a regular expression
    log: LogName = "access"
    limit: Int = Field(default=1000, ge=1, le=100_000)
    since: Duration | None = None


class LogsJournal(Args):
    unit: ServiceName | None = None
    lines: Int = Field(default=200, ge=1, le=100_000)
    priority: Literal["emerg", "alert", "crit", "err", "warning", "notice", "info", "debug"] | None = None
    since: Duration | None = None


LOGS = [
    kind("logs.tail", LogsTail, "Show the last lines of a site's log", read=True, positional=("domain",), json=False,
         example={"domain": "example.com", "log": "error", "lines": 500}),
    kind("logs.search", LogsSearch, "Find log lines containing a text", read=True, positional=("domain",),
         json=False, example={"domain": "example.com", "text": "POST /wp-login.php", "since": "24h"}),
    kind("logs.list", OptionalDomain, "List the log files and their sizes", read=True, example=_D),
    kind("logs.journal", LogsJournal, "Show the system journal", read=True, json=False,
         example={"unit": "nginx.service", "priority": "err", "since": "1h"}),
    kind("logs.rotate", OptionalDomain, "Rotate the logs now", example=_D),
]  # fmt: skip

# --- metrics ---------------------------------------------------------------------------------------


class MetricsHistory(Args):
    metric: Literal["cpu", "memory", "disk", "network", "load"]
    period: Literal["1h", "6h", "24h", "7d", "30d"] = "24h"


class AlertSet(Args):
    metric: Literal["cpu", "memory", "disk", "load"]
    threshold_percent: Int = Field(ge=1, le=100)
    duration_min: Int = Field(default=5, ge=1, le=1440)
    email: Email | None = None  # None: the organisation's owners


METRICS = [
    kind("metrics.get", NoArgs, "Show the current CPU, memory, disk, network and load", read=True, example={}),
    kind("metrics.history", MetricsHistory, "Show a metric over a period", read=True, positional=("metric",),
         example={"metric": "cpu", "period": "7d"}),
    kind("metrics.alert-list", NoArgs, "List the metric alerts", read=True, example={}),
    kind("metrics.alert-set", AlertSet, "Alert when a metric stays above a threshold", positional=("metric",),
         json=True, example={"metric": "disk", "threshold_percent": 90, "email": "ops@example.com"}),
    kind("metrics.alert-delete", IdArgs, "Delete a metric alert", positional=("id",), example={"id": "al-2"}),
]  # fmt: skip

# --- quota (pro) -----------------------------------------------------------------------------------


class QuotaSet(Args):
    username: Username
    soft_mb: Int = Field(ge=0, le=16_777_216)
    hard_mb: Int = Field(ge=0, le=16_777_216)
    inodes: Int | None = Field(default=None, ge=0, le=1_000_000_000)

    @model_validator(mode="after")
    def _soft_below_hard(self) -> QuotaSet:
        if self.soft_mb > self.hard_mb:
            raise ValueError("the soft limit must not exceed the hard limit")
        return self


QUOTA = [
    kind("quota.list", NoArgs, "List the disk quotas and usage of every user", read=True, example={}),
    kind("quota.get", UserArgs, "Show a user's disk quota and usage", read=True, positional=("username",),
         example=_U),
    kind("quota.set", QuotaSet, "Set a user's disk quota", positional=("username",),
         example={"username": "deploy", "soft_mb": 9000, "hard_mb": 10000}),
    kind("quota.remove", UserArgs, "Remove a user's disk quota", positional=("username",), example=_U),
]  # fmt: skip

# --- plan: hosting plans, the resource packages applied to sites (pro) -----------------------------


class PlanCreate(Args):
    name: Slug
    disk_mb: Int = Field(ge=0, le=16_777_216)  # 0: unlimited, here and below
    bandwidth_gb: Int = Field(default=0, ge=0, le=1_000_000)
    memory_mb: Int = Field(default=0, ge=0, le=1_048_576)
    cpu_percent: Int = Field(default=0, ge=0, le=12_800)
    processes: Int = Field(default=0, ge=0, le=100_000)


class PlanApply(Args):
    domain: DomainName
    plan: Slug


PLAN = [
    kind("plan.list", NoArgs, "List the hosting plans", read=True, example={}),
    kind("plan.show", DomainArgs, "Show the plan of a site and its usage against it", read=True,
         positional=("domain",), example=_D),
    kind("plan.create", PlanCreate, "Create or change a hosting plan", positional=("name",),
         example={"name": "small", "disk_mb": 10240, "memory_mb": 1024, "cpu_percent": 100}),
    kind("plan.delete", NameArgs, "Delete a hosting plan no site uses", positional=("name",),
         example={"name": "small"}),
    kind("plan.apply", PlanApply, "Put a site on a hosting plan", positional=("domain", "plan"),
         example={"domain": "example.com", "plan": "small"}),
]  # fmt: skip

# --- tuning (pro) ----------------------------------------------------------------------------------

TuningTarget = Literal["system", "mysql", "postgres", "php", "nginx", "redis"]


class TuningArgs(Args):
    target: TuningTarget


class TuningApply(Args):
    target: TuningTarget
    profile: Literal["auto", "balanced", "performance", "low-memory"] = "auto"


class SysctlSet(Args):
    """A kernel parameter of the allow-list, set persistently."""

    key: SysctlKey
    value: SysctlValue = Field(json_schema_extra=allowed_values(SYSCTL))

    _allowed_value = value_of_its_key(SYSCTL)


TUNING = [
    kind("tuning.show", TuningArgs, "Show the current tuning of a component", read=True, positional=("target",),
         example={"target": "mysql"}),
    kind("tuning.recommend", TuningArgs, "Recommend settings for a component from the hardware and load",
         read=True, positional=("target",), example={"target": "php"}),
    kind("tuning.apply", TuningApply, "Apply a tuning profile to a component", positional=("target",),
         example={"target": "mysql", "profile": "performance"}),
    kind("tuning.reset", TuningArgs, "Restore a component's default settings", positional=("target",),
         example={"target": "nginx"}),
    kind("tuning.sysctl-set", SysctlSet, "Set a kernel parameter (from the allow-list) persistently",
         positional=("key", "value"),
         example={"key": "net.core.somaxconn", "value": "4096"}),
]  # fmt: skip

# --- extension (pro) -------------------------------------------------------------------------------


class ExtensionInstall(Args):
    name: Slug
    version: SemVer | None = None


EXTENSION = [
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

KINDS: list[JobKind] = [
    *SYSTEM, *UPDATES, *STORAGE, *SERVICE, *DAEMON, *CRON, *USER, *SECURITY, *WAF, *LOGS, *METRICS,
    *QUOTA, *PLAN, *TUNING, *EXTENSION,
]  # fmt: skip
