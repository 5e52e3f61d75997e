"""Faults of the file workspace, end to end through the API with a real agent process: a killed
agent's half-written names, a full disk, hard links to another user's file, and what the agent
says of its kernel's link protections.

The module's agent is its own process (`AgentProcess`, with a direct-upload ingress) linked to
the session's `fleetdeck local` as a second server, over a home of its own with two sites:
``a.example`` and ``full.example``, whose folder becomes a 1 MiB tmpfs for the full-disk tests
(root only: mount needs it). A kill is ``SIGSTOP`` once the operation's temporary name is there
(so the operation is surely mid-way: each is slow or held by the test), then ``SIGKILL``.
"""

from __future__ import annotations

import errno
import io
import logging
import os
import signal
import socket
import subprocess
import sys
import tarfile
import threading
import uuid
import zipfile
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import h11
import httpx
import pytest
import trio

from agent.files import inflight, sweep
from agent.files.jail import refusal
from agent.jobs.toolkit.base import JobContext, Kind, run_kind
from agent.jobs.toolkit.output import Output
from agent.sites import SiteRegistry
from api_client import Client
from contract.errors import ApiError, Forbidden, InsufficientStorage
from contract.job_kinds import lookup
from contract.models import RELAY_UPLOAD_LIMIT, Scope
from tests.conftest import ROOT, AgentProcess, Stack
from tests.helpers import wait_until

SITE = Scope(scope="site", domain="a.example")
FULL = Scope(scope="site", domain="full.example")
MiB = 1024 * 1024
SITES = '{"sites": [{"domain": "a.example", "slug": "site-a"}, {"domain": "full.example", "slug": "site-full"}]}'


@dataclass
class Server:
    agent: AgentProcess
    home: Path
    token: str

    @property
    def id(self) -> str:
        return self.agent.server_id

    @property
    def site(self) -> Path:
        return self.home / "site-a"

    @property
    def full(self) -> Path:
        return self.home / "site-full"

    def client(self) -> Client:
        return Client(self.agent.stack.base_url, token=self.token)

    def ingress_url(self) -> str | None:
        with self.agent.stack.http(self.token) as http:
            url: str | None = http.get(f"/v1/servers/{self.id}").json()["agent"]["direct_ingress_url"]
            return url


@pytest.fixture(scope="module")
def server(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with stack.http() as http:
        created = http.post("/v1/servers", json={"name": f"faults-{uuid.uuid4().hex[:8]}", "kind": "full"}).json()
    base = tmp_path_factory.mktemp("faults")
    home, state = base / "home", base / "state"
    (home / "site-a").mkdir(parents=True)
    (home / "site-full").mkdir()
    state.mkdir()
    (state / "sites.json").write_text(SITES)
    agent = AgentProcess(
        stack, created["server"]["id"], created["agent_token"], home, state, "--ingress", "127.0.0.1:0"
    )
    yield Server(agent, home, stack.token)
    agent.stop()


@pytest.fixture
def folder(server: Server) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    (server.site / name).mkdir()
    return name


def leftovers(folder: Path) -> list[str]:
    """The workspace's work-in-progress names in `folder`."""
    return sorted(name for name in os.listdir(folder) if ".fleetdeck-" in name)


# --- a killed agent --------------------------------------------------------------------------


def kill_mid_way(server: Server, folder: Path, final: str) -> list[str]:
    """Once a temporary name is in `folder`, stop the agent there, check it is mid-way (the final
    name not made), and kill it; the names it left."""
    wait_until(lambda: leftovers(folder), timeout=60)
    server.agent.process.send_signal(signal.SIGSTOP)
    left = leftovers(folder)
    assert left and not (folder / final).exists(), "the operation ended before the agent was stopped"
    server.agent.kill()
    return left


def restart_and_check(server: Server, folder: Path, final: str, left: list[str]) -> None:
    assert leftovers(folder) == left  # nothing removed them while the agent was away
    server.agent.restart()  # online once its start has swept
    assert leftovers(folder) == [] and not (folder / final).exists()


def held_body(first: bytes, release: threading.Event) -> Iterator[bytes]:
    yield first
    release.wait(60)
    yield b"never all of it"


def test_a_killed_relay_upload_leaves_no_temporary_file(server: Server, folder: str) -> None:
    release = threading.Event()
    params = {"scope": "site", "domain": "a.example", "path": f"{folder}/up.bin"}

    def upload() -> None:
        with httpx.Client(base_url=server.agent.stack.base_url, timeout=60) as http:
            try:
                http.put(
                    f"/v1/servers/{server.id}/fs/upload",
                    params=params,
                    content=held_body(b"x" * MiB, release),
                    headers={"Authorization": f"Bearer {server.token}", "Content-Length": str(8 * MiB)},
                )
            except (httpx.HTTPError, h11.LocalProtocolError):
                pass  # the agent went away under it, and the body was never all sent

    thread = threading.Thread(target=upload, daemon=True)
    thread.start()
    try:
        left = kill_mid_way(server, server.site / folder, "up.bin")
    finally:
        release.set()
        thread.join(60)
    restart_and_check(server, server.site / folder, "up.bin", left)


def test_a_killed_streamed_upload_leaves_no_temporary_file(server: Server, folder: str) -> None:
    release = threading.Event()

    async def body() -> AsyncIterator[bytes]:
        yield b"x" * MiB
        await trio.to_thread.run_sync(release.wait, 60)
        yield b"never all of it"

    async def upload() -> None:
        params = {"scope": "site", "domain": "a.example", "path": f"{folder}/up.bin", "overwrite": False}
        async with server.client() as client:
            try:  # what the client sends over the relay's limit: the WebSocket stream
                await client.files._upload_stream(server.id, params, body(), RELAY_UPLOAD_LIMIT + MiB)
            except Exception:
                pass  # the agent went away under it, whatever the client says

    thread = threading.Thread(target=trio.run, args=(upload,), daemon=True)
    thread.start()
    try:
        left = kill_mid_way(server, server.site / folder, "up.bin")
    finally:
        release.set()
        thread.join(60)
    restart_and_check(server, server.site / folder, "up.bin", left)


def test_a_killed_direct_upload_leaves_no_temporary_file(server: Server, folder: str) -> None:
    with server.agent.stack.http(server.token) as http:
        body = {"scope": "site", "domain": "a.example", "path": f"{folder}/up.bin", "size": 8 * MiB}
        granted = http.post(f"/v1/servers/{server.id}/fs/upload/direct", json=body).json()
    url = urlsplit(granted["url"])
    with socket.create_connection((url.hostname, url.port), timeout=30) as sock:
        sock.sendall(f"PUT {url.path} HTTP/1.1\r\nHost: x\r\nContent-Length: {8 * MiB}\r\n\r\n".encode())
        sock.sendall(b"x" * MiB)
        left = kill_mid_way(server, server.site / folder, "up.bin")
    restart_and_check(server, server.site / folder, "up.bin", left)


def run_operation(server: Server, start: Callable[[Client], Any]) -> threading.Thread:
    """Start a compress, extract or copy in a thread (its answer is lost with the agent)."""

    async def run() -> None:
        async with server.client() as client:
            try:
                started = await start(client)
                if isinstance(started, str):  # an operation id: follow it until the agent is gone
                    async for _ in client.files.operation(server.id, started):
                        pass
            except Exception:
                pass

    thread = threading.Thread(target=trio.run, args=(run,), daemon=True)
    thread.start()
    return thread


def test_a_killed_compress_leaves_no_temporary_file(server: Server, folder: str) -> None:
    root = server.site / folder
    with open(root / "zeros.bin", "wb") as f:
        f.truncate(16 * 1024 * MiB)  # sparse: no disk, but seconds to read and deflate

    def start(client: Client) -> Any:
        return client.files.compress(server.id, SITE, [f"{folder}/zeros.bin"], f"{folder}/zeros.zip", format="zip")

    thread = run_operation(server, start)
    left = kill_mid_way(server, root, "zeros.zip")
    thread.join(60)
    restart_and_check(server, root, "zeros.zip", left)


def test_a_killed_extract_leaves_no_temporary_folder(server: Server, folder: str) -> None:
    root = server.site / folder
    with tarfile.open(root / "many.tar", "w") as archive:
        for n in range(40_000):  # one file at a time through the jail: seconds
            info = tarfile.TarInfo(f"many/d{n % 100}/f{n}.txt")
            info.size = 3
            archive.addfile(info, io.BytesIO(b"abc"))

    def start(client: Client) -> Any:
        return client.files.extract(server.id, SITE, f"{folder}/many.tar", f"{folder}/out")

    thread = run_operation(server, start)
    left = kill_mid_way(server, root, "out")
    thread.join(60)
    restart_and_check(server, root, "out", left)


def test_a_killed_copy_leaves_no_temporary_folder(server: Server, folder: str) -> None:
    root = server.site / folder
    for d in range(100):
        (root / "tree" / f"d{d}").mkdir(parents=True)
        for n in range(300):
            (root / "tree" / f"d{d}" / f"f{n}.txt").write_bytes(b"abc")
    (root / "into").mkdir()

    def start(client: Client) -> Any:
        return client.files.copy(server.id, SITE, [f"{folder}/tree"], f"{folder}/into")

    thread = run_operation(server, start)
    left = kill_mid_way(server, root / "into", "tree")
    thread.join(60)
    restart_and_check(server, root / "into", "tree", left)


# --- a full disk -----------------------------------------------------------------------------


@pytest.fixture
def full_disk(server: Server) -> Iterator[Path]:
    """site-full's folder as a 1 MiB tmpfs with 64 inodes, unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m,nr_inodes=64,mode=0755", "tmpfs", str(server.full)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield server.full
    finally:
        subprocess.run(["umount", "-l", str(server.full)], check=True)


def refused_for_space(failure: BaseException, path: str) -> bool:
    return isinstance(failure, InsufficientStorage) and failure.status_code == 507 and failure.details == {"path": path}


@pytest.mark.anyio
async def test_a_full_disk_is_named_and_leaves_nothing(server: Server, full_disk: Path) -> None:
    """Each write path into a full disk answers 507 insufficient_storage naming where it wrote
    (the destination of a copy, compress or extract); nothing partial is left; the agent logs one
    line for each, no traceback."""
    (full_disk / "half.bin").write_bytes(os.urandom(600 * 1024))  # a second one does not fit
    with zipfile.ZipFile(full_disk / "bomb.zip", "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("zeros.bin", bytes(2 * MiB))
    big = os.urandom(2 * MiB)
    before = sorted(os.listdir(full_disk))
    log_size = server.agent.log_file.stat().st_size
    async with server.client() as client:
        with pytest.raises(ApiError) as wrote:
            await client.files.write(server.id, FULL, "note.txt", "x" * (2 * MiB))
        assert refused_for_space(wrote.value, "note.txt"), wrote.value
        with pytest.raises(ApiError) as relayed:
            await client.files.upload(server.id, FULL, "relay.bin", big[:MiB])  # up to 1 MiB: the relay
        assert client.files.last_upload_via == "relay"
        assert refused_for_space(relayed.value, "relay.bin"), relayed.value
        with pytest.raises(ApiError) as directly:
            await client.files.upload(server.id, FULL, "direct.bin", big)  # over 1 MiB: the ingress
        assert refused_for_space(directly.value, "direct.bin"), directly.value
        assert "direct upload to direct.bin: the disk is full" in server.agent.log_file.read_text(errors="replace")
        with pytest.raises(ApiError) as streamed:  # what the client sends over 64 MiB, with 2 MiB
            params = {"scope": "site", "domain": "full.example", "path": "stream.bin", "overwrite": False}
            await client.files._upload_stream(server.id, params, big, len(big))
        assert refused_for_space(streamed.value, "stream.bin"), streamed.value
        with pytest.raises(ApiError) as copied:
            await client.files.copy(server.id, FULL, ["half.bin"], "copy.bin")
        assert refused_for_space(copied.value, "copy.bin"), copied.value
        for started, path in (
            (await client.files.compress(server.id, FULL, ["half.bin"], "half.zip", format="zip"), "half.zip"),
            (await client.files.extract(server.id, FULL, "bomb.zip", "out"), "out"),
        ):
            events = [e async for e in client.files.operation(server.id, started)]
            assert events[-1].event == "error" and events[-1].data["code"] == "insufficient_storage", events[-1]
            assert events[-1].data["details"] == {"path": path}
    assert sorted(os.listdir(full_disk)) == before  # no half file, no temporary name
    fillers = 0
    while True:  # the inodes run out too: then not even a folder can be made
        try:
            (full_disk / f"inode-{fillers}").touch()
        except OSError:
            break
        fillers += 1
    async with server.client() as client:
        with pytest.raises(ApiError) as made:
            await client.files.mkdir(server.id, FULL, "folder")
        assert refused_for_space(made.value, "folder"), made.value
    logged = server.agent.log_file.read_text(errors="replace")[log_size:]
    assert "Traceback" not in logged and logged.count("disk is full") >= 8, logged


def test_a_job_that_fills_the_disk_ends_with_one_line(full_disk: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The real dispatcher, with a job body that writes past the disk's end: exit 1, one stderr
    line saying the disk is full, one log line, no traceback. (A write of a job's output into a
    site, `SiteOutput`, names the file too.)"""
    kind = lookup("storage.usage")
    assert kind is not None
    target = full_disk / "dump.sql"

    def write_past_the_end() -> None:
        with open(target, "wb") as f:
            f.write(os.urandom(2 * MiB))

    async def fill(args: Any, ctx: JobContext, out: Output) -> int:
        await trio.to_thread.run_sync(write_past_the_end)
        return 0

    class Lines(Output):
        def __init__(self) -> None:
            self.stderr_lines: list[str] = []

        def lines(self, stream: str, texts: list[str]) -> None:
            if stream == "stderr":
                self.stderr_lines += texts

    out = Lines()
    ctx = JobContext("/nonexistent", "/nonexistent", SiteRegistry("/nonexistent"), "test")
    with caplog.at_level(logging.INFO):
        code = trio.run(run_kind, {kind.kind: Kind(kind, fill)}, kind.kind, ["storage", "usage"], ctx, out)
    assert code == 1
    assert out.stderr_lines == ["error: the disk is full (no space left on the device)"]
    assert [r.exc_info for r in caplog.records if "disk is full" in r.getMessage()] == [None]
    target.unlink()


# --- hard links and the kernel's protections -----------------------------------------------


@pytest.mark.anyio
async def test_a_hard_link_to_another_users_file_is_refused_through_the_api(server: Server, folder: str) -> None:
    """A file of root's hard-linked into the site (what a site user can do where hard links are
    not protected): reading, downloading, changing its mode and saving over it are 403 naming
    it, and the file outside is as it was."""
    outside = server.home.parent / f"outside-{folder}.txt"
    outside.write_text("root's secret\n")
    os.chmod(outside, 0o600)
    os.link(outside, server.site / folder / "hard")
    path = f"{folder}/hard"
    async with server.client() as client:
        for attempt in (
            client.files.read(server.id, SITE, path),
            client.files.read_window(server.id, SITE, path, offset=0, length=10),
            client.files.chmod(server.id, SITE, [path], 0o666),
            client.files.write(server.id, SITE, path, "mine now"),
        ):
            with pytest.raises(Forbidden) as refused:
                await attempt
            assert refused.value.details == {"path": path}, refused.value
        with pytest.raises(Forbidden):
            async for _ in client.files.download(server.id, SITE, path):
                pass
    assert outside.read_text() == "root's secret\n" and (outside.stat().st_mode & 0o777) == 0o600


def test_the_server_says_whether_its_kernel_protects_links(server: Server) -> None:
    with server.agent.stack.http(server.token) as http:
        agent = http.get(f"/v1/servers/{server.id}").json()["agent"]
    said = {name: Path("/proc/sys/fs", name).read_text().strip() != "0" for name in agent["kernel_protections"]}
    assert set(said) == {"protected_hardlinks", "protected_symlinks"}
    assert agent["kernel_protections"] == said


# --- the journal and its sweep, with real processes ------------------------------------------

CHILD = """
import os, sys
from agent.files import fdops, inflight
state, home, mode = sys.argv[1:4]
inflight.activate(inflight.Journal(state, home))
dest = os.open(os.path.join(home, "site", "dest"), os.O_PATH | os.O_DIRECTORY)
fd, _ = fdops.create_temp(dest, "upload.bin")
os.write(fd, b"half of it")
tree = fdops.mkdir_temp(dest, "extracted")
os.mkdir("sub", dir_fd=os.open(tree, os.O_PATH, dir_fd=dest))
aside = fdops.journaled_temp(dest, "keep", "old", restore="keep")
os.rename("keep", aside, src_dir_fd=dest, dst_dir_fd=dest)  # a replace cut between its two renames
moved = os.open(os.path.join(home, "site", "moved"), os.O_PATH | os.O_DIRECTORY)
fdops.create_temp(moved, "x")
print("ready", flush=True)
if mode == "die":
    os.kill(os.getpid(), 9)
sys.stdin.read()
"""


def journalling_child(tmp_path: Path, mode: str) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path / "state"), str(tmp_path / "home"), mode],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stdout.readline() == "ready\n"
    return child


def test_the_sweep_settles_what_a_dead_process_left_and_nothing_else(tmp_path: Path) -> None:
    """A process journals its temporary names and dies (SIGKILL) mid-way: the next start removes
    its file and its folder tree, puts back the folder a replace had set aside, and leaves alone
    what is no longer in the folder it was made in (that folder was swapped for another). A live
    process's names are left alone until it dies, and then the first touch of the scope settles them."""
    home = tmp_path / "home"
    (home / "site" / "dest" / "keep").mkdir(parents=True)
    (home / "site" / "dest" / "keep" / "old.txt").write_text("the old folder's file")
    (home / "site" / "moved").mkdir()
    (tmp_path / "state").mkdir()
    dead = journalling_child(tmp_path, "die")
    dead.wait()
    dest = home / "site" / "dest"
    made = leftovers(dest)
    assert len(made) == 3 and not (dest / "keep").exists()
    # The folder of the last name is swapped: a same-named entry there now is someone else's.
    (home / "site" / "moved").rename(home / "site" / "moved-away")
    (home / "site" / "moved").mkdir()
    (stranger,) = leftovers(home / "site" / "moved-away")
    (home / "site" / "moved" / stranger).write_text("not ours")
    try:
        assert sweep.start(str(tmp_path / "state"), str(home)) == 3
        assert leftovers(dest) == [] and (dest / "keep" / "old.txt").read_text() == "the old folder's file"
        assert (home / "site" / "moved" / stranger).read_text() == "not ours"
        assert os.listdir(tmp_path / "state" / "inflight") == []
        alive = journalling_child(tmp_path, "live")
        try:
            assert len(leftovers(dest)) == 3 and sweep.start(str(tmp_path / "state"), str(home)) == 0
            assert len(leftovers(dest)) == 3  # still being written
        finally:
            alive.kill()
            alive.wait()
        assert sweep.scope(str(home), "elsewhere") == 0 and len(leftovers(dest)) == 3  # another scope's
        assert sweep.scope(str(home), "site") == 4 and leftovers(dest) == []  # and the one in moved/
        assert (dest / "keep" / "old.txt").exists() and leftovers(home / "site" / "moved") == [stranger]
    finally:
        inflight.activate(None)


def test_a_quota_is_named_like_a_full_disk() -> None:
    """EDQUOT cannot be made here (this kernel has no CONFIG_QUOTA, its tmpfs no quota option): the
    one translation every fs.* path, the ingress and the jobs use, on its own."""
    named = refusal(OSError(errno.EDQUOT, os.strerror(errno.EDQUOT)), "a/b.bin")
    assert named is not None and named.to_wire() == {
        "code": "insufficient_storage",
        "message": "the disk quota is exceeded",
        "details": {"path": "a/b.bin"},
    }
    assert ApiError.for_code("insufficient_storage") is InsufficientStorage and InsufficientStorage.status == 507
