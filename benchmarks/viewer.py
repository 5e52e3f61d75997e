"""The viewer (F3) beside `less +G`: opening a 100 MB log at its end, end to end through the API
(client → control plane → agent, ranged `fs/read`), and `less -n +G` of the same file in a
pseudo-terminal on this machine (`-n`: no line numbers, so less does not read the whole file).

    python benchmarks/viewer.py

It prints figures; it asserts nothing. Target: the viewer's last page of a 100 MB log under
300 ms, the file never read whole (a few windows at most).
"""

from __future__ import annotations

import argparse
import os
import pty
import select
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from api_client import Client
from benchmarks._stack import local_stack
from contract.models import FileWindow, Scope
from tui.files.pager import Pager

LOG_SIZE = 100 * 1000 * 1000
RUNS = 5
SITE = Scope(scope="site", domain="example.com")
LAST_LINE = b"the very last line of the log\n"


def write_log(path: Path) -> None:
    line = b"2026-11-23 10:00:00 [info] 127.0.0.1 GET /index.php?page=1 200 1234 0.012s ok\n"
    with path.open("wb") as f:
        f.write(line * ((LOG_SIZE - len(LAST_LINE)) // len(line)))
        f.write(LAST_LINE)


async def viewer_figures(base_url: str, token: str, server_id: str, path: str) -> tuple[list[float], int]:
    """Seconds to the last page (200x48) of a fresh viewer, and the bytes it read to get there."""
    times, read = [], 0
    async with Client(base_url, token=token) as client:
        for _ in range(RUNS):
            read = 0

            async def fetch(offset: int, length: int) -> FileWindow:
                nonlocal read
                window = await client.files.read_window(server_id, SITE, path, offset, length)
                read += window.length
                return window

            pager = Pager(fetch)
            pager.width, pager.height = 200, 48
            started = time.perf_counter()
            page = await pager.open(at_end=True)
            times.append(time.perf_counter() - started)
            assert page.rows[-1].text == LAST_LINE.decode().rstrip("\n")
    return times, read


def less_figure(path: Path) -> float | None:
    """Seconds from starting `less -n +G` in a 200x48 pseudo-terminal until it shows the last line."""
    if shutil.which("less") is None:
        return None
    main, tty = pty.openpty()
    os.set_blocking(main, False)
    env = {**os.environ, "TERM": "xterm", "LINES": "48", "COLUMNS": "200", "LESS": ""}
    started = time.perf_counter()
    less = subprocess.Popen(["less", "-n", "+G", str(path)], stdin=tty, stdout=tty, stderr=tty, env=env)
    seen = b""
    try:
        while LAST_LINE.rstrip() not in seen:
            if select.select([main], [], [], 30)[0]:
                seen = (seen + os.read(main, 65536))[-4096:]
            elif less.poll() is not None:
                return None
        return time.perf_counter() - started
    finally:
        less.kill()
        less.wait()
        os.close(main)
        os.close(tty)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a 1 MB log, one run: only checks that it runs")
    if parser.parse_args(argv).quick:
        global LOG_SIZE, RUNS  # the sizes every part uses
        LOG_SIZE, RUNS = 1000 * 1000, 1
    with local_stack() as stack:
        log = stack.data_dir / "home" / "example-com" / "logs" / "bench-100mb.log"
        write_log(log)
        times, read = trio.run(viewer_figures, stack.base_url, stack.token, stack.server_id, "logs/bench-100mb.log")
        less = [t for t in (less_figure(log) for _ in range(RUNS)) if t is not None]
        size_mb = log.stat().st_size / 1e6
    print(f"open a {size_mb:.0f} MB log at its end: viewer (API, ranged reads) median ", end="")
    median, worst = statistics.median(times) * 1000, max(times) * 1000
    print(f"{median:.0f} ms, worst {worst:.0f} ms, {read / 1024:.0f} KiB read", end="")
    print(f"   less -n +G median {statistics.median(less) * 1000:.0f} ms" if less else "   (no less here)")


if __name__ == "__main__":
    main()
