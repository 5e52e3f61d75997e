"""Job kinds of `ssl`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from contract.job_kinds.argtypes import Bool, DomainName, Email, OnOff, RelativePath, SiteDomain
from contract.job_kinds.base import Args, DomainArgs, JobKind, NoArgs, ScopedPath, kind

_D = {"domain": "example.com"}


class SslIssue(Args):
    domain: SiteDomain
    aliases: list[DomainName] = Field(default_factory=list, max_length=100)
    wildcard: Bool = False  # also *.<domain> (needs the zone on this server's DNS)
    provider: Literal["letsencrypt", "zerossl", "buypass"] = "letsencrypt"
    key_type: Literal["ec256", "ec384", "rsa2048", "rsa4096"] = "ec256"
    email: Email | None = None
    staging: Bool = False


class SslRenew(Args):
    domain: SiteDomain
    force: Bool = False


class SslRevoke(Args):
    domain: SiteDomain
    reason: Literal["unspecified", "key_compromise", "superseded", "cessation_of_operation"] = "unspecified"


class SslInstall(Args):
    domain: SiteDomain
    cert_path: RelativePath = Field(min_length=1)
    key_path: RelativePath = Field(min_length=1)
    chain_path: RelativePath = ""


class SslAutoRenew(Args):
    domain: SiteDomain
    state: OnOff


KINDS: list[JobKind] = [
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
