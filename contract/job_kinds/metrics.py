"""Job kinds of `metrics`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from contract.job_kinds.argtypes import Email, Int
from contract.job_kinds.base import Args, IdArgs, JobKind, NoArgs, kind


class MetricsHistory(Args):
    metric: Literal["cpu", "memory", "disk", "network", "load"]
    period: Literal["1h", "6h", "24h", "7d", "30d"] = "24h"


class AlertSet(Args):
    metric: Literal["cpu", "memory", "disk", "load"]
    threshold_percent: Int = Field(ge=1, le=100)
    duration_min: Int = Field(default=5, ge=1, le=1440)
    email: Email | None = None  # None: the organisation's owners


KINDS: list[JobKind] = [
    kind("metrics.get", NoArgs, "Show the current CPU, memory, disk, network and load", read=True, example={}),
    kind("metrics.history", MetricsHistory, "Show a metric over a period", read=True, positional=("metric",),
         example={"metric": "cpu", "period": "7d"}),
    kind("metrics.alert-list", NoArgs, "List the metric alerts", read=True, example={}),
    kind("metrics.alert-set", AlertSet, "Alert when a metric stays above a threshold", positional=("metric",),
         json=True, example={"metric": "disk", "threshold_percent": 90, "email": "ops@example.com"}),
    kind("metrics.alert-delete", IdArgs, "Delete a metric alert", positional=("id",), example={"id": "al-2"}),
]  # fmt: skip
