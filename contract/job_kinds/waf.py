"""Job kinds of `waf`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from contract.job_kinds.argtypes import Int, IPOrCidr, SiteDomain
from contract.job_kinds.base import SYSADMIN, Args, DomainArgs, JobKind, OptionalDomain, kind

_D = {"domain": "example.com"}


class WafEnable(Args):
    domain: SiteDomain
    mode: Literal["detect", "block"] = "block"


class WafRule(Args):
    domain: SiteDomain
    rule_id: Int = Field(ge=1, le=99_999_999)


class WafAllow(Args):
    domain: SiteDomain
    source: IPOrCidr


class WafParanoia(Args):
    domain: SiteDomain
    level: Int = Field(ge=1, le=4)


class WafEvents(Args):
    domain: SiteDomain
    limit: Int = Field(default=100, ge=1, le=1000)


# Who runs this domain's mutations, and from which plan (`base.DomainPolicy`).
POLICY = SYSADMIN

KINDS: list[JobKind] = [
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
