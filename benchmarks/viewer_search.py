"""The viewer's `/` search (``fs/find``) beside `grep -b -m1` on the same 1 GiB log: end to end
through the API (client → control plane → agent, which reads the file through the jail), the
match on the log's last line, so the whole file is read; then `?` from the end to a match on its
first line (the whole file read backward, and its lines counted for the match's line number).

    python benchmarks/viewer_search.py

The log is read once before the runs, so both read it from the page cache. It prints MiB/s; it
asserts only that the match is where it was written. Target: at least 100 MiB/s (the viewer paged
its search through 1 MiB windows at 6-10 MiB/s).
"""

from __future__ import annotations

import argparse
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
from contract.models import Scope

LOG_SIZE = 1024 * 1024 * 1024
RUNS = 3
SITE = Scope(scope="site", domain="example.com")
LINE = b"2026-11-23 10:00:00 [info] 127.0.0.1 GET /index.php?page=1 200 1234 0.012s ok\n"
FIRST_LINE = b"2026-11-23 09:59:59 [warn] the first Needle-Early of the log\n"
LAST_LINE = b"2026-11-23 23:59:59 [error] the last Needle-Late of the log\n"


def write_log(path: Path) -> int:
    """The log: its first and last lines hold the needles, the rest is alike. Its line count."""
    block = LINE * (1024 * 1024 // len(LINE))
    lines = 2
    with path.open("wb") as f:
        f.write(FIRST_LINE)
        written = len(FIRST_LINE)
        while written + len(block) + len(LAST_LINE) <= LOG_SIZE:
            f.write(block)
            written += len(block)
            lines += block.count(b"\n")
        f.write(LAST_LINE)
    return lines


def read_once(path: Path) -> None:
    with path.open("rb") as f:
        while f.read(16 * 1024 * 1024):
            pass


async def find_figures(base_url: str, token: str, server_id: str, path: str, size: int, lines: int) -> dict[str, float]:
    """Median seconds of a forward find of the last line's needle from 0, and of a backward one of
    the first line's from the end."""
    times: dict[str, list[float]] = {"forward": [], "backward": []}
    async with Client(base_url, token=token) as client:
        for _ in range(RUNS):
            started = time.perf_counter()
            late = await client.files.find(server_id, SITE, path, query="needle-late")
            times["forward"].append(time.perf_counter() - started)
            assert (late.offset, late.line) == (size - len(LAST_LINE) + LAST_LINE.index(b"Needle"), lines), late
            started = time.perf_counter()
            early = await client.files.find(server_id, SITE, path, query="needle-early", backward=True, offset=size)
            times["backward"].append(time.perf_counter() - started)
            assert (early.offset, early.line) == (FIRST_LINE.index(b"Needle"), 1), early
    return {way: statistics.median(seconds) for way, seconds in times.items()}


def grep_figure(path: Path) -> float | None:
    """Median seconds of `grep -b -m1 -i needle-late` (the byte offset of the first match)."""
    if shutil.which("grep") is None:
        return None
    times = []
    for _ in range(RUNS):
        started = time.perf_counter()
        done = subprocess.run(["grep", "-b", "-m1", "-i", "needle-late", str(path)], capture_output=True, check=True)
        times.append(time.perf_counter() - started)
        assert done.stdout.endswith(LAST_LINE), done.stdout[-200:]
    return statistics.median(times)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="an 8 MiB log, one run: only checks that it runs")
    if parser.parse_args(argv).quick:
        global LOG_SIZE, RUNS  # the sizes every part uses
        LOG_SIZE, RUNS = 8 * 1024 * 1024, 1
    with local_stack() as stack:
        log = stack.data_dir / "home" / "example-com" / "logs" / "bench-search.log"
        lines = write_log(log)
        size = log.stat().st_size
        read_once(log)
        rel = "logs/bench-search.log"
        seconds = trio.run(find_figures, stack.base_url, stack.token, stack.server_id, rel, size, lines)
        grep = grep_figure(log)
    mib = size / (1024 * 1024)
    print(f"search a {mib:,.0f} MiB log ({lines:,} lines), medians of {RUNS}:")
    print(f"  viewer /  (fs/find, forward, match on the last line)  {mib / seconds['forward']:8,.0f} MiB/s", end="")
    print(f"   grep -b -m1 -i {mib / grep:8,.0f} MiB/s" if grep else "   (no grep here)")
    print(f"  viewer ?  (fs/find, backward, match on the first line) {mib / seconds['backward']:7,.0f} MiB/s")


if __name__ == "__main__":
    main()
