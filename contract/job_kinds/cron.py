"""Job kinds of `cron`."""

from __future__ import annotations

from pydantic import Field, model_validator

from contract.job_kinds.argtypes import CronCommand, CronSchedule, DomainName, Id, Int
from contract.job_kinds.base import Args, IdArgs, JobKind, OptionalDomain, kind

_D = {"domain": "example.com"}


class CronAdd(Args):
    domain: DomainName
    schedule: CronSchedule
    command: CronCommand


class CronEdit(Args):
    id: Id
    schedule: CronSchedule | None = None  # None: unchanged
    command: CronCommand | None = None

    @model_validator(mode="after")
    def _something(self) -> CronEdit:
        if self.schedule is None and self.command is None:
            raise ValueError("nothing to change: give a schedule, a command or both")
        return self


class CronHistory(Args):
    id: Id
    limit: Int = Field(default=20, ge=1, le=1000)


_CRON = {"id": "c-12"}

KINDS: list[JobKind] = [
    kind("cron.list", OptionalDomain, "List the cron jobs", read=True, example=_D),
    kind("cron.add", CronAdd, "Add a cron job to a site", positional=("domain",),
         example={"domain": "example.com", "schedule": "*/5 * * * *",
                  "command": "/usr/bin/php /home/example-com/artisan schedule:run"}),
    kind("cron.pause", IdArgs, "Pause a cron job", positional=("id",), example=_CRON),
    kind("cron.resume", IdArgs, "Resume a paused cron job", positional=("id",), example=_CRON),
    kind("cron.run", IdArgs, "Run a cron job now", positional=("id",), example=_CRON),
    kind("cron.edit", CronEdit, "Change a cron job's schedule or command", positional=("id",),
         example={"id": "c-12", "schedule": "0 4 * * *"}),
    kind("cron.delete", IdArgs, "Delete a cron job", positional=("id",), example=_CRON),
    kind("cron.history", CronHistory, "List a cron job's last runs", read=True, positional=("id",),
         example={"id": "c-12", "limit": 5}),
]  # fmt: skip
