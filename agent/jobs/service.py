"""``service status|restart <name>``: system services, through systemd when it runs.

systemd is detected the way ``sd_booted()`` does (``/run/systemd/system`` exists); otherwise the
SysV ``service`` tool (``/etc/init.d`` scripts) answers.
"""

from __future__ import annotations

import os
from typing import Any

import trio

from agent.jobs.base import JobContext, JobError, Output, handler
from agent.jobs.host import systemd_running
from agent.jobs.proc import capture_command, require, stream_command
from api_client.job_kinds.system import ServiceArgs

INIT_D = "/etc/init.d"


async def _require_init_script(name: str) -> None:
    if not await trio.to_thread.run_sync(os.path.exists, os.path.join(INIT_D, name)):
        raise JobError(f"no service named {name} on this server (no {INIT_D}/{name})")


async def _systemd_status(name: str) -> dict[str, Any]:
    systemctl = require("systemctl", "ask systemd about the service")
    properties = "LoadState,ActiveState,SubState,Description"
    code, text, err = await capture_command([systemctl, "show", name, f"--property={properties}", "--no-pager"])
    if code != 0:
        raise JobError(f"systemctl show {name} failed (exit {code}): {' '.join(err.split())}")
    return parse_systemctl_show(name, text)


def parse_systemctl_show(name: str, text: str) -> dict[str, Any]:
    """The status of `name` from ``systemctl show --property=LoadState,ActiveState,SubState,Description``."""
    fields = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    if fields.get("LoadState") == "not-found":
        raise JobError(f"no service named {name} on this server")
    active = fields.get("ActiveState", "unknown")
    return {
        "name": name,
        "active": active == "active",
        "state": f"{active} ({fields.get('SubState', 'unknown')})",
        "description": fields.get("Description"),
        "manager": "systemd",
    }


async def _sysv_status(name: str) -> dict[str, Any]:
    service = require("service", "ask the init scripts about the service")
    await _require_init_script(name)
    code, text, err = await capture_command([service, name, "status"])
    return parse_service_status(name, code, text, err)


def parse_service_status(name: str, code: int, text: str, err: str) -> dict[str, Any]:
    """The status of `name` from ``service NAME status``: its exit code (LSB: 0 running) and last words."""
    said = [line.strip() for line in (text + "\n" + err).splitlines() if line.strip()]
    if code == 1 and any("unrecognized service" in line for line in said):
        raise JobError(f"no service named {name} on this server")
    return {
        "name": name,
        "active": code == 0,
        "state": said[-1] if said else ("running" if code == 0 else f"not running (status {code})"),
        "status_code": code,
        "manager": "sysv",
    }


async def _status(args: ServiceArgs, ctx: JobContext, out: Output) -> int:
    result = await (_systemd_status(args.name) if systemd_running() else _sysv_status(args.name))
    out.result(result, as_json=ctx.as_json)
    return 0


async def _restart(args: ServiceArgs, ctx: JobContext, out: Output) -> int:
    name = args.name
    if systemd_running():
        argv = [require("systemctl", "restart the service"), "restart", name]
    else:
        await _require_init_script(name)
        argv = [require("service", "restart the service"), name, "restart"]
    return await stream_command(out, argv)


KINDS = [
    handler("service.status", _status),
    handler("service.restart", _restart),
]
