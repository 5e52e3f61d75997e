"""Job kinds of `cron`."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from contract.job_kinds.argtypes import CronCommand, CronSchedule, Id, Int, SiteDomain, listed_by
from contract.job_kinds.base import Args, JobKind, OptionalDomain, kind

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


_CRON = {"id": "c-12"}

KINDS: list[JobKind] = [
    kind("cron.list", OptionalDomain, "List the cron jobs", read=True, example=_D),
    kind("cron.add", CronAdd, "Add a cron job to a site", positional=("domain",),
         example={"domain": "example.com", "schedule": "*/5 * * * *",
                  "command": "/usr/bin/php /home/example-com/artisan schedule:run"}),
    kind("cron.pause", CronEntryArgs, "Pause a cron job", positional=("id",), example=_CRON),
    kind("cron.resume", CronEntryArgs, "Resume a paused cron job", positional=("id",), example=_CRON),
    kind("cron.run", CronEntryArgs, "Run a cron job now", positional=("id",), example=_CRON),
    kind("cron.edit", CronEdit, "Change a cron job's schedule or command", positional=("id",),
         example={"id": "c-12", "schedule": "0 4 * * *"}),
    kind("cron.delete", CronEntryArgs, "Delete a cron job", positional=("id",), example=_CRON),
    kind("cron.history", CronHistory, "List a cron job's last runs", read=True, positional=("id",),
         example={"id": "c-12", "limit": 5}),
]  # fmt: skip
