"""Job kinds of `daemon` (supervised long-running processes of a site)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from contract.job_kinds.argtypes import CommandLine, Int, RelativePath, SiteDomain, Slug, listed_by
from contract.job_kinds.base import Args, JobKind, NoArgs, ScopedPath, kind

DaemonName = Annotated[Slug, listed_by("daemon.list", "daemons", "name", noun="daemons", details=("domain", "command"))]
"""A daemon the server has (a new one's name is a plain `Slug`)."""


class DaemonCreate(Args):
    name: Slug
    domain: SiteDomain
    command: CommandLine
    directory: RelativePath = ""  # the working folder inside the site
    instances: Int = Field(default=1, ge=1, le=16)


class DaemonArgs(Args):
    name: DaemonName


class DaemonLogs(Args):
    name: DaemonName
    lines: Int = Field(default=200, ge=1, le=100_000)


_DMN = {"name": "queue-worker"}

KINDS: list[JobKind] = [
    kind("daemon.list", NoArgs, "List the daemons", read=True, example={}),
    kind("daemon.status", DaemonArgs, "Show a daemon's processes", read=True, positional=("name",), example=_DMN),
    kind("daemon.create", DaemonCreate, "Run a command as a supervised daemon of a site", positional=("name",),
         example={"name": "queue-worker", "domain": "example.com", "command": "php artisan queue:work --tries=3",
                  "instances": 2}, paths=(ScopedPath("directory", site="domain"),)),
    kind("daemon.delete", DaemonArgs, "Stop and delete a daemon", positional=("name",), example=_DMN),
    kind("daemon.start", DaemonArgs, "Start a daemon", positional=("name",), example=_DMN),
    kind("daemon.stop", DaemonArgs, "Stop a daemon", positional=("name",), example=_DMN),
    kind("daemon.restart", DaemonArgs, "Restart a daemon", positional=("name",), example=_DMN),
    kind("daemon.logs", DaemonLogs, "Show the last lines a daemon printed", read=True, positional=("name",),
         json=False, example={"name": "queue-worker", "lines": 50}),
]  # fmt: skip
