"""Job kinds of `metrics`."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from contract.job_kinds.argtypes import Email, Int
from contract.job_kinds.base import INFRA, Args, DiskSpace, IdArgs, JobKind, NoArgs, Result, kind


class MetricsHistory(Args):
    metric: Literal["cpu", "memory", "disk", "network", "load"]
    period: Literal["1h", "6h", "24h", "7d", "30d"] = "24h"


class AlertSet(Args):
    metric: Literal["cpu", "memory", "disk", "load"]
    threshold_percent: Int = Field(ge=1, le=100)
    duration_min: Int = Field(default=5, ge=1, le=1440)
    email: Email | None = None  # None: the organisation's owners


class LoadAverage(Result):
    model_config = ConfigDict(serialize_by_alias=True)  # the keys are /proc/loadavg's periods

    one: float = Field(alias="1m", description="runnable processes, averaged over 1 minute")
    five: float = Field(alias="5m", description="averaged over 5 minutes")
    fifteen: float = Field(alias="15m", description="averaged over 15 minutes")


class Memory(Result):
    total: int | None = Field(default=None, description="MemTotal, bytes")
    free: int | None = Field(default=None, description="MemFree, bytes")
    available: int | None = Field(default=None, description="MemAvailable, bytes")
    buffers: int | None = Field(default=None, description="Buffers, bytes")
    cached: int | None = Field(default=None, description="Cached (the page cache), bytes")
    swap_total: int | None = Field(default=None, description="SwapTotal, bytes")
    swap_free: int | None = Field(default=None, description="SwapFree, bytes")
    used: int | None = Field(default=None, description="total minus available, bytes")


class HomeDisk(DiskSpace):
    inodes_total: int = Field(description="the file system's inodes")
    inodes_free: int = Field(description="its free inodes")


class Network(Result):
    rx_bytes: int = Field(description="received since boot by every interface but the loopback, bytes")
    tx_bytes: int = Field(description="sent since boot, bytes")


class MetricsNow(Result):
    load: LoadAverage = Field(description="the load averages")
    cpu_count: int | None = Field(description="logical CPUs (None: not known)")
    memory: Memory = Field(description="the figures of /proc/meminfo (each None where the kernel has none)")
    disk: HomeDisk = Field(description="the file system of the sites' home")
    network: Network = Field(description="the network counters")
    uptime_s: float = Field(description="seconds since boot")
    cpu_percent: float | None = Field(description="CPU busy since the sample before, percent (None: the first)")


class MetricPoint(Result):
    at: str = Field(description="when it was sampled (RFC 3339, UTC)")
    value: float = Field(description="the metric then, in `unit`")


class MetricsHistoryResult(Result):
    metric: Literal["cpu", "memory", "disk", "network", "load"] = Field(description="the metric")
    period: Literal["1h", "6h", "24h", "7d", "30d"] = Field(description="how far back")
    unit: Literal["percent", "bytes/s"] = Field(description="the values' unit (load: percent of the CPUs)")
    points: list[MetricPoint] = Field(description="the samples of the period, oldest first")


class Alert(Result):
    id: str = Field(description="the rule's id (al-N)")
    metric: Literal["cpu", "memory", "disk", "load"] = Field(description="the metric it watches")
    threshold_percent: int = Field(description="it fires above this, percent")
    duration_min: int = Field(description="for this long, minutes")
    email: str | None = Field(description="who is told (None: the organisation's owners)")
    created_at: str = Field(description="when it was made (RFC 3339, UTC)")


class AlertState(Alert):
    value: float | None = Field(description="the metric's last sample, percent (None: no sample yet)")
    firing: bool = Field(description="every sample of its last duration_min minutes is above the threshold")


class AlertList(Result):
    alerts: list[AlertState] = Field(description="the rules, with the metric now")


class AlertSetResult(Result):
    alert: Alert = Field(description="the rule as it is now")
    replaced: bool = Field(description="it replaced the metric's rule (False: a new rule)")


class AlertDeleted(Result):
    deleted: Alert = Field(description="the rule removed")
    message: str = Field(description="what was done, for a person")


# Who runs this domain's mutations, and from which plan (`base.DomainPolicy`).
POLICY = INFRA

KINDS: list[JobKind] = [
    kind("metrics.get", NoArgs, "Show the current CPU, memory, disk, network and load", read=True, example={},
         result=MetricsNow),
    kind("metrics.history", MetricsHistory, "Show a metric over a period", read=True, positional=("metric",),
         example={"metric": "cpu", "period": "7d"}, result=MetricsHistoryResult),
    kind("metrics.alert-list", NoArgs, "List the metric alerts", read=True, example={}, result=AlertList),
    kind("metrics.alert-set", AlertSet, "Alert when a metric stays above a threshold", positional=("metric",),
         json=True, example={"metric": "disk", "threshold_percent": 90, "email": "ops@example.com"},
         result=AlertSetResult),
    kind("metrics.alert-delete", IdArgs, "Delete a metric alert", positional=("id",), example={"id": "al-2"},
         result=AlertDeleted),
]  # fmt: skip
