"""``security fail2ban-status|fail2ban-ban|fail2ban-unban|fail2ban-jail-set``: the running
fail2ban, through ``fail2ban-client -s <socket>`` (the layout's ``fail2ban.socket``).

``jail-set`` changes the jail now (``set JAIL maxretry|bantime|findtime``) and keeps the values
for the next start in ``<jail_dir>/fleetdeck-<jail>.local``, which ``fail2ban-client -c
<conf_dir> -t`` checks first: a refused file is taken back (exit 78) and nothing changes.
"""

from __future__ import annotations

import os
from typing import Any

import trio

from agent.jobs.security.checked import replace_checked
from agent.jobs.toolkit.base import JobContext
from agent.jobs.toolkit.output import JobError, Output
from agent.jobs.toolkit.proc import capture_command, require
from contract.job_kinds.security import Fail2banBan, Fail2banJail, Fail2banStatus

NUMBERS = {
    "Currently failed": "currently_failed",
    "Total failed": "total_failed",
    "Currently banned": "currently_banned",
    "Total banned": "total_banned",
    "Number of jail": "jail_count",
}


def parse_status(text: str) -> dict[str, Any]:
    """``fail2ban-client status [JAIL]``: its tree of ``Key:<tab>value`` lines as a dict
    (``jails``, ``files``, ``banned`` as lists; the counts as ints)."""
    parsed: dict[str, Any] = {}
    for line in text.splitlines():
        body = line.lstrip("|`- \t")
        key, sep, value = body.partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key in NUMBERS and value.isdigit():
            parsed[NUMBERS[key]] = int(value)
        elif key == "Jail list":
            parsed["jails"] = [name.strip() for name in value.split(",") if name.strip()]
        elif key == "File list":
            parsed["files"] = value.split()
        elif key == "Banned IP list":
            parsed["banned"] = value.split()
    return parsed


async def client(ctx: JobContext, *words: str) -> str:
    """``fail2ban-client -s SOCKET WORDS...``: its stdout, or a JobError in fail2ban's words."""
    tool = require("fail2ban-client", "talk to fail2ban")
    socket = ctx.host.fail2ban.socket
    if not await trio.to_thread.run_sync(os.path.exists, socket):
        raise JobError(f"fail2ban is not running (no socket {socket})")
    code, text, err = await capture_command([tool, "-s", socket, *words])
    if code != 0:
        said = " ".join((text + " " + err).split())  # fail2ban's own sentence is on stdout, its log line on stderr
        if "does not exist" in said and len(words) > 1:
            raise JobError(f"fail2ban has no jail {words[1]}")
        raise JobError(f"fail2ban-client {' '.join(words)} failed (exit {code}): {said[-400:]}")
    return text


async def jail_status(ctx: JobContext, jail: str) -> dict[str, Any]:
    parsed = parse_status(await client(ctx, "status", jail))
    return {
        "name": jail,
        **{key: parsed.get(key, 0) for key in ("currently_failed", "total_failed", "currently_banned", "total_banned")},
        "banned": parsed.get("banned", []),
        "files": parsed.get("files", []),
    }


async def overview(ctx: JobContext) -> dict[str, Any]:
    jails = parse_status(await client(ctx, "status")).get("jails", [])
    return {"running": True, "jails": [await jail_status(ctx, jail) for jail in jails]}


async def status(args: Fail2banStatus, ctx: JobContext, out: Output) -> int:
    result = {"running": True, "jails": [await jail_status(ctx, args.jail)]} if args.jail else await overview(ctx)
    out.result(result, as_json=ctx.as_json)
    return 0


async def ban(args: Fail2banBan, ctx: JobContext, out: Output) -> int:
    count = (await client(ctx, "set", args.jail, "banip", args.ip)).strip()
    out.stdout(f"{args.ip} banned in {args.jail}" if count != "0" else f"{args.ip} was already banned in {args.jail}")
    return 0


async def unban(args: Fail2banBan, ctx: JobContext, out: Output) -> int:
    count = (await client(ctx, "set", args.jail, "unbanip", args.ip)).strip()
    out.stdout(f"{args.ip} unbanned in {args.jail}" if count != "0" else f"{args.ip} was not banned in {args.jail}")
    return 0


async def jail_set(args: Fail2banJail, ctx: JobContext, out: Output) -> int:
    layout = ctx.host.fail2ban
    await jail_status(ctx, args.jail)  # the jail runs (else a clear error before anything changes)
    values = {"maxretry": args.max_retry, "bantime": args.ban_time_s, "findtime": args.find_time_s}
    content = f"# made by the fleetdeck agent (security.fail2ban-jail-set)\n[{args.jail}]\n" + "".join(
        f"{key} = {value}\n" for key, value in values.items()
    )
    path = os.path.join(layout.jail_dir, f"fleetdeck-{args.jail}.local")
    check = [require("fail2ban-client", "check the fail2ban configuration"), "-c", layout.conf_dir, "-t"]
    await replace_checked(path, content, check, "fail2ban-client -t")
    for key, value in values.items():
        await client(ctx, "set", args.jail, key, str(value))
    out.stdout(
        f"jail {args.jail}: " + ", ".join(f"{key} {value}" for key, value in values.items()) + f" (kept in {path})"
    )
    return 0
