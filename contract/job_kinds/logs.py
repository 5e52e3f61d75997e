"""Job kinds of `logs`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from contract.job_kinds.argtypes import Duration, Int, SearchText, ServiceName, SiteDomain
from contract.job_kinds.base import INFRA, Args, JobKind, OptionalDomain, Result, kind

_D = {"domain": "example.com"}

LogName = Literal["access", "error"]


class LogsTail(Args):
    domain: SiteDomain
    log: LogName = "access"
    lines: Int = Field(default=200, ge=1, le=1_000_000)


class LogsSearch(Args):
    domain: SiteDomain
    text: SearchText  # a fixed string, not a regular expression
    log: LogName = "access"
    limit: Int = Field(default=1000, ge=1, le=100_000)
    since: Duration | None = None


class LogsJournal(Args):
    unit: ServiceName | None = None
    lines: Int = Field(default=200, ge=1, le=100_000)
    priority: Literal["emerg", "alert", "crit", "err", "warning", "notice", "info", "debug"] | None = None
    since: Duration | None = None


class LogFile(Result):
    scope: Literal["site", "system"] = Field(description="a site's log folder, or the system's log folder")
    domain: str | None = Field(description="the site (None: a system log)")
    path: str = Field(description="the file, on the server")
    bytes: int = Field(description="its size, bytes")
    modified: str = Field(description="when it last changed (RFC 3339, UTC)")


class LogList(Result):
    logs: list[LogFile] = Field(description="the sites' log files, then (without a domain) the system's")


# Who runs this domain's mutations, and from which plan (`base.DomainPolicy`).
POLICY = INFRA

KINDS: list[JobKind] = [
    kind("logs.tail", LogsTail, "Show the last lines of a site's log", read=True, positional=("domain",), json=False,
         example={"domain": "example.com", "log": "error", "lines": 500}),
    kind("logs.search", LogsSearch, "Find log lines containing a text", read=True, positional=("domain",),
         json=False, example={"domain": "example.com", "text": "POST /wp-login.php", "since": "24h"}),
    kind("logs.list", OptionalDomain, "List the log files and their sizes", read=True, example=_D,
         result=LogList),
    kind("logs.journal", LogsJournal, "Show the system journal", read=True, json=False,
         example={"unit": "nginx.service", "priority": "err", "since": "1h"}),
    kind("logs.rotate", OptionalDomain, "Rotate the logs now", example=_D),
]  # fmt: skip
