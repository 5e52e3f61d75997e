"""``service list|status|start|stop|restart|reload|enable|disable|logs``: the system's services.

Where PID 1 is systemd (``/run/systemd/system`` exists, what ``sd_booted()`` checks; the host
layout's ``init`` section may say so instead) they are systemd units: ``systemctl
list-units|show|<action>`` and ``journalctl -u``. Otherwise they are the Debian init scripts:
``service --status-all``, ``service <name> <action>``, ``update-rc.d`` for the boot links
(``agent.jobs.toolkit.host.system_argv`` builds every action's argv), and, without a journal, the log
files a service is known to write (`SYSV_LOG_FILES`).

A change that is already in place says so and ends 0 (start of a running service, enable of an
enabled one); after a change the service's state is read back, and a service that did not reach
it (an init script that printed "ERROR." yet exited 0) fails the job.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import re
from typing import Any

import trio

from agent.jobs.toolkit.base import JobContext, RunFunction, handler
from agent.jobs.toolkit.host import INIT_D, InitLayout, system_argv, sysv_enabled
from agent.jobs.toolkit.output import JobError, Output
from agent.jobs.toolkit.proc import capture_command, require, stream_command
from contract.job_kinds.base import NoArgs
from contract.job_kinds.service import ServiceArgs, ServiceLogs, ServiceStop

SHOW_PROPERTIES = "LoadState,ActiveState,SubState,Description,MainPID,UnitFileState"
ENABLED_STATES = {"enabled": True, "enabled-runtime": True, "alias": True, "disabled": False, "masked": False}

# Without journald, the files a Debian service writes (fnmatch pattern of the name -> glob patterns;
# ``{name}`` is the service's name). Services that log only to syslog have none.
SYSV_LOG_FILES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("nginx", ("/var/log/nginx/error.log", "/var/log/nginx/access.log")),
    ("php*-fpm", ("/var/log/{name}.log",)),
    ("mariadb", ("/var/log/mysql/error.log",)),
    ("mysql", ("/var/log/mysql/error.log",)),
    ("postgresql", ("/var/log/postgresql/postgresql-*.log",)),
    ("supervisor", ("/var/log/supervisor/supervisord.log",)),
    ("fail2ban", ("/var/log/fail2ban.log",)),
    ("haproxy", ("/var/log/haproxy.log",)),
    ("named", ("/var/log/named/*.log",)),
    ("unattended-upgrades", ("/var/log/unattended-upgrades/unattended-upgrades.log",)),
)


# --- reading the state ----------------------------------------------------------------------------


def parse_systemctl_show(name: str, text: str) -> dict[str, Any]:
    """The status of `name` from ``systemctl show --property=`` `SHOW_PROPERTIES`."""
    fields = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    if fields.get("LoadState") == "not-found":
        raise JobError(f"no service named {name} on this server")
    active = fields.get("ActiveState", "unknown")
    pid = fields.get("MainPID", "0")
    return {
        "name": name,
        "active": active == "active",
        "state": f"{active} ({fields.get('SubState', 'unknown')})",
        "description": fields.get("Description"),
        "pid": int(pid) if pid.isdigit() and pid != "0" else None,
        "enabled": ENABLED_STATES.get(fields.get("UnitFileState", "")),  # None: static, generated, ...
        "manager": "systemd",
    }


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


async def _systemd_status(name: str, init: InitLayout) -> dict[str, Any]:
    systemctl = init.tool("systemctl", "ask systemd about the service")
    code, text, err = await capture_command([systemctl, "show", name, f"--property={SHOW_PROPERTIES}", "--no-pager"])
    if code != 0:
        raise JobError(f"systemctl show {name} failed (exit {code}): {' '.join(err.split())}")
    return parse_systemctl_show(name, text)


async def _sysv_status(name: str, init: InitLayout) -> dict[str, Any]:
    code, text, err = await capture_command(system_argv(name, "status", init))
    status = parse_service_status(name, code, text, err)
    status["enabled"] = await trio.to_thread.run_sync(sysv_enabled, name)
    return status


async def service_state(name: str, init: InitLayout) -> dict[str, Any]:
    """The state of the service `name` (a JobError when there is no such service)."""
    return await (_systemd_status(name, init) if init.systemd else _sysv_status(name, init))


# --- list ---------------------------------------------------------------------------------------------


def parse_list_units(text: str) -> list[dict[str, Any]]:
    """``systemctl list-units --type=service --all --no-pager --plain``: one record per unit line
    (UNIT LOAD ACTIVE SUB DESCRIPTION); the header, the legend and the counts are skipped."""
    services = []
    for line in text.splitlines():
        parts = line.lstrip("● *").split(None, 4)
        if len(parts) < 4 or not parts[0].endswith(".service"):
            continue
        unit, load, active, sub = parts[:4]
        services.append(
            {
                "name": unit.removesuffix(".service"),
                "active": active == "active",
                "state": f"{active} ({sub})",
                "loaded": load == "loaded",
                "description": parts[4].strip() if len(parts) > 4 else None,
            }
        )
    return services


def parse_list_unit_files(text: str) -> dict[str, bool | None]:
    """``systemctl list-unit-files --type=service --no-pager --plain --no-legend``: unit -> enabled."""
    states: dict[str, bool | None] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].endswith(".service"):
            states[parts[0].removesuffix(".service")] = ENABLED_STATES.get(parts[1])
    return states


STATUS_ALL_LINE = re.compile(r"^\s*\[ ([+?-]) \]\s+(\S+)\s*$")


def parse_status_all(text: str) -> list[dict[str, Any]]:
    """``service --status-all``: `` [ + ]  name`` running, ``[ - ]`` stopped, ``[ ? ]`` unknown
    (a script without a status action)."""
    services = []
    for line in text.splitlines():
        match = STATUS_ALL_LINE.match(line)
        if match:
            sign, name = match.groups()
            state = {"+": "running", "-": "stopped", "?": "unknown"}[sign]
            services.append({"name": name, "active": {"+": True, "-": False}.get(sign), "state": state})
    return sorted(services, key=lambda service: service["name"])


async def _systemd_list(init: InitLayout) -> list[dict[str, Any]]:
    systemctl = init.tool("systemctl", "list the services")
    code, text, err = await capture_command(
        [systemctl, "list-units", "--type=service", "--all", "--no-pager", "--plain"]
    )
    if code != 0:
        raise JobError(f"systemctl list-units failed (exit {code}): {' '.join(err.split())}")
    services = parse_list_units(text)
    code, text, _ = await capture_command(
        [systemctl, "list-unit-files", "--type=service", "--no-pager", "--plain", "--no-legend"]
    )
    enabled = parse_list_unit_files(text) if code == 0 else {}
    for service in services:
        service["enabled"] = enabled.get(service["name"])
        service["manager"] = "systemd"
    return services


async def _sysv_list(init: InitLayout) -> list[dict[str, Any]]:
    code, text, err = await capture_command([init.tool("service", "list the services"), "--status-all"])
    if code != 0:
        raise JobError(f"service --status-all failed (exit {code}): {' '.join(err.split())}")
    services = parse_status_all(text + "\n" + err)  # the "[ ? ]" lines come on stderr
    for service in services:
        service["enabled"] = await trio.to_thread.run_sync(sysv_enabled, service["name"])
        service["manager"] = "sysv"
    return services


async def _list(args: NoArgs, ctx: JobContext, out: Output) -> int:
    init = ctx.host.init
    services = await (_systemd_list(init) if init.systemd else _sysv_list(init))
    out.result({"services": services}, as_json=ctx.as_json)
    return 0


async def _status(args: ServiceArgs, ctx: JobContext, out: Output) -> int:
    out.result(await service_state(args.name, ctx.host.init), as_json=ctx.as_json)
    return 0


# --- changes ------------------------------------------------------------------------------------------

# What each action leaves behind: (the state field, its value).
OUTCOME = {
    "start": ("active", True),
    "stop": ("active", False),
    "restart": ("active", True),
    "reload": ("active", True),
    "enable": ("enabled", True),
    "disable": ("enabled", False),
}
IDEMPOTENT = ("start", "stop", "enable", "disable")  # already in place: said, and exit 0
SETTLE_S = 5.0  # how long a service may take to reach the state its init script started it towards
SETTLE_POLL_S = 0.2


def _words(field: str, value: bool) -> str:
    if field == "active":
        return "running" if value else "stopped"
    return "enabled at boot" if value else "disabled at boot"


async def _settled(name: str, field: str, wanted: bool, init: InitLayout) -> dict[str, Any]:
    """The service's state once `field` is `wanted`, or the last one read when SETTLE_S passed: a
    daemon writes its pid file a moment after its init script returned."""
    state = await service_state(name, init)
    with trio.move_on_after(SETTLE_S):
        while state.get(field) != wanted:
            await trio.sleep(SETTLE_POLL_S)
            state = await service_state(name, init)
    return state


async def _reload(name: str, out: Output, init: InitLayout) -> int:
    """``reload``; an init script without one (its usage line lists only ``force-reload``, which
    Debian's policy makes every script have) gets ``force-reload``: reload, or restart if it cannot."""
    argv = system_argv(name, "reload", init)
    code, text, err = await capture_command(argv)
    said = text + err
    if code != 0 and not init.systemd and "Usage:" in said and "force-reload" in said:
        out.stdout(f"the init script of {name} has no reload: force-reload (a restart) instead")
        return await stream_command(out, system_argv(name, "force-reload", init))
    out.lines("stdout", [line for line in text.splitlines() if line.strip()])
    out.lines("stderr", [line for line in err.splitlines() if line.strip()])
    return code


async def _change(action: str, name: str, out: Output, init: InitLayout) -> int:
    field, wanted = OUTCOME[action]
    before = await service_state(name, init)
    if action in IDEMPOTENT and before.get(field) == wanted:
        out.stdout(f"{name} is already {_words(field, wanted)}")
        return 0
    if action == "reload" and not before["active"]:
        raise JobError(f"{name} is not running: start it instead of reloading it")
    if action == "reload":
        code = await _reload(name, out, init)
    else:
        code = await stream_command(out, system_argv(name, action, init))
    if code != 0:
        raise JobError(f"{action} {name} failed (exit {code})")
    after = await _settled(name, field, wanted, init)
    if action in ("restart", "reload") and not after["active"] and not init.systemd:
        # Some scripts' restart only stops (Debian's supervisor 4.2.5: its force-reload calls it too).
        out.stdout(f"the init script's {action} left {name} stopped: starting it")
        if await stream_command(out, system_argv(name, "start", init)) == 0:
            after = await _settled(name, field, wanted, init)
    if after.get(field) != wanted:
        raise JobError(f"{action} {name}: the service is {_words(field, not wanted)} afterwards ({after['state']})")
    out.stdout(f"{name} is {_words(field, wanted)}")
    return 0


def _action(action: str) -> RunFunction:
    async def run(args: ServiceArgs | ServiceStop, ctx: JobContext, out: Output) -> int:
        return await _change(action, args.name, out, ctx.host.init)

    return run


# --- logs ---------------------------------------------------------------------------------------------


def parse_journal(text: str) -> list[str]:
    """``journalctl`` lines without its own notes (``-- No entries --``, ``-- Boot ... --``)."""
    return [line for line in text.splitlines() if not (line.startswith("-- ") and line.endswith(" --"))]


def sysv_log_files(name: str) -> list[str]:
    """The log files `name` writes without a journal (`SYSV_LOG_FILES`), those that exist now."""
    found: list[str] = []
    for pattern, paths in SYSV_LOG_FILES:
        if fnmatch.fnmatchcase(name, pattern):
            for path in paths:
                found += sorted(p for p in glob.glob(path.format(name=glob.escape(name))) if os.path.isfile(p))
    return found


async def _logs(args: ServiceLogs, ctx: JobContext, out: Output) -> int:
    name, lines, init = args.name, str(args.lines), ctx.host.init
    if init.systemd:
        journalctl = init.tool("journalctl", "read the service's journal")
        code, text, err = await capture_command([journalctl, "-u", name, "-n", lines, "--no-pager", "-o", "short-iso"])
        if code != 0:
            raise JobError(f"journalctl -u {name} failed (exit {code}): {' '.join(err.split())}")
        out.lines("stdout", parse_journal(text))
        return 0
    if not await trio.to_thread.run_sync(os.path.exists, os.path.join(INIT_D, name)):
        raise JobError(f"no service named {name} on this server (no {INIT_D}/{name})")
    files = await trio.to_thread.run_sync(sysv_log_files, name)
    if not files:
        raise JobError(
            f"this server has no journal (PID 1 is not systemd) and {name} has no log file the agent knows of"
            " (it may log to syslog only)"
        )
    return await stream_command(out, [require("tail", "read the service's log files"), "-n", lines, *files])


KINDS = [
    handler("service.list", _list),
    handler("service.status", _status),
    *(handler(f"service.{action}", _action(action)) for action in OUTCOME),
    handler("service.logs", _logs),
]
