"""Ranged `fs/read` (the viewer's read) through the HTTP API with the real agent: windows of any
file, of any size, text or binary; bad windows are 422; the jail holds as for every path."""

from __future__ import annotations

import base64
import os
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from api_client import Client
from contract.models import WINDOW_LIMIT, Scope
from tests.conftest import Stack

pytestmark = pytest.mark.stack_variants("sqlite", "postgresql")

SITE = Scope(scope="site", domain="example.com")
MIB = 1024 * 1024


def site_root(stack: Stack) -> Path:
    return stack.data_dir / "home" / "example-com"


@pytest.fixture
def folder(stack: Stack) -> Path:
    """A fresh folder in example.com for one test."""
    path = site_root(stack) / f"w-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    return path


def rel(stack: Stack, path: Path) -> str:
    return str(path.relative_to(site_root(stack)))


def read(stack: Stack, http: httpx.Client, path: str, **params: Any) -> httpx.Response:
    query = {"scope": "site", "domain": "example.com", "path": path, **params}
    return http.get(f"/v1/servers/{stack.server_id}/fs/read", params=query)


def numbered_lines(count: int) -> bytes:
    return b"".join(b"line %07d\n" % n for n in range(count))


@pytest.mark.anyio
async def test_first_middle_and_last_window_of_a_20_mb_file(stack: Stack, folder: Path) -> None:
    """A 20 MB log is over the editor's 10 MiB limit: its windows are read all the same."""
    data = numbered_lines(20 * MIB // 13 + 1)  # 13 bytes a line: a little over 20 MiB
    (folder / "big.log").write_bytes(data)
    path = rel(stack, folder / "big.log")
    async with Client(stack.base_url, token=stack.token) as client:
        first = await client.files.read_window(stack.server_id, SITE, path, 0, 4096)
        middle = await client.files.read_window(stack.server_id, SITE, path, 10 * MIB + 7, WINDOW_LIMIT)
        last = await client.files.read_window(stack.server_id, SITE, path, len(data) - 100, WINDOW_LIMIT)
    assert (first.offset, first.length, first.size, first.eof) == (0, 4096, len(data), False)
    assert first.data == data[:4096] and first.path == path
    assert (middle.length, middle.eof) == (WINDOW_LIMIT, False)
    assert middle.data == data[10 * MIB + 7 : 11 * MIB + 7]
    assert (last.offset, last.length, last.eof) == (len(data) - 100, 100, True)
    assert last.data == data[-100:]


@pytest.mark.parametrize("offset", [6, 1000, 2**63 - 1])
def test_a_window_beyond_the_end_is_empty_with_eof(stack: Stack, folder: Path, offset: int) -> None:
    (folder / "small.txt").write_bytes(b"hello\n")
    with stack.http() as http:
        answer = read(stack, http, rel(stack, folder / "small.txt"), offset=offset, length=10)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["offset"], body["length"], body["size"], body["data_base64"], body["eof"]) == (offset, 0, 6, "", True)
    assert set(body) == {"path", "offset", "length", "size", "mtime", "data_base64", "eof"}


def test_a_binary_file_is_read_in_windows_never_415(stack: Stack, folder: Path) -> None:
    data = bytes(range(256)) * 64
    (folder / "blob.bin").write_bytes(data)
    with stack.http() as http:
        whole = read(stack, http, rel(stack, folder / "blob.bin"))
        window = read(stack, http, rel(stack, folder / "blob.bin"), offset=250, length=20)
    assert (whole.status_code, whole.json()["error"]["code"]) == (415, "binary_file")  # the editor's read
    assert window.status_code == 200, window.text
    assert base64.b64decode(window.json()["data_base64"]) == data[250:270]


def test_offset_alone_reads_a_window_of_at_most_one_mib(stack: Stack, folder: Path) -> None:
    (folder / "two.bin").write_bytes(os.urandom(2 * MIB))
    with stack.http() as http:
        answer = read(stack, http, rel(stack, folder / "two.bin"), offset=MIB // 2)
    assert answer.status_code == 200, answer.text
    assert (answer.json()["length"], answer.json()["eof"]) == (WINDOW_LIMIT, False)


@pytest.mark.parametrize(
    "params",
    [
        {"offset": 0, "length": WINDOW_LIMIT + 1},
        {"offset": -1, "length": 10},
        {"offset": 0, "length": -5},
        {"offset": "abc", "length": 10},
        {"offset": 2**63, "length": 10},
    ],
)
def test_a_bad_window_is_422(stack: Stack, folder: Path, params: dict[str, Any]) -> None:
    (folder / "a.txt").write_bytes(b"a\n")
    with stack.http() as http:
        answer = read(stack, http, rel(stack, folder / "a.txt"), **params)
    assert (answer.status_code, answer.json()["error"]["code"]) == (422, "validation_error")


def test_the_jail_holds_for_ranged_reads(stack: Stack, folder: Path, tmp_path: Path) -> None:
    outside = tmp_path / "secret.txt"
    outside.write_bytes(b"secret\n")
    (folder / "escape").symlink_to(outside)
    with stack.http() as http:
        dotdot = read(stack, http, "../../etc/passwd", offset=0, length=100)
        link = read(stack, http, rel(stack, folder / "escape"), offset=0, length=100)
    assert (dotdot.status_code, dotdot.json()["error"]["code"]) == (422, "path_outside_scope")
    assert (link.status_code, link.json()["error"]["code"]) == (422, "path_outside_scope")
    assert b"secret" not in link.content


def test_a_folder_is_not_read_as_a_window(stack: Stack, folder: Path) -> None:
    with stack.http() as http:
        answer = read(stack, http, rel(stack, folder), offset=0, length=10)
    assert (answer.status_code, answer.json()["error"]["code"]) == (422, "validation_error")
