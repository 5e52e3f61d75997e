"""``fs.find``: the viewer's search and go-to-line, in one file of any size, read through the jail.

Every answer is checked against the file's bytes searched in Python (`expected`): the match's
offset and its line number as content search numbers lines.
"""

from __future__ import annotations

import os
import pwd
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.files.fdops import CancelToken, OperationCancelled
from agent.files.find import SEARCH_BLOCK, Needle, find
from agent.files.handlers import FileHandlers
from contract.models import FsFound
from tests.helpers.agent_files import SITE, Home, call, error, make_home, outside_state

FIND_USER = "fdfind-test"


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return make_home(tmp_path)


@pytest.fixture
def fsa(home: Home) -> FileHandlers:
    return home.handlers()


def expected(data: bytes, at: int) -> dict[str, int]:
    return {"offset": at, "line": data.count(b"\n", 0, at) + 1, "size": len(data)}


NONE = {"offset": None, "line": None}


def big_log() -> bytes:
    """Three blocks' worth of lines; "Error" on the first line, across the first block's end (its
    first byte in one block, the rest in the next), and on the last line."""
    line = b"%08d ok\n"  # 12 bytes
    lines = [line % n for n in range(3 * SEARCH_BLOCK // 12)]
    across = SEARCH_BLOCK // 12  # the line holding the first block's last byte (at its 4th byte)
    lines[0], lines[across], lines[-1] = b"Error first\n", b"abcError ac\n", b"ERROR last\n"
    data = b"".join(lines)
    assert data.index(b"Error", 12) == SEARCH_BLOCK - 1
    return data


@pytest.mark.anyio
async def test_find_forward_and_backward_through_a_file_of_several_blocks(fsa: FileHandlers, home: Home) -> None:
    data = big_log()
    (home.site / "big.log").write_bytes(data)
    first, across, last = 0, SEARCH_BLOCK - 1, data.index(b"ERROR last")

    async def found(**params: object) -> dict[str, object]:
        answer = await call(fsa.fs_find, **SITE, path="big.log", **params)
        FsFound.model_validate(answer)
        return dict(answer)

    assert await found(query="error") == expected(data, first)
    assert await found(query="error", offset=1) == expected(data, across)
    assert await found(query="error", offset=across + 1) == expected(data, last)
    assert await found(query="error", offset=last + 1) == {**NONE, "size": len(data)}
    assert await found(query="Error", case_sensitive=True, offset=1) == expected(data, across)
    assert await found(query="ERROR", case_sensitive=True) == expected(data, last)  # only the last is in capitals

    assert await found(query="error", backward=True, offset=len(data)) == expected(data, last)
    assert await found(query="error", backward=True, offset=last) == expected(data, across)
    assert await found(query="error", backward=True, offset=across) == expected(data, first)
    assert await found(query="error", backward=True, offset=0) == {**NONE, "size": len(data)}
    assert await found(query="error", backward=True, offset=10 * len(data)) == expected(data, last)  # past the end
    assert await found(query="not there") == {**NONE, "size": len(data)}


@pytest.mark.anyio
async def test_a_needle_that_is_not_ascii_is_found_in_any_case_and_at_its_byte_offset(
    fsa: FileHandlers, home: Home
) -> None:
    filler = "é" * (SEARCH_BLOCK // 2 - 3) + "\n"  # two bytes a character: the block ends mid-word
    data = (filler + "Grüße aus Köln\n" + filler + "GRÜSSE, GRÜẞE\n").encode()
    (home.site / "umlaut.txt").write_bytes(data)
    at = data.index("Grüße".encode())
    assert at < SEARCH_BLOCK < at + len("Grüße".encode())
    assert await call(fsa.fs_find, **SITE, path="umlaut.txt", query="grüße") == expected(data, at)
    again = await call(fsa.fs_find, **SITE, path="umlaut.txt", query="grüße", offset=at + 1)
    assert again == expected(data, data.index("GRÜẞE".encode()))
    backward = await call(fsa.fs_find, **SITE, path="umlaut.txt", query="GRÜ", backward=True, offset=len(data))
    assert backward == expected(data, data.index("GRÜẞE".encode()))
    sensitive = await call(fsa.fs_find, **SITE, path="umlaut.txt", query="grüße", case_sensitive=True, offset=at + 1)
    assert sensitive == {**NONE, "size": len(data)}


@pytest.mark.anyio
async def test_line_numbers_count_from_the_last_answers_until_the_file_changes(fsa: FileHandlers, home: Home) -> None:
    """`n`, `N` and go-to-line count from where the last answers were (`LINE_MARKS`); a file
    rewritten since, even to the same size with its old mtime put back, is counted afresh."""
    data = big_log()
    path = home.site / "big.log"
    path.write_bytes(data)
    last = data.index(b"ERROR last")
    for params in ({"line": 5}, {"query": "error", "offset": 1}, {"query": "error", "offset": last, "backward": True}):
        await call(fsa.fs_find, **SITE, path="big.log", **params)  # marks near the start, the middle, the end
    assert await call(fsa.fs_find, **SITE, path="big.log", query="error", offset=SEARCH_BLOCK) == expected(data, last)
    before = path.stat()
    shifted = b"\n" * 1000 + data[: -1000 - len(b"ERROR last\n")] + b"ERROR last\n"  # same size, more lines
    path.write_bytes(shifted)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_size == before.st_size
    lowered = shifted.lower()
    again = await call(fsa.fs_find, **SITE, path="big.log", query="error", offset=SEARCH_BLOCK)
    assert again == expected(shifted, lowered.index(b"error", SEARCH_BLOCK))  # the line across, 1000 bytes on
    backward = await call(fsa.fs_find, **SITE, path="big.log", query="error", backward=True, offset=len(shifted) - 20)
    assert backward == expected(shifted, lowered.rindex(b"error", 0, len(shifted) - 20 + 4))


@pytest.mark.anyio
async def test_go_to_a_line(fsa: FileHandlers, home: Home) -> None:
    """A line's start, wherever the blocks end; past the last line: the last line (a newline at the
    end starts none); an empty file has its line 1 at 0."""
    data = big_log()
    (home.site / "big.log").write_bytes(data)
    lines = data.count(b"\n")

    async def line(number: int, path: str = "big.log") -> dict[str, object]:
        return dict(await call(fsa.fs_find, **SITE, path=path, line=number))

    assert await line(1) == expected(data, 0)
    assert await line(2) == expected(data, 12)
    after_block = SEARCH_BLOCK // 12 + 2  # the line after the one across the first block's end
    assert await line(after_block) == expected(data, (after_block - 1) * 12)
    assert await line(lines) == expected(data, data.rindex(b"\n", 0, -1) + 1)
    assert await line(lines + 1) == await line(lines) == await line(10**12)
    (home.site / "open-end.txt").write_bytes(b"one\ntwo")
    assert await line(2, "open-end.txt") == await line(3, "open-end.txt") == {"offset": 4, "line": 2, "size": 7}
    (home.site / "empty.txt").write_bytes(b"")
    assert await line(5, "empty.txt") == {"offset": 0, "line": 1, "size": 0}


@pytest.mark.anyio
async def test_find_refuses_what_is_not_a_file_of_the_scope(fsa: FileHandlers, home: Home) -> None:
    before = outside_state(home)
    assert (await error(fsa.fs_find, **SITE, path="public", query="x")).code == "validation_error"
    assert (await error(fsa.fs_find, **SITE, path="out_file", query="secret")).code == "path_outside_scope"
    assert (await error(fsa.fs_find, **SITE, path="../other-site/secret.txt", line=1)).code == "path_outside_scope"
    for params in ({}, {"query": "x", "line": 1}, {"query": ""}, {"line": 0}, {"query": "x", "offset": -1}):
        refused = await error(fsa.fs_find, **SITE, path="notes.txt", **params)
        assert refused.code == "validation_error", params
    assert (await error(fsa.fs_find, **SITE, path="gone.txt", query="x")).code == "not_found"
    assert outside_state(home) == before


@pytest.fixture
def find_user() -> Iterator[pwd.struct_passwd]:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    subprocess.run(["userdel", FIND_USER], capture_output=True)
    done = subprocess.run(["useradd", "--system", "--no-create-home", FIND_USER], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"useradd failed: {done.stderr}")
    try:
        yield pwd.getpwnam(FIND_USER)
    finally:
        subprocess.run(["userdel", FIND_USER], capture_output=True)


@pytest.mark.anyio
async def test_a_hard_link_to_another_users_file_is_not_searched(
    fsa: FileHandlers, home: Home, find_user: pwd.struct_passwd
) -> None:
    """The site user hard-links root's 0600 file into the site: fs.find, which the agent runs as
    root, refuses it as the viewer's ranged read does, and says nothing of what it holds."""
    for path in [home.site, *home.site.rglob("*")]:
        os.lchown(path, find_user.pw_uid, find_user.pw_gid)
    os.link(home.outside / "secret.txt", home.site / "hard-out")
    for params in ({"query": "secret"}, {"query": "nothing like it"}, {"line": 1}):
        refused = await error(fsa.fs_find, **SITE, path="hard-out", **params)
        assert (refused.code, refused.details) == ("forbidden", {"path": "hard-out"})


def test_a_cancelled_find_stops(home: Home) -> None:
    (home.site / "big.log").write_bytes(big_log())
    token = CancelToken()
    token.cancel()
    with home.handlers().open_scope(SITE) as jail, pytest.raises(OperationCancelled):
        find(jail, "big.log", query="nowhere", line=None, offset=0, backward=False, case_sensitive=False, token=token)


def test_the_needle_of_content_search_and_find() -> None:
    assert Needle("error").find(b"an ERROR here") == 3 and Needle("error").rfind(b"error Error", 11) == 6
    assert Needle("Error", case_sensitive=True).find(b"ERROR Error") == 6
    assert Needle("error").rfind(b"error Error", 6) == 0  # a match must start before the end given
    assert Needle("köln").find("aus KÖLN".encode()) == 4 and Needle("köln").in_line("KÖLN")
    assert Needle("é").find(b"\xff\xfe" + "É".encode()) == 2  # bytes that are not UTF-8 keep their offsets
