"""Job kinds of `cron`."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from contract.job_kinds.argtypes import CronCommand, CronSchedule, Id, Int, SiteDomain, listed_by
from contract.job_kinds.base import INFRA, Args, JobKind, OptionalDomain, Result, kind

CronEntryId = Annotated[
    Id, listed_by("cron.list", "entries", "id", noun="cron entries", details=("domain", "schedule", "command"))
]
"""A cron entry the server has."""


_D = {"domain": "example.com"}


class CronAdd(Args):
    domain: SiteDomain
    schedule: CronSchedule
    command: CronCommand


class CronEntryArgs(Args):
    id: CronEntryId


class CronEdit(Args):
    id: CronEntryId
    schedule: CronSchedule | None = None  # None: unchanged
    command: CronCommand | None = None

    @model_validator(mode="after")
    def _something(self) -> CronEdit:
        if self.schedule is None and self.command is None:
            raise ValueError("nothing to change: give a schedule, a command or both")
        return self


class CronHistory(Args):
    id: CronEntryId
    limit: Int = Field(default=20, ge=1, le=1000)


class CronEntry(Result):
    id: str = Field(description="the entry's id (c + 12 hex digits)")
    domain: str = Field(description="the site whose user runs it")
    schedule: str = Field(description="the five crontab time fields")
    command: str = Field(description="the command, run in the site's folder as its user")
    paused: bool = Field(description="left out of the crontab until resumed")
    created_at: str = Field(description="when it was added (RFC 3339, UTC)")


class CronList(Result):
    entries: list[CronEntry] = Field(description="the entries (of the site asked for, or all)")


class CronAdded(Result):
    entry: CronEntry = Field(description="the new entry")
    user: str = Field(description="the site user whose crontab runs it")


class CronDeleted(Result):
    deleted: CronEntry = Field(description="the entry removed (its run history went with it)")


class CronRun(Result):
    started_at: str = Field(description="when it started (RFC 3339, UTC)")
    ended_at: str | None = Field(description="when it ended (None: not ended)")
    duration_s: int | None = Field(description="how long it ran, seconds (None: not ended)")
    exit_code: int | None = Field(description="its exit code (None: not ended)")
    state: Literal["running", "ok", "failed", "interrupted"] = Field(
        description="running, ok (exit 0), failed, or interrupted (it never recorded an end)"
    )
    trigger: Literal["manual", "schedule"] = Field(description="started by cron.run, or by cron's schedule")


class CronHistoryResult(Result):
    id: str = Field(description="the entry's id")
    domain: str = Field(description="its site")
    schedule: str = Field(description="the five crontab time fields")
    command: str = Field(description="the command")
    paused: bool = Field(description="left out of the crontab until resumed")
    history_file: str = Field(description="where the runs are recorded, on the server")
    runs: list[CronRun] = Field(description="the last runs, newest first, at most `limit`")


_CRON = {"id": "c-12"}

# Who runs this domain's mutations, and from which plan (`base.DomainPolicy`).
POLICY = INFRA

KINDS: list[JobKind] = [
    kind("cron.list", OptionalDomain, "List the cron jobs", read=True, example=_D, result=CronList),
    kind("cron.add", CronAdd, "Add a cron job to a site", positional=("domain",),
         example={"domain": "example.com", "schedule": "*/5 * * * *",
                  "command": "/usr/bin/php /home/example-com/artisan schedule:run"}, result=CronAdded),
    kind("cron.pause", CronEntryArgs, "Pause a cron job", positional=("id",), example=_CRON),
    kind("cron.resume", CronEntryArgs, "Resume a paused cron job", positional=("id",), example=_CRON),
    kind("cron.run", CronEntryArgs, "Run a cron job now", positional=("id",), example=_CRON),
    kind("cron.edit", CronEdit, "Change a cron job's schedule or command", positional=("id",),
         example={"id": "c-12", "schedule": "0 4 * * *"}),
    kind("cron.delete", CronEntryArgs, "Delete a cron job", positional=("id",), example=_CRON, result=CronDeleted),
    kind("cron.history", CronHistory, "List a cron job's last runs", read=True, positional=("id",),
         example={"id": "c-12", "limit": 5}, result=CronHistoryResult),
]  # fmt: skip
