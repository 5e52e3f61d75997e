"""How soon `fleetdeck` shows something, next to a bare Textual app, in one run.

Each row starts a process in a pseudo-terminal of 80x24 (TERM=xterm-256color, like a user's
terminal) and times, from just before the spawn, until a marker text first appears in what the
process writes to the terminal:

* bare Textual app, first frame: an `App` with one `Static`, its text;
* fleetdeck, first frame: the starting screen's line ("Starting the local control plane…", or
  "Connecting to the local control plane…" when a stack runs on the data dir);
* fleetdeck, server list: `127.0.0.1`, the address of the demo server in the server list, which
  is drawn once the embedded stack answers.

fleetdeck runs on the embedded default (`fleetdeck --data-dir DIR`) in three cases: a fresh data
dir (the demo workspace and database are made: 20,000 files); the stack that start left running
(a TUI leaves its stack up for `FLEETDECK_LOCAL_IDLE_MINUTES`, so the next start joins it); and a
reused data dir whose stack was stopped (`fleetdeck local --stop`). Each is measured `--runs`
times, the bare app twice per round between them, as the load of a shared machine changes from
minute to minute (median shown, and the range); the process is then quit with ctrl+q. Everything
includes the interpreter's start and imports, as the user waits for them too. Our packages'
bytecode is made first, as an installed fleetdeck has it (pip compiles it, as it did Textual's):
where PYTHONDONTWRITEBYTECODE is set, every run would otherwise compile them from source.

    python -m benchmarks.startup [--runs 3]
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import select
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks._stack import compile_bytecode
from fleetdeck.launcher import child_environment
from fleetdeck.running import stop_running

SIZE = (24, 80)  # rows, columns
TIMEOUT_S = 120.0
QUIT = b"\x11"  # ctrl+q, bound to quit by Textual and by fleetdeck

BARE_APP = """
from textual.app import App
from textual.widgets import Static

class Bare(App[None]):
    def compose(self):
        yield Static("bare app is drawn")

Bare().run()
"""
BARE_MARKER = b"bare app is drawn"
FIRST_FRAME_MARKER = b"the local control plane"
IDLE_MINUTES = "10"  # the default: the stack a TUI started stays up for the next start
SERVER_LIST_MARKER = b"127.0.0.1"


def time_markers(command: Sequence[str], markers: Sequence[bytes]) -> list[float]:
    """Seconds from spawning `command` in a pseudo-terminal until each marker appears in its output."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", SIZE[0], SIZE[1], 0, 0))
    env = child_environment(
        {
            "TERM": "xterm-256color",
            "COLUMNS": str(SIZE[1]),
            "LINES": str(SIZE[0]),
            "FLEETDECK_LOCAL_IDLE_MINUTES": IDLE_MINUTES,
        }
    )
    env.pop("COLORTERM", None)
    start = time.perf_counter()
    process = subprocess.Popen(command, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True)
    os.close(slave)
    seen: dict[bytes, float] = {}
    output = b""
    try:
        deadline = start + TIMEOUT_S
        while len(seen) < len(markers) and time.perf_counter() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                if process.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            now = time.perf_counter()
            output += chunk
            for marker in markers:
                if marker not in seen and marker in output:
                    seen[marker] = now - start
        missing = [m.decode() for m in markers if m not in seen]
        if missing:
            raise RuntimeError(f"{' '.join(command)}: never showed {missing}; last output {output[-300:]!r}")
        return [seen[m] for m in markers]
    finally:
        _quit(process, master)


def _quit(process: subprocess.Popen[bytes], master: int) -> None:
    """ctrl+q, and the process's output read until it exits (a full pty would block its exit)."""
    try:
        os.write(master, QUIT)
        deadline = time.monotonic() + 20
        while process.poll() is None and time.monotonic() < deadline:
            if select.select([master], [], [], 0.2)[0]:
                try:
                    os.read(master, 65536)
                except OSError:
                    break
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
        process.wait(20)
    finally:
        os.close(master)


def fleetdeck_command(data_dir: Path) -> list[str]:
    return [sys.executable, "-m", "fleetdeck", "--data-dir", str(data_dir), "--theme", "fleetdeck-ansi"]


def summary(values: Sequence[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:6.2f} s"
    return f"{statistics.median(values):6.2f} s ({min(values):.2f}-{max(values):.2f})"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one run: only checks that it runs")
    args = parser.parse_args(argv)
    runs = 1 if args.quick else args.runs
    compile_bytecode()

    bare: list[float] = []
    cases: dict[str, list[list[float]]] = {"fresh": [], "running": [], "stopped": []}
    markers = [FIRST_FRAME_MARKER, SERVER_LIST_MARKER]
    with tempfile.TemporaryDirectory(prefix="fleetdeck-startup-") as folder:
        for run in range(runs):
            data_dir = Path(folder) / f"data-{run}"
            try:
                bare.append(time_markers([sys.executable, "-c", BARE_APP], [BARE_MARKER])[0])
                cases["fresh"].append(time_markers(fleetdeck_command(data_dir), markers))
                cases["running"].append(time_markers(fleetdeck_command(data_dir), markers))
                bare.append(time_markers([sys.executable, "-c", BARE_APP], [BARE_MARKER])[0])
                stop_running(data_dir)
                cases["stopped"].append(time_markers(fleetdeck_command(data_dir), markers))
            finally:
                stop_running(data_dir)
                shutil.rmtree(data_dir, ignore_errors=True)

    bare_median = statistics.median(bare)
    names = {
        "fresh": "fleetdeck, fresh data dir",
        "running": "fleetdeck, stack running",
        "stopped": "fleetdeck, reused, stopped",
    }
    rows = [("bare Textual app", "first frame", bare)]
    for case, name in names.items():
        rows.append((name, "first frame", [times[0] for times in cases[case]]))
        rows.append((name, "server list", [times[1] for times in cases[case]]))
    print(f"time to show, from spawn, in an {SIZE[1]}x{SIZE[0]} pseudo-terminal; median of {runs} (range)")
    for name, what, values in rows:
        ratio = statistics.median(values) / bare_median
        print(f"  {name:<28} {what:<12} {summary(values)}   x{ratio:.2f} the bare app")
    print(
        "goals (issue 26): first frame within x1.1 of the bare app; server list within 0.5 s with the stack"
        " running, within 3 s on a fresh data dir"
    )


if __name__ == "__main__":
    main()
