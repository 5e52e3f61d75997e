"""Job kinds of `system`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from contract.job_kinds.argtypes import HostName, Int, Locale, SafeText, Timezone
from contract.job_kinds.base import SYSADMIN, Args, JobKind, NoArgs, Result, kind


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


class OsRelease(Result):
    name: str = Field(description="os-release's PRETTY_NAME (or NAME, or the kernel's name)")
    id: str | None = Field(description="os-release's ID (debian, ubuntu...)")
    version_id: str | None = Field(description="os-release's VERSION_ID (12...)")
    codename: str | None = Field(description="os-release's VERSION_CODENAME (bookworm...)")


class KernelInfo(Result):
    name: str = Field(description="uname's system name (Linux)")
    release: str = Field(description="uname's release (6.1.0-18-amd64)")
    version: str = Field(description="uname's build version")
    machine: str = Field(description="uname's machine (x86_64, aarch64)")


class CpuInfo(Result):
    model: str | None = Field(description="the processor's model name (None: not known)")
    count: int | None = Field(description="the number of logical CPUs (None: not known)")


class KernelProtections(Result):
    protected_hardlinks: bool | None = Field(description="fs.protected_hardlinks is on (None: not readable)")
    protected_symlinks: bool | None = Field(description="fs.protected_symlinks is on (None: not readable)")


class SystemInfo(Result):
    hostname: str = Field(description="the server's host name")
    os: OsRelease = Field(description="the distribution, from /etc/os-release")
    kernel: KernelInfo = Field(description="the running kernel, from uname")
    cpu: CpuInfo = Field(description="the processors")
    memory_bytes: int | None = Field(description="the total memory, bytes (None: /proc/meminfo has no MemTotal)")
    uptime_s: float = Field(description="seconds since boot")
    python: str = Field(description="the agent's Python version")
    agent_version: str = Field(description="the agent's version")
    kernel_protections: KernelProtections = Field(description="the kernel's link protections the file jail relies on")


class ProcessRow(Result):
    pid: int = Field(description="the process id")
    user: str = Field(description="the owner's user name (or uid)")
    cpu_percent: float = Field(description="CPU time over its lifetime, percent of one CPU (ps pcpu)")
    memory_percent: float = Field(description="resident memory, percent of the total (ps pmem)")
    rss_bytes: int = Field(description="resident memory, bytes")
    elapsed_s: int = Field(description="seconds since it started")
    name: str = Field(description="the executable's name (ps comm)")
    command: str = Field(description="the full command line")


class ProcessList(Result):
    sort: Literal["cpu", "memory"] = Field(description="the order: by CPU, or by resident memory, highest first")
    processes: list[ProcessRow] = Field(description="the busiest processes, at most `limit`")


class CacheDrop(Result):
    message: str = Field(description="what was done, for a person")
    cached_before_bytes: int | None = Field(description="page cache before, bytes (None: not known)")
    cached_after_bytes: int | None = Field(description="page cache after, bytes (None: not known)")


# Who runs this domain's mutations, and from which plan (`base.DomainPolicy`).
POLICY = SYSADMIN

KINDS: list[JobKind] = [
    kind("system.info", NoArgs, "Show the server: OS, kernel, CPU, memory, uptime, load", read=True, example={},
         result=SystemInfo),
    kind("system.processes", Processes, "List the busiest processes", read=True,
         example={"sort": "memory", "limit": 10}, result=ProcessList),
    kind("system.reboot", Reboot, "Reboot the server", example={"delay_min": 5, "confirm": "web1.example.com"}),
    kind("system.hostname-set", HostnameSet, "Set the host name", positional=("hostname",),
         example={"hostname": "web1.example.com"}),
    kind("system.timezone-set", TimezoneSet, "Set the time zone", positional=("timezone",),
         example={"timezone": "Europe/Berlin"}),
    kind("system.locale-set", LocaleSet, "Set the system locale", positional=("locale",),
         example={"locale": "en_US.UTF-8"}),
    kind("system.swap-set", SwapSet, "Size the swap file", positional=("size_mb",), example={"size_mb": 2048}),
    kind("system.ntp-sync", NoArgs, "Synchronise the clock now", example={}),
    kind("system.cache-drop", NoArgs, "Drop the kernel's page cache, dentries and inodes", example={},
         result=CacheDrop),
]  # fmt: skip
