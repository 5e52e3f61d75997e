"""Job kinds of `daemon` (supervised long-running processes of a site)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from contract.job_kinds.argtypes import CommandLine, Int, RelativePath, SiteDomain, Slug, listed_by
from contract.job_kinds.base import INFRA, Args, JobKind, NoArgs, Result, ScopedPath, kind

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


class DaemonDefinition(Result):
    name: str = Field(description="the daemon's name")
    domain: str = Field(description="the site whose user runs it")
    command: str = Field(description="the command line, as given")
    directory: str = Field(description="its working folder inside the site ('': the site's folder)")
    instances: int = Field(description="how many processes run it")


class DaemonProcess(Result):
    group: str = Field(description="supervisor's group (the program, fleetdeck-<name>)")
    process: str = Field(description="the instance's name (fleetdeck-<name>_NN)")
    state: str = Field(description="supervisor's state: RUNNING, STARTING, BACKOFF, STOPPED, FATAL...")
    pid: int | None = Field(description="its process id (None: not running)")
    uptime: str | None = Field(description="how long it has run, H:MM:SS (None: not running)")
    description: str | None = Field(description="supervisor's words after the state")


class Daemon(DaemonDefinition):
    program: str = Field(description="the supervisor program, fleetdeck-<name>")
    running: int = Field(description="how many of its instances are RUNNING")
    processes: list[DaemonProcess] = Field(description="its instances as supervisord knows them (none: not loaded)")


class DaemonList(Result):
    daemons: list[Daemon] = Field(description="every daemon, by name")
    supervisor: str = Field(description="running, or why supervisord could not be asked")


class DaemonCreated(Result):
    daemon: Daemon = Field(description="the daemon as it is now")
    outcome: Literal["created", "changed", "unchanged"] = Field(description="what the job did to it")


class DaemonDeleted(Result):
    deleted: DaemonDefinition | None = Field(description="the daemon removed (None: there was none)")


_DMN = {"name": "queue-worker"}

# Who runs this domain's mutations, and from which plan (`base.DomainPolicy`).
POLICY = INFRA

KINDS: list[JobKind] = [
    kind("daemon.list", NoArgs, "List the daemons", read=True, example={}, result=DaemonList),
    kind("daemon.status", DaemonArgs, "Show a daemon's processes", read=True, positional=("name",), example=_DMN,
         result=Daemon),
    kind("daemon.create", DaemonCreate, "Run a command as a supervised daemon of a site", positional=("name",),
         example={"name": "queue-worker", "domain": "example.com", "command": "php artisan queue:work --tries=3",
                  "instances": 2}, paths=(ScopedPath("directory", site="domain"),), result=DaemonCreated),
    kind("daemon.delete", DaemonArgs, "Stop and delete a daemon", positional=("name",), example=_DMN,
         result=DaemonDeleted),
    kind("daemon.start", DaemonArgs, "Start a daemon", positional=("name",), example=_DMN),
    kind("daemon.stop", DaemonArgs, "Stop a daemon", positional=("name",), example=_DMN),
    kind("daemon.restart", DaemonArgs, "Restart a daemon", positional=("name",), example=_DMN),
    kind("daemon.logs", DaemonLogs, "Show the last lines a daemon printed", read=True, positional=("name",),
         json=False, example={"name": "queue-worker", "lines": 50}),
]  # fmt: skip
