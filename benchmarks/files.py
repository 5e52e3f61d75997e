"""The file workspace beside the same work over ssh: listing a 100,000-entry folder, and
downloading and uploading 256 MiB, end to end through the API (client → control plane → agent).

The agent serves a direct-upload ingress, so the 256 MiB upload takes the path the client picks
by size (direct: client → agent, the control plane only signs the URL); the same upload to an
agent without an ingress shows the fallback (the WebSocket stream through the control plane).

    python benchmarks/files.py

It prints figures; it asserts nothing. Targets: listing no slower than `ssh ls -la` of the same
folder; transfers at least as fast as scp. The editor figures (first frame and keystroke on a
10 MiB file) come with the editor, which is not built yet.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from api_client import Client
from api_client.models import Scope
from benchmarks._stack import LocalStack, Ssh, local_stack, loopback_sshd

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


def main() -> None:
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


if __name__ == "__main__":
    main()
