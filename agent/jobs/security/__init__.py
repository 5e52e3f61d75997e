"""``security.*``: fail2ban (`fail2ban`), the SSH server's policy (`sshd`), the nftables firewall
(`firewall`), the malware scan of the sites with ClamAV (`malware`) and ``status``, a summary of
the four.
"""

from __future__ import annotations

from typing import Any

from agent.jobs.security import fail2ban, firewall, malware, sshd
from agent.jobs.toolkit.base import JobContext, handler
from agent.jobs.toolkit.needs import HostPath, Tool
from agent.jobs.toolkit.output import JobError, Output
from agent.jobs.toolkit.proc import which
from contract.job_kinds.base import NoArgs
from contract.job_kinds.security import SshSet


async def _part(name: str, ctx: JobContext) -> dict[str, Any]:
    """One part of the summary; a part that cannot be read says why instead."""
    tools = {"firewall": "nft", "fail2ban": "fail2ban-client", "ssh": "sshd"}
    if which(tools[name]) is None:
        return {"available": False, "error": f"{tools[name]} is not installed"}
    try:
        if name == "firewall":
            part = await firewall.summary(ctx)
            return {"available": True, **part, "rules": len(part["rules"])}
        if name == "fail2ban":
            jails = (await fail2ban.overview(ctx))["jails"]
            banned = sum(jail["currently_banned"] for jail in jails)
            return {"available": True, "running": True, "jails": [jail["name"] for jail in jails], "banned": banned}
        return {"available": True, **(await sshd.effective(ctx))}
    except JobError as exc:
        return {"available": True, "error": str(exc)}


async def _status(args: NoArgs, ctx: JobContext, out: Output) -> int:
    result = {name: await _part(name, ctx) for name in ("firewall", "fail2ban", "ssh")}
    result["scan"] = await malware.summary(ctx)
    out.result(result, as_json=ctx.as_json)
    return 0


async def _ssh_set(args: SshSet, ctx: JobContext, out: Output) -> int:
    code = await sshd.ssh_set(args, ctx, out)
    if args.port is not None and await firewall.follow_ssh(ctx):
        out.stdout(f"firewall reloaded: SSH on {args.port} stays allowed")
    return code


FAIL2BAN = (Tool("fail2ban-client"),)
FIREWALL = (Tool("nft"),)
# clamd's signature folder, which the package makes (the scan needs a clamd answering there too:
# one that is down is the scan's own exit 69, not a missing package).
CLAMAV = (HostPath(lambda host: host.clamav.database_dir, "clamav-daemon"),)

KINDS = [
    handler("security.status", _status),
    handler("security.fail2ban-status", fail2ban.status, needs=FAIL2BAN),
    handler("security.fail2ban-ban", fail2ban.ban, needs=FAIL2BAN),
    handler("security.fail2ban-unban", fail2ban.unban, needs=FAIL2BAN),
    handler("security.fail2ban-jail-set", fail2ban.jail_set, needs=FAIL2BAN),
    handler("security.ssh-set", _ssh_set, needs=(Tool("sshd"),)),
    handler("security.scan", malware.scan, needs=CLAMAV),
    handler("security.scan-report", malware.scan_report),
    handler("security.firewall-list", firewall.firewall_list, needs=FIREWALL),
    handler("security.firewall-allow", firewall.firewall_allow, needs=FIREWALL),
    handler("security.firewall-deny", firewall.firewall_deny, needs=FIREWALL),
    handler("security.firewall-delete", firewall.firewall_delete, needs=FIREWALL),
    handler("security.firewall-enable", firewall.firewall_enable, needs=FIREWALL),
    handler("security.firewall-disable", firewall.firewall_disable, needs=FIREWALL),
]
