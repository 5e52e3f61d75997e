"""Job kinds of `quota` (pro)."""

from __future__ import annotations

from pydantic import Field, model_validator

from contract.job_kinds.argtypes import Int, Username
from contract.job_kinds.base import INFRA_PRO, Args, JobKind, NoArgs, UserArgs, kind

_U = {"username": "deploy"}


class QuotaSet(Args):
    username: Username
    soft_mb: Int = Field(ge=0, le=16_777_216)
    hard_mb: Int = Field(ge=0, le=16_777_216)
    inodes: Int | None = Field(default=None, ge=0, le=1_000_000_000)

    @model_validator(mode="after")
    def _soft_below_hard(self) -> QuotaSet:
        if self.soft_mb > self.hard_mb:
            raise ValueError("the soft limit must not exceed the hard limit")
        return self


# Who runs this domain's mutations, and from which plan (`base.DomainPolicy`).
POLICY = INFRA_PRO

KINDS: list[JobKind] = [
    kind("quota.list", NoArgs, "List the disk quotas and usage of every user", read=True, example={}),
    kind("quota.get", UserArgs, "Show a user's disk quota and usage", read=True, positional=("username",),
         example=_U),
    kind("quota.set", QuotaSet, "Set a user's disk quota", positional=("username",),
         example={"username": "deploy", "soft_mb": 9000, "hard_mb": 10000}),
    kind("quota.remove", UserArgs, "Remove a user's disk quota", positional=("username",), example=_U),
]  # fmt: skip
