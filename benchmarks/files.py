"""The file workspace beside the same work over ssh: listing a 100,000-entry folder, and
downloading and uploading 256 MiB, end to end through the API (client → control plane → agent).

The agent serves a direct-upload ingress, so the 256 MiB upload takes the path the client picks
by size (direct: client → agent, the control plane only signs the URL); the same upload to an
agent without an ingress shows the fallback (the WebSocket stream through the control plane).

    python benchmarks/files.py

It prints figures; it asserts nothing. Targets: listing no slower than `ssh ls -la` of the same
folder; transfers at least as fast as scp; the editor's first frame of a 10 MiB file under 300 ms
and a keystroke (in the middle of that file, until the frame showing it) under 30 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from api_client import Client
from benchmarks._stack import LocalStack, Ssh, local_stack, loopback_sshd
from contract.models import Scope

ENTRIES = 100_000
TRANSFER = 256 * 1024 * 1024
SITE = Scope(scope="site", domain="example.com")


def make_folder(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(ENTRIES):
        (folder / f"entry-{i:06d}.html").write_bytes(b"x")


async def api_figures(stack: LocalStack, server_id: str, data: bytes) -> tuple[dict[str, float], str]:
    figures: dict[str, float] = {}
    async with Client(stack.base_url, token=stack.token) as client:
        started = time.perf_counter()
        listing = await client.files.list_all(server_id, SITE, "big")
        figures["list"] = time.perf_counter() - started
        assert len(listing.entries) == ENTRIES
        started = time.perf_counter()
        await client.files.upload(server_id, SITE, "upload.bin", data, overwrite=True)
        figures["upload"] = time.perf_counter() - started
        via = client.files.last_upload_via or "?"
        started = time.perf_counter()
        received = 0
        async for chunk in client.files.download(server_id, SITE, "upload.bin"):
            received += len(chunk)
        figures["download"] = time.perf_counter() - started
        assert received == TRANSFER
    return figures, via


async def upload_figure(stack: LocalStack, server_id: str, data: bytes) -> tuple[float, str]:
    async with Client(stack.base_url, token=stack.token) as client:
        started = time.perf_counter()
        await client.files.upload(server_id, SITE, "upload-fallback.bin", data, overwrite=True)
        return time.perf_counter() - started, client.files.last_upload_via or "?"


def ssh_figures(ssh: Ssh, site: Path, blob: Path) -> dict[str, float]:
    figures: dict[str, float] = {}
    started = time.perf_counter()
    done = subprocess.run(ssh.command(f"ls -la {site / 'big'}"), capture_output=True, check=True)
    figures["list"] = time.perf_counter() - started
    assert done.stdout.count(b"\n") >= ENTRIES
    with tempfile.TemporaryDirectory() as folder:
        copy = Path(folder) / "copy.bin"
        started = time.perf_counter()
        subprocess.run(ssh.scp_from(str(blob), copy), check=True)
        figures["download"] = time.perf_counter() - started
        started = time.perf_counter()
        upload = [*ssh.scp_from(str(blob), copy)]
        upload[-2], upload[-1] = str(copy), f"root@127.0.0.1:{site / 'scp-upload.bin'}"
        subprocess.run(upload, check=True)
        figures["upload"] = time.perf_counter() - started
    return figures


EDITOR_FILE = 10 * 1024 * 1024
KEYSTROKES = 30


def php_source(size: int) -> str:
    block = "".join(
        f"<?php\n/** Handler {i}. */\nfunction handler_{i}($request) {{\n    return ['id' => {i}, 'ok' => true];\n}}\n"
        for i in range(200)
    )
    return (block * (size // len(block) + 1))[:size]


async def editor_figures(text: str) -> tuple[float, list[float]]:
    """(seconds from `load` to the first full frame, seconds per keystroke until its frame)."""
    from textual import events
    from textual.app import App, ComposeResult
    from textual.strip import Strip

    from tui.app import freeze_startup_objects
    from tui.files.editor import Editor

    class WatchedEditor(Editor):
        drawn: asyncio.Event | None = None

        def render_line(self, y: int) -> Strip:
            strip = super().render_line(y)
            if self.drawn is not None and y == self.scrollable_content_region.height - 1:
                self.drawn.set()  # the last row of the frame: the whole frame is drawn
            return strip

    class Bench(App[None]):
        def compose(self) -> ComposeResult:
            yield WatchedEditor()

    app = Bench()
    async with app.run_test(size=(200, 50)) as pilot:
        editor = app.query_one(WatchedEditor)
        editor.focus()
        freeze_startup_objects()  # as the fleetdeck app does when it mounts
        await pilot.pause()
        editor.drawn = asyncio.Event()
        started = time.perf_counter()
        editor.load(text, "big.php")
        await editor.drawn.wait()
        first_frame = time.perf_counter() - started
        editor.move_to(editor.line_count // 2, 10)
        await pilot.pause()
        keystrokes = []
        for key in "fleetdeck-is-fast-enough-here!"[:KEYSTROKES]:
            editor.drawn = asyncio.Event()
            started = time.perf_counter()
            # The key as the terminal driver delivers it (Pilot.press adds waits of its own).
            app.post_message(events.Key(key, key))
            await editor.drawn.wait()
            keystrokes.append(time.perf_counter() - started)
            await pilot.pause()
        return first_frame, keystrokes


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="1,000 entries, 1 MiB, a 64 KiB file: only checks that it runs"
    )
    if parser.parse_args(argv).quick:
        global ENTRIES, TRANSFER, EDITOR_FILE, KEYSTROKES  # the sizes every part uses
        ENTRIES, TRANSFER, EDITOR_FILE, KEYSTROKES = 1_000, 1024 * 1024, 64 * 1024, 5
    first_frame, keystrokes = asyncio.run(editor_figures(php_source(EDITOR_FILE)))
    with local_stack() as stack:
        site = stack.data_dir / "home" / "example-com"
        make_folder(site / "big")
        blob = stack.data_dir / "blob.bin"
        blob.write_bytes(os.urandom(TRANSFER))
        data = blob.read_bytes()
        with stack.separate_agent("bench-agent", ingress=True) as server_id:
            api, via = trio.run(api_figures, stack, server_id, data)
        with stack.separate_agent("bench-agent-no-ingress") as server_id:
            fallback, fallback_via = trio.run(upload_figure, stack, server_id, data)
        with loopback_sshd() as ssh:
            over_ssh = ssh_figures(ssh, site, blob) if ssh is not None else None
    mib = TRANSFER / 1024 / 1024
    print(f"listing {ENTRIES:,} entries:  API {api['list'] * 1000:7.0f} ms", end="")
    print(f"   ssh ls -la {over_ssh['list'] * 1000:7.0f} ms" if over_ssh else "   (no sshd here)")
    for what in ("download", "upload"):
        print(f"{what} {mib:.0f} MiB:{'':7}API {mib / api[what]:7.0f} MiB/s", end="")
        print(f"   scp {mib / over_ssh[what]:7.0f} MiB/s" if over_ssh else "   (no sshd here)", end="")
        print(f"   (path: {via})" if what == "upload" else "")
    print(f"upload {mib:.0f} MiB, agent without ingress: API {mib / fallback:7.0f} MiB/s   (path: {fallback_via})")
    print(f"editor, 10 MiB PHP file: first frame {first_frame * 1000:.0f} ms; keystroke median ", end="")
    print(
        f"{statistics.median(keystrokes) * 1000:.1f} ms, worst {max(keystrokes) * 1000:.1f} ms ({len(keystrokes)} keys)"
    )


if __name__ == "__main__":
    main()
