"""``security firewall-list|allow|deny|delete|enable|disable``: an nftables table of our own.

The rules are the agent's record, ``<state_dir>/firewall.json`` (``{"enabled": bool, "rules":
[{id, action, proto, port, port_range, source, comment}]}``); the kernel holds their image, the
table ``inet <system.nft_table>``, rebuilt whole from the record and loaded with one ``nft -f``
(checked first with ``nft -c -f``), which the kernel applies atomically. No other table is read or
touched. While the firewall is on, the table's input chain drops what no rule accepts, after
accepting loopback, established connections, ICMP and the SSH server's ports (``sshd -T``; 22
when sshd cannot tell); the agent's link is an outgoing connection, so it stays up. Deny rules
come before allow rules. While it is off, the table does not exist; the rules stay recorded.

Where the kernel refuses nftables (no nf_tables, no CAP_NET_ADMIN in a container), the job ends
with exit 69 and a line that says so: the firewall cannot run on this server.
"""

from __future__ import annotations

import fcntl
import ipaddress
import os
import secrets
from collections.abc import Callable
from typing import Any

import orjson
import trio

from agent.jobs.security.sshd import effective
from agent.jobs.toolkit.base import JobContext
from agent.jobs.toolkit.output import EXIT_MISSING, EXIT_REFUSED, JobError, Output
from agent.jobs.toolkit.proc import capture_command, require, which
from agent.sites import write_atomically
from agent.state import open_lock_file
from contract.job_kinds.base import NoArgs
from contract.job_kinds.security import FirewallDelete, FirewallRule

RECORD = "firewall.json"
KERNEL_REFUSALS = ("Operation not permitted", "Protocol not supported", "Address family not supported")
DEFAULT_SSH_PORTS = [22]


# --- the record ----------------------------------------------------------------------------


def _path(ctx: JobContext) -> str:
    return os.path.join(ctx.state_dir, RECORD)


def read_record(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            document = orjson.loads(f.read())
    except FileNotFoundError:
        return {"enabled": False, "rules": []}
    except orjson.JSONDecodeError as exc:
        raise JobError(f"{path} is not valid JSON ({exc}); fix it first") from None
    rules = document.get("rules") if isinstance(document, dict) else None
    enabled = bool(document.get("enabled")) if isinstance(document, dict) else False
    return {"enabled": enabled, "rules": [r for r in rules if isinstance(r, dict)] if isinstance(rules, list) else []}


# --- the ruleset ---------------------------------------------------------------------------


def rule_statement(rule: dict[str, Any]) -> str:
    """One recorded rule as an nft statement, with its id in the comment."""
    parts: list[str] = []
    source = rule.get("source")
    if source:
        family = "ip6" if ipaddress.ip_network(source, strict=False).version == 6 else "ip"
        parts.append(f"{family} saddr {source}")
    ports = rule.get("port_range") or (str(rule["port"]) if rule.get("port") else None)
    proto = rule.get("proto", "tcp")
    if ports:
        parts.append(f"meta l4proto {{ tcp, udp }} th dport {ports}" if proto == "any" else f"{proto} dport {ports}")
    elif proto != "any":
        parts.append(f"meta l4proto {proto}")
    verdict = "accept" if rule["action"] == "allow" else "drop"
    comment = f"{rule['id']} {rule.get('comment') or ''}".strip()[:120]
    return " ".join([*parts, verdict, f'comment "{comment}"'])


def ruleset(table: str, enabled: bool, rules: list[dict[str, Any]], ssh_ports: list[int]) -> str:
    """The whole table, replacing whatever the kernel has under that name (`table` first makes
    sure there is one to delete, so the file loads whether or not it existed)."""
    head = f"table inet {table} {{\n}}\ndelete table inet {table}\n"
    if not enabled:
        return head
    ordered = [r for r in rules if r["action"] == "deny"] + [r for r in rules if r["action"] == "allow"]
    ssh = ", ".join(str(port) for port in ssh_ports)
    lines = [
        "type filter hook input priority filter; policy drop;",
        'iif "lo" accept',
        "ct state established,related accept",
        "ct state invalid drop",
        "meta l4proto { icmp, ipv6-icmp } accept",
        f'tcp dport {{ {ssh} }} accept comment "ssh"',
        *(rule_statement(rule) for rule in ordered),
    ]
    body = "".join(f"\t\t{line}\n" for line in lines)
    return head + f"table inet {table} {{\n\tchain input {{\n{body}\t}}\n}}\n"


async def _nft(argv_tail: list[str], stdin: bytes = b"") -> tuple[int, str, str]:
    return await capture_command([require("nft", "drive the firewall"), *argv_tail], stdin=stdin)


def _kernel_refusal(said: str) -> JobError | None:
    if any(words in said for words in KERNEL_REFUSALS):
        return JobError(
            f"the kernel refuses nftables here ({said[-300:]}): the firewall cannot run on this server", EXIT_MISSING
        )
    return None


async def load(ruleset_text: str) -> None:
    """Check then load a ruleset; the kernel takes it whole or not at all."""
    for argv_tail, what in ((["-c", "-f", "-"], "nft -c"), (["-f", "-"], "nft -f")):
        code, text, err = await _nft(argv_tail, ruleset_text.encode())
        if code != 0:
            said = " ".join((err or text).split())
            refusal = _kernel_refusal(said)
            if refusal is not None:
                raise refusal
            raise JobError(
                f"{what} refused the firewall rules (exit {code}): {said[-400:]}; nothing changed", EXIT_REFUSED
            )


async def ssh_ports(ctx: JobContext) -> list[int]:
    if which("sshd") is None:
        return DEFAULT_SSH_PORTS
    try:
        return (await effective(ctx))["ports"] or DEFAULT_SSH_PORTS
    except JobError:
        return DEFAULT_SSH_PORTS


async def change(ctx: JobContext, edit: Callable[[dict[str, Any]], Any]) -> tuple[dict[str, Any], Any]:
    """Apply `edit` to the record under its lock, load the table it describes, then save it:
    a ruleset the kernel refuses leaves both the kernel and the record as they were."""
    path = _path(ctx)
    ports = await ssh_ports(ctx)

    def locked() -> tuple[dict[str, Any], Any, Any]:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        lock = open_lock_file(path + ".lock")
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        record = read_record(path)
        return record, edit(record), lock

    record, answer, lock = await trio.to_thread.run_sync(locked)
    try:
        await load(ruleset(ctx.host.system.nft_table, record["enabled"], record["rules"], ports))
        await trio.to_thread.run_sync(
            write_atomically, path, orjson.dumps(record, option=orjson.OPT_INDENT_2) + b"\n", 0o600
        )
    finally:
        lock.close()
    return record, answer


async def follow_ssh(ctx: JobContext) -> bool:
    """Reload the table when the firewall is on, so it lets in the SSH server's ports as they are
    now (after ``ssh-set --port``); whether it was reloaded."""
    record = await trio.to_thread.run_sync(read_record, _path(ctx))
    if not record["enabled"]:
        return False
    await change(ctx, lambda record: None)
    return True


# --- handlers ------------------------------------------------------------------------------


async def kernel_table(ctx: JobContext) -> str | None:
    """The table as the kernel has it now (``nft list table``), None when it does not exist."""
    code, text, err = await _nft(["list", "table", "inet", ctx.host.system.nft_table])
    if code != 0:
        refusal = _kernel_refusal(" ".join(err.split()))
        if refusal is not None:
            raise refusal
        return None
    return text


async def summary(ctx: JobContext) -> dict[str, Any]:
    record = await trio.to_thread.run_sync(read_record, _path(ctx))
    loaded = await kernel_table(ctx) if which("nft") else None
    return {
        "table": f"inet {ctx.host.system.nft_table}",
        "enabled": record["enabled"],
        "loaded": loaded is not None,
        "rules": record["rules"],
    }


async def firewall_list(args: NoArgs, ctx: JobContext, out: Output) -> int:
    require("nft", "read the firewall")
    result = await summary(ctx)
    result["ssh_ports"] = await ssh_ports(ctx)
    out.result(result, as_json=ctx.as_json)
    return 0


def _rule(action: str, args: FirewallRule) -> dict[str, Any]:
    return {
        "id": f"fw-{secrets.token_hex(3)}",
        "action": action,
        "proto": args.proto,
        "port": args.port,
        "port_range": args.port_range,
        "source": args.source,
        "comment": args.comment,
    }


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    keys = ("action", "proto", "port", "port_range", "source")
    return all(a.get(key) == b.get(key) for key in keys)


async def _add(action: str, args: FirewallRule, ctx: JobContext, out: Output) -> int:
    rule = _rule(action, args)

    def edit(record: dict[str, Any]) -> dict[str, Any]:
        existing = next((r for r in record["rules"] if _same(r, rule)), None)
        if existing is None:
            record["rules"].append(rule)
        return existing or rule

    record, kept = await change(ctx, edit)
    if kept is not rule:
        message = f"the same rule exists already: {kept['id']}; nothing changed"
    else:
        off = "" if record["enabled"] else " (the firewall is off: the rule applies once it is on)"
        message = f"rule {rule['id']} added: {rule_statement(rule)}{off}"
    result = {"rule": kept, "added": kept is rule, "enabled": record["enabled"], "message": message}
    out.result(result, as_json=ctx.as_json)
    return 0


async def firewall_allow(args: FirewallRule, ctx: JobContext, out: Output) -> int:
    return await _add("allow", args, ctx, out)


async def firewall_deny(args: FirewallRule, ctx: JobContext, out: Output) -> int:
    return await _add("deny", args, ctx, out)


async def firewall_delete(args: FirewallDelete, ctx: JobContext, out: Output) -> int:
    def edit(record: dict[str, Any]) -> bool:
        before = len(record["rules"])
        record["rules"] = [r for r in record["rules"] if r.get("id") != args.rule]
        return len(record["rules"]) < before

    _, removed = await change(ctx, edit)
    message = f"rule {args.rule} deleted" if removed else f"no firewall rule {args.rule}: nothing to delete"
    out.result({"rule": args.rule, "deleted": removed, "message": message}, as_json=ctx.as_json)
    return 0


async def _switch(on: bool, ctx: JobContext, out: Output) -> int:
    def edit(record: dict[str, Any]) -> bool:
        was: bool = record["enabled"]
        record["enabled"] = on
        return was

    record, was = await change(ctx, edit)
    table = f"inet {ctx.host.system.nft_table}"
    if on:
        ports = ", ".join(str(port) for port in await ssh_ports(ctx))
        out.stdout(
            f"firewall {'was already on' if was else 'on'}: table {table} loaded with {len(record['rules'])} rule(s);"
            f" loopback, established connections, ICMP and SSH ({ports}) stay allowed"
        )
    else:
        out.stdout(f"firewall {'off' if was else 'was already off'}: table {table} removed, rules kept")
    return 0


async def firewall_enable(args: NoArgs, ctx: JobContext, out: Output) -> int:
    return await _switch(True, ctx, out)


async def firewall_disable(args: NoArgs, ctx: JobContext, out: Output) -> int:
    return await _switch(False, ctx, out)
