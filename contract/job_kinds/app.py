"""Job kinds of `app`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from contract.job_kinds.argtypes import (
    Bool,
    CommandLine,
    EnvName,
    Int,
    Port,
    RelativePath,
    Secret,
    SiteDomain,
    Slug,
    Version,
)
from contract.job_kinds.base import INFRA, Args, JobKind, NoArgs, ScopedPath, kind


class AppName(Args):
    name: Slug


class AppCreate(Args):
    name: Slug
    domain: SiteDomain
    runtime: Literal["node", "python", "ruby", "go", "bun", "deno"]
    runtime_version: Version | None = None
    port: Port
    command: CommandLine
    directory: RelativePath = ""


class AppDelete(Args):
    name: Slug
    keep_files: Bool = False


class AppLogs(Args):
    name: Slug
    lines: Int = Field(default=200, ge=1, le=100_000)


class AppEnvSet(Args):
    name: Slug
    key: EnvName
    value: Secret  # environment values are often credentials: they never enter the argv


class AppEnvKey(Args):
    name: Slug
    key: EnvName


class AppScale(Args):
    name: Slug
    instances: Int = Field(ge=1, le=32)


_A = {"name": "api"}

# Who runs this domain's mutations, and from which plan (`base.DomainPolicy`).
POLICY = INFRA

KINDS: list[JobKind] = [
    kind("app.list", NoArgs, "List the applications", read=True, example={}),
    kind("app.inspect", AppName, "Show an application", read=True, positional=("name",), example=_A),
    kind("app.create", AppCreate, "Create an application process behind a site", positional=("name",),
         example={"name": "api", "domain": "api.example.com", "runtime": "node", "runtime_version": "20",
                  "port": 3000, "command": "node server.js"}, paths=(ScopedPath("directory", site="domain"),)),
    kind("app.delete", AppDelete, "Delete an application", positional=("name",),
         example={"name": "api", "keep_files": True}, confirm="name"),
    kind("app.start", AppName, "Start an application", positional=("name",), example=_A),
    kind("app.stop", AppName, "Stop an application", positional=("name",), example=_A),
    kind("app.restart", AppName, "Restart an application", positional=("name",), example=_A),
    kind("app.logs", AppLogs, "Show the last lines an application printed", read=True, positional=("name",),
         json=False, example={"name": "api", "lines": 500}),
    kind("app.env-list", AppName, "List an application's environment variable names", read=True,
         positional=("name",), example=_A),
    kind("app.env-set", AppEnvSet, "Set an environment variable of an application", positional=("name", "key"),
         example={"name": "api", "key": "DATABASE_URL", "value": "postgres://u:p@localhost/db"}),
    kind("app.env-unset", AppEnvKey, "Remove an environment variable of an application", positional=("name", "key"),
         example={"name": "api", "key": "DEBUG"}),
    kind("app.scale", AppScale, "Set how many instances of an application run", positional=("name",),
         example={"name": "api", "instances": 4}),
]  # fmt: skip
