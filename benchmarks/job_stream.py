"""Job output throughput: agent → control plane → API client (SSE), and into the TUI log panel,
beside the same 200,000 lines read through `ssh localhost` (sshd started on loopback).

    python benchmarks/job_stream.py [--lines 200000] [--quick]

It prints figures. Targets: ≥ 300,000 lines/s to the client, first line on screen within 100 ms
of the job starting. It checks one thing: that what arrives is exactly what was written. A job
keeps at most 16 MiB of output (`control_plane.jobs.runner.DEFAULT_OUTPUT_CAP`); a log past it
arrives cut, its kept lines exact and then the cap's note saying how many lines and bytes were
left out. Measured at 200,000 lines of the earlier, longer line (16,889,780 bytes): 198,684 lines
arrived exactly as written, then the note "1,316 lines (112,626 bytes) left out": the cap cut
the log, no line was lost. The log's lines are sized so that 200,000 fit under the cap.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from textual.app import App, ComposeResult
from textual.strip import Strip

from api_client import Client
from benchmarks._stack import cpu_seconds, local_stack, loopback_sshd
from control_plane.jobs.runner import DEFAULT_OUTPUT_CAP, cap_note
from tui.jobs.log_panel import LogLine, LogPanel


def log_line(i: int) -> str:
    """The log's line `i` (77 bytes on average with its newline: 200,000 of them fit in a job's output)."""
    return f'203.0.113.{i % 250} - - [22/Nov/2026:10:00:00 +0000] "GET /i/{i} HTTP/1.1" 200 {i}'


def write_log(path: Path, lines: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        for i in range(lines):
            handle.write(log_line(i) + "\n")


def check_arrived(texts: Sequence[str], lines: int, cap: int = DEFAULT_OUTPUT_CAP) -> int:
    """How many of the `lines` written arrived, each exactly as written, in order; past the job
    output `cap`, the kept lines are followed by the cap's note naming the rest.

    Raises:
        AssertionError: a line is missing, changed or out of order, or the note is wrong.
    """
    kept, size = 0, 0
    while kept < lines and size + len(log_line(kept).encode()) + 1 <= cap:
        size += len(log_line(kept).encode()) + 1
        kept += 1
    for i in range(min(kept, len(texts))):
        assert texts[i] == log_line(i), f"line {i} arrived as {texts[i]!r}, written as {log_line(i)!r}"
    left_out = [len(log_line(i).encode()) + 1 for i in range(kept, lines)]
    note = [cap_note(cap, len(left_out), sum(left_out))] if left_out else []
    assert len(texts) == kept + len(note), f"received {len(texts)} lines, expected {kept} and {len(note)} note"
    assert list(texts[kept:]) == note, f"the end of the output: {texts[kept:]!r}, expected {note!r}"
    return kept


async def through_api(base_url: str, token: str, server_id: str, lines: int) -> tuple[float, float, int, list[str]]:
    """(seconds to the exit event, seconds to the first line, lines received, texts) for one logs.tail job."""
    texts: list[str] = []
    async with Client(base_url, token=token) as client:
        started = time.perf_counter()
        job = await client.jobs.create(server_id, "logs.tail", {"domain": "example.com", "lines": lines})
        first = 0.0
        async for event in client.jobs.stream(job.id):
            if event.event == "line":
                if not texts:
                    first = time.perf_counter() - started
                texts.append(event.data["text"])
        return time.perf_counter() - started, first, len(texts), texts


async def benchmark_feed(texts: Sequence[str], *, batch: int = 5_000) -> tuple[float, float]:
    """Feed `texts` to a headless log panel as the job screen does: batches of lines, the event
    loop free in between.

    Returns (seconds until every line is in and painted, seconds from the first batch to the
    first frame showing it).
    """

    class WatchedPanel(LogPanel):
        """Says when a frame with at least `wanted` lines has been drawn."""

        wanted = 0
        drawn: asyncio.Event | None = None

        def _render_frame(self, width: int, height: int) -> list[Strip]:
            if self.drawn is not None and self.appended >= self.wanted:
                self.drawn.set()
            return super()._render_frame(width, height)

    class Bench(App[None]):
        def compose(self) -> ComposeResult:
            yield WatchedPanel()

    async def drawn_with(panel: WatchedPanel, count: int) -> None:
        panel.wanted, panel.drawn = count, asyncio.Event()
        panel._frame_key = None  # draw again even if that frame was drawn already
        panel.refresh()
        await panel.drawn.wait()

    app = Bench()
    async with app.run_test(size=(160, 48)):
        panel = app.query_one(WatchedPanel)
        loop = asyncio.get_running_loop()
        started = loop.time()
        panel.append_lines([LogLine(text) for text in texts[:batch]])
        await drawn_with(panel, min(batch, len(texts)))
        first_frame = loop.time() - started
        for start in range(batch, len(texts), batch):
            panel.append_lines([LogLine(text) for text in texts[start : start + batch]])
            await asyncio.sleep(0)
        await drawn_with(panel, len(texts))
        return loop.time() - started, first_frame


def into_log_panel(texts: list[str]) -> tuple[float, float]:
    """(seconds to append every line to the TUI log panel and paint, seconds to the first painted frame)."""
    return asyncio.run(benchmark_feed(texts))


def through_ssh(log: Path, lines: int) -> float | None:
    with loopback_sshd() as ssh:
        if ssh is None:
            return None
        started = time.perf_counter()
        done = subprocess.run(ssh.command(f"tail -n {lines} {log}"), capture_output=True, check=True)
        elapsed = time.perf_counter() - started
        assert done.stdout.count(b"\n") == lines
        return elapsed


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--quick", action="store_true", help="2,000 lines: only checks that it runs")
    args = parser.parse_args(argv)
    lines = 2_000 if args.quick else args.lines
    with local_stack() as stack:
        log = stack.site_log("example-com", "access.log")
        write_log(log, lines)
        print(f"lines: {lines:,}")
        with stack.separate_agent("bench-agent", "--host-layout", str(stack.host_layout)) as server_id:
            trio.run(through_api, stack.base_url, stack.token, server_id, 1000)  # warm up
            pids = {"control plane": stack.pid, "agent": stack.agent_pid}
            before = {name: cpu_seconds(pid) for name, pid in pids.items()}
            client_before = time.process_time()
            total, first, _, texts = trio.run(through_api, stack.base_url, stack.token, server_id, lines)
            cpu = {name: cpu_seconds(pid) - before[name] for name, pid in pids.items()}
            cpu["client"] = time.process_time() - client_before
        arrived = check_arrived(texts, lines)
        print(f"arrived exactly as written: {arrived:,} of {lines:,} lines")
        print(f"agent → API client (SSE):  {len(texts) / total:>12,.0f} lines/s   ({total * 1000:.0f} ms in all)")
        print(f"  first line after start:  {first * 1000:>12.1f} ms (POST /jobs to the first SSE line)")
        print("  CPU seconds:             " + ", ".join(f"{name} {seconds:.2f}" for name, seconds in cpu.items()))
        shared, _, _, shared_texts = trio.run(through_api, stack.base_url, stack.token, stack.server_id, lines)
        check_arrived(shared_texts, lines)
        print(f"  same, agent in the control plane's process (fleetdeck local): {lines / shared:,.0f} lines/s")
        feed, first_frame = into_log_panel(texts)
        print(f"into the TUI log panel:    {lines / feed:>12,.0f} lines/s   ({feed * 1000:.0f} ms in all)")
        print(f"  first frame with a line: {first_frame * 1000:>12.1f} ms after its batch arrived")
        ssh = through_ssh(log, lines)
        if ssh is None:
            print("ssh localhost:             not measured (no sshd/ssh on this machine)")
        else:
            print(f"ssh localhost tail -n:     {lines / ssh:>12,.0f} lines/s   ({ssh * 1000:.0f} ms in all)")


if __name__ == "__main__":
    main()
