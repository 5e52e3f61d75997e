"""Job kinds of `system`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from contract.job_kinds.argtypes import HostName, Int, Locale, SafeText, Timezone
from contract.job_kinds.base import Args, JobKind, NoArgs, kind


class Processes(Args):
    sort: Literal["cpu", "memory"] = "cpu"
    limit: Int = Field(default=25, ge=1, le=500)


class Reboot(Args):
    delay_min: Int = Field(default=0, ge=0, le=1440)
    confirm: SafeText | None = None  # the server's host name, typed again: anything else refuses


class HostnameSet(Args):
    hostname: HostName


class TimezoneSet(Args):
    timezone: Timezone


class LocaleSet(Args):
    locale: Locale


class SwapSet(Args):
    size_mb: Int = Field(ge=0, le=65536)  # 0: no swap file


KINDS: list[JobKind] = [
    kind("system.info", NoArgs, "Show the server: OS, kernel, CPU, memory, uptime, load", read=True, example={}),
    kind("system.processes", Processes, "List the busiest processes", read=True,
         example={"sort": "memory", "limit": 10}),
    kind("system.reboot", Reboot, "Reboot the server", example={"delay_min": 5, "confirm": "web1.example.com"}),
    kind("system.hostname-set", HostnameSet, "Set the host name", positional=("hostname",),
         example={"hostname": "web1.example.com"}),
    kind("system.timezone-set", TimezoneSet, "Set the time zone", positional=("timezone",),
         example={"timezone": "Europe/Berlin"}),
    kind("system.locale-set", LocaleSet, "Set the system locale", positional=("locale",),
         example={"locale": "en_US.UTF-8"}),
    kind("system.swap-set", SwapSet, "Size the swap file", positional=("size_mb",), example={"size_mb": 2048}),
    kind("system.ntp-sync", NoArgs, "Synchronise the clock now", example={}),
    kind("system.cache-drop", NoArgs, "Drop the kernel's page cache, dentries and inodes", example={}),
]  # fmt: skip
