"""``system info --json``: what this server is (host, OS, kernel, CPU, memory, versions)."""

from __future__ import annotations

import os
import platform
import socket
from typing import Any

import trio

from agent.jobs.base import JobContext, Output, handler
from agent.jobs.metrics import meminfo, uptime_s
from api_client.job_kinds.base import NoArgs


def os_release(path: str = "/etc/os-release") -> dict[str, str]:
    fields: dict[str, str] = {}
    try:
        with open(path) as f:
            for line in f:
                key, sep, value = line.strip().partition("=")
                if sep and key and not key.startswith("#"):
                    fields[key] = value.strip().strip("\"'")
    except OSError:
        pass
    return fields


def cpu_model(path: str = "/proc/cpuinfo") -> str | None:
    try:
        with open(path) as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "cpu model", "Processor"):
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or None


def info(version: str) -> dict[str, Any]:
    release, uname = os_release(), os.uname()
    return {
        "hostname": socket.gethostname(),
        "os": {
            "name": release.get("PRETTY_NAME") or release.get("NAME") or uname.sysname,
            "id": release.get("ID"),
            "version_id": release.get("VERSION_ID"),
            "codename": release.get("VERSION_CODENAME"),
        },
        "kernel": {"name": uname.sysname, "release": uname.release, "version": uname.version, "machine": uname.machine},
        "cpu": {"model": cpu_model(), "count": os.cpu_count()},
        "memory_bytes": meminfo().get("total"),
        "uptime_s": uptime_s(),
        "python": platform.python_version(),
        "agent_version": version,
    }


async def _info(args: NoArgs, ctx: JobContext, out: Output) -> int:
    out.result(await trio.to_thread.run_sync(info, ctx.version), as_json=ctx.as_json)
    return 0


KINDS = [
    handler("system.info", _info),
]
