"""A fake at a boundary the tests cannot reach: systemd's tools on a server whose PID 1 is systemd.

PID 1 on the test machine is not systemd, so its ``systemctl``, ``journalctl``, ``timedatectl`` and
``hostnamectl`` cannot act (and must not: other tests drive the init scripts meanwhile). An agent
whose host layout has `RecordedSystemd.layout` as its ``init`` section believes PID 1 is systemd
and finds these stand-ins before the real tools. Each stand-in writes the argv it was given to
``calls.jsonl``, then answers with output recorded from systemd 252 on Debian 12
(``tests/data/tool_output/``):

- ``systemctl show UNIT`` prints the unit's recorded state (a ``systemctl_show_*.txt``); a unit
  the script does not name prints the recording of one systemd does not know;
- ``systemctl list-units`` and ``list-unit-files`` print their recordings;
- ``journalctl`` prints the recording scripted for its unit (``-u``, ``--unit=``; ``""`` without
  one), else ``-- No entries --``;
- any other command (``systemctl restart nginx``, ``timedatectl set-timezone ...``) does what its
  `Answer` says: its recorded lines on stderr, its exit code, and the unit's recorded state after
  it; a command without one does what these tools do when they succeed: print nothing, exit 0.

The script is ``script.json`` beside ``bin/``, rewritten by `RecordedSystemd.script` for each test.
The stand-ins load this file by its path, so it imports nothing but the standard library.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

RECORDED = Path(__file__).resolve().parent.parent / "data" / "tool_output"
TOOLS = ("systemctl", "journalctl", "timedatectl", "hostnamectl")
SCRIPT = "script.json"
CALLS = "calls.jsonl"
NOT_FOUND = "systemctl_show_not_found.txt"
NO_ENTRIES = "journalctl_no_entries.txt"

STAND_IN = """#!{python}
# A stand-in for systemd's {tool} that replays recorded output: see {module}.
import importlib.util, sys
spec = importlib.util.spec_from_file_location("recorded_systemd", {module!r})
module = importlib.util.module_from_spec(spec)
sys.modules["recorded_systemd"] = module
spec.loader.exec_module(module)
sys.exit(module.replay(sys.argv))
"""


@dataclass(frozen=True)
class Answer:
    """What a command does: its recorded stderr (a file of ``tool_output/``), its exit code, and
    the recorded ``systemctl show`` of its unit (its last word) afterwards."""

    stderr: str | None = None
    exit_code: int = 0
    then: str | None = None


@dataclass
class Script:
    units: dict[str, str] = field(default_factory=dict)  # unit -> its systemctl show recording
    answers: dict[str, Answer] = field(default_factory=dict)  # "systemctl restart nginx" -> Answer
    journals: dict[str, str] = field(default_factory=dict)  # unit ("" for none) -> journalctl recording


class RecordedSystemd:
    """The stand-ins in `folder`/bin, and what they were asked."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.bin = folder / "bin"
        self.bin.mkdir(parents=True)
        for tool in TOOLS:
            stand_in = self.bin / tool
            stand_in.write_text(STAND_IN.format(python=sys.executable, tool=tool, module=str(Path(__file__).resolve())))
            stand_in.chmod(0o755)
        self.script(Script())

    @property
    def layout(self) -> dict[str, str]:
        """The host layout's ``init`` section that makes an agent use these stand-ins."""
        return {"system": "systemd", "tools_dir": str(self.bin)}

    def script(self, script: Script) -> None:
        """Answer as `script` says from now on, and forget the commands asked so far."""
        answers = {command: asdict(answer) for command, answer in script.answers.items()}
        written = {"units": script.units, "answers": answers, "journals": script.journals}
        (self.folder / SCRIPT).write_text(json.dumps(written))
        (self.folder / CALLS).write_text("")

    def asked(self) -> list[list[str]]:
        """The commands asked since the last look (or `script`), each tool by its name."""
        calls = self.folder / CALLS
        lines = calls.read_text().splitlines()
        calls.write_text("")
        return [json.loads(line) for line in lines]


def _unit_of(command: list[str]) -> str:
    for i, word in enumerate(command):
        if word == "-u" and i + 1 < len(command):
            return command[i + 1]
        if word.startswith("--unit="):
            return word.removeprefix("--unit=")
    return ""


def _print(recording: str, stream: Any = None) -> None:
    (stream or sys.stdout).write((RECORDED / recording).read_text())


def replay(argv: list[str]) -> int:
    """Run as the stand-in ``argv[0]``: record the command, answer it (see the module docstring)."""
    tool = Path(argv[0])
    folder = tool.parent.parent
    command = [tool.name, *argv[1:]]
    with open(folder / CALLS, "a") as calls:
        calls.write(json.dumps(command) + "\n")
    script = json.loads((folder / SCRIPT).read_text())
    if command[0] == "journalctl":
        _print(script["journals"].get(_unit_of(command), NO_ENTRIES))
    elif command[:2] == ["systemctl", "show"]:
        _print(script["units"].get(command[2], NOT_FOUND))
    elif command[:2] in (["systemctl", "list-units"], ["systemctl", "list-unit-files"]):
        _print(f"systemctl_{command[1].replace('-', '_')}.txt")
    else:
        answer = Answer(**script["answers"].get(" ".join(command), {}))
        if answer.stderr is not None:
            _print(answer.stderr, sys.stderr)
        if answer.then is not None:
            script["units"][command[-1]] = answer.then
            (folder / SCRIPT).write_text(json.dumps(script))
        return answer.exit_code
    return 0
