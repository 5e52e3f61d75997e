"""``security ssh-set``: the SSH server's port, password login and root login, through the drop-in
``<ssh.dropin_dir>/00-fleetdeck.conf``.

sshd keeps the FIRST value it reads for a keyword and Debian's ``sshd_config`` includes
``sshd_config.d/*.conf`` at its top, so the drop-in sorts first (``00-``). The new drop-in is
checked with ``sshd -t -f <sshd_config>`` (the whole configuration, as sshd will read it): when
sshd refuses it, the previous drop-in is put back and the job exits 78. Then ``sshd -T`` says
whether the values took effect (a keyword set in ``sshd_config`` above the Include wins: a
warning says so) and ssh is reloaded through its service control. Both refuse to run without
sshd's privilege separation folder, ``/run/sshd`` (a tmpfs: gone after a boot until ssh's service
makes it), so the agent makes it first, root's and 0755, as Debian's init script does.
"""

from __future__ import annotations

import os
from typing import Any

import trio

from agent.jobs.security.checked import read_or_none, replace_checked
from agent.jobs.toolkit.base import JobContext
from agent.jobs.toolkit.host import control_service
from agent.jobs.toolkit.output import JobError, Output
from agent.jobs.toolkit.proc import capture_command, require
from contract.job_kinds.security import SshSet

DROPIN = "00-fleetdeck.conf"
KEYWORDS = ("Port", "PasswordAuthentication", "KbdInteractiveAuthentication", "PermitRootLogin")
ROOT_LOGIN_ALIASES = {"without-password": "prohibit-password"}
PRIVILEGE_SEPARATION_DIR = "/run/sshd"


def parse_dropin(text: str) -> dict[str, str]:
    """Our drop-in's ``Keyword value`` lines (comments and other keywords left out)."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(None, 1)
        if len(parts) == 2 and parts[0] in KEYWORDS:
            values[parts[0]] = parts[1].strip()
    return values


def render_dropin(values: dict[str, str]) -> str:
    body = "".join(f"{key} {values[key]}\n" for key in KEYWORDS if key in values)
    return "# made by the fleetdeck agent (security.ssh-set); edits are overwritten\n" + body


def parse_effective(text: str) -> dict[str, Any]:
    """``sshd -T``: the effective port(s), password login and root login."""
    ports: list[int] = []
    found: dict[str, Any] = {}
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        if key == "port" and value.isdigit():
            ports.append(int(value))
        elif key == "passwordauthentication":
            found["password_auth"] = "on" if value == "yes" else "off"
        elif key == "kbdinteractiveauthentication":
            found["kbd_interactive_auth"] = "on" if value == "yes" else "off"
        elif key == "permitrootlogin":
            found["root_login"] = ROOT_LOGIN_ALIASES.get(value, value)
    return {"ports": ports, **found}


def make_privilege_separation_dir() -> None:
    """``/run/sshd``, root's and 0755, when missing (Debian's ``check_privsep_dir``): ``sshd -t``
    and ``sshd -T`` refuse to run without it. A folder of /run, which only root may write."""
    try:
        os.mkdir(PRIVILEGE_SEPARATION_DIR, 0o755)
    except FileExistsError:
        return
    os.chmod(PRIVILEGE_SEPARATION_DIR, 0o755)  # mkdir's mode passes through the umask


async def effective(ctx: JobContext) -> dict[str, Any]:
    sshd = require("sshd", "read the SSH server's settings")
    await trio.to_thread.run_sync(make_privilege_separation_dir)
    code, text, err = await capture_command([sshd, "-T", "-f", ctx.host.ssh.sshd_config])
    if code != 0:
        raise JobError(f"sshd -T failed (exit {code}): {' '.join(err.split())[-400:]}")
    return parse_effective(text)


def wanted(args: SshSet, current: dict[str, str]) -> dict[str, str]:
    values = dict(current)
    if args.port is not None:
        values["Port"] = str(args.port)
    if args.password_auth is not None:
        values["PasswordAuthentication"] = "yes" if args.password_auth == "on" else "no"
        # keyboard-interactive (PAM) asks for the same password: off means both off
        if args.password_auth == "off":
            values["KbdInteractiveAuthentication"] = "no"
        else:
            values.pop("KbdInteractiveAuthentication", None)
    if args.root_login is not None:
        values["PermitRootLogin"] = args.root_login
    return values


async def ssh_set(args: SshSet, ctx: JobContext, out: Output) -> int:
    layout = ctx.host.ssh
    sshd = require("sshd", "check the SSH server's configuration")
    path = os.path.join(layout.dropin_dir, DROPIN)
    previous = await trio.to_thread.run_sync(read_or_none, path)
    values = wanted(args, parse_dropin(previous.decode("utf-8", "replace") if previous else ""))
    await trio.to_thread.run_sync(make_privilege_separation_dir)
    changed = await replace_checked(path, render_dropin(values), [sshd, "-t", "-f", layout.sshd_config], "sshd -t")
    if not changed:
        out.stdout(f"the SSH settings are already so ({path}): nothing changed")
        return 0
    now = await effective(ctx)
    asked = {"password_auth": args.password_auth, "root_login": args.root_login}
    for key, value in asked.items():
        if value is not None and now.get(key) != value:
            out.stderr(f"warning: {key} is {now.get(key)} (sshd_config sets it before including {layout.dropin_dir})")
    if args.port is not None and args.port not in now["ports"]:
        out.stderr(f"warning: sshd does not listen on {args.port}: its configuration does not include {path}")
    await control_service(layout.control, "reload", init=ctx.host.init)
    out.stdout(f"SSH settings written to {path} and ssh reloaded: " + ", ".join(f"{k} {v}" for k, v in values.items()))
    return 0
