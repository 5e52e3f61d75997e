"""Job kinds of `ssl`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from contract.job_kinds.argtypes import Bool, DomainName, Email, OnOff, RelativePath, SiteDomain
from contract.job_kinds.base import INFRA, Args, DomainArgs, JobKind, NoArgs, Result, ScopedPath, kind

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


class SiteCertificate(Result):
    domain: str = Field(description="the site")
    source: Literal["acme", "installed", "unknown"] = Field(
        description="acme: issued by ssl.issue; installed: from files (ssl.install); unknown: no record"
    )
    auto_renew: bool = Field(description="the agent renews it before it expires")
    names: list[str] = Field(description="the DNS names it covers")
    issuer: str = Field(description="the issuer's distinguished name (RFC 4514)")
    serial: str = Field(description="its serial number, hexadecimal")
    not_before: str = Field(description="valid from (RFC 3339, UTC)")
    not_after: str = Field(description="valid until (RFC 3339, UTC)")
    days_left: int = Field(description="whole days until not_after (negative: expired)")
    path: str = Field(description="the full chain the site serves, on the server")


class CertificateFile(Result):
    path: str = Field(description="the certificate file, on the server")
    source: Literal["letsencrypt", "site", "agent"] = Field(
        description="letsencrypt: certbot's live folder; site: a site's fullchain.pem; agent: a loose file"
    )
    error: str | None = Field(default=None, description="why it could not be read (None: it was read)")
    subject: str | None = Field(default=None, description="the subject's distinguished name")
    issuer: str | None = Field(default=None, description="the issuer's distinguished name")
    not_after: str | None = Field(
        default=None, description="valid until (RFC 3339, UTC; openssl's words when it cannot be parsed)"
    )
    names: list[str] = Field(default_factory=list, description="the DNS names (or the subject's CN)")
    days_left: int | None = Field(default=None, description="whole days until not_after (None: not known)")
    expired: bool | None = Field(default=None, description="not_after has passed (None: not known)")


class CertificateList(Result):
    certificates: list[CertificateFile] = Field(description="every certificate file of the server")


class CertificateRevoked(Result):
    domain: str = Field(description="the site")
    revoked: bool = Field(description="the CA revoked it (always True: a refusal fails the job)")
    names: list[str] = Field(description="the names the revoked certificate covered")


class CertificateDeleted(Result):
    domain: str = Field(description="the site")
    deleted: bool = Field(description="a certificate was removed (False: the site had none)")
    message: str = Field(description="what was done, for a person")


# Who runs this domain's mutations, and from which plan (`base.DomainPolicy`).
POLICY = INFRA

KINDS: list[JobKind] = [
    kind("ssl.list", NoArgs, "List the certificates of the server", read=True, example={}, result=CertificateList),
    kind("ssl.inspect", DomainArgs, "Show a site's certificate (issuer, names, expiry)", read=True,
         positional=("domain",), example=_D, result=SiteCertificate),
    kind("ssl.issue", SslIssue, "Issue a certificate from an ACME provider", positional=("domain",),
         example={"domain": "example.com", "aliases": ["www.example.com"], "email": "ops@example.com"},
         result=SiteCertificate),
    kind("ssl.renew", SslRenew, "Renew a certificate now", positional=("domain",), json=True,
         example={"domain": "example.com", "force": True}, result=SiteCertificate),
    kind("ssl.revoke", SslRevoke, "Revoke a certificate", positional=("domain",), json=True,
         example={"domain": "example.com", "reason": "key_compromise"}, result=CertificateRevoked),
    kind("ssl.delete", DomainArgs, "Remove a certificate from the server", positional=("domain",), example=_D,
         result=CertificateDeleted),
    kind("ssl.install", SslInstall, "Install an uploaded certificate and key", positional=("domain",),
         example={"domain": "example.com", "cert_path": "ssl/cert.pem", "key_path": "ssl/key.pem"},
         paths=tuple(ScopedPath(name, site="domain") for name in ("cert_path", "key_path", "chain_path")),
         result=SiteCertificate),
    kind("ssl.auto-renew", SslAutoRenew, "Turn automatic renewal on or off", positional=("domain", "state"),
         example={"domain": "example.com", "state": "off"}),
]  # fmt: skip
