"""The README's "Running at scale" section, as a test runs it: its shell lines and its load
balancer's body, with the example's addresses, ports, ids and tokens replaced by the test's own.
A README whose commands drift (an option renamed, an address the test does not know) fails."""

from __future__ import annotations

import json
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetdeck.launcher import PROJECT_ROOT
from tests.helpers.control_planes import OwnControlPlane
from tests.helpers.replicas import nats_binary

README = PROJECT_ROOT / "README.md"
HEADING = "## Running at scale"
ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=")


@dataclass(frozen=True)
class ScaleSection:
    lines: list[str]  # the shell lines of the section's `sh` blocks, in order
    lb_body: dict[str, Any]  # its one `json` block: the load balancer's POST body

    def starting(self, prefix: str) -> list[str]:
        return [line for line in self.lines if line.startswith(prefix)]


def scale_section(readme: Path = README) -> ScaleSection:
    text = readme.read_text()
    start = text.index(HEADING)
    end = text.find("\n## ", start + len(HEADING))
    blocks = re.findall(r"```(\w+)\n(.*?)```", text[start : end if end > 0 else None], re.S)
    lines = [line.strip() for kind, block in blocks if kind == "sh" for line in block.splitlines() if line.strip()]
    bodies = [json.loads(block) for kind, block in blocks if kind == "json"]
    assert len(bodies) == 1, f"the section has {len(bodies)} json blocks, not one load balancer body"
    return ScaleSection(lines, bodies[0])


def substitute(line: str, replacements: list[tuple[str, str]]) -> str:
    """`line` with each example value replaced, in order; none of the example's addresses may be left."""
    for example, ours in replacements:
        line = line.replace(example, ours)
    assert "10.0.0." not in line, f"an address of the README's example the test does not know: {line}"
    return line


def command(line: str) -> tuple[dict[str, str], list[str]]:
    """A shell line's leading `NAME=value` words (its environment) and its argv, with `fleetdeck`
    as installed beside this Python (the console script) and `nats-server` as the tests find it."""
    words = shlex.split(line, comments=True)
    env: dict[str, str] = {}
    while words and ASSIGNMENT.match(words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    programs = {"fleetdeck": str(Path(sys.executable).parent / "fleetdeck"), "nats-server": nats_binary() or ""}
    assert words and words[0] in programs, f"not a command the test knows how to run: {line}"
    return env, [programs[words[0]], *words[1:]]


def exported(lines: list[str]) -> dict[str, str]:
    """The variables the section's `export NAME=value` lines set."""
    found: dict[str, str] = {}
    for line in lines:
        if line.startswith("export "):
            name, _, value = shlex.split(line.removeprefix("export "))[0].partition("=")
            found[name] = value
    return found


class CommandReplica(OwnControlPlane):
    """`fleetdeck serve` started by a given argv (a README line) rather than OwnControlPlane's own;
    restartable with the same argv (its --listen names its port)."""

    def __init__(self, folder: Path, db_url: str, name: str, argv: list[str], env: dict[str, str]) -> None:
        super().__init__(folder, db_url, name, env)
        self.argv = argv

    def command(self) -> list[str]:
        return self.argv

    def replica_id(self) -> str:
        """The id its latest start took on the bus (its log says it)."""
        found = re.findall(r"replica (rpl_\w+) on the bus", self.log())
        assert found, self.log()
        return str(found[-1])
