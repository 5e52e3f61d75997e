"""A site's web server and PHP logs through the files API (`scope=logs`), end to end on the session's
hosting server: a real root agent, nginx and PHP-FPM. A request to the site writes its access log in
root's folder outside the site; the logs scope lists, reads, downloads and searches it; every write
is refused (403, the logs are read-only) while a copy out into the site works; a link planted in
the log folder (nginx misbehaving) is never followed out; another org sees nothing, a member reads."""

from __future__ import annotations

import base64
import os
import pwd
import secrets
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import trio

from api_client import Client
from contract.errors import Forbidden
from contract.models import LOGS_READ_ONLY, FsDestination, Scope
from tests.helpers import wait_until
from tests.helpers.hosting import Hosting

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs the root agent's system users")

PASSWORD = "pw-123456"


@pytest.fixture(scope="module")
def domain(hosting: Hosting) -> Iterator[str]:
    """A static site of the hosting server, with a request in its access log."""
    name = f"logs{secrets.token_hex(4)}.example.test"
    hosting.run("site.create", domain=name).ok()
    yield name
    hosting.run("site.delete", domain=name)
    subprocess.run(["userdel", slug(name)], capture_output=True, check=False)


def slug(domain: str) -> str:
    return domain.replace(".", "-")


def logs(domain: str) -> Scope:
    return Scope(scope="logs", domain=domain)


def query(domain: str, path: str) -> dict[str, str]:
    return {"scope": "logs", "domain": domain, "path": path}


def fs(hosting: Hosting, http: httpx.Client, method: str, route: str, **kwargs: Any) -> httpx.Response:
    return http.request(method, f"/v1/servers/{hosting.server_id}/fs/{route}", **kwargs)


def requested(hosting: Hosting, domain: str) -> str:
    """A request to the site, once nginx wrote it in the site's access log: its marker path."""
    marker = f"/from-the-logs-scope-{secrets.token_hex(4)}"
    access_log = hosting.site_logs(domain) / "access.log"
    wait_until(lambda: hosting.get(domain, marker).status_code == 404 and marker in access_log.read_text())
    return marker


def user_of_org(hosting: Hosting, role: str) -> str:
    """A session token of a new user with `role` in the hosting server's org."""
    with hosting.http() as http:
        org = http.get("/v1/me").json()["org"]["name"]
    email = f"{role}-{uuid.uuid4().hex[:6]}@{org}.test"
    hosting.stack.admin("create-user", email, "--org", org, "--role", role, "--password", PASSWORD)
    return hosting.stack.login(email, PASSWORD)


@pytest.mark.anyio
async def test_the_logs_scope_lists_and_reads_what_the_web_server_wrote(hosting: Hosting, domain: str) -> None:
    marker = requested(hosting, domain)
    on_disk = (hosting.site_logs(domain) / "access.log").read_bytes()
    server = hosting.server_id
    async with Client(hosting.stack.base_url, token=hosting.token) as client:
        scopes = await client.files.scopes(server)
        assert Scope(scope="logs", domain=domain, slug=slug(domain)) in scopes
        site = next(s for s in scopes if s.scope == "site" and s.domain == domain)
        assert scopes.index(site) + 1 == scopes.index(site.logs())  # each site's logs follow it
        names = {e["name"]: e for e in (await client.files.list_all(server, logs(domain))).entries}
        assert {"access.log", "error.log"} <= set(names) and names["access.log"]["owner"] == "root"
        assert (await client.files.stat(server, logs(domain), "access.log")).size >= len(on_disk)
        assert marker in (await client.files.read(server, logs(domain), "access.log")).content
        # The viewer's read: a window at the end of the log.
        tail = await client.files.read_window(server, logs(domain), "access.log", len(on_disk) - 40, 40)
        assert base64.b64decode(tail.data_base64) == on_disk[-40:] and tail.offset == len(on_disk) - 40
        downloaded = b"".join([chunk async for chunk in client.files.download(server, logs(domain), "access.log")])
        assert downloaded.startswith(on_disk)
        by_name = await client.files.search(server, logs(domain), "", "access")
        assert [m.entry.name for m in by_name.matches] == ["access.log"]
        by_content = await client.files.search(server, logs(domain), "", marker, content=True)
        assert [(m.entry.name, marker in (m.text or "")) for m in by_content.matches] == [("access.log", True)]
        assert (await client.files.dirsize(server, logs(domain), "")).files >= 2
        # A user saves a log into the site: a file of the site's user there, the log unchanged.
        site_scope = FsDestination(scope="site", domain=domain)
        copied = await client.files.copy(server, logs(domain), ["access.log"], "saved-access.log", to=site_scope)
        assert copied == ["saved-access.log"]
        saved = hosting.home / slug(domain) / "saved-access.log"
        assert saved.read_bytes().startswith(on_disk) and saved.stat().st_uid == pwd.getpwnam(slug(domain)).pw_uid
        assert (hosting.site_logs(domain) / "access.log").read_bytes().startswith(on_disk)
    with hosting.http() as http:
        actions = [
            e["action"] for e in http.get("/v1/audit", params={"server_id": server, "limit": 20}).json()["entries"]
        ]
    assert "fs.copy" in actions and not {"fs.read", "fs.list", "fs.search"} & set(actions)  # reads are not audited


# Every write of the files API, aimed at the logs scope (or from it, when it would change it).
def _writes(domain: str) -> list[tuple[str, str, dict[str, Any]]]:
    logs_body = {"scope": "logs", "domain": domain}
    into_logs = {"scope": "site", "domain": domain, "to": {"scope": "logs", "domain": domain}}
    out_to_site = {"to": {"scope": "site", "domain": domain}}
    query = {"scope": "logs", "domain": domain}
    return [
        ("PUT", "write", {"json": {**logs_body, "path": "access.log", "content": "rewritten\n"}}),
        ("PUT", "write", {"json": {**logs_body, "path": "new.log", "content": "new\n", "create_only": True}}),
        ("POST", "mkdir", {"json": {**logs_body, "path": "folder"}}),
        ("POST", "move", {"json": {**logs_body, "paths": ["access.log"], "destination": "renamed.log"}}),
        ("POST", "move", {"json": {**logs_body, **out_to_site, "paths": ["access.log"], "destination": "moved.log"}}),
        ("POST", "copy", {"json": {**logs_body, "paths": ["access.log"], "destination": "copy.log"}}),
        ("POST", "copy", {"json": {**into_logs, "paths": ["public_html"], "destination": "site-copy"}}),
        ("POST", "delete", {"json": {**logs_body, "paths": ["access.log"]}}),
        ("POST", "delete", {"json": {**logs_body, "paths": ["access.log"], "permanent": True}}),
        ("GET", "trash", {"params": query}),
        ("POST", "trash/restore", {"json": {**logs_body, "ids": ["x"]}}),
        ("POST", "trash/empty", {"json": logs_body}),
        ("POST", "chmod", {"json": {**logs_body, "paths": ["access.log"], "mode": "0666"}}),
        ("POST", "compress", {"json": {**logs_body, "paths": ["access.log"], "format": "zip", "destination": "a.zip"}}),
        ("POST", "extract", {"json": {**logs_body, "path": "a.tar.gz", "destination": "out"}}),
        ("PUT", "upload", {"params": {**query, "path": "up.log"}, "content": b"uploaded\n"}),
        ("POST", "upload/direct", {"json": {**logs_body, "path": "up.log", "size": 9}}),
    ]


def test_every_write_to_the_logs_is_refused_as_read_only(hosting: Hosting, domain: str) -> None:
    folder = hosting.site_logs(domain)
    before = {path.name: path.read_bytes() for path in folder.iterdir()}
    site_before = sorted(os.listdir(hosting.home / slug(domain)))
    refused = []
    with hosting.http() as http:
        for method, route, request in _writes(domain):
            answer = fs(hosting, http, method, route, **request)
            error = answer.json()["error"] if answer.status_code >= 400 else {}
            refused.append((route, answer.status_code, error.get("code"), error.get("message")))
    assert refused == [(route, 403, "forbidden", LOGS_READ_ONLY) for _method, route, _request in _writes(domain)]
    assert {path.name: path.read_bytes() for path in folder.iterdir()} == before
    assert sorted(os.listdir(hosting.home / slug(domain))) == site_before


@pytest.mark.anyio
async def test_the_stream_upload_to_the_logs_is_refused_as_read_only(hosting: Hosting, domain: str) -> None:
    params = {"scope": "logs", "domain": domain, "path": "streamed.log", "size": "5"}
    route = f"/v1/servers/{hosting.server_id}/fs/upload/stream"
    async with Client(hosting.stack.base_url, token=hosting.token) as client:
        async with client.websocket(route, params=params) as socket:
            with trio.fail_after(30):  # refused before a byte is taken
                answer = orjson.loads(await socket.receive_text())
        assert answer["error"]["code"] == "forbidden" and answer["error"]["message"] == LOGS_READ_ONLY
        with pytest.raises(Forbidden):  # the client's upload, whichever path it takes
            await client.files.upload(hosting.server_id, logs(domain), "streamed.log", b"hello")
    assert not (hosting.site_logs(domain) / "streamed.log").exists()


def plant_links(folder: Path, outside: Path) -> list[str]:
    """Root's secret in `outside`, and names for it in the log folder `folder` (planted as root: the
    web server misbehaving): links to the file (absolute, relative), to its folder, a hard link."""
    (outside / "keys").mkdir(parents=True)
    (outside / "keys" / "agent-token").write_text("outside secret\n")
    outside.chmod(0o700)
    secret = outside / "keys" / "agent-token"
    os.symlink(secret, folder / "absolute.log")
    os.symlink(os.path.relpath(secret, folder), folder / "relative.log")
    os.symlink(outside / "keys", folder / "keys")
    os.link(secret, folder / "hard.log")
    return ["absolute.log", "relative.log", "keys", "hard.log"]


@pytest.mark.anyio
async def test_a_link_planted_in_the_log_folder_is_not_followed_out(hosting: Hosting, domain: str) -> None:
    outside, folder = hosting.folder / f"root-only-{secrets.token_hex(3)}", hosting.site_logs(domain)
    planted = plant_links(folder, outside)
    server, scope = hosting.server_id, logs(domain)
    try:
        async with Client(hosting.stack.base_url, token=hosting.token) as client:
            listed = {e["name"]: e for e in (await client.files.list_all(server, scope)).entries}
            assert [listed[name]["type"] for name in planted] == ["symlink", "symlink", "symlink", "file"]
            with hosting.http() as http:
                for name in ("absolute.log", "relative.log"):
                    for route, extra in [("read", {}), ("read", {"offset": 0}), ("download", {})]:
                        answer = fs(hosting, http, "GET", route, params={**query(domain, name), **extra})
                        assert answer.status_code == 422 and answer.json()["error"]["code"] == "path_outside_scope"
                listing = fs(hosting, http, "GET", "list", params=query(domain, "keys"))
                assert listing.status_code == 422 and listing.json()["error"]["code"] == "path_outside_scope"
                hard = fs(hosting, http, "GET", "read", params=query(domain, "hard.log"))
                assert hard.status_code == 403 and hard.json()["error"]["details"] == {"path": "hard.log"}
            found = await client.files.search(server, scope, "", "outside secret", content=True)
            assert found.matches == []
            # Saved into the site, a planted link stays a link: the file it names is not read.
            copied = await client.files.copy(
                server, scope, ["absolute.log"], "planted.log", to=FsDestination(scope="site", domain=domain)
            )
            assert copied == ["planted.log"]
            assert (hosting.home / slug(domain) / "planted.log").is_symlink()
    finally:
        for name in planted:
            (folder / name).unlink()
        (hosting.home / slug(domain) / "planted.log").unlink(missing_ok=True)
    assert (outside / "keys" / "agent-token").read_text() == "outside secret\n"


def test_another_orgs_server_is_not_found(hosting: Hosting, domain: str) -> None:
    org = f"other-{uuid.uuid4().hex[:6]}"
    hosting.stack.admin("create-org", org, "--plan", "max")
    email = f"owner@{org}.test"
    hosting.stack.admin("create-user", email, "--org", org, "--role", "owner", "--password", PASSWORD)
    query = {"scope": "logs", "domain": domain, "path": "access.log"}
    with hosting.stack.http(hosting.stack.login(email, PASSWORD)) as http:
        for route, params in [("scopes", {}), ("list", {**query, "path": ""}), ("read", query), ("download", query)]:
            answer = fs(hosting, http, "GET", route, params=params)
            assert answer.status_code == 404 and answer.json()["error"]["code"] == "not_found", route


@pytest.mark.anyio
async def test_a_member_reads_the_logs_and_an_operator_saves_one_into_its_site(hosting: Hosting, domain: str) -> None:
    marker = requested(hosting, domain)
    server, scope = hosting.server_id, logs(domain)
    async with Client(hosting.stack.base_url, token=user_of_org(hosting, "member")) as member:
        assert Scope(scope="logs", domain=domain, slug=slug(domain)) in await member.files.scopes(server)
        assert marker in (await member.files.read(server, scope, "access.log")).content
        with pytest.raises(Forbidden):  # a member writes nowhere, so saves no log into the site
            await member.files.copy(
                server, scope, ["access.log"], "member.log", to=FsDestination(scope="site", domain=domain)
            )
    async with Client(hosting.stack.base_url, token=user_of_org(hosting, "operator")) as operator:
        into_site = FsDestination(scope="site", domain=domain)
        assert await operator.files.copy(server, scope, ["access.log"], "operator.log", to=into_site) == [
            "operator.log"
        ]
        other_site = FsDestination(scope="site", domain=f"other-{domain}")
        with pytest.raises(Forbidden) as refused:  # another site's: cross-site, owners only
            await operator.files.copy(server, scope, ["access.log"], "x.log", to=other_site)
        assert refused.value.details == {"capability": "root_scope"}
    assert marker in (hosting.home / slug(domain) / "operator.log").read_text()
    assert not (hosting.home / slug(domain) / "member.log").exists()
