"""Job kinds of `mail`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from contract.job_kinds.argtypes import Bool, Email, Int, Secret, SiteDomain, Slug
from contract.job_kinds.base import INFRA, Args, DomainArgs, JobKind, NoArgs, kind

_D = {"domain": "example.com"}


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
    domain: SiteDomain
    selector: Slug = "default"
    bits: Literal[1024, 2048, 4096] = 2048


class DmarcSet(Args):
    domain: SiteDomain
    policy: Literal["none", "quarantine", "reject"]
    rua: Email | None = None
    pct: Int = Field(default=100, ge=0, le=100)


_MB = {"address": "jo@example.com"}

# Who runs this domain's mutations, and from which plan (`base.DomainPolicy`).
POLICY = INFRA

KINDS: list[JobKind] = [
    kind("mail.list", NoArgs, "List the mail domains", read=True, example={}),
    kind("mail.domain-add", DomainArgs, "Receive mail for a domain", positional=("domain",), example=_D),
    kind("mail.domain-delete", DomainArgs, "Stop receiving mail for a domain", positional=("domain",), example=_D,
         confirm="domain"),
    kind("mail.mailbox-list", DomainArgs, "List the mailboxes of a domain", read=True, positional=("domain",),
         example=_D),
    kind("mail.mailbox-add", MailboxAdd, "Create a mailbox", positional=("address",),
         example={"address": "jo@example.com", "password": "correct-horse-battery", "quota_mb": 2048}),
    kind("mail.mailbox-delete", MailboxDelete, "Delete a mailbox", positional=("address",),
         example={"address": "jo@example.com", "keep_data": True}, confirm="address"),
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
