"""Direct uploads and downloads through an agent's HTTP ingress, on the real stack: the control
plane signs a one-time URL, the bytes go straight to and from the agent, the control plane audits
the uploads the agent reports.

The module's agent is its own process with ``--ingress 127.0.0.1:0``, linked to the session's
`fleetdeck local` as a second server; the session's demo agent has no ingress (the fallback).
The last tests drive an `Ingress` in-process with a key they know, to sign what the control
plane never would (expired grants, another server, paths outside the scope).
"""

from __future__ import annotations

import base64
import hashlib
import os
import pwd
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson
import pytest
import trio

from agent.files.handlers import FileHandlers
from agent.files.ingress import Ingress
from agent.sites import SiteRegistry
from api_client import DIRECT_THRESHOLD, Client
from contract.errors import Conflict, PathOutsideScope
from contract.link import grant
from contract.models import DIRECT_UPLOAD_LIMIT, Scope
from tests.conftest import Stack, start_agent
from tests.helpers import wait_until
from tests.helpers.hostile import Canaries, Racer, SiteUser, plant_hardlink, plant_symlink

pytestmark = pytest.mark.stack_variants("sqlite", "postgresql")

SITE = Scope(scope="site", domain="a.example")
DEMO_SITE = Scope(scope="site", domain="example.com")
MiB = 1024 * 1024


@dataclass
class IngressServer:
    server_id: str
    home: Path
    url: str  # the ingress's base URL, as the agent announced it
    process: subprocess.Popen[str]
    log: list[str] = field(default_factory=list)

    @property
    def site(self) -> Path:
        return self.home / "site-a"


def _drain(process: subprocess.Popen[str], lines: list[str]) -> None:
    """Read the agent's stderr so its pipe never fills (and keep it for failure messages)."""
    assert process.stderr is not None
    for line in process.stderr:
        lines.append(line)


def _server(stack: Stack, server_id: str) -> dict[str, Any]:
    with stack.http() as http:
        server: dict[str, Any] = http.get(f"/v1/servers/{server_id}").json()
        return server


def _agent_server(
    stack: Stack, folder: Path, *, ingress: str = "127.0.0.1:0", ingress_url: str | None = None
) -> IngressServer:
    with stack.http() as http:
        created = http.post("/v1/servers", json={"name": f"ingress-{uuid.uuid4().hex[:8]}", "kind": "full"}).json()
    server_id = created["server"]["id"]
    home, state = folder / "home", folder / "state"
    (home / "site-a").mkdir(parents=True)
    state.mkdir()
    (state / "sites.json").write_text('{"sites": [{"domain": "a.example", "slug": "site-a"}]}')
    process = start_agent(stack.base_url, created["agent_token"], home, state, ingress=ingress, ingress_url=ingress_url)
    server = IngressServer(server_id, home, "", process)
    threading.Thread(target=_drain, args=(process, server.log), daemon=True).start()
    try:
        wait_until(lambda: _server(stack, server_id)["agent"]["direct_ingress_url"], timeout=30)
    except AssertionError:
        process.kill()
        raise AssertionError("the ingress agent did not come online:\n" + "".join(server.log)) from None
    server.url = _server(stack, server_id)["agent"]["direct_ingress_url"]
    return server


@pytest.fixture(scope="module")
def direct(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[IngressServer]:
    server = _agent_server(stack, tmp_path_factory.mktemp("ingress"))
    yield server
    server.process.kill()
    server.process.wait()


@pytest.fixture
def folder(stack: Stack, direct: IngressServer) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    (direct.site / name).mkdir()
    return name


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(8 * MiB):
            digest.update(chunk)
    return digest.hexdigest()


def _grant_url(stack: Stack, server_id: str, path: str, size: int, **extra: Any) -> httpx.Response:
    body = {"scope": "site", "domain": SITE.domain, "path": path, "size": size, **extra}
    with stack.http() as http:
        return http.post(f"/v1/servers/{server_id}/fs/upload/direct", json=body)


def _url(stack: Stack, direct: IngressServer, path: str, size: int, **extra: Any) -> str:
    answer = _grant_url(stack, direct.server_id, path, size, **extra)
    assert answer.status_code == 200, answer.text
    url: str = answer.json()["url"]
    assert url.startswith(direct.url + "/upload/")
    return url


def _error(answer: httpx.Response) -> tuple[int, str]:
    return answer.status_code, answer.json()["error"]["code"]


def _audit(stack: Stack, server_id: str) -> list[dict[str, Any]]:
    with stack.http() as http:
        entries: list[dict[str, Any]] = http.get(
            "/v1/audit", params={"server_id": server_id, "action": "fs.upload", "limit": 100}
        ).json()["entries"]
        return entries


# --- through the control plane -----------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("size", [0, 1, 3 * MiB + 7, 300 * MiB])
async def test_direct_upload_lands_byte_exact(stack: Stack, direct: IngressServer, folder: str, size: int) -> None:
    data = os.urandom(size)
    path = f"{folder}/blob-{size}.bin"
    async with Client(stack.base_url, token=stack.token) as client:
        if size > DIRECT_THRESHOLD:
            entry = await client.files.upload(direct.server_id, SITE, path, data)
            assert client.files.last_upload_via == "direct"  # picked by size, not by the caller
        else:  # below the threshold the client would relay: ask for the URL by hand
            signed = await client.files.direct_url(direct.server_id, SITE, path, size)
            assert signed.url is not None and signed.expires_at is not None
            async with httpx.AsyncClient() as http:
                answer = await http.put(signed.url, content=data)
            assert answer.status_code == 200, answer.text
            entry = _entry(answer)
    assert entry.size == size and entry.path == path
    target = direct.site / path
    assert target.stat().st_size == size and _sha256(target) == hashlib.sha256(data).hexdigest()
    assert sorted(p.name for p in (direct.site / folder).iterdir()) == [f"blob-{size}.bin"]  # no temporary left
    entries = [e for e in _audit(stack, direct.server_id) if e["target"] == path]
    assert len(entries) == 1
    assert entries[0]["outcome"] == "ok" and entries[0]["actor"]["email"] == stack.email
    assert entries[0]["details"] | {"via": "direct", "bytes": size, "size": size} == entries[0]["details"]


def _entry(answer: httpx.Response) -> Any:
    from contract.models import FsEntryResult

    return FsEntryResult.model_validate(answer.json()).entry


def test_bytes_skip_the_control_plane(stack: Stack, direct: IngressServer) -> None:
    """The URL points at the agent's own listener, not at the control plane."""
    assert urlsplit(direct.url).port != urlsplit(stack.base_url).port
    assert urlsplit(direct.url).hostname == "127.0.0.1"


def test_url_is_single_use(stack: Stack, direct: IngressServer, folder: str) -> None:
    path = f"{folder}/once.txt"
    url = _url(stack, direct, path, 3, overwrite=True)
    assert httpx.put(url, content=b"one").status_code == 200
    assert _error(httpx.put(url, content=b"two")) == (403, "forbidden")
    assert (direct.site / path).read_bytes() == b"one"
    outcomes = [(e["outcome"], e["error_code"]) for e in _audit(stack, direct.server_id) if e["target"] == path]
    assert sorted(outcomes, key=str) == [("error", "forbidden"), ("ok", None)]  # the second try is audited


def _tamper_payload(url: str, **changes: Any) -> str:
    head, token = url.rsplit("/", 1)
    payload, mac = token.split(".")
    fields = orjson.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    forged = base64.urlsafe_b64encode(orjson.dumps(fields | changes)).rstrip(b"=").decode()
    return f"{head}/{forged}.{mac}"


def test_tampered_url_is_refused(stack: Stack, direct: IngressServer, folder: str) -> None:
    url = _url(stack, direct, f"{folder}/a.bin", 4)
    other = _url(stack, direct, f"{folder}/b.bin", 4)
    forged = [
        _tamper_payload(url, path=f"{folder}/elsewhere.bin"),
        _tamper_payload(url, size=8),
        _tamper_payload(url, expires=time.time() + 86400),
        url.rsplit(".", 1)[0] + "." + other.rsplit(".", 1)[1],  # another grant's signature
        url[:-2] + ("AA" if not url.endswith("AA") else "BB"),
        direct.url + "/upload/not-a-token",
    ]
    for bad in forged:
        answer = httpx.put(bad, content=b"data" if "size" not in bad else b"datadata")
        assert _error(answer) == (401, "unauthenticated"), bad
    assert list((direct.site / folder).iterdir()) == []
    assert httpx.put(url, content=b"good").status_code == 200  # the genuine URL was not used up


def test_body_larger_than_signed_size_is_refused(stack: Stack, direct: IngressServer, folder: str) -> None:
    url = _url(stack, direct, f"{folder}/big.bin", 1 * MiB)
    answer = httpx.put(url, content=os.urandom(4 * MiB))
    assert _error(answer) == (413, "too_large")
    assert answer.json()["error"]["details"] == {"limit": MiB, "size": 4 * MiB}
    smaller = httpx.put(_url(stack, direct, f"{folder}/big.bin", 1 * MiB), content=b"x" * 10)
    assert _error(smaller) == (422, "validation_error")

    def chunked() -> Iterator[bytes]:
        yield b"x" * MiB
        yield b"y"

    unsized = httpx.put(_url(stack, direct, f"{folder}/big.bin", 1 * MiB), content=chunked())
    assert _error(unsized) == (411, "bad_request")
    # Each was refused on its head alone, before a file was created, so there is nothing to wait for.
    assert list((direct.site / folder).iterdir()) == []
    codes = {e["error_code"] for e in _audit(stack, direct.server_id) if e["target"] == f"{folder}/big.bin"}
    assert codes == {"too_large", "validation_error", "bad_request"}


def _cut_put(stack: Stack, direct: IngressServer, folder: str, path: str, size: int, **extra: Any) -> None:
    """Start a PUT of `size` bytes, send an eighth of them, and vanish."""
    url = urlsplit(_url(stack, direct, path, size, **extra))
    with socket.create_connection((url.hostname, url.port), timeout=30) as sock:
        sock.sendall(f"PUT {url.path} HTTP/1.1\r\nHost: x\r\nContent-Length: {size}\r\n\r\n".encode())
        for _ in range(size // MiB // 8):
            sock.sendall(os.urandom(MiB))
        wait_until(lambda: [p.name for p in (direct.site / folder).iterdir() if p.name.endswith(".tmp")])


def test_interrupted_put_leaves_no_file_and_no_temporary(stack: Stack, direct: IngressServer, folder: str) -> None:
    path = f"{folder}/cut.bin"
    _cut_put(stack, direct, folder, path, 64 * MiB)
    wait_until(lambda: list((direct.site / folder).iterdir()) == [], timeout=10)
    wait_until(
        lambda: any(e["target"] == path and e["outcome"] == "error" for e in _audit(stack, direct.server_id)),
        timeout=10,
    )
    entry = next(e for e in _audit(stack, direct.server_id) if e["target"] == path)
    assert entry["error_code"] == "bad_request" and entry["details"]["bytes"] == 8 * MiB


def test_interrupted_replace_keeps_the_old_file(stack: Stack, direct: IngressServer, folder: str) -> None:
    (direct.site / folder / "keep.bin").write_bytes(b"the old content")
    _cut_put(stack, direct, folder, f"{folder}/keep.bin", 16 * MiB, overwrite=True)
    wait_until(lambda: [p.name for p in (direct.site / folder).iterdir()] == ["keep.bin"], timeout=10)
    assert (direct.site / folder / "keep.bin").read_bytes() == b"the old content"


def test_path_outside_scope_is_refused_before_and_at_the_put(stack: Stack, direct: IngressServer, folder: str) -> None:
    for bad in ("../escape.bin", "/etc/escape.bin", f"{folder}/../../escape.bin"):
        assert _error(_grant_url(stack, direct.server_id, bad, 4)) == (422, "path_outside_scope"), bad
    # A folder swapped for a link out of the scope after the URL was signed: the agent's jail
    # refuses at the PUT, whatever the grant says.
    (direct.site / folder / "sub").mkdir()
    url = _url(stack, direct, f"{folder}/sub/x.bin", 4)
    outside = direct.home / "outside"
    outside.mkdir(exist_ok=True)
    (direct.site / folder / "sub").rmdir()
    (direct.site / folder / "sub").symlink_to(outside)
    assert _error(httpx.put(url, content=b"evil")) == (422, "path_outside_scope")
    assert list(outside.iterdir()) == []


def test_long_name_and_permission_denied_are_clear_errors(stack: Stack, direct: IngressServer, folder: str) -> None:
    assert _error(_grant_url(stack, direct.server_id, f"{folder}/{'n' * 256}", 4)) == (422, "validation_error")
    if os.geteuid() != 0:
        pytest.skip("chattr +i needs root")
    locked = direct.site / folder / "locked"
    locked.mkdir()
    url = _url(stack, direct, f"{folder}/locked/x.bin", 4)
    if subprocess.run(["chattr", "+i", str(locked)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not supported here")
    try:  # refused at the PUT (EPERM even for root), as a site user is refused another's folder
        answer = httpx.put(url, content=b"data")
    finally:
        subprocess.run(["chattr", "-i", str(locked)], check=True)
    assert _error(answer) == (403, "forbidden")
    assert answer.json()["error"]["details"]["path"] == f"{folder}/locked/x.bin"
    assert list(locked.iterdir()) == []


@pytest.mark.anyio
async def test_conflict_is_refused_before_any_byte(stack: Stack, direct: IngressServer, folder: str) -> None:
    (direct.site / folder / "taken.bin").write_bytes(b"old")
    async with Client(stack.base_url, token=stack.token) as client:
        with pytest.raises(Conflict):
            await client.files.direct_url(direct.server_id, SITE, f"{folder}/taken.bin", 2 * MiB)
        with pytest.raises(PathOutsideScope):
            await client.files.upload(direct.server_id, SITE, "../nope.bin", b"z" * (2 * MiB))
        data = os.urandom(2 * MiB)
        await client.files.upload(direct.server_id, SITE, f"{folder}/taken.bin", data, overwrite=True)
        assert client.files.last_upload_via == "direct"
    assert (direct.site / folder / "taken.bin").read_bytes() == data


@pytest.mark.anyio
async def test_fallback_when_ingress_is_off_is_silent(stack: Stack) -> None:
    assert _server(stack, stack.server_id)["agent"]["direct_ingress_url"] is None
    data = os.urandom(3 * MiB)
    path = f"fallback-{uuid.uuid4().hex[:8]}.bin"
    async with Client(stack.base_url, token=stack.token) as client:
        signed = await client.files.direct_url(stack.server_id, DEMO_SITE, path, len(data))
        assert signed.url is None
        entry = await client.files.upload(stack.server_id, DEMO_SITE, path, data)
        assert client.files.last_upload_via == "relay" and entry.size == len(data)
    assert (stack.data_dir / "home" / "example-com" / path).read_bytes() == data


@pytest.mark.anyio
async def test_over_2_gib_takes_the_stream(stack: Stack, direct: IngressServer) -> None:
    async with Client(stack.base_url, token=stack.token) as client:
        signed = await client.files.direct_url(direct.server_id, SITE, "huge.bin", DIRECT_UPLOAD_LIMIT + 1)
        assert signed.url is None
        assert (await client.files.direct_url(direct.server_id, SITE, "huge.bin", DIRECT_UPLOAD_LIMIT)).url


@pytest.mark.anyio
async def test_unreachable_ingress_falls_back_silently(stack: Stack, tmp_path: Path) -> None:
    """An ingress the client cannot reach (a firewall): the upload goes through the relay."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    server = _agent_server(stack, tmp_path, ingress_url=f"http://127.0.0.1:{port}")
    try:
        data = os.urandom(2 * MiB)
        async with Client(stack.base_url, token=stack.token) as client:
            await client.files.upload(server.server_id, SITE, "fell-back.bin", data)
            assert client.files.last_upload_via == "relay"
        assert (server.site / "fell-back.bin").read_bytes() == data
    finally:
        server.process.kill()
        server.process.wait()


# --- the ingress alone, with a key the test knows ---------------------------------------------


@dataclass
class LocalIngress:
    url: str
    key: bytes
    site: Path
    reports: list[dict[str, Any]]

    def sign(self, path: str, size: int, *, server_id: str = "srv_test", expires_in: float = 60.0) -> str:
        claims = grant.UploadGrant(
            server_id=server_id,
            scope="site",
            domain="a.example",
            path=path,
            size=size,
            overwrite=False,
            expires=time.time() + expires_in,
            nonce=grant.new_nonce(),
        )
        return f"{self.url}/upload/{grant.sign(self.key, claims)}"

    def sign_download(self, path: str, *, server_id: str = "srv_test", expires_in: float = 60.0) -> str:
        claims = grant.DownloadGrant(
            server_id=server_id,
            scope="site",
            domain="a.example",
            path=path,
            expires=time.time() + expires_in,
            nonce=grant.new_nonce(),
        )
        return f"{self.url}/download/{grant.sign(self.key, claims)}"


def _welcome(ingress: Ingress, key: bytes, now: float) -> None:
    """What the agent's link does on each welcome (a new link: a new key, the signer's clock)."""
    ingress.on_welcome({"t": "welcome", "server_id": "srv_test", "ingress_key": grant.encode_key(key), "now": now})


@pytest.fixture
async def local_ingress(tmp_path: Path) -> Any:
    home, state = tmp_path / "home", tmp_path / "state"
    (home / "site-a").mkdir(parents=True)
    state.mkdir()
    (state / "sites.json").write_text('{"sites": [{"domain": "a.example", "slug": "site-a"}]}')
    reports: list[dict[str, Any]] = []
    ingress = Ingress(FileHandlers(str(home), SiteRegistry(str(state))), "127.0.0.1:0", report=reports.append)
    key = grant.new_key()
    async with trio.open_nursery() as nursery:
        url = await nursery.start(ingress.serve)
        _welcome(ingress, key, time.time() + 3600)
        yield LocalIngress(url, key, home / "site-a", reports), ingress
        nursery.cancel_scope.cancel()


@pytest.mark.anyio
async def test_ingress_refuses_what_the_control_plane_would_never_sign(local_ingress: Any) -> None:
    local, ingress = local_ingress
    async with httpx.AsyncClient() as http:
        # The welcome said the control plane's clock is an hour ahead of ours: a grant good for a
        # minute by our clock has expired. Expiry is checked in the signer's clock, not the agent's.
        answer = await http.put(local.sign("a.bin", 1), content=b"a")
        assert _error(answer) == (401, "unauthenticated") and answer.json()["error"]["details"]["reason"] == "expired"
        _welcome(ingress, local.key, time.time())
        assert (await http.put(local.sign("a.bin", 1), content=b"a")).status_code == 200
        expired = await http.put(local.sign("b.bin", 1, expires_in=-1), content=b"b")
        assert _error(expired) == (401, "unauthenticated")
        assert _error(await http.put(local.sign("c.bin", 1, server_id="srv_other"), content=b"c")) == (403, "forbidden")
        for outside in ("../escape.bin", "/tmp/escape.bin", "x/../../escape.bin"):
            assert _error(await http.put(local.sign(outside, 1), content=b"e")) == (422, "path_outside_scope")
        assert (await http.get(local.url + "/upload/x")).status_code == 404  # a GET is a download
        assert (await http.delete(local.url + "/upload/x")).status_code == 405
        # A new link brings a new key: URLs signed with the old one stop working.
        stale = local.sign("d.bin", 1)
        _welcome(ingress, grant.new_key(), time.time())
        assert _error(await http.put(stale, content=b"d")) == (401, "unauthenticated")
    home = local.site.parent
    assert sorted(p.name for p in home.rglob("*") if p.is_file()) == ["a.bin"]
    assert not await trio.Path("/tmp/escape.bin").exists()
    # Only requests with a genuine, live grant for this server are reported (and so audited).
    assert [(r["path"], r["outcome"], r["error_code"]) for r in local.reports] == [
        ("a.bin", "ok", None),
        ("../escape.bin", "error", "path_outside_scope"),
        ("/tmp/escape.bin", "error", "path_outside_scope"),
        ("x/../../escape.bin", "error", "path_outside_scope"),
    ]


@pytest.mark.anyio
async def test_ingress_honours_expect_100_continue(local_ingress: Any) -> None:
    local, ingress = local_ingress
    _welcome(ingress, local.key, time.time())
    url = urlsplit(local.sign("curl.bin", 5))
    stream = await trio.open_tcp_stream(url.hostname, url.port)
    async with stream:
        await stream.send_all(
            f"PUT {url.path} HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n".encode()
        )
        interim = await stream.receive_some(1024)
        assert interim.startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        await stream.send_all(b"hello")
        answer = b""
        while chunk := await stream.receive_some(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert (local.site / "curl.bin").read_bytes() == b"hello"


def test_only_writers_get_a_url(stack: Stack, direct: IngressServer) -> None:
    email = f"member-{uuid.uuid4().hex[:6]}@demo.test"
    stack.admin("create-user", email, "--org", "demo", "--role", "member", "--password", "pw-123456")
    member = stack.login(email, "pw-123456")
    with stack.http(member) as http:
        body = {"scope": "site", "domain": SITE.domain, "path": "m.bin", "size": 4}
        refused = http.post(f"/v1/servers/{direct.server_id}/fs/upload/direct", json=body)
        assert _error(refused) == (403, "forbidden")
        root = http.post(f"/v1/servers/{direct.server_id}/fs/upload/direct", json={**body, "scope": "root"})
        assert _error(root) == (403, "forbidden")


# --- direct downloads --------------------------------------------------------------------------


def _download_url(stack: Stack, server_id: str, path: str, token: str | None = None) -> httpx.Response:
    params = {"scope": "site", "domain": SITE.domain, "path": path}
    with stack.http(token) as http:
        return http.post(f"/v1/servers/{server_id}/fs/download/direct", params=params)


@pytest.mark.anyio
@pytest.mark.parametrize("size", [0, 1, 3 * MiB + 7, 70 * MiB])
async def test_direct_download_is_byte_exact_and_skips_the_control_plane(
    stack: Stack, direct: IngressServer, folder: str, size: int
) -> None:
    data = os.urandom(size)
    (direct.site / folder / "blob.bin").write_bytes(data)
    received = bytearray()
    async with Client(stack.base_url, token=stack.token) as client:
        async for chunk in client.files.download(direct.server_id, SITE, f"{folder}/blob.bin"):
            received += chunk
        assert client.files.last_download_via == "direct"
    assert len(received) == size and hashlib.sha256(received).digest() == hashlib.sha256(data).digest()


def test_a_download_url_is_single_use_and_only_a_download_url(stack: Stack, direct: IngressServer, folder: str) -> None:
    (direct.site / folder / "a.txt").write_bytes(b"alpha")
    answer = _download_url(stack, direct.server_id, f"{folder}/a.txt")
    assert answer.status_code == 200, answer.text
    url = answer.json()["url"]
    assert url.startswith(direct.url + "/download/") and answer.json()["expires_at"]
    got = httpx.get(url)
    assert (got.status_code, got.content) == (200, b"alpha")
    assert got.headers["content-disposition"] == "attachment; filename*=UTF-8''a.txt"
    assert _error(httpx.get(url)) == (403, "forbidden")
    # An upload's grant is no download's, nor the other way round: each kind is signed apart.
    upload = _url(stack, direct, f"{folder}/a.txt", 5, overwrite=True)
    refused = httpx.get(direct.url + "/download/" + upload.rsplit("/", 1)[1])
    assert _error(refused) == (401, "unauthenticated") and refused.json()["error"]["details"]["reason"] == "signature"
    fresh_download = _download_url(stack, direct.server_id, f"{folder}/a.txt").json()["url"]
    as_upload = httpx.put(direct.url + "/upload/" + fresh_download.rsplit("/", 1)[1], content=b"owned")
    assert _error(as_upload) == (401, "unauthenticated")
    tampered = _tamper_payload(fresh_download, path=f"{folder}/../other.txt")
    assert _error(httpx.get(tampered)) == (401, "unauthenticated")
    assert (direct.site / folder / "a.txt").read_bytes() == b"alpha"


def test_a_download_url_refuses_what_the_download_would(stack: Stack, direct: IngressServer, folder: str) -> None:
    (direct.site / folder / "sub").mkdir()
    for path, expected in [
        (f"{folder}/missing.txt", (404, "not_found")),
        (f"{folder}/sub", (422, "validation_error")),  # not a regular file
        ("../escape.txt", (422, "path_outside_scope")),
    ]:
        answer = _download_url(stack, direct.server_id, path)
        assert answer.status_code == 200, answer.text  # checked at the GET, where the file is read
        assert _error(httpx.get(answer.json()["url"])) == expected, path


@pytest.mark.anyio
async def test_download_falls_back_to_the_relay_without_an_ingress(stack: Stack) -> None:
    assert _server(stack, stack.server_id)["agent"]["direct_ingress_url"] is None
    name = f"relayed-{uuid.uuid4().hex[:8]}.bin"
    data = os.urandom(2 * MiB)
    (stack.data_dir / "home" / "example-com" / name).write_bytes(data)
    async with Client(stack.base_url, token=stack.token) as client:
        assert (await client.files.direct_download_url(stack.server_id, DEMO_SITE, name)).url is None
        received = b"".join([chunk async for chunk in client.files.download(stack.server_id, DEMO_SITE, name)])
        assert client.files.last_download_via == "relay"
    assert received == data


def test_who_may_get_a_download_url(stack: Stack, direct: IngressServer, folder: str) -> None:
    """A member reads a site (observe), so gets its URLs; not the server root's. Another org's
    server is 404, as every route says of it."""
    email = f"reader-{uuid.uuid4().hex[:6]}@demo.test"
    stack.admin("create-user", email, "--org", "demo", "--role", "member", "--password", "pw-123456")
    member = stack.login(email, "pw-123456")
    assert _download_url(stack, direct.server_id, f"{folder}/x.txt", member).status_code == 200
    with stack.http(member) as http:
        params = {"scope": "root", "path": "site-a"}
        assert _error(http.post(f"/v1/servers/{direct.server_id}/fs/download/direct", params=params)) == (
            403,
            "forbidden",
        )
    stranger = stack.new_owner("dl-stranger")
    assert _error(_download_url(stack, direct.server_id, f"{folder}/x.txt", stranger)) == (404, "not_found")


DOWNLOAD_USER = "fddl-test"


@pytest.fixture
def site_user(local_ingress: Any) -> Iterator[SiteUser]:
    """The site's own (hostile) user, owning everything in the ingress's site."""
    if os.geteuid() != 0:
        pytest.skip("needs root")
    subprocess.run(["userdel", DOWNLOAD_USER], capture_output=True)
    done = subprocess.run(["useradd", "--system", "--no-create-home", DOWNLOAD_USER], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    account = pwd.getpwnam(DOWNLOAD_USER)
    user = SiteUser(account.pw_name, account.pw_uid, account.pw_gid)
    local, _ingress = local_ingress
    for path in [local.site, *local.site.rglob("*")]:
        user.chown(path)
    # pytest's temporary folders are root's 0700: the user (its racer) must reach its site.
    above = [folder for folder in local.site.parents if folder != Path("/") and folder != Path("/tmp")]
    modes = {folder: folder.stat().st_mode & 0o7777 for folder in above}
    for folder, mode in modes.items():
        folder.chmod(mode | 0o001)
    try:
        yield user
    finally:
        for folder, mode in modes.items():
            folder.chmod(mode)
        subprocess.run(["userdel", DOWNLOAD_USER], capture_output=True)


@pytest.mark.anyio
async def test_a_hostile_site_user_cannot_download_what_is_outside(
    local_ingress: Any, site_user: SiteUser, tmp_path: Path
) -> None:
    """Links out of the site, a hard link to root's file, and a folder swapped for a link to
    root's folder while downloads run: the ingress, root, never sends a byte of what is outside."""
    local, ingress = local_ingress
    _welcome(ingress, local.key, time.time())
    canaries = Canaries.make(tmp_path)
    plant_symlink(site_user, local.site / "out-link", canaries.file)
    plant_hardlink(local.site / "hard-out", canaries.file)
    docs = local.site / "docs"
    docs.mkdir()
    (docs / canaries.name_token).write_text("the site's own file\n")
    for path in (docs, docs / canaries.name_token):
        site_user.chown(path)
    async with httpx.AsyncClient() as http:
        link = await http.get(local.sign_download("out-link"))
        assert _error(link) == (422, "path_outside_scope") and canaries.token not in link.text
        hard = await http.get(local.sign_download("hard-out"))
        assert _error(hard) == (403, "forbidden") and canaries.token not in hard.text
        racer = Racer(site_user, docs, canaries.folder)
        try:
            answers = [await http.get(local.sign_download(f"docs/{canaries.name_token}")) for _ in range(200)]
        finally:
            swaps = racer.stop()
    assert swaps > 0
    assert all(canaries.token not in answer.text for answer in answers)
    assert {a.status_code for a in answers} <= {200, 404, 422}
    assert any(a.status_code == 200 and a.text == "the site's own file\n" for a in answers)


@pytest.mark.anyio
async def test_a_file_that_shrinks_during_a_download_cuts_it_short(local_ingress: Any) -> None:
    """Once the head said the size, a shorter file can only end the connection early: the client
    sees a body short of its Content-Length (httpx raises), never a short file passed off as whole."""
    local, ingress = local_ingress
    _welcome(ingress, local.key, time.time())
    big = local.site / "shrinking.bin"
    big.write_bytes(os.urandom(64 * MiB))
    async with httpx.AsyncClient() as http, http.stream("GET", local.sign_download("shrinking.bin")) as answer:
        assert answer.headers["content-length"] == str(64 * MiB)
        chunks = answer.aiter_raw()
        await anext(chunks)
        os.truncate(big, MiB)
        with pytest.raises(httpx.RemoteProtocolError):
            async for _chunk in chunks:
                pass
