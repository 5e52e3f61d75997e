"""Job kinds of `plan`: hosting plans, the resource packages applied to sites (pro)."""

from __future__ import annotations

from pydantic import Field

from contract.job_kinds.argtypes import Int, SiteDomain, Slug
from contract.job_kinds.base import INFRA_PRO, Args, DomainArgs, JobKind, NameArgs, NoArgs, kind

_D = {"domain": "example.com"}


class PlanCreate(Args):
    name: Slug
    disk_mb: Int = Field(ge=0, le=16_777_216)  # 0: unlimited, here and below
    bandwidth_gb: Int = Field(default=0, ge=0, le=1_000_000)
    memory_mb: Int = Field(default=0, ge=0, le=1_048_576)
    cpu_percent: Int = Field(default=0, ge=0, le=12_800)
    processes: Int = Field(default=0, ge=0, le=100_000)


class PlanApply(Args):
    domain: SiteDomain
    plan: Slug


# Who runs this domain's mutations, and from which plan (`base.DomainPolicy`).
POLICY = INFRA_PRO

KINDS: list[JobKind] = [
    kind("plan.list", NoArgs, "List the hosting plans", read=True, example={}),
    kind("plan.show", DomainArgs, "Show the plan of a site and its usage against it", read=True,
         positional=("domain",), example=_D),
    kind("plan.create", PlanCreate, "Create or change a hosting plan", positional=("name",),
         example={"name": "small", "disk_mb": 10240, "memory_mb": 1024, "cpu_percent": 100}),
    kind("plan.delete", NameArgs, "Delete a hosting plan no site uses", positional=("name",),
         example={"name": "small"}),
    kind("plan.apply", PlanApply, "Put a site on a hosting plan", positional=("domain", "plan"),
         example={"domain": "example.com", "plan": "small"}),
]  # fmt: skip
