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
from contract.job_kinds.base import Args, DomainArgs, JobKind, NoArgs, kind

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


_D = {"domain": "example.com"}

KINDS: list[JobKind] = [
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
