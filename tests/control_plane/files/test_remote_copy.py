"""Cross-server copy and move through the real stack: two agents of the demo org, each with its
own home, and a real sshd on 127.0.0.1 that the destination agent installs its one-transfer key
for. Bytes go agent to agent over SSH; the tests check them byte for byte, check that the key
is gone afterwards (authorized_keys back to its original bytes) and cannot be used again."""

from __future__ import annotations

import os
import secrets
import shutil
import stat
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from textual.pilot import Pilot

from agent.files.handlers import FileHandlers
from agent.files.remote_copy import RESULT_PREFIX, RemoteCopy, SshSettings
from agent.link.call import Call
from agent.sites import SiteRegistry
from contract.link.protocol import RpcError
from contract.models import LOGS_READ_ONLY
from fleetdeck.launcher import free_port
from tests.conftest import Stack, start_agent
from tests.helpers import eventually, wait_for, wait_until
from tests.helpers.copy_sshd import MISSING, ORIGINAL_KEYS, Sshd, copy_sshd
from tests.helpers.site_logs import logs_layout, write_site_log
from tests.helpers.tui import highlight, highlight_server, names, real_app, run, show_location
from tui.files.commander import CommanderScreen
from tui.files.dialogs import CopyDialog

SITE = "example.com"

pytestmark = [
    pytest.mark.skipif(MISSING is not None, reason=str(MISSING)),
    pytest.mark.stack_variants("sqlite", "postgresql"),
]


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    with copy_sshd(tmp_path_factory.mktemp("sshd")) as started:
        yield started


@dataclass
class Agent:
    server_id: str
    home: Path
    state: Path
    process: subprocess.Popen[str]


def _online(stack: Stack, server_id: str) -> bool:
    with stack.http() as http:
        return bool(http.get(f"/v1/servers/{server_id}").json()["agent"]["online"])


def _server(stack: Stack, name: str, address: str | None = None) -> tuple[str, str]:
    with stack.http() as http:
        answer = http.post("/v1/servers", json={"name": name, "kind": "full", "address": address})
        assert answer.status_code in (200, 201), answer.text
        created = answer.json()
    return created["server"]["id"], created["agent_token"]


def _agent(stack: Stack, folder: Path, token: str, server_id: str, *options: str) -> Agent:
    home, state = folder / "home", folder / "state"
    (home / "example-com").mkdir(parents=True)
    state.mkdir()
    (state / "sites.json").write_text('{"sites": [{"domain": "example.com", "slug": "example-com"}]}')
    process = start_agent(stack.base_url, token, home, state, *options)
    return Agent(server_id, home, state, process)


@pytest.fixture(scope="module")
def agents(stack: Stack, sshd: Sshd, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Agent, Agent]]:
    """Server A (no address: the link's address is its source IP; reached at --ssh-host; its site
    has web logs) and server B (address 127.0.0.1), both of the demo org, both pointing at the
    test sshd."""
    tag = uuid.uuid4().hex[:6]
    a_id, a_token = _server(stack, f"xa-{tag}")
    b_id, b_token = _server(stack, f"xb-{tag}", "127.0.0.1")
    a_folder = tmp_path_factory.mktemp("xa")
    layout, logs = logs_layout(a_folder)
    write_site_log(logs, "example-com", "access.log", "".join(f"10.0.0.{n} GET /x/{n} 200\n" for n in range(200)))
    a_options = [*sshd.agent_options(), "--ssh-host", "127.0.0.1", "--host-layout", str(layout)]
    a = _agent(stack, a_folder, a_token, a_id, *a_options)
    b = _agent(stack, tmp_path_factory.mktemp("xb"), b_token, b_id, *sshd.agent_options())
    try:
        wait_until(lambda: _online(stack, a_id) and _online(stack, b_id), timeout=30)
        yield a, b
    finally:
        for agent in (a, b):
            agent.process.terminate()
            agent.process.wait(15)


def fs(stack: Stack, http: httpx.Client, server_id: str, route: str, body: dict[str, Any]) -> httpx.Response:
    return http.post(f"/v1/servers/{server_id}/fs/{route}", json=body, timeout=120)


def to_server(agent: Agent, **fields: Any) -> dict[str, Any]:
    return {"server_id": agent.server_id, **fields}


def site_dir(agent: Agent) -> Path:
    return agent.home / "example-com"


def snapshot(root: Path) -> dict[str, tuple[str, Any, int]]:
    """Every entry beneath `root`: (kind, bytes or link target, permission bits), links not followed."""
    seen: dict[str, tuple[str, Any, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            st = path.lstat()
            rel = str(path.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                seen[rel] = ("link", os.readlink(path), 0)
            elif stat.S_ISDIR(st.st_mode):
                seen[rel] = ("dir", None, stat.S_IMODE(st.st_mode))
            else:
                seen[rel] = ("file", path.read_bytes(), stat.S_IMODE(st.st_mode))
    return seen


def leftovers(agent: Agent) -> list[str]:
    folder = agent.state / "transfers"
    return sorted(os.listdir(folder)) if folder.exists() else []


def audit(stack: Stack, server_id: str, action: str) -> list[dict[str, Any]]:
    with stack.http() as http:
        entries: list[dict[str, Any]] = http.get(
            "/v1/audit", params={"server_id": server_id, "action": action, "limit": 50}
        ).json()["entries"]
    return entries


def make_tree(root: Path) -> None:
    (root / "tree" / "a" / "b" / "c").mkdir(parents=True)
    (root / "tree" / "empty").mkdir()
    (root / "tree" / "a" / "readme.md").write_text("# hello\n")
    (root / "tree" / "a" / "b" / "big.bin").write_bytes(os.urandom(3 * 1024 * 1024 + 17))
    (root / "tree" / "a" / "b" / "c" / "zero").write_bytes(b"")
    (root / "tree" / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (root / "tree" / "run.sh").chmod(0o750)
    os.symlink("a/readme.md", root / "tree" / "readme-link")
    (root / "one.bin").write_bytes(os.urandom(70_000))


def test_copy_files_and_a_tree_byte_exact(stack: Stack, sshd: Sshd, agents: tuple[Agent, Agent]) -> None:
    a, b = agents
    folder = f"c-{uuid.uuid4().hex[:6]}"
    make_tree(site_dir(a) / folder)
    os.symlink("../../outside", site_dir(a) / folder / "tree" / "escaping-link")  # left out, reported
    (site_dir(b) / "incoming").mkdir(exist_ok=True)
    if os.geteuid() == 0:  # what arrives in a site belongs to the site's owner, as other creations do
        os.chown(site_dir(b), 4242, 4242)
    with stack.http() as http:
        answer = fs(
            stack,
            http,
            a.server_id,
            "copy",
            {
                "scope": "site",
                "domain": SITE,
                "paths": [f"{folder}/tree", f"{folder}/one.bin"],
                "destination": "incoming",
                "to": to_server(b),
            },
        )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert sorted(body["copied"]) == ["incoming/one.bin", "incoming/tree"]
    assert body["skipped"] == ["tree/escaping-link"]
    source = snapshot(site_dir(a) / folder)
    del source["tree/escaping-link"]
    copied = snapshot(site_dir(b) / "incoming")
    assert copied == source  # contents, link targets and modes (0750 kept)
    assert copied["tree/run.sh"][2] == 0o750
    if os.geteuid() == 0:
        owners = {p.lstat().st_uid for p in (site_dir(b) / "incoming").rglob("*")}
        assert owners == {4242}
    assert (site_dir(a) / folder / "one.bin").exists()  # a copy leaves the source
    assert sshd.authorized_keys.read_bytes() == ORIGINAL_KEYS  # the key is gone again
    assert leftovers(a) == [] and leftovers(b) == []  # no private key, no spec
    for server in (a, b):
        mine = [e for e in audit(stack, server.server_id, "fs.copy") if e["outcome"] == "ok"]
        assert mine, server.server_id
    source_entry = audit(stack, a.server_id, "fs.copy")[0]
    dest_entry = audit(stack, b.server_id, "fs.copy")[0]
    assert source_entry["details"]["transfer_id"] == dest_entry["details"]["transfer_id"]
    assert source_entry["details"]["to"]["server_id"] == b.server_id
    assert dest_entry["details"]["from"]["server_id"] == a.server_id


def test_move_removes_the_source_only_on_success(stack: Stack, sshd: Sshd, agents: tuple[Agent, Agent]) -> None:
    a, b = agents
    name = f"m-{uuid.uuid4().hex[:6]}"
    make_tree(site_dir(a) / name)
    before = snapshot(site_dir(a) / name)
    (site_dir(b) / "taken").mkdir(exist_ok=True)
    (site_dir(b) / "taken" / name).write_text("already here")
    with stack.http() as http:
        # The destination holds the name: nothing moves, the source stays whole.
        refused = fs(
            stack,
            http,
            a.server_id,
            "move",
            {"scope": "root", "paths": [f"example-com/{name}"], "destination": "example-com/taken", "to": to_server(b)},
        )
        assert refused.status_code == 409 and refused.json()["error"]["code"] == "conflict", refused.text
        assert snapshot(site_dir(a) / name) == before
        assert (site_dir(b) / "taken" / name).read_text() == "already here"
        moved = fs(
            stack,
            http,
            a.server_id,
            "move",
            {
                "scope": "root",
                "paths": [f"example-com/{name}"],
                "destination": f"example-com/{name}-moved",
                "to": to_server(b),
            },
        )
    assert moved.status_code == 200, moved.text
    assert moved.json()["moved"] == [f"example-com/{name}-moved"]
    assert not (site_dir(a) / name).exists()
    assert snapshot(site_dir(b) / f"{name}-moved") == before
    assert sshd.authorized_keys.read_bytes() == ORIGINAL_KEYS
    assert leftovers(a) == [] and leftovers(b) == []
    errors = [e for e in audit(stack, b.server_id, "fs.move") if e["outcome"] == "error"]
    assert errors and errors[0]["error_code"] == "conflict"


def test_a_log_is_copied_to_another_server_and_never_moved(
    sshd: Sshd, stack: Stack, agents: tuple[Agent, Agent]
) -> None:
    """A site's logs (read-only) are a copy's source across servers too: the copy only reads them,
    a move would change them (403, nothing travels)."""
    a, b = agents
    log = a.home.parent / "site-logs" / "example-com" / "access.log"
    before = log.read_bytes()
    folder = f"logs-{uuid.uuid4().hex[:6]}"
    (site_dir(b) / folder).mkdir()
    to = to_server(b, scope="site", domain=SITE)
    body = {"scope": "logs", "domain": SITE, "paths": ["access.log"], "destination": folder, "to": to}
    with stack.http() as http:
        copied = fs(stack, http, a.server_id, "copy", body)
        moved = fs(stack, http, a.server_id, "move", {**body, "destination": f"{folder}/moved"})
    assert copied.status_code == 200 and copied.json()["copied"] == [f"{folder}/access.log"], copied.text
    assert (site_dir(b) / folder / "access.log").read_bytes() == before
    assert (moved.status_code, moved.json()["error"]["message"]) == (403, LOGS_READ_ONLY)
    assert log.read_bytes() == before and sorted(os.listdir(site_dir(b) / folder)) == ["access.log"]
    assert sshd.authorized_keys.read_bytes() == ORIGINAL_KEYS
    assert leftovers(a) == [] and leftovers(b) == []


def test_a_failed_push_keeps_the_source_and_removes_the_key(
    stack: Stack, sshd: Sshd, agents: tuple[Agent, Agent], tmp_path: Path
) -> None:
    """A destination whose SSH port answers nothing: the push fails after the key was installed;
    the move leaves the source, and the key and the spec are gone all the same."""
    a, _ = agents
    server_id, token = _server(stack, f"xc-{uuid.uuid4().hex[:6]}", "127.0.0.1")
    options = ["--ssh-port", str(free_port()), "--ssh-authorized-keys", str(sshd.authorized_keys)]
    c = _agent(stack, tmp_path, token, server_id, *options)
    try:
        wait_until(lambda: _online(stack, server_id), timeout=30)
        name = f"f-{uuid.uuid4().hex[:6]}.txt"
        (site_dir(a) / name).write_text("stays")
        with stack.http() as http:
            failed = fs(
                stack,
                http,
                a.server_id,
                "move",
                {"scope": "site", "domain": SITE, "paths": [name], "destination": "", "to": to_server(c)},
            )
        assert failed.status_code == 502, failed.text
        assert failed.json()["error"]["details"]["agent_code"] == "transfer_failed"
        assert (site_dir(a) / name).read_text() == "stays"
        assert not (site_dir(c) / name).exists()
        assert sshd.authorized_keys.read_bytes() == ORIGINAL_KEYS
        assert leftovers(a) == [] and leftovers(c) == []
    finally:
        c.process.terminate()
        c.process.wait(15)


def test_overwrite(stack: Stack, agents: tuple[Agent, Agent]) -> None:
    a, b = agents
    name = f"o-{uuid.uuid4().hex[:6]}.txt"
    (site_dir(a) / name).write_text("new")
    (site_dir(b) / name).write_text("old")
    body = {"scope": "site", "domain": SITE, "paths": [name], "destination": "", "to": to_server(b)}
    with stack.http() as http:
        conflict = fs(stack, http, a.server_id, "copy", body)
        assert conflict.status_code == 409 and conflict.json()["error"]["code"] == "conflict"
        assert (site_dir(b) / name).read_text() == "old"
        replaced = fs(stack, http, a.server_id, "copy", {**body, "overwrite": True})
    assert replaced.status_code == 200, replaced.text
    assert (site_dir(b) / name).read_text() == "new"
    assert leftovers(b) == []


def test_refusals(stack: Stack, agents: tuple[Agent, Agent]) -> None:
    a, b = agents
    name = f"r-{uuid.uuid4().hex[:6]}.txt"
    (site_dir(a) / name).write_text("x")
    body = {"scope": "site", "domain": SITE, "paths": [name], "destination": "", "to": to_server(b)}
    admin = f"admin-{uuid.uuid4().hex[:6]}@demo.test"
    stack.admin("create-user", admin, "--org", "demo", "--role", "admin", "--password", "pw-123456")
    with stack.http(stack.login(admin, "pw-123456")) as http:
        forbidden = fs(stack, http, a.server_id, "copy", body)
        assert forbidden.status_code == 403, forbidden.text  # cross-server is for owners
    other_org = f"other-{uuid.uuid4().hex[:6]}"
    stack.admin("create-org", other_org, "--plan", "max")
    foreign = stack.admin("create-server", "theirs", "--org", other_org)
    foreign_id = str(foreign["id"])
    offline_id, _ = _server(stack, f"off-{uuid.uuid4().hex[:6]}", "127.0.0.1")
    with stack.http() as http:
        for server_id in (foreign_id, "no-such-server"):
            missing = fs(stack, http, a.server_id, "copy", {**body, "to": {"server_id": server_id}})
            assert missing.status_code == 404, missing.text
        offline = fs(stack, http, a.server_id, "copy", {**body, "to": {"server_id": offline_id}})
        assert offline.status_code == 409 and offline.json()["error"]["code"] == "agent_offline", offline.text
        outside = fs(stack, http, a.server_id, "copy", {**body, "paths": ["../../etc/passwd"]})
        assert outside.status_code == 422 and outside.json()["error"]["code"] == "path_outside_scope", outside.text
        outside_dest = fs(stack, http, a.server_id, "copy", {**body, "destination": "../escape"})
        assert outside_dest.status_code == 422 and outside_dest.json()["error"]["code"] == "path_outside_scope"
    assert leftovers(a) == [] and leftovers(b) == []


# --- the key itself, against the real sshd, with the agents' handlers in this process ----------


def _ssh(sshd: Sshd, key: Path, *command: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [
            "ssh",
            "-F",
            "/dev/null",
            "-T",
            "-i",
            str(key),
            "-p",
            str(sshd.port),
            "-o",
            "BatchMode=yes",
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "LogLevel=ERROR",
            "root@127.0.0.1",
            *command,
        ],
        input=stdin,
        capture_output=True,
        timeout=60,
    )


@dataclass
class Pair:
    source: RemoteCopy
    dest: RemoteCopy
    source_home: Path


@pytest.fixture
def pair(sshd: Sshd, tmp_path: Path) -> Pair:
    for name in ("src-home", "src-state", "dst-home", "dst-state"):
        (tmp_path / name).mkdir()
    (tmp_path / "src-home" / "note.txt").write_text("note")

    def side(home: str, state: str, settings: SshSettings) -> RemoteCopy:
        files = FileHandlers(str(tmp_path / home), SiteRegistry(str(tmp_path / state)))
        return RemoteCopy(files, str(tmp_path / state), settings)

    return Pair(
        side("src-home", "src-state", SshSettings()),
        side("dst-home", "dst-state", sshd.settings()),
        tmp_path / "src-home",
    )


async def _prepare_and_accept(pair: Pair, source_ip: str = "127.0.0.1") -> tuple[str, Path]:
    """A transfer up to the installed key; returns its id and a copy of the private key."""
    tid = secrets.token_hex(16)
    prepared = await pair.source.prepare(
        Call(1, "fs.xfer.prepare", {"transfer_id": tid, "scope": "root", "paths": ["note.txt"]})
    )
    key = Path(pair.source.state_dir) / "transfers" / f"out-{tid}" / "key"
    stolen = Path(pair.source.state_dir).parent / f"stolen-{tid}"
    shutil.copy(key, stolen)
    stolen.chmod(0o600)
    params = {
        "transfer_id": tid,
        "scope": "root",
        "destination": "",
        "names": prepared["names"],
        "public_key": prepared["public_key"],
        "source_ip": source_ip,
    }
    await pair.dest.accept(Call(2, "fs.xfer.accept", params))
    return tid, stolen


def test_the_key_serves_one_transfer_only(sshd: Sshd, pair: Pair) -> None:
    async def main() -> None:
        tid, stolen = await _prepare_and_accept(pair)
        assert f"fleetdeck-xfer:{tid}".encode() in sshd.authorized_keys.read_bytes()
        accepted_keys = pair.dest.ssh.public_host_keys()
        push: dict[str, Any] = {"transfer_id": tid, "scope": "root", "paths": ["note.txt"], "host": "127.0.0.1"}
        push |= {"port": sshd.port, "user": "root", "host_keys": accepted_keys}
        result = await pair.source.push(Call(3, "fs.xfer.push", push))
        assert result["copied"] == ["note.txt"]
        await pair.dest.close(Call(4, "fs.xfer.close", {"transfer_id": tid}))
        await pair.source.close(Call(5, "fs.xfer.close", {"transfer_id": tid}))
        assert sshd.authorized_keys.read_bytes() == ORIGINAL_KEYS
        assert not (Path(pair.source.state_dir) / "transfers" / f"out-{tid}").exists()
        again = await trio.to_thread.run_sync(lambda: _ssh(sshd, stolen, stdin=b"more"))
        assert again.returncode == 255 and b"Permission denied" in again.stderr

    trio.run(main)


def test_the_key_runs_only_the_receive_command_and_only_from_the_source(sshd: Sshd, pair: Pair) -> None:
    async def main() -> None:
        tid, stolen = await _prepare_and_accept(pair)
        # Whatever command is asked for, the forced one runs: here it gets no stream and says so.
        forced = await trio.to_thread.run_sync(lambda: _ssh(sshd, stolen, "id"))
        assert b"uid=" not in forced.stdout and RESULT_PREFIX.encode() in forced.stdout, forced
        assert b"ended before all of its bytes" in forced.stdout
        assert sshd.authorized_keys.read_bytes() == ORIGINAL_KEYS  # used once: gone
        await pair.dest.close(Call(4, "fs.xfer.close", {"transfer_id": tid}))

        tid, stolen = await _prepare_and_accept(pair, source_ip="192.0.2.7")
        elsewhere = await trio.to_thread.run_sync(lambda: _ssh(sshd, stolen))
        assert elsewhere.returncode == 255 and b"Permission denied" in elsewhere.stderr
        await pair.dest.close(Call(4, "fs.xfer.close", {"transfer_id": tid}))
        await pair.source.close(Call(5, "fs.xfer.close", {"transfer_id": tid}))
        assert sshd.authorized_keys.read_bytes() == ORIGINAL_KEYS
        assert os.listdir(Path(pair.dest.state_dir) / "transfers") == []

    trio.run(main)


def test_a_server_with_another_host_key_is_refused(sshd: Sshd, pair: Pair, tmp_path: Path) -> None:
    """The source pins the host keys the destination's agent reported: an impostor is refused
    before the key is offered, and the transfer leaves nothing behind."""
    other = tmp_path / "other_host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    impostor = " ".join(Path(f"{other}.pub").read_text().split()[:2])

    async def main() -> None:
        tid, _ = await _prepare_and_accept(pair)
        push: dict[str, Any] = {"transfer_id": tid, "scope": "root", "paths": ["note.txt"], "host": "127.0.0.1"}
        push |= {"port": sshd.port, "user": "root", "host_keys": [impostor]}
        with pytest.raises(RpcError) as refused:
            await pair.source.push(Call(3, "fs.xfer.push", push))
        assert refused.value.code == "transfer_failed" and "Host key verification failed" in refused.value.message
        assert not (Path(pair.dest.files.home) / "note.txt").exists()
        await pair.dest.close(Call(4, "fs.xfer.close", {"transfer_id": tid}))
        await pair.source.close(Call(5, "fs.xfer.close", {"transfer_id": tid}))
        assert sshd.authorized_keys.read_bytes() == ORIGINAL_KEYS
        assert os.listdir(Path(pair.dest.state_dir) / "transfers") == []
        assert os.listdir(Path(pair.source.state_dir) / "transfers") == []

    trio.run(main)


@pytest.mark.parametrize("host", ["-oProxyCommand=touch /tmp/fleetdeck-pwned", "127.0.0.1 -v", "", "a;b"])
def test_a_push_to_an_address_that_is_not_one_is_refused_before_ssh(sshd: Sshd, pair: Pair, host: str) -> None:
    """Whatever the control plane sends as the destination's address: an IP address or a host
    name, or nothing reaches ssh's command line (the address also goes after `--`)."""

    async def main() -> None:
        tid, _ = await _prepare_and_accept(pair)
        push: dict[str, Any] = {"transfer_id": tid, "scope": "root", "paths": ["note.txt"], "host": host}
        push |= {"port": sshd.port, "user": "root", "host_keys": pair.dest.ssh.public_host_keys()}
        with pytest.raises(RpcError) as refused:
            await pair.source.push(Call(3, "fs.xfer.push", push))
        assert refused.value.code == "validation_error" and refused.value.message.startswith("host: must be"), (
            refused.value
        )
        assert not (Path(pair.dest.files.home) / "note.txt").exists()
        await pair.dest.close(Call(4, "fs.xfer.close", {"transfer_id": tid}))
        await pair.source.close(Call(5, "fs.xfer.close", {"transfer_id": tid}))

    trio.run(main)
    assert not Path("/tmp/fleetdeck-pwned").exists()


def test_a_cancelled_push_leaves_nothing_on_either_side(sshd: Sshd, pair: Pair) -> None:
    """Cancelled mid-stream (as when the control plane's call is cancelled or times out): ssh is
    killed, the receiver finds the stream cut short and removes its temporary folder, the keys go."""
    with (pair.source_home / "big.bin").open("wb") as big:
        big.truncate(512 * 1024 * 1024)  # sparse: cheap to make, slow enough to stream
    dest_home = Path(pair.dest.files.home)

    async def main() -> None:
        tid = secrets.token_hex(16)
        prepared = await pair.source.prepare(
            Call(1, "fs.xfer.prepare", {"transfer_id": tid, "scope": "root", "paths": ["big.bin"]})
        )
        accept = {"transfer_id": tid, "scope": "root", "destination": "", "names": prepared["names"]}
        accept |= {"public_key": prepared["public_key"], "source_ip": "127.0.0.1"}
        await pair.dest.accept(Call(2, "fs.xfer.accept", accept))
        push: dict[str, Any] = {"transfer_id": tid, "scope": "root", "paths": ["big.bin"], "host": "127.0.0.1"}
        push |= {"port": sshd.port, "user": "root", "host_keys": pair.dest.ssh.public_host_keys()}
        async with trio.open_nursery() as nursery:
            nursery.start_soon(pair.source.push, Call(3, "fs.xfer.push", push))
            await eventually(lambda: os.listdir(dest_home), within=30)  # the receiver is spooling
            nursery.cancel_scope.cancel()
        assert not (Path(pair.source.state_dir) / "transfers" / f"out-{tid}").exists()
        await pair.dest.close(Call(4, "fs.xfer.close", {"transfer_id": tid}))
        assert sshd.authorized_keys.read_bytes() == ORIGINAL_KEYS
        await eventually(lambda: not os.listdir(dest_home), within=20)  # the receiver notices the cut, cleans up
        assert os.listdir(Path(pair.dest.state_dir) / "transfers") == []

    trio.run(main)


def test_the_tui_copies_between_panels_on_two_servers(stack: Stack, agents: tuple[Agent, Agent]) -> None:
    """F5 in the two-pane browser, left panel on server A, right panel on server B."""
    a, b = agents
    with stack.http() as http:
        servers = {s["id"]: s["name"] for s in http.get("/v1/servers").json()["servers"]}
    (site_dir(a) / "tui-cross.bin").write_bytes(os.urandom(300_000))
    app = real_app(stack)

    async def scenario(pilot: Pilot[None]) -> None:
        await highlight_server(pilot, servers[a.server_id])
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, CommanderScreen) and names(app.screen.left))
        screen = app.screen
        assert isinstance(screen, CommanderScreen)
        await pilot.press("tab")
        await show_location(pilot, screen, f"{servers[b.server_id]} · example.com")
        await wait_for(pilot, lambda: screen.right.server is not None and screen.right.server.id == b.server_id)
        await pilot.press("tab")
        await highlight(pilot, screen.left, "tui-cross.bin")
        await pilot.press("f5")
        await wait_for(pilot, lambda: isinstance(app.screen, CopyDialog))
        assert app.screen.cross == "server"  # type: ignore[attr-defined]
        await pilot.press("enter")
        await wait_for(pilot, lambda: "tui-cross.bin" in names(screen.right), seconds=60)

    try:
        run(app, scenario)
        assert (site_dir(b) / "tui-cross.bin").read_bytes() == (site_dir(a) / "tui-cross.bin").read_bytes()
    finally:
        for agent in agents:
            (site_dir(agent) / "tui-cross.bin").unlink(missing_ok=True)
