"""The file workspace beside the same work over ssh: listing a 100,000-entry folder, and
downloading and uploading 256 MiB, end to end through the API (client → control plane → agent).

The agent serves a direct-upload ingress, so the 256 MiB upload takes the path the client picks
by size (direct: client → agent, the control plane only signs the URL); the same upload to an
agent without an ingress shows the fallback (the WebSocket stream through the control plane).

    python benchmarks/files.py

Downloads take the direct path too when the agent has an ingress (a signed one-time GET on the
agent, which sends the file with `sendfile`); the relay through the control plane is measured
beside it. Beside the transfers: the loopback TCP rate between two processes on this machine
(one sends 1 MiB buffers, the other receives them), the ceiling any of them could reach, so a
change in the machine is told from a change in the product; and the peak RSS of the control
plane and the agent, which stays flat whatever the file's size.

It prints figures; it asserts nothing. Targets (issue 26): listing no slower than `ssh ls -la` of
the same folder; downloads ≥ 4x scp, streamed uploads (no ingress) ≥ 2x scp, direct uploads ≥ 4x;
the editor's first frame of a 10 MiB file under 300 ms and a keystroke (in the middle of that
file, until the frame showing it) median ≤ 16 ms, worst ≤ 50 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
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
from contract import allocator
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
        for direct, name in ((True, "download"), (False, "download relayed")):
            started = time.perf_counter()
            received = 0
            async for chunk in client.files.download(server_id, SITE, "upload.bin", direct=direct):
                received += len(chunk)
            figures[name] = time.perf_counter() - started
            assert received == TRANSFER
            assert client.files.last_download_via == ("direct" if direct else "relay")
    return figures, via


LOOPBACK_SENDER = """
import socket, sys
size, port = int(sys.argv[1]), int(sys.argv[2])
block = bytes(1024 * 1024)
with socket.create_connection(("127.0.0.1", port)) as s:
    for _ in range(size // len(block)):
        s.sendall(block)
"""


def loopback_mib_s(size: int) -> float:
    """MiB/s of `size` bytes over loopback TCP from another process, received in 1 MiB reads."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        sender = subprocess.Popen([sys.executable, "-c", LOOPBACK_SENDER, str(size), str(port)])
        connection, _ = server.accept()
        buffer = bytearray(1024 * 1024)
        received = 0
        started = time.perf_counter()
        with connection:
            while n := connection.recv_into(buffer):
                received += n
        elapsed = time.perf_counter() - started
        sender.wait()
    return received / 1024 / 1024 / elapsed


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


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
    allocator.keep_buffers_mapped()  # this process is the client: as fleetdeck's own process does
    first_frame, keystrokes = asyncio.run(editor_figures(php_source(EDITOR_FILE)))
    with local_stack() as stack:
        site = stack.data_dir / "home" / "example-com"
        make_folder(site / "big")
        blob = stack.data_dir / "blob.bin"
        blob.write_bytes(os.urandom(TRANSFER))
        data = blob.read_bytes()
        with stack.separate_agent("bench-agent", ingress=True) as server_id:
            api, via = trio.run(api_figures, stack, server_id, data)
            peaks = {"control plane": peak_rss_mib(stack.pid), "agent": peak_rss_mib(stack.agent_pid)}
        with stack.separate_agent("bench-agent-no-ingress") as server_id:
            fallback, fallback_via = trio.run(upload_figure, stack, server_id, data)
        with loopback_sshd() as ssh:
            over_ssh = ssh_figures(ssh, site, blob) if ssh is not None else None
        ceiling = loopback_mib_s(max(TRANSFER, 64 * 1024 * 1024))
    mib = TRANSFER / 1024 / 1024
    print(f"listing {ENTRIES:,} entries:  API {api['list'] * 1000:7.0f} ms", end="")
    print(f"   ssh ls -la {over_ssh['list'] * 1000:7.0f} ms" if over_ssh else "   (no sshd here)")
    print(f"loopback TCP between two processes (the ceiling): {ceiling:7.0f} MiB/s")
    rows = [
        ("download", "direct", api["download"], "download"),
        ("download", "relay", api["download relayed"], "download"),
        ("upload", via, api["upload"], "upload"),
        ("upload", f"{fallback_via}, no ingress", fallback, "upload"),
    ]
    for what, path, seconds, reference in rows:
        rate = mib / seconds
        print(f"{what} {mib:.0f} MiB ({path}):".ljust(38) + f"API {rate:7.0f} MiB/s", end="")
        if over_ssh:
            scp = mib / over_ssh[reference]
            print(f"   scp {scp:7.0f} MiB/s   {rate / scp:5.1f}x scp   {rate / ceiling:5.2f} of the ceiling")
        else:
            print("   (no sshd here)")
    print(f"peak RSS after the transfers: control plane {peaks['control plane']:.0f} MiB,", end="")
    print(f" agent {peaks['agent']:.0f} MiB")
    print(f"editor, 10 MiB PHP file: first frame {first_frame * 1000:.0f} ms; keystroke median ", end="")
    print(
        f"{statistics.median(keystrokes) * 1000:.1f} ms, worst {max(keystrokes) * 1000:.1f} ms ({len(keystrokes)} keys)"
    )


if __name__ == "__main__":
    main()
