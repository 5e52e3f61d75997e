"""``metrics get --json``: load, CPUs, memory, the home's disk and uptime, read from /proc."""

from __future__ import annotations

import os
from typing import Any

import trio

from agent.jobs.base import JobContext, Output, handler
from api_client.job_kinds.base import NoArgs

MEMINFO_FIELDS = {
    "MemTotal": "total",
    "MemFree": "free",
    "MemAvailable": "available",
    "Buffers": "buffers",
    "Cached": "cached",
    "SwapTotal": "swap_total",
    "SwapFree": "swap_free",
}


def meminfo(path: str = "/proc/meminfo") -> dict[str, int]:
    """The memory figures of /proc/meminfo, in bytes."""
    memory: dict[str, int] = {}
    with open(path) as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in MEMINFO_FIELDS:
                parts = rest.split()
                if parts and parts[0].isdigit():
                    memory[MEMINFO_FIELDS[key]] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    if "total" in memory and "available" in memory:
        memory["used"] = memory["total"] - memory["available"]
    return memory


def disk(path: str) -> dict[str, Any]:
    st = os.statvfs(path)
    total, free, available = st.f_blocks * st.f_frsize, st.f_bfree * st.f_frsize, st.f_bavail * st.f_frsize
    used = total - free
    return {
        "path": path,
        "total": total,
        "used": used,
        "free": free,
        "available": available,
        "used_percent": round(100 * used / (used + available), 1) if used + available else 0.0,
        "inodes_total": st.f_files,
        "inodes_free": st.f_ffree,
    }


def uptime_s() -> float:
    with open("/proc/uptime") as f:
        return float(f.read().split()[0])


def metrics(home: str) -> dict[str, Any]:
    load1, load5, load15 = os.getloadavg()
    return {
        "load": {"1m": load1, "5m": load5, "15m": load15},
        "cpu_count": os.cpu_count(),
        "memory": meminfo(),
        "disk": disk(home),
        "uptime_s": uptime_s(),
    }


async def _get(args: NoArgs, ctx: JobContext, out: Output) -> int:
    out.result(await trio.to_thread.run_sync(metrics, ctx.home), as_json=ctx.as_json)
    return 0


KINDS = [
    handler("metrics.get", _get),
]
