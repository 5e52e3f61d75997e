"""Job kinds of `site`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from contract.job_kinds.argtypes import (
    Bool,
    DomainName,
    EnvName,
    FpmEnvValue,
    InstalledPhpVersion,
    Int,
    MemoryLimit,
    SiteDomain,
    UploadLimit,
)
from contract.job_kinds.base import CONTENT, Args, DomainArgs, JobKind, NoArgs, Result, kind

SiteProfile = Literal["static", "php", "wordpress"]
"""What a new site's public_html starts with; the agent has a template for each (and no other)."""


class SiteCreate(Args):
    domain: DomainName
    profile: SiteProfile = Field(default="static", description="what the site's public_html starts with")
    php: InstalledPhpVersion | None = Field(
        default=None, description="the PHP version of a php or wordpress site (default: the server's default PHP)"
    )

    @model_validator(mode="after")
    def _php_needs_a_php_profile(self) -> SiteCreate:
        if self.php is not None and self.profile == "static":
            raise ValueError("a static site runs no PHP: give profile php or wordpress with a PHP version")
        return self


class SiteDelete(Args):
    domain: SiteDomain
    keep_files: Bool = False


class SiteAlias(Args):
    domain: SiteDomain
    alias: DomainName


class SiteRedirect(Args):
    domain: SiteDomain
    https: Bool = False
    www: Literal["keep", "add", "remove"] = "keep"


class SiteLogs(Args):
    domain: SiteDomain
    lines: Int = Field(default=100, ge=1, le=10_000)
    log: Literal["access", "error", "both"] = "both"


class SiteEnvKey(Args):
    domain: SiteDomain
    key: EnvName


class SiteEnvSet(SiteEnvKey):
    value: FpmEnvValue  # travels in the job's secrets either way; `masked` hides it in listings
    masked: Bool = False


class SiteLimits(Args):
    """Only the limits given change; the job prints them all."""

    domain: SiteDomain
    max_children: Int | None = Field(default=None, ge=1, le=1000)
    memory_limit: MemoryLimit | None = None
    upload_limit: UploadLimit | None = None


class SiteClone(Args):
    domain: SiteDomain
    target: DomainName


# --- results -------------------------------------------------------------------------------------


class SiteRow(Result):
    domain: str = Field(description="the site's domain")
    slug: str = Field(description="the site's folder name in the home")
    home: str = Field(description="the absolute path of the site's folder")
    exists: bool = Field(description="the site's folder is there")
    owner: str | None = Field(description="the user owning the site's folder (null: no folder)")
    error: str | None = Field(default=None, description="why the folder could not be measured (null: it was)")
    disk_bytes: int | None = Field(description="bytes the folder takes on disk (null: not measured)")


class SiteList(Result):
    sites: list[SiteRow] = Field(description="the server's sites, in the registry's order")


class SiteInfo(SiteRow):
    user: str | None = Field(description="the system user the site's PHP and files run as")
    uid: int | None = Field(description="that user's uid (null: unknown)")
    gid: int | None = Field(description="that user's primary gid (null: unknown)")
    size_bytes: int | None = Field(description="the apparent size of the site's files, in bytes")
    files: int | None = Field(description="how many files the folder holds")
    dirs: int | None = Field(description="how many folders the folder holds")
    profile: str | None = Field(description="static, php or wordpress (null: an older site, static)")
    php: str | None = Field(description="the PHP version serving the site (null: no PHP)")
    created_at: str | None = Field(description="when the site was created (RFC 3339)")
    docroot: str | None = Field(description="the web root, relative to the site's folder")
    enabled: bool | None = Field(description="served (false: the parked page answers 503)")
    aliases: list[str] = Field(description="the other domains the site answers on")
    https_redirect: bool | None = Field(description="port 80 redirects to https")
    www_redirect: str | None = Field(description="keep, add or remove the www prefix")
    served: bool = Field(description="the web server has the site's server block")


class SiteMade(Result):
    site: SiteInfo = Field(description="the site as it is now")
    served: bool = Field(description="the web server serves it (false: the software is missing, see stderr)")


class SiteCloned(Result):
    site: SiteInfo = Field(description="the copy as it is now")
    cloned_from: str = Field(description="the domain of the site it was copied from")
    served: bool = Field(description="the web server serves it (false: the software is missing, see stderr)")


class SiteDeleted(Result):
    deleted: str = Field(description="the domain of the deleted site")
    home: str = Field(description="the site's folder")
    files_removed: bool = Field(description="the site's folder was removed (false: kept, or not there)")
    user_removed: str | None = Field(description="the site's own system user, removed (null: none)")
    cron_entries_removed: int = Field(description="the site's cron entries removed")
    daemons_removed: int = Field(description="the site's daemons removed")
    web_files_removed: list[str] = Field(description="the web server and PHP-FPM files removed")
    certificates_removed: bool = Field(description="the site had certificates, now removed")


class SiteAliases(Result):
    domain: str = Field(description="the site's domain")
    aliases: list[str] = Field(description="the other domains the site answers on, now")


class SiteEnvRow(Result):
    key: str = Field(description="the variable's name")
    value: str | None = Field(description="its value (*** when masked)")
    masked: bool = Field(description="the value is hidden in listings")


class SiteEnvList(Result):
    domain: str = Field(description="the site's domain")
    env: list[SiteEnvRow] = Field(description="the environment of the site's PHP, by name")


class SiteLimitsResult(Result):
    domain: str = Field(description="the site's domain")
    max_children: int | None = Field(description="PHP-FPM children at most (null: the site runs no PHP)")
    memory_limit: str | None = Field(description="PHP's memory_limit (null: PHP's default)")
    upload_limit: str | None = Field(description="the largest upload, PHP's and nginx's (null: the default)")


class SiteLogLines(Result):
    domain: str = Field(description="the site's domain")
    access: list[str] | None = Field(default=None, description="the last access log lines (null: not asked for)")
    error: list[str] | None = Field(default=None, description="the last error log lines (null: not asked for)")


_D = {"domain": "example.com"}

# Who runs this domain's mutations, and from which plan (`base.DomainPolicy`).
POLICY = CONTENT

KINDS: list[JobKind] = [
    kind("site.list", NoArgs, "List the sites of the server", read=True, example={}, result=SiteList),
    kind("site.inspect", DomainArgs, "Show one site", read=True, positional=("domain",), example=_D,
         result=SiteInfo),
    kind("site.create", SiteCreate, "Create a site from a profile", positional=("domain",),
         example={"domain": "example.com", "profile": "php"}, result=SiteMade),
    kind("site.delete", SiteDelete, "Delete a site (optionally keeping its files)", positional=("domain",),
         example={"domain": "example.com", "keep_files": True}, result=SiteDeleted, confirm="domain"),
    kind("site.enable", DomainArgs, "Serve a disabled site again", positional=("domain",), example=_D),
    kind("site.disable", DomainArgs, "Stop serving a site, keeping everything", positional=("domain",), example=_D),
    kind("site.alias-add", SiteAlias, "Add an alias domain to a site", positional=("domain", "alias"),
         example={"domain": "example.com", "alias": "www.example.com"}, result=SiteAliases),
    kind("site.alias-remove", SiteAlias, "Remove an alias domain from a site", positional=("domain", "alias"),
         example={"domain": "example.com", "alias": "www.example.com"}, result=SiteAliases),
    kind("site.redirect-set", SiteRedirect, "Set the https and www redirects of a site", positional=("domain",),
         example={"domain": "example.com", "https": True, "www": "remove"}),
    kind("site.logs", SiteLogs, "Show the last lines of a site's access and error logs", read=True,
         positional=("domain",), example={"domain": "example.com", "lines": 50, "log": "error"}, result=SiteLogLines),
    kind("site.env-list", DomainArgs, "List the environment of a site's PHP (secret values masked)", read=True,
         positional=("domain",), example=_D, result=SiteEnvList),
    kind("site.env-set", SiteEnvSet, "Set an environment variable of a site's PHP", positional=("domain", "key"),
         example={"domain": "example.com", "key": "DB_PASSWORD", "value": "correct-horse-battery", "masked": True}),
    kind("site.env-unset", SiteEnvKey, "Remove an environment variable of a site's PHP",
         positional=("domain", "key"), example={"domain": "example.com", "key": "DB_PASSWORD"}),
    kind("site.limits", SiteLimits, "Set a site's PHP children, memory and upload limits", positional=("domain",),
         json=True, example={"domain": "example.com", "max_children": 8, "memory_limit": "256M",
                             "upload_limit": "64M"}, result=SiteLimitsResult),
    kind("site.clone", SiteClone, "Copy a site to a new domain (files, user, web server)",
         positional=("domain", "target"), json=True,
         example={"domain": "example.com", "target": "staging.example.com"}, result=SiteCloned),
]  # fmt: skip
