"""Job kinds of the web stack: site, wp, php, ssl, dns, mail, deploy, app, cache."""

from __future__ import annotations

import ipaddress
import re
from typing import Literal

from pydantic import Field, SecretStr, model_validator

from contract.job_kinds.allowlists import PHP_INI, PHP_INI_PER_SITE, allowed_values, value_of_its_key
from contract.job_kinds.argtypes import (
    Bool,
    CommandLine,
    DnsLookupName,
    DnsName,
    DnsValue,
    DomainName,
    Email,
    EnvName,
    FpmEnvValue,
    GitRef,
    GitUrl,
    Id,
    IniValue,
    Int,
    IPAddress,
    IPv4,
    IPv6,
    Locale,
    MemoryLimit,
    OnOff,
    PhpDirective,
    PhpModule,
    PhpVersion,
    PluginSlug,
    Port,
    RelativePath,
    SafeText,
    Secret,
    SitePhpDirective,
    Slug,
    UploadLimit,
    Version,
    WpUser,
)
from contract.job_kinds.base import Args, JobKind, NoArgs, ScopedPath, kind

# --- shared argument models ------------------------------------------------------------------------


class DomainArgs(Args):
    domain: DomainName


class Lines(Args):
    lines: Int = Field(default=200, ge=1, le=100_000)


# --- site ------------------------------------------------------------------------------------------


SiteProfile = Literal["static", "php", "wordpress"]
"""What a new site's public_html starts with; the agent has a template for each (and no other)."""


class SiteCreate(Args):
    domain: DomainName
    profile: SiteProfile = Field(default="static", description="what the site's public_html starts with")
    php: PhpVersion | None = Field(
        default=None, description="the PHP version of a php or wordpress site (default: the server's default PHP)"
    )

    @model_validator(mode="after")
    def _php_needs_a_php_profile(self) -> SiteCreate:
        if self.php is not None and self.profile == "static":
            raise ValueError("a static site runs no PHP: give profile php or wordpress with a PHP version")
        return self


class SiteDelete(Args):
    domain: DomainName
    keep_files: Bool = False


class SiteAlias(Args):
    domain: DomainName
    alias: DomainName


class SiteRedirect(Args):
    domain: DomainName
    https: Bool = False
    www: Literal["keep", "add", "remove"] = "keep"


class SiteLogs(Args):
    domain: DomainName
    lines: Int = Field(default=100, ge=1, le=10_000)
    log: Literal["access", "error", "both"] = "both"


class SiteEnvKey(Args):
    domain: DomainName
    key: EnvName


class SiteEnvSet(SiteEnvKey):
    value: FpmEnvValue  # travels in the job's secrets either way; `masked` hides it in listings
    masked: Bool = False


class SiteLimits(Args):
    """Only the limits given change; the job prints them all."""

    domain: DomainName
    max_children: Int | None = Field(default=None, ge=1, le=1000)
    memory_limit: MemoryLimit | None = None
    upload_limit: UploadLimit | None = None


class SiteClone(Args):
    domain: DomainName
    target: DomainName


_D = {"domain": "example.com"}

SITE = [
    kind("site.list", NoArgs, "List the sites of the server", read=True, example={}),
    kind("site.inspect", DomainArgs, "Show one site", read=True, positional=("domain",), example=_D),
    kind("site.create", SiteCreate, "Create a site from a profile", positional=("domain",),
         example={"domain": "example.com", "profile": "php"}),
    kind("site.delete", SiteDelete, "Delete a site (optionally keeping its files)", positional=("domain",),
         example={"domain": "example.com", "keep_files": True}),
    kind("site.enable", DomainArgs, "Serve a disabled site again", positional=("domain",), example=_D),
    kind("site.disable", DomainArgs, "Stop serving a site, keeping everything", positional=("domain",), example=_D),
    kind("site.alias-add", SiteAlias, "Add an alias domain to a site", positional=("domain", "alias"),
         example={"domain": "example.com", "alias": "www.example.com"}),
    kind("site.alias-remove", SiteAlias, "Remove an alias domain from a site", positional=("domain", "alias"),
         example={"domain": "example.com", "alias": "www.example.com"}),
    kind("site.redirect-set", SiteRedirect, "Set the https and www redirects of a site", positional=("domain",),
         example={"domain": "example.com", "https": True, "www": "remove"}),
    kind("site.logs", SiteLogs, "Show the last lines of a site's access and error logs", read=True,
         positional=("domain",), example={"domain": "example.com", "lines": 50, "log": "error"}),
    kind("site.env-list", DomainArgs, "List the environment of a site's PHP (secret values masked)", read=True,
         positional=("domain",), example=_D),
    kind("site.env-set", SiteEnvSet, "Set an environment variable of a site's PHP", positional=("domain", "key"),
         example={"domain": "example.com", "key": "DB_PASSWORD", "value": "correct-horse-battery", "masked": True}),
    kind("site.env-unset", SiteEnvKey, "Remove an environment variable of a site's PHP",
         positional=("domain", "key"), example={"domain": "example.com", "key": "DB_PASSWORD"}),
    kind("site.limits", SiteLimits, "Set a site's PHP children, memory and upload limits", positional=("domain",),
         json=True, example={"domain": "example.com", "max_children": 8, "memory_limit": "256M",
                             "upload_limit": "64M"}),
    kind("site.clone", SiteClone, "Copy a site to a new domain (files, user, web server)",
         positional=("domain", "target"), json=True,
         example={"domain": "example.com", "target": "staging.example.com"}),
]  # fmt: skip

# --- wp --------------------------------------------------------------------------------------------


class WpList(Args):
    domain: DomainName | None = None


class WpTarget(Args):
    domain: DomainName
    path: RelativePath = ""  # the install's folder inside the site, "" = the site root


class WpInstall(WpTarget):
    title: SafeText
    admin_user: WpUser
    admin_email: Email
    admin_password: Secret
    locale: Locale = "en_US"
    version: Version | None = None


class WpUpdate(WpTarget):
    scope: Literal["all", "plugins", "themes", "translations"] = "all"


class WpCoreUpdate(WpTarget):
    version: Version | None = None
    minor: Bool = False


class WpPlugin(WpTarget):
    plugin: PluginSlug


class WpPluginInstall(WpPlugin):
    version: Version | None = None
    activate: Bool = False


class WpPluginUpdate(WpTarget):
    plugin: PluginSlug | None = None  # None: every plugin


class WpTheme(WpTarget):
    theme: PluginSlug


class WpThemeInstall(WpTheme):
    version: Version | None = None
    activate: Bool = False


class WpUserCreate(WpTarget):
    login: WpUser
    email: Email
    role: Literal["administrator", "editor", "author", "contributor", "subscriber"] = "subscriber"
    password: Secret | None = None  # None: WordPress mails a reset link


class WpSearchReplace(WpTarget):
    search: DomainName
    replace: DomainName
    dry_run: Bool = False


class WpMaintenance(WpTarget):
    state: OnOff


_W = {"domain": "example.com", "path": "blog"}
_IN_SITE = (ScopedPath("path", site="domain"),)  # the install's folder, in the site
_WPLUG = {"domain": "example.com", "plugin": "wordpress-seo"}

WP = [
    kind("wp.list", WpList, "List the WordPress installs", read=True, example={"domain": "example.com"}),
    kind("wp.info", WpTarget, "Show a WordPress install (versions, plugins needing updates)", read=True,
         positional=("domain",), example=_W, paths=_IN_SITE),
    kind("wp.check", WpTarget, "Verify the core and plugin checksums of an install", read=True,
         positional=("domain",), example=_W, paths=_IN_SITE),
    kind("wp.install", WpInstall, "Install WordPress in a site", positional=("domain",),
         example={"domain": "example.com", "title": "My blog", "admin_user": "admin-jo",
                  "admin_email": "jo@example.com", "admin_password": "correct-horse-battery", "locale": "de_DE"},
         paths=_IN_SITE),
    kind("wp.update", WpUpdate, "Update plugins, themes and translations", positional=("domain",),
         example={"domain": "example.com", "scope": "plugins"}, paths=_IN_SITE),
    kind("wp.core-update", WpCoreUpdate, "Update WordPress core", positional=("domain",),
         example={"domain": "example.com", "version": "6.5.2"}, paths=_IN_SITE),
    kind("wp.plugin-list", WpTarget, "List the plugins of an install", read=True, positional=("domain",), example=_W,
         paths=_IN_SITE),
    kind("wp.plugin-install", WpPluginInstall, "Install a plugin from WordPress.org", positional=("domain", "plugin"),
         example={**_WPLUG, "version": "22.5", "activate": True}, paths=_IN_SITE),
    kind("wp.plugin-activate", WpPlugin, "Activate a plugin", positional=("domain", "plugin"), example=_WPLUG,
         paths=_IN_SITE),
    kind("wp.plugin-deactivate", WpPlugin, "Deactivate a plugin", positional=("domain", "plugin"), example=_WPLUG,
         paths=_IN_SITE),
    kind("wp.plugin-update", WpPluginUpdate, "Update one plugin, or all of them", positional=("domain",),
         example=_WPLUG, paths=_IN_SITE),
    kind("wp.plugin-delete", WpPlugin, "Delete a plugin", positional=("domain", "plugin"), example=_WPLUG,
         paths=_IN_SITE),
    kind("wp.theme-list", WpTarget, "List the themes of an install", read=True, positional=("domain",), example=_W,
         paths=_IN_SITE),
    kind("wp.theme-install", WpThemeInstall, "Install a theme from WordPress.org", positional=("domain", "theme"),
         example={"domain": "example.com", "theme": "twentytwentyfour", "activate": True}, paths=_IN_SITE),
    kind("wp.theme-activate", WpTheme, "Activate a theme", positional=("domain", "theme"),
         example={"domain": "example.com", "theme": "twentytwentyfour"}, paths=_IN_SITE),
    kind("wp.theme-delete", WpTheme, "Delete a theme", positional=("domain", "theme"),
         example={"domain": "example.com", "theme": "twentytwentyone"}, paths=_IN_SITE),
    kind("wp.cache-flush", WpTarget, "Flush the object cache of an install", positional=("domain",), example=_W,
         paths=_IN_SITE),
    kind("wp.user-list", WpTarget, "List the users of an install", read=True, positional=("domain",), example=_W,
         paths=_IN_SITE),
    kind("wp.user-create", WpUserCreate, "Create a WordPress user", positional=("domain", "login"),
         example={"domain": "example.com", "login": "editor1", "email": "ed@example.com", "role": "editor",
                  "password": "correct-horse-battery"}, paths=_IN_SITE),
    kind("wp.search-replace", WpSearchReplace, "Move an install to another domain in its database",
         positional=("domain",),
         example={"domain": "example.com", "search": "old.example.com", "replace": "example.com", "dry_run": True},
         paths=_IN_SITE),
    kind("wp.maintenance", WpMaintenance, "Turn maintenance mode on or off", positional=("domain", "state"),
         example={"domain": "example.com", "state": "on"}, paths=_IN_SITE),
]  # fmt: skip

# --- php -------------------------------------------------------------------------------------------


class PhpVersionArgs(Args):
    version: PhpVersion


class PhpSet(Args):
    domain: DomainName
    version: PhpVersion


class PhpIniGet(Args):
    version: PhpVersion
    key: PhpDirective
    domain: DomainName | None = None  # None: the version's global php.ini


class PhpIniSet(Args):
    """A directive of one site's pool (``php_admin_value``): the allow-list of the site's directives."""

    version: PhpVersion
    key: SitePhpDirective
    value: IniValue = Field(json_schema_extra=allowed_values(PHP_INI_PER_SITE))
    domain: DomainName

    _allowed_value = value_of_its_key(PHP_INI_PER_SITE)


class PhpIniGlobalSet(Args):
    """A directive of every site of a PHP version (``99-fleetdeck.ini``): the whole allow-list."""

    version: PhpVersion
    key: PhpDirective
    value: IniValue = Field(json_schema_extra=allowed_values(PHP_INI))

    _allowed_value = value_of_its_key(PHP_INI)


class PhpModuleArgs(Args):
    version: PhpVersion
    module: PhpModule


class PhpPool(Args):
    domain: DomainName
    pm: Literal["dynamic", "static", "ondemand"] = "ondemand"
    max_children: Int = Field(default=10, ge=1, le=1000)
    max_requests: Int | None = Field(default=None, ge=0, le=1_000_000)


_V = {"version": "8.3"}

PHP = [
    kind("php.versions", NoArgs, "List the installed PHP versions", read=True, example={}),
    kind("php.install", PhpVersionArgs, "Install a PHP version", positional=("version",), example=_V),
    kind("php.uninstall", PhpVersionArgs, "Remove a PHP version no site uses", positional=("version",), example=_V),
    kind("php.set", PhpSet, "Switch a site to a PHP version", positional=("domain", "version"),
         example={"domain": "example.com", "version": "8.3"}),
    kind("php.restart", PhpVersionArgs, "Restart the FPM service of a PHP version", positional=("version",),
         example=_V),
    kind("php.reload", PhpVersionArgs, "Reload the FPM service of a PHP version (new workers, same master)",
         positional=("version",), example=_V),
    kind("php.ini-get", PhpIniGet, "Show a php.ini directive", read=True, positional=("version", "key"),
         example={"version": "8.3", "key": "memory_limit"}),
    kind("php.ini-set", PhpIniSet, "Set a php.ini directive of one site (from the allow-list)",
         positional=("version", "key", "value"),
         example={"version": "8.3", "key": "memory_limit", "value": "512M", "domain": "example.com"}),
    kind("php.ini-global-set", PhpIniGlobalSet, "Set a php.ini directive for every site of a PHP version",
         positional=("version", "key", "value"), group="sysadmin",
         example={"version": "8.3", "key": "opcache.memory_consumption", "value": "256"}),
    kind("php.module-list", PhpVersionArgs, "List the extension modules of a PHP version", read=True,
         positional=("version",), example=_V),
    kind("php.module-enable", PhpModuleArgs, "Enable a PHP extension module", positional=("version", "module"),
         example={"version": "8.3", "module": "imagick"}),
    kind("php.module-disable", PhpModuleArgs, "Disable a PHP extension module", positional=("version", "module"),
         example={"version": "8.3", "module": "xdebug"}),
    kind("php.extension-install", PhpModuleArgs, "Install a PHP extension from Debian (php<version>-<module>)",
         positional=("version", "module"), example={"version": "8.3", "module": "imagick"}),
    kind("php.fpm-status", PhpVersionArgs, "Show the FPM pools of a PHP version", read=True,
         positional=("version",), example=_V),
    kind("php.pool-set", PhpPool, "Size the FPM pool of a site", positional=("domain",),
         example={"domain": "example.com", "pm": "dynamic", "max_children": 20}),
    kind("php.opcache-reset", DomainArgs, "Empty the opcache of the FPM serving a site", positional=("domain",),
         example=_D),
]  # fmt: skip

# --- ssl -------------------------------------------------------------------------------------------


class SslIssue(Args):
    domain: DomainName
    aliases: list[DomainName] = Field(default_factory=list, max_length=100)
    wildcard: Bool = False  # also *.<domain> (needs the zone on this server's DNS)
    provider: Literal["letsencrypt", "zerossl", "buypass"] = "letsencrypt"
    key_type: Literal["ec256", "ec384", "rsa2048", "rsa4096"] = "ec256"
    email: Email | None = None
    staging: Bool = False


class SslRenew(Args):
    domain: DomainName
    force: Bool = False


class SslRevoke(Args):
    domain: DomainName
    reason: Literal["unspecified", "key_compromise", "superseded", "cessation_of_operation"] = "unspecified"


class SslInstall(Args):
    domain: DomainName
    cert_path: RelativePath = Field(min_length=1)
    key_path: RelativePath = Field(min_length=1)
    chain_path: RelativePath = ""


class SslAutoRenew(Args):
    domain: DomainName
    state: OnOff


SSL = [
    kind("ssl.list", NoArgs, "List the certificates of the server", read=True, example={}),
    kind("ssl.inspect", DomainArgs, "Show a site's certificate (issuer, names, expiry)", read=True,
         positional=("domain",), example=_D),
    kind("ssl.issue", SslIssue, "Issue a certificate from an ACME provider", positional=("domain",),
         example={"domain": "example.com", "aliases": ["www.example.com"], "email": "ops@example.com"}),
    kind("ssl.renew", SslRenew, "Renew a certificate now", positional=("domain",), json=True,
         example={"domain": "example.com", "force": True}),
    kind("ssl.revoke", SslRevoke, "Revoke a certificate", positional=("domain",), json=True,
         example={"domain": "example.com", "reason": "key_compromise"}),
    kind("ssl.delete", DomainArgs, "Remove a certificate from the server", positional=("domain",), example=_D),
    kind("ssl.install", SslInstall, "Install an uploaded certificate and key", positional=("domain",),
         example={"domain": "example.com", "cert_path": "ssl/cert.pem", "key_path": "ssl/key.pem"},
         paths=tuple(ScopedPath(name, site="domain") for name in ("cert_path", "key_path", "chain_path"))),
    kind("ssl.auto-renew", SslAutoRenew, "Turn automatic renewal on or off", positional=("domain", "state"),
         example={"domain": "example.com", "state": "off"}),
]  # fmt: skip

# --- dns -------------------------------------------------------------------------------------------

RecordType = Literal["A", "AAAA", "CNAME", "MX", "TXT", "SRV", "CAA", "NS"]
_HOSTNAME_RE = re.compile(r"^[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)+$")
_TLD_DIGITS = re.compile(r"\.[0-9]+$")
_SRV_RE = re.compile(r"^[0-9]{1,5} [0-9]{1,5} ")
_CAA_RE = re.compile(r"^(?:0|128) (?:issue|issuewild|iodef) [A-Za-z0-9.:/@_-]{1,200}$")


class Zone(Args):
    zone: DomainName


class ZoneAdd(Args):
    zone: DomainName
    ipv4: IPv4 | None = None  # the apex A record to create
    ipv6: IPv6 | None = None


class RecordAdd(Args):
    zone: DomainName
    type: RecordType
    name: DnsName = "@"
    value: DnsValue
    ttl: Int = Field(default=3600, ge=60, le=604_800)
    priority: Int | None = Field(default=None, ge=0, le=65535)  # MX and SRV only
    wildcard: Bool = False  # the record is for *.<name> (a '*' never travels in an argv)

    @model_validator(mode="after")
    def _value_matches_type(self) -> RecordAdd:
        value, kind_ = self.value, self.type
        if kind_ in ("A", "AAAA"):
            address = ipaddress.ip_address(value)
            if address.version != (4 if kind_ == "A" else 6):
                raise ValueError(f"an {kind_} record needs an IPv{4 if kind_ == 'A' else 6} address")
            self.value = str(address)
        elif kind_ in ("CNAME", "NS", "MX") and not (_HOSTNAME_RE.match(value) and not _TLD_DIGITS.search(value)):
            raise ValueError(f"a {kind_} record points to a lowercase host name with a dot")
        elif kind_ == "SRV" and not (
            _SRV_RE.match(value) and _HOSTNAME_RE.match(value.split(" ")[-1]) and value.count(" ") == 2
        ):
            raise ValueError("an SRV record value is 'weight port target'")
        elif kind_ == "CAA" and not _CAA_RE.match(value):
            raise ValueError("a CAA record value is 'flags tag value', e.g. '0 issue letsencrypt.org'")
        if kind_ == "CNAME" and self.name == "@":
            raise ValueError("a CNAME record cannot be at the zone apex")
        if (self.priority is not None) != (kind_ in ("MX", "SRV")):
            raise ValueError("priority is required for MX and SRV records and not allowed for others")
        return self


class RecordList(Args):
    zone: DomainName
    type: RecordType | None = None


class RecordDelete(Args):
    zone: DomainName
    id: Id


LookupType = Literal["A", "AAAA", "CNAME", "MX", "TXT", "SRV", "CAA", "NS", "SOA", "PTR"]


class DnsLookup(Args):
    name: DnsLookupName
    type: LookupType = "A"
    server: IPAddress | None = None  # None: the server's own resolvers (/etc/resolv.conf)
    port: Port | None = None  # the server's DNS port (53 unless given)


class Dnssec(Args):
    zone: DomainName
    state: OnOff


_Z = {"zone": "example.com"}

DNS = [
    kind("dns.lookup", DnsLookup, "Look a name up with dig", read=True, positional=("name",),
         example={"name": "www.example.com", "type": "A", "server": "1.1.1.1"}),
    kind("dns.zone-list", NoArgs, "List the DNS zones", read=True, example={}),
    kind("dns.zone-show", Zone, "Show a zone with its records", read=True, positional=("zone",), example=_Z),
    kind("dns.zone-add", ZoneAdd, "Create a DNS zone", positional=("zone",),
         example={"zone": "example.com", "ipv4": "203.0.113.10"}),
    kind("dns.zone-delete", Zone, "Delete a DNS zone", positional=("zone",), example=_Z),
    kind("dns.record-list", RecordList, "List the records of a zone", read=True, positional=("zone",),
         example={"zone": "example.com", "type": "MX"}),
    kind("dns.record-add", RecordAdd, "Add a record to a zone", positional=("zone", "type"),
         example={"zone": "example.com", "type": "MX", "name": "@", "value": "mail.example.com", "priority": 10}),
    kind("dns.record-delete", RecordDelete, "Delete a record", positional=("zone", "id"),
         example={"zone": "example.com", "id": "r-42"}),
    kind("dns.dnssec-set", Dnssec, "Turn DNSSEC signing of a zone on or off", positional=("zone", "state"),
         example={"zone": "example.com", "state": "on"}),
    kind("dns.check", Zone, "Check delegation and resolution of a zone", read=True, positional=("zone",),
         example=_Z),
]  # fmt: skip

# --- mail ------------------------------------------------------------------------------------------


class MailboxAdd(Args):
    address: Email
    password: Secret
    quota_mb: Int = Field(default=1024, ge=0, le=1_048_576)  # 0: unlimited


class MailboxDelete(Args):
    address: Email
    keep_data: Bool = False


class MailboxPassword(Args):
    address: Email
    password: Secret


class MailboxQuota(Args):
    address: Email
    quota_mb: Int = Field(ge=0, le=1_048_576)


class MailAlias(Args):
    source: Email
    destination: Email


class DkimSetup(Args):
    domain: DomainName
    selector: Slug = "default"
    bits: Literal[1024, 2048, 4096] = 2048


class DmarcSet(Args):
    domain: DomainName
    policy: Literal["none", "quarantine", "reject"]
    rua: Email | None = None
    pct: Int = Field(default=100, ge=0, le=100)


_MB = {"address": "jo@example.com"}

MAIL = [
    kind("mail.list", NoArgs, "List the mail domains", read=True, example={}),
    kind("mail.domain-add", DomainArgs, "Receive mail for a domain", positional=("domain",), example=_D),
    kind("mail.domain-delete", DomainArgs, "Stop receiving mail for a domain", positional=("domain",), example=_D),
    kind("mail.mailbox-list", DomainArgs, "List the mailboxes of a domain", read=True, positional=("domain",),
         example=_D),
    kind("mail.mailbox-add", MailboxAdd, "Create a mailbox", positional=("address",),
         example={"address": "jo@example.com", "password": "correct-horse-battery", "quota_mb": 2048}),
    kind("mail.mailbox-delete", MailboxDelete, "Delete a mailbox", positional=("address",),
         example={"address": "jo@example.com", "keep_data": True}),
    kind("mail.mailbox-password", MailboxPassword, "Set a mailbox password", positional=("address",),
         example={"address": "jo@example.com", "password": "another-long-secret"}),
    kind("mail.mailbox-quota", MailboxQuota, "Set a mailbox quota", positional=("address",),
         example={"address": "jo@example.com", "quota_mb": 4096}),
    kind("mail.alias-list", DomainArgs, "List the aliases of a domain", read=True, positional=("domain",),
         example=_D),
    kind("mail.alias-add", MailAlias, "Forward an address to another", positional=("source", "destination"),
         example={"source": "info@example.com", "destination": "jo@example.com"}),
    kind("mail.alias-delete", MailAlias, "Remove a forward", positional=("source", "destination"),
         example={"source": "info@example.com", "destination": "jo@example.com"}),
    kind("mail.dkim-setup", DkimSetup, "Create a DKIM key and print its DNS record", positional=("domain",), json=True,
         example={"domain": "example.com", "selector": "s2024"}),
    kind("mail.dkim-show", DomainArgs, "Show the DKIM DNS record of a domain", read=True, positional=("domain",),
         example=_D),
    kind("mail.dmarc-set", DmarcSet, "Set the DMARC policy of a domain", positional=("domain",),
         example={"domain": "example.com", "policy": "quarantine", "rua": "dmarc@example.com"}),
    kind("mail.queue-list", NoArgs, "List the outgoing mail queue", read=True, example={}),
    kind("mail.queue-flush", NoArgs, "Retry delivery of every queued message", example={}),
]  # fmt: skip

# --- deploy ----------------------------------------------------------------------------------------


class DeployGit(Args):
    domain: DomainName
    repo: GitUrl
    branch: GitRef = "main"
    path: RelativePath = ""  # the folder of the site to deploy into
    public: RelativePath = ""  # as in DeployInit (kept when the deploy was initialised before)
    token: Secret | None = None  # an access token for a private https repository (never reaches the site's user)

    @model_validator(mode="after")
    def _token_only_over_https(self) -> DeployGit:
        _token_over_https(self.token, self.repo)
        return self


class DeployInit(Args):
    domain: DomainName
    repo: GitUrl | None = None  # None: a bare repository in the site to push to
    branch: GitRef = "main"  # what `deploy.run` deploys
    shared: list[RelativePath] = Field(default_factory=list, max_length=20)  # folders kept across releases
    public: RelativePath = ""  # the release's folder the site serves ("public"; "": the release itself)
    token: Secret | None = None  # as in DeployGit

    @model_validator(mode="after")
    def _token_only_over_https(self) -> DeployInit:
        _token_over_https(self.token, self.repo)
        return self


def _token_over_https(token: SecretStr | None, repo: str | None) -> None:
    """A token goes only to an https repository (the agent sends it there, never the site's git)."""
    if token is not None and repo is not None and not repo.startswith("https://"):
        raise ValueError("a token is sent only to an https:// repository: give its https URL, or no token")


class DeployRun(Args):
    domain: DomainName
    branch: GitRef | None = None  # None: the branch `deploy.init` chose
    token: Secret | None = None  # as in DeployGit


class DeployRollback(Args):
    domain: DomainName
    release: Id | None = None  # None: the previous release


class DeployRelease(Args):
    domain: DomainName
    release: Id


class DeployPrune(Args):
    domain: DomainName
    keep: Int = Field(default=5, ge=1, le=50)


DEPLOY = [
    kind("deploy.init", DeployInit, "Prepare a site for git deploys: clone a repository, or make one to push to",
         positional=("domain",), json=True,
         example={"domain": "example.com", "repo": "https://github.com/acme/site.git", "branch": "main",
                  "shared": ["storage", "public/uploads"], "public": "public"},
         paths=(ScopedPath("shared", site="domain"), ScopedPath("public", site="domain"))),
    kind("deploy.run", DeployRun, "Deploy the newest commit of the branch as a new release", positional=("domain",),
         json=True, example={"domain": "example.com", "branch": "main"}),
    kind("deploy.git", DeployGit, "Deploy a git branch into a site as a new release", positional=("domain",),
         json=True,
         example={"domain": "example.com", "repo": "https://github.com/acme/site.git", "branch": "main",
                  "token": "ghp_exampletoken123"},
         paths=(ScopedPath("path", site="domain"), ScopedPath("public", site="domain"))),
    kind("deploy.rollback", DeployRollback, "Switch a site back to an earlier release", positional=("domain",),
         example={"domain": "example.com", "release": "20240501-1"}),
    kind("deploy.list", DomainArgs, "List the releases of a site", read=True, positional=("domain",), example=_D),
    kind("deploy.inspect", DeployRelease, "Show one release (commit, time, log)", read=True,
         positional=("domain", "release"), example={"domain": "example.com", "release": "20240501-1"}),
    kind("deploy.prune", DeployPrune, "Delete old releases, keeping the newest", positional=("domain",),
         example={"domain": "example.com", "keep": 3}),
    kind("deploy.key-show", DomainArgs, "Show the site's deploy key (to add to the git host)", read=True,
         positional=("domain",), example=_D),
]  # fmt: skip

# --- app -------------------------------------------------------------------------------------------


class AppName(Args):
    name: Slug


class AppCreate(Args):
    name: Slug
    domain: DomainName
    runtime: Literal["node", "python", "ruby", "go", "bun", "deno"]
    runtime_version: Version | None = None
    port: Port
    command: CommandLine
    directory: RelativePath = ""


class AppDelete(Args):
    name: Slug
    keep_files: Bool = False


class AppLogs(Args):
    name: Slug
    lines: Int = Field(default=200, ge=1, le=100_000)


class AppEnvSet(Args):
    name: Slug
    key: EnvName
    value: Secret  # environment values are often credentials: they never enter the argv


class AppEnvKey(Args):
    name: Slug
    key: EnvName


class AppScale(Args):
    name: Slug
    instances: Int = Field(ge=1, le=32)


_A = {"name": "api"}

APP = [
    kind("app.list", NoArgs, "List the applications", read=True, example={}),
    kind("app.inspect", AppName, "Show an application", read=True, positional=("name",), example=_A),
    kind("app.create", AppCreate, "Create an application process behind a site", positional=("name",),
         example={"name": "api", "domain": "api.example.com", "runtime": "node", "runtime_version": "20",
                  "port": 3000, "command": "node server.js"}, paths=(ScopedPath("directory", site="domain"),)),
    kind("app.delete", AppDelete, "Delete an application", positional=("name",),
         example={"name": "api", "keep_files": True}),
    kind("app.start", AppName, "Start an application", positional=("name",), example=_A),
    kind("app.stop", AppName, "Stop an application", positional=("name",), example=_A),
    kind("app.restart", AppName, "Restart an application", positional=("name",), example=_A),
    kind("app.logs", AppLogs, "Show the last lines an application printed", read=True, positional=("name",),
         json=False, example={"name": "api", "lines": 500}),
    kind("app.env-list", AppName, "List an application's environment variable names", read=True,
         positional=("name",), example=_A),
    kind("app.env-set", AppEnvSet, "Set an environment variable of an application", positional=("name", "key"),
         example={"name": "api", "key": "DATABASE_URL", "value": "postgres://u:p@localhost/db"}),
    kind("app.env-unset", AppEnvKey, "Remove an environment variable of an application", positional=("name", "key"),
         example={"name": "api", "key": "DEBUG"}),
    kind("app.scale", AppScale, "Set how many instances of an application run", positional=("name",),
         example={"name": "api", "instances": 4}),
]  # fmt: skip

# --- cache -----------------------------------------------------------------------------------------

CacheEngine = Literal["redis", "memcached", "opcache", "page"]


class CacheStatus(Args):
    engine: CacheEngine | None = None


class CacheTarget(Args):
    engine: CacheEngine
    domain: DomainName | None = None  # page and opcache caches can be per site


class CacheConfig(Args):
    engine: Literal["redis", "memcached"]
    memory_mb: Int = Field(ge=16, le=65536)
    eviction: Literal["allkeys-lru", "volatile-lru", "allkeys-lfu", "volatile-lfu", "noeviction"] | None = None


CACHE = [
    kind("cache.status", CacheStatus, "Show the caches (memory, hit rate)", read=True, example={"engine": "redis"}),
    kind("cache.flush", CacheTarget, "Flush a cache", positional=("engine",),
         example={"engine": "page", "domain": "example.com"}),
    kind("cache.enable", CacheTarget, "Enable a cache", positional=("engine",),
         example={"engine": "page", "domain": "example.com"}),
    kind("cache.disable", CacheTarget, "Disable a cache", positional=("engine",), example={"engine": "memcached"}),
    kind("cache.config-set", CacheConfig, "Size a cache server", positional=("engine",),
         example={"engine": "redis", "memory_mb": 512, "eviction": "allkeys-lru"}),
]  # fmt: skip

KINDS: list[JobKind] = [*SITE, *WP, *PHP, *SSL, *DNS, *MAIL, *DEPLOY, *APP, *CACHE]
