"""``updates list --json``: the packages apt can upgrade (``apt list --upgradable``).

It reads apt's cache as it is (no ``apt update``): the answer is as fresh as the last refresh.
"""

from __future__ import annotations

import re
from typing import Any

from agent.jobs.base import JobContext, JobError, Output, handler
from agent.jobs.proc import capture_command, require
from api_client.job_kinds.base import NoArgs

# name/suite[,suite..] version arch [upgradable from: old]
_LINE = re.compile(
    r"^(?P<name>[^/\s]+)/(?P<suites>\S+) (?P<version>\S+) (?P<arch>\S+)(?: \[upgradable from: (?P<old>[^\]]+)\])?"
)


def parse_upgradable(text: str) -> list[dict[str, Any]]:
    updates = []
    for line in text.splitlines():
        match = _LINE.match(line.strip())
        if match is None:
            continue  # "Listing...", notices
        suites = match["suites"].split(",")
        updates.append(
            {
                "name": match["name"],
                "version": match["version"],
                "current_version": match["old"],
                "arch": match["arch"],
                "suites": suites,
                "security": any("security" in s for s in suites),
            }
        )
    return updates


async def _list(args: NoArgs, ctx: JobContext, out: Output) -> int:
    apt = require("apt", "list the available updates (only apt-based systems are supported)")
    code, text, err = await capture_command([apt, "list", "--upgradable"])
    if code != 0:
        raise JobError(f"apt list --upgradable failed (exit {code}): {' '.join(err.split())}")
    updates = parse_upgradable(text)
    out.result(
        {"updates": updates, "count": len(updates), "security_count": sum(u["security"] for u in updates)},
        as_json=ctx.as_json,
    )
    return 0


KINDS = [
    handler("updates.list", _list),
]
