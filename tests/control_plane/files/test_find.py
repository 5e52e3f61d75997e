"""`fs/find` (the viewer's search and go-to-line) through the HTTP API with the real agent: the
match's offset and line from any offset, forward and backward; a line's start; bad queries are
422; the jail holds as for every path; another org's server is 404."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from api_client import Client
from contract.errors import ValidationFailed
from contract.models import FsFound, Scope
from tests.conftest import Stack

pytestmark = pytest.mark.stack_variants("sqlite", "postgresql")

SITE = Scope(scope="site", domain="example.com")
PASSWORD = "pw-123456"


def site_root(stack: Stack) -> Path:
    return stack.data_dir / "home" / "example-com"


@pytest.fixture
def log(stack: Stack) -> tuple[str, bytes]:
    """A 3 MB log in a fresh folder of example.com, "Timeout" on two of its lines: its path and bytes."""
    folder = site_root(stack) / f"f-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    lines = [b"line %07d ok\n" % n for n in range(200_000)]
    lines[10], lines[150_000] = b"upstream Timeout\n", b"TIMEOUT again\n"
    data = b"".join(lines)
    (folder / "app.log").write_bytes(data)
    return f"{folder.name}/app.log", data


def found(data: bytes, at: int) -> FsFound:
    return FsFound(offset=at, line=data.count(b"\n", 0, at) + 1, size=len(data))


@pytest.mark.anyio
async def test_find_forward_backward_and_a_line(stack: Stack, log: tuple[str, bytes]) -> None:
    path, data = log
    first, second = data.index(b"Timeout"), data.index(b"TIMEOUT")
    nothing = FsFound(offset=None, line=None, size=len(data))
    async with Client(stack.base_url, token=stack.token) as client:

        async def find(**params: Any) -> FsFound:
            return await client.files.find(stack.server_id, SITE, path, **params)

        assert await find(query="timeout") == found(data, first)
        assert (await find(query="timeout")).line == 11
        assert await find(query="timeout", offset=first + 1) == found(data, second)
        assert await find(query="timeout", offset=second + 1) == nothing
        assert await find(query="timeout", backward=True, offset=len(data)) == found(data, second)
        assert await find(query="timeout", backward=True, offset=second) == found(data, first)
        assert await find(query="TIMEOUT", case_sensitive=True) == found(data, second)
        assert await find(line=150_001) == found(data, second)
        assert await find(line=10**9) == found(data, data.rindex(b"line 0199999"))
        with pytest.raises(ValidationFailed):
            await find(query="timeout", line=3)
        with pytest.raises(ValidationFailed):
            await find()


def get_find(stack: Stack, http: httpx.Client, **params: Any) -> httpx.Response:
    query = {"scope": "site", "domain": "example.com", **params}
    return http.get(f"/v1/servers/{stack.server_id}/fs/find", params=query)


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"query": "x", "line": 1},
        {"query": ""},
        {"query": "x" * 257},
        {"line": 0},
        {"query": "x", "offset": -1},
        {"query": "x", "offset": 2**63},
        {"query": "x", "backward": "sideways"},
    ],
)
def test_a_bad_find_is_422(stack: Stack, log: tuple[str, bytes], params: dict[str, Any]) -> None:
    with stack.http() as http:
        answer = get_find(stack, http, path=log[0], **params)
    assert (answer.status_code, answer.json()["error"]["code"]) == (422, "validation_error"), params


def test_the_jail_holds_for_find(stack: Stack, log: tuple[str, bytes], tmp_path: Path) -> None:
    outside = tmp_path / "secret.txt"
    outside.write_bytes(b"secret\n")
    folder = log[0].rpartition("/")[0]
    (site_root(stack) / folder / "escape").symlink_to(outside)
    with stack.http() as http:
        dotdot = get_find(stack, http, path="../../etc/passwd", query="root")
        link = get_find(stack, http, path=f"{folder}/escape", query="secret")
        a_folder = get_find(stack, http, path=folder, query="x")
    assert (dotdot.status_code, dotdot.json()["error"]["code"]) == (422, "path_outside_scope")
    assert (link.status_code, link.json()["error"]["code"]) == (422, "path_outside_scope")
    assert (a_folder.status_code, a_folder.json()["error"]["code"]) == (422, "validation_error")


def test_another_orgs_server_is_not_found(stack: Stack, log: tuple[str, bytes]) -> None:
    org = f"other-{uuid.uuid4().hex[:6]}"
    stack.admin("create-org", org, "--plan", "max")
    email = f"owner@{org}.test"
    stack.admin("create-user", email, "--org", org, "--role", "owner", "--password", PASSWORD)
    with stack.http(stack.login(email, PASSWORD)) as http:
        answer = get_find(stack, http, path=log[0], query="timeout")
    assert (answer.status_code, answer.json()["error"]["code"]) == (404, "not_found")
    assert "Timeout" not in answer.text
