"""Job kinds of `tuning` (pro)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from contract.job_kinds.allowlists import SYSCTL, allowed_values, value_of_its_key
from contract.job_kinds.argtypes import SysctlKey, SysctlValue
from contract.job_kinds.base import INFRA_PRO, Args, JobKind, kind

TuningTarget = Literal["system", "mysql", "postgres", "php", "nginx", "redis"]


class TuningArgs(Args):
    target: TuningTarget


class TuningApply(Args):
    target: TuningTarget
    profile: Literal["auto", "balanced", "performance", "low-memory"] = "auto"


class SysctlSet(Args):
    """A kernel parameter of the allow-list, set persistently."""

    key: SysctlKey
    value: SysctlValue = Field(json_schema_extra=allowed_values(SYSCTL))

    _allowed_value = value_of_its_key(SYSCTL)


# Who runs this domain's mutations, and from which plan (`base.DomainPolicy`).
POLICY = INFRA_PRO

KINDS: list[JobKind] = [
    kind("tuning.show", TuningArgs, "Show the current tuning of a component", read=True, positional=("target",),
         example={"target": "mysql"}),
    kind("tuning.recommend", TuningArgs, "Recommend settings for a component from the hardware and load",
         read=True, positional=("target",), example={"target": "php"}),
    kind("tuning.apply", TuningApply, "Apply a tuning profile to a component", positional=("target",),
         example={"target": "mysql", "profile": "performance"}),
    kind("tuning.reset", TuningArgs, "Restore a component's default settings", positional=("target",),
         example={"target": "nginx"}),
    kind("tuning.sysctl-set", SysctlSet, "Set a kernel parameter (from the allow-list) persistently",
         positional=("key", "value"),
         example={"key": "net.core.somaxconn", "value": "4096"}),
]  # fmt: skip
