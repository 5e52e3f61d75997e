"""``daemon list|status|create|delete|start|stop|restart|logs``: a site's long-running commands,
as supervisor programs.

Each daemon is one file, ``<conf_dir>/fleetdeck-<name>.conf`` (``ctx.host.supervisor``), holding
the program ``fleetdeck-<name>``: its first line is a comment with the definition as JSON (name,
domain, command, directory, instances), so the folder itself is the record and nothing else
needs to agree with it. The program runs as the site's user, in the site's folder (or the
``directory`` inside it), with ``numprocs`` instances named ``fleetdeck-<name>_00``, ``_01``...;
each instance's stdout and stderr go to ``<log_dir>/fleetdeck-<name>-NN.log``: supervisord
writes the logs as root, so they stay in its own folder rather than one the site user controls.

supervisord is driven with ``supervisorctl -c <supervisord_conf>``: ``reread`` checks the
configuration (a broken file is put back as it was, exit 78), ``update fleetdeck-<name>`` adds,
changes (restarting it) or removes the program, ``start|stop|restart|status`` act on its group.
The command is checked before anything is written: its program must exist and be executable
(exit 78 otherwise); supervisor runs it without a shell, as the catalog's grammar says.
"""

from __future__ import annotations

import glob
import os
import posixpath
import re
import stat
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import trio

from agent.files.jail import Jail, normalize
from agent.jobs.toolkit.base import JobContext, handler
from agent.jobs.toolkit.boundary import site_jail
from agent.jobs.toolkit.common import Account, find_site, site_account
from agent.jobs.toolkit.host import SupervisorLayout
from agent.jobs.toolkit.needs import Tool
from agent.jobs.toolkit.output import EXIT_REFUSED, JobError, Output
from agent.jobs.toolkit.proc import SYSTEM_PATH, capture_command, require, stream_command, which
from agent.sites import Site, write_atomically
from contract.job_kinds.base import NameArgs, NoArgs
from contract.job_kinds.daemon import DaemonCreate, DaemonLogs
from contract.link.protocol import RpcError

PREFIX = "fleetdeck-"
HEADER = "; fleetdeck daemon "  # then the definition as JSON, on the file's first line
DEFINITION_FIELDS = ("name", "domain", "command", "directory", "instances")
STATUS_LINE = re.compile(r"^(?P<process>\S+)\s+(?P<state>[A-Z]+)\s*(?P<description>.*)$")
NOT_REACHABLE = ("no such file", "refused connection", "Connection refused", "SERVER_ERROR")


def program(name: str) -> str:
    return PREFIX + name


def conf_path(layout: SupervisorLayout, name: str) -> str:
    return os.path.join(layout.conf_dir, f"{program(name)}.conf")


def log_pattern(layout: SupervisorLayout, name: str) -> str:
    """Where supervisord writes each instance's output (``%(process_num)02d`` is supervisor's own)."""
    return os.path.join(layout.log_dir, f"{program(name)}-%(process_num)02d.log")


def log_files(layout: SupervisorLayout, name: str, instances: int) -> list[str]:
    return [log_pattern(layout, name).replace("%(process_num)02d", f"{n:02d}") for n in range(instances)]


# --- the program's file -----------------------------------------------------------------------------


def _escape(value: str) -> str:
    """A value supervisor reads with its own ``%(name)s`` expansion: a literal ``%`` is ``%%``."""
    return value.replace("%", "%%")


def render(definition: dict[str, Any], argv: list[str], workdir: str, account: Account, folder: str, log: str) -> str:
    """The program section of a daemon (`argv`: its command with the program resolved to a path)."""
    user = account.name
    environment = {"HOME": folder, "USER": user, "LOGNAME": user, "PATH": SYSTEM_PATH, "LANG": "C.UTF-8"}
    lines = [
        HEADER + orjson.dumps({key: definition[key] for key in DEFINITION_FIELDS}).decode(),
        f"[program:{program(definition['name'])}]",
        f"command={_escape(' '.join(argv))}",
        "process_name=%(program_name)s_%(process_num)02d",
        f"numprocs={definition['instances']}",
        f"directory={_escape(workdir)}",
        f"user={account.name}",
        "autostart=true",
        "autorestart=true",
        "startsecs=1",
        "stopasgroup=true",
        "killasgroup=true",
        "redirect_stderr=true",
        f"stdout_logfile={_escape(log)}",
        "stdout_logfile_maxbytes=10MB",
        "stdout_logfile_backups=3",
        "environment=" + ",".join(f'{key}="{_escape(value)}"' for key, value in environment.items()),
    ]
    return "\n".join(lines) + "\n"


def read_definition(path: str) -> dict[str, Any] | None:
    """The definition in a daemon's file (None: no such file); a file of the prefix that the agent
    did not write is refused rather than overwritten."""
    try:
        with open(path, encoding="utf-8") as f:
            first = f.readline()
    except FileNotFoundError:
        return None
    try:
        definition = orjson.loads(first.removeprefix(HEADER)) if first.startswith(HEADER) else None
    except orjson.JSONDecodeError:
        definition = None
    if not isinstance(definition, dict):
        raise JobError(f"{path} was not written by the fleetdeck agent: it is left alone")
    return definition


def definitions(layout: SupervisorLayout) -> Iterator[dict[str, Any]]:
    """Every daemon's definition, by name (files of the prefix the agent did not write are skipped)."""
    for path in sorted(glob.glob(os.path.join(glob.escape(layout.conf_dir), f"{PREFIX}*.conf"))):
        try:
            definition = read_definition(path)
        except JobError:
            continue
        if definition is not None:
            yield definition


async def _definition(ctx: JobContext, name: str) -> dict[str, Any]:
    definition = await trio.to_thread.run_sync(read_definition, conf_path(ctx.host.supervisor, name))
    if definition is None:
        raise JobError(f"no daemon {name} on this server")
    return definition


# --- supervisorctl ------------------------------------------------------------------------------------


async def supervisorctl(layout: SupervisorLayout, *args: str) -> tuple[int, str, str]:
    """``supervisorctl -c <supervisord_conf> ARGS``; a supervisord that does not answer is a JobError."""
    tool = require("supervisorctl", "drive the daemons")
    code, text, err = await capture_command([tool, "-c", layout.supervisord_conf, *args])
    said = text + err
    if code != 0 and any(sign in said for sign in NOT_REACHABLE):
        raise JobError(f"supervisord is not running or not reachable ({' '.join(said.split())})")
    return code, text, err


def parse_status(text: str) -> list[dict[str, Any]]:
    """``supervisorctl status`` lines: ``group:process  STATE  description`` (``pid N, uptime H:MM:SS``
    while RUNNING)."""
    processes = []
    for line in text.splitlines():
        match = STATUS_LINE.match(line.strip())
        if match is None or "ERROR" in line:
            continue
        group, _, name = match["process"].rpartition(":")
        description = match["description"].strip()
        pid = re.search(r"\bpid (\d+)", description)
        uptime = re.search(r"\buptime (\S+)", description)
        processes.append(
            {
                "group": group or name,
                "process": name,
                "state": match["state"],
                "pid": int(pid[1]) if pid else None,
                "uptime": uptime[1] if uptime else None,
                "description": description or None,
            }
        )
    return processes


async def _processes(layout: SupervisorLayout, name: str) -> list[dict[str, Any]]:
    """The daemon's processes as supervisord knows them ([] when it has not loaded the program)."""
    _, text, _ = await supervisorctl(layout, "status", f"{program(name)}:*")
    return [p for p in parse_status(text) if p["group"] == program(name)]


def _described(definition: dict[str, Any], processes: list[dict[str, Any]]) -> dict[str, Any]:
    running = sum(1 for p in processes if p["state"] == "RUNNING")
    return {**definition, "program": program(definition["name"]), "running": running, "processes": processes}


async def _apply(layout: SupervisorLayout, name: str) -> None:
    """``supervisorctl update fleetdeck-<name>``: add, restart with its new definition, or remove."""
    code, text, err = await supervisorctl(layout, "update", program(name))
    if code != 0 or "ERROR" in text:
        raise JobError(f"supervisorctl update {program(name)} failed (exit {code}): {' '.join((text + err).split())}")


async def _reread(layout: SupervisorLayout) -> str | None:
    """supervisor's own check of its configuration: None when it reads, else its words."""
    code, text, err = await supervisorctl(layout, "reread")
    return None if code == 0 and "ERROR" not in text else " ".join((text + err).split())


# --- create -----------------------------------------------------------------------------------------


def _resolve(args: DaemonCreate, ctx: JobContext, site: Site) -> tuple[str, list[str]]:
    """The working folder and the command with its program as a path, or a JobError (exit 78)
    saying what is wrong with them: checked before anything is written. A folder or program of
    the site is looked at through its jail (a link may lead elsewhere in the site, never out);
    supervisord then enters the folder and runs the program as the site's user."""
    folder = ctx.site_home(site.slug)
    argv = args.command.split(" ")
    name = argv[0]
    with site_jail(ctx, site.slug) as jail:
        directory = _inside(jail, args.directory, stat.S_ISDIR)
        if directory is None:
            raise JobError(f"the daemon's directory {args.directory or '.'} is not a folder of the site", EXIT_REFUSED)
        workdir = posixpath.join(folder, directory) if directory else folder
        if "/" in name and not name.startswith("/"):
            program = _inside(jail, posixpath.join(directory, name), _executable)
            path = posixpath.join(folder, program) if program is not None else None
        else:
            path = name if name.startswith("/") else which(name)
            if path is not None and not (os.path.isfile(path) and os.access(path, os.X_OK)):
                path = None
    if path is None:
        where = f"in {workdir}" if "/" in name and not name.startswith("/") else "on this server"
        raise JobError(f"{name}: no such executable program {where}: the daemon was not written", EXIT_REFUSED)
    return workdir, [path, *argv[1:]]


def _inside(jail: Jail, path: str, wanted: Callable[[int], bool]) -> str | None:
    """`path` spelt plainly when it names, in the site, an entry whose mode is `wanted` (an in-site
    link is followed); else None (missing, leading out, ``..``)."""
    try:
        rel = normalize(path)
        return rel if wanted(jail.stat(rel).st_mode) else None
    except RpcError:
        return None


def _executable(mode: int) -> bool:
    return stat.S_ISREG(mode) and bool(mode & 0o111)


def _write_or_restore(path: str, text: str | None) -> None:
    """Put `text` in place atomically (None: remove the file)."""
    if text is None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    else:
        write_atomically(path, text.encode(), 0o644)


async def _create(args: DaemonCreate, ctx: JobContext, out: Output) -> int:
    layout = ctx.host.supervisor
    site = await find_site(ctx, args.domain)
    account = site_account(ctx, site)
    folder = ctx.site_home(site.slug)
    workdir, argv = await trio.to_thread.run_sync(_resolve, args, ctx, site)
    definition = args.model_dump(include=set(DEFINITION_FIELDS))
    path = conf_path(layout, args.name)
    existing = await trio.to_thread.run_sync(read_definition, path)
    if existing is not None and existing.get("domain") != site.domain:
        raise JobError(f"daemon {args.name} belongs to site {existing.get('domain')}: choose another name")
    if existing == definition:
        await _apply(layout, args.name)  # in case supervisord has not loaded it yet
        out.stdout(f"daemon {args.name} already exists with this definition")
        return await _report(ctx, definition, "unchanged", out)
    problem = await _reread(layout)
    if problem is not None:
        raise JobError(f"supervisor's configuration does not read before the change: {problem}")
    before = await trio.to_thread.run_sync(_read_text, path)
    text = render(definition, argv, workdir, account, folder, log_pattern(layout, args.name))
    await trio.to_thread.run_sync(os.makedirs, layout.conf_dir, 0o755, True)
    await trio.to_thread.run_sync(_write_or_restore, path, text)
    problem = await _reread(layout)
    if problem is not None:
        await trio.to_thread.run_sync(_write_or_restore, path, before)
        raise JobError(f"supervisor refused the daemon's file ({problem}): the previous state is back", EXIT_REFUSED)
    await _apply(layout, args.name)
    verb = "changed" if existing is not None else "created"
    instances = f"{args.instances} instance(s)"
    out.stdout(f"daemon {args.name} {verb}: {' '.join(argv)} ({instances}) as {account.name} in {workdir}")
    return await _report(ctx, definition, verb, out)


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        return None


async def _report(ctx: JobContext, definition: dict[str, Any], outcome: str, out: Output) -> int:
    """The daemon as it is now (the result, last on stdout); `outcome`: created, changed or unchanged."""
    processes = await _processes(ctx.host.supervisor, definition["name"])
    out.result({"daemon": _described(definition, processes), "outcome": outcome}, as_json=ctx.as_json)
    return 0


# --- the other kinds ----------------------------------------------------------------------------------


async def _list(args: NoArgs, ctx: JobContext, out: Output) -> int:
    layout = ctx.host.supervisor
    daemons = await trio.to_thread.run_sync(lambda: list(definitions(layout)))
    supervisor = "running"
    try:
        _, text, _ = await supervisorctl(layout, "status")
    except JobError as exc:  # the definitions are still worth seeing
        text, supervisor = "", str(exc)
    processes = parse_status(text)
    described = [_described(d, [p for p in processes if p["group"] == program(d["name"])]) for d in daemons]
    out.result({"daemons": described, "supervisor": supervisor}, as_json=ctx.as_json)
    return 0


async def _status(args: NameArgs, ctx: JobContext, out: Output) -> int:
    definition = await _definition(ctx, args.name)
    processes = await _processes(ctx.host.supervisor, args.name)
    out.result(_described(definition, processes), as_json=ctx.as_json)
    return 0


async def _control(action: str, args: NameArgs, ctx: JobContext, out: Output) -> int:
    layout = ctx.host.supervisor
    await _definition(ctx, args.name)
    await _apply(layout, args.name)  # a file written while supervisord was down is loaded first
    processes = await _processes(layout, args.name)
    states = {p["state"] for p in processes}
    if action == "start" and states == {"RUNNING"}:
        out.stdout(f"daemon {args.name} is already running")
        return 0
    if action == "stop" and not states & {"RUNNING", "STARTING", "BACKOFF"}:
        out.stdout(f"daemon {args.name} is already stopped")
        return 0
    code, text, err = await supervisorctl(layout, action, f"{program(args.name)}:*")
    out.lines("stdout", [line for line in (text + err).splitlines() if line.strip()])
    if code != 0 or "ERROR" in text:
        raise JobError(f"supervisorctl {action} {program(args.name)} failed (exit {code})")
    return 0


async def _start(args: NameArgs, ctx: JobContext, out: Output) -> int:
    return await _control("start", args, ctx, out)


async def _stop(args: NameArgs, ctx: JobContext, out: Output) -> int:
    return await _control("stop", args, ctx, out)


async def _restart(args: NameArgs, ctx: JobContext, out: Output) -> int:
    return await _control("restart", args, ctx, out)


async def _delete(args: NameArgs, ctx: JobContext, out: Output) -> int:
    layout = ctx.host.supervisor
    path = conf_path(layout, args.name)
    definition = await trio.to_thread.run_sync(read_definition, path)
    if definition is None:
        out.stdout(f"daemon {args.name} does not exist: nothing to delete")
        out.result({"deleted": None}, as_json=ctx.as_json)
        return 0
    await remove(ctx, definition)
    out.stdout(f"daemon {args.name} of {definition.get('domain')} stopped and deleted")
    out.result({"deleted": definition}, as_json=ctx.as_json)
    return 0


async def remove(ctx: JobContext, definition: dict[str, Any]) -> None:
    """Remove a daemon: its file, then ``update`` stops its processes and drops the program; its
    log files go too."""
    layout, name = ctx.host.supervisor, str(definition["name"])
    await trio.to_thread.run_sync(_write_or_restore, conf_path(layout, name), None)
    await _apply(layout, name)

    def drop_logs() -> None:
        for path in log_files(layout, name, int(definition.get("instances", 1))):
            for rotated in [path, *glob.glob(glob.escape(path) + ".[0-9]*")]:
                _write_or_restore(rotated, None)

    await trio.to_thread.run_sync(drop_logs)


async def forget_site(ctx: JobContext, site: Site, out: Output) -> int:
    """Remove a site's daemons (for ``site delete``: their processes hold its user); how many."""
    layout = ctx.host.supervisor
    owned = [d for d in await trio.to_thread.run_sync(lambda: list(definitions(layout))) if d["domain"] == site.domain]
    for definition in owned:
        try:
            await remove(ctx, definition)
        except JobError as exc:
            out.stderr(f"warning: daemon {definition['name']}: {exc}")
    return len(owned)


async def _logs(args: DaemonLogs, ctx: JobContext, out: Output) -> int:
    layout = ctx.host.supervisor
    definition = await _definition(ctx, args.name)
    instances = int(definition.get("instances", 1))
    files = [p for p in log_files(layout, args.name, instances) if await trio.to_thread.run_sync(os.path.isfile, p)]
    if not files:
        out.stdout(f"daemon {args.name} has printed nothing yet")
        return 0
    return await stream_command(out, [require("tail", "read the daemon's log"), "-n", str(args.lines), *files])


NEEDS = (Tool("supervisorctl"),)  # supervisor runs the daemons

KINDS = [
    handler("daemon.list", _list),
    handler("daemon.status", _status),
    handler("daemon.create", _create),
    handler("daemon.delete", _delete),
    handler("daemon.start", _start),
    handler("daemon.stop", _stop),
    handler("daemon.restart", _restart),
    handler("daemon.logs", _logs),
]
