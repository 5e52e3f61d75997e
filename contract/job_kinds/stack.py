"""Job kinds of `stack` (compose projects from the template catalog)."""

from __future__ import annotations

from pydantic import Field

from contract.job_kinds.argtypes import Bool, Int, ServiceName, SiteDomain, Slug
from contract.job_kinds.base import INFRA, Args, JobKind, NoArgs, kind


class StackName(Args):
    name: Slug


class StackCreate(Args):
    name: Slug
    template: Slug
    domain: SiteDomain | None = None  # the site that proxies to the stack's web service


class StackDown(Args):
    name: Slug
    volumes: Bool = False


class StackRestart(Args):
    name: Slug
    service: ServiceName | None = None


class StackLogs(Args):
    name: Slug
    service: ServiceName | None = None
    lines: Int = Field(default=200, ge=1, le=100_000)


_S = {"name": "monitoring"}

# Who runs this domain's mutations, and from which plan (`base.DomainPolicy`).
POLICY = INFRA

KINDS: list[JobKind] = [
    kind("stack.list", NoArgs, "List the stacks", read=True, example={}),
    kind("stack.templates", NoArgs, "List the stack templates that can be created", read=True, example={}),
    kind("stack.inspect", StackName, "Show a stack and its services", read=True, positional=("name",), example=_S),
    kind("stack.create", StackCreate, "Create a stack from a template", positional=("name",),
         example={"name": "monitoring", "template": "uptime-kuma", "domain": "status.example.com"}),
    kind("stack.delete", StackDown, "Delete a stack", positional=("name",), example={**_S, "volumes": True},
         confirm="name"),
    kind("stack.up", StackName, "Start a stack", positional=("name",), example=_S),
    kind("stack.down", StackDown, "Stop a stack", positional=("name",), example=_S),
    kind("stack.restart", StackRestart, "Restart a stack or one of its services", positional=("name",),
         example={**_S, "service": "app"}),
    kind("stack.pull", StackName, "Pull newer images for a stack and recreate it", positional=("name",), example=_S),
    kind("stack.logs", StackLogs, "Show the last lines a stack printed", read=True, positional=("name",), json=False,
         example={**_S, "service": "app", "lines": 100}),
]  # fmt: skip
