"""This machine's figures, read from /proc and statvfs: memory, a file system's space, uptime
(for ``metrics.*``, ``system.info`` and ``storage.*``)."""

from __future__ import annotations

import os
from typing import Any

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
    """The memory figures of /proc/meminfo, in bytes (``total``, ``available``, ``used``...).

    Why: ``system.info`` and the metrics sampler read the same figures the same way.

    Args:
        path: the file to read (a test gives its own).

    Raises:
        OSError: the file cannot be read.
    """
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
    """The space and inodes of the file system holding `path` (statvfs), in bytes.

    Why: ``storage.*`` and the metrics sampler report the same figures the same way.

    Args:
        path: any path on that file system (the home).

    Raises:
        OSError: `path` does not exist.
    """
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
    """Seconds since this machine booted (/proc/uptime).

    Raises:
        OSError: /proc is not mounted.
    """
    with open("/proc/uptime") as f:
        return float(f.read().split()[0])
