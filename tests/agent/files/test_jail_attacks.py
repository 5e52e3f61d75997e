"""The jail under the attacks known from file-manager CVEs, for every write operation.

Traversal in every spelling and position, links at the start, middle and end of a path,
dangling links used to create, edited trash sidecars, a fuzz of paths, and a race that swaps
folders for links to the outside while recursive operations run. Each test asserts the answer
and, above all, that nothing outside the scope changed.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.files import transfer, trash, tree
from agent.files.fdops import CancelToken
from agent.files.handlers import FileHandlers
from agent.files.jail import Jail
from agent.link.call import Call
from contract.link.protocol import RpcError
from contract.models import TRASH_FOLDER
from tests.helpers.agent_files import (
    SERVER_ID,
    SITE,
    Home,
    call,
    error,
    lexists,
    linked,
    make_home,
    outside_state,
    temp_leftovers,
)
from tests.helpers.races import Flipper

RESOLVERS = [
    pytest.param(None, id="auto"),
    pytest.param(False, id="walk"),
]
SAFE_CODES = {"path_outside_scope", "not_found", "validation_error", "conflict"}


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return make_home(tmp_path)


@pytest.fixture(params=RESOLVERS)
def fs(request: pytest.FixtureRequest, home: Home) -> FileHandlers:
    return home.handlers(request.param)


# --- traversal spellings -----------------------------------------------------------------------

TRAVERSALS = [
    "..",
    "../",
    "../outside/x",
    "../../outside/x",
    "a/../../outside/x",
    "a/b/../../../x",
    "./../x",
    "x/..",
    "../x/",
    "/etc/x",
    "//etc/x",
    "/../x",
    "a/..//../x",
    "x\x00y",
]
LITERAL_NAMES = [  # dangerous-looking, but plain names here: they must land inside
    "%2e%2e/x",
    "..%2f..%2fx",
    "%252e%252e/x",
    "....//x",
    "...",
    "..\\..\\outside\\x",
    "\\..\\x",
    "x/...",
    ". ./x",
    "..;/x",
]


def write_ops(path: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        ("fs_write", {"path": path, "content": "pwned"}),
        ("fs_write", {"path": path, "content": "pwned", "create_only": True}),
        ("fs_mkdir", {"path": path}),
        ("fs_mkdir", {"path": path, "parents": True}),
        ("fs_move", {"paths": ["notes.txt"], "destination": path}),
        ("fs_move", {"paths": [path], "destination": "public"}),
        ("fs_copy", {"paths": ["a"], "destination": path}),
        ("fs_copy", {"paths": [path], "destination": "public"}),
        ("fs_delete", {"paths": [path]}),
        ("fs_delete", {"paths": [path], "permanent": True}),
        ("fs_chmod", {"paths": [path], "mode": 0o777, "recursive": True}),
        ("fs_compress", {"paths": ["public"], "format": "zip", "destination": path}),
        ("fs_compress", {"paths": [path], "format": "zip", "destination": "out.zip"}),
        ("fs_extract", {"path": "site.zip", "destination": path}),
        ("fs_extract", {"path": "site.zip", "destination": path, "on_conflict": "overwrite"}),
        ("fs_extract_check", {"path": "site.zip", "destination": path}),
        ("fs_dirsize", {"path": path}),
        ("fs_search", {"path": path, "query": "secret", "content": True}),
    ]


async def _attempt(fs: FileHandlers, op: str, params: dict[str, Any]) -> str:
    try:
        await call(getattr(fs, op), **SITE, **params)
    except RpcError as exc:
        assert exc.code in SAFE_CODES, (op, params, exc)
        return exc.code
    return "ok"


@pytest.mark.anyio
async def test_traversal_in_every_spelling_is_refused(fs: FileHandlers, home: Home) -> None:
    await call(fs.fs_compress, **SITE, paths=["public"], format="zip", destination="site.zip")
    before = outside_state(home)
    for path in TRAVERSALS:
        for op, params in write_ops(path):
            assert await _attempt(fs, op, params) == "path_outside_scope", (op, params)
    assert outside_state(home) == before
    assert not (home.base / "x").exists() and not (home.home / "x").exists()


@pytest.mark.anyio
async def test_names_that_look_like_traversal_stay_inside(fs: FileHandlers, home: Home) -> None:
    before = outside_state(home)
    for path in LITERAL_NAMES:
        made = await call(fs.fs_mkdir, **SITE, path=path, parents=True)
        assert (home.site / made["entry"]["path"]).is_dir(), path
        written = await call(fs.fs_write, **SITE, path=f"{path}/file.txt", content="inside")
        assert (home.site / written["entry"]["path"]).read_text() == "inside"
    assert (home.site / "%2e%2e" / "x" / "file.txt").exists()
    assert (home.site / "...." / "x").is_dir()
    assert (home.site / "..\\..\\outside\\x").is_dir()  # a backslash is part of a name
    assert outside_state(home) == before


# --- links at the start, the middle and the end ------------------------------------------------

LINK_PATHS = {
    "start-rel": "out_rel/new",
    "start-abs": "out_abs/new",
    "start-existing": "out_rel/secret.txt",
    "middle": "a/out_mid/sub/new",
    "middle-existing": "a/out_mid/sub/inner.txt",
    "other-site": "to_other/secret.txt",
    "end-dir": "out_rel",
    "end-file": "out_file",
    "end-dangling-rel": "dangling_out",
    "end-dangling-abs": "dangling_abs",
}

# What a link at the END of the path gives (the link itself is in the scope); a link at the
# start or in the middle is path_outside_scope for every operation.
AT_THE_END = {
    "write": "path_outside_scope",  # an edit goes through the link: out
    "write_new": "conflict",  # the name is taken (by the link)
    "mkdir": "conflict",
    "move_src": "ok",  # the link itself moves
    "copy_src": "ok",  # copied as a link
    "copy_dst": "path_outside_scope",  # "into" the folder it points to: out
    "delete": "ok",  # the link itself goes to the trash
    "chmod": "path_outside_scope",
    "compress_dst": "conflict",
    "extract_dst": "path_outside_scope",
    "dirsize": "path_outside_scope",
}


def link_op(op: str, path: str) -> tuple[str, dict[str, Any]]:
    ops: dict[str, tuple[str, dict[str, Any]]] = {
        "write": ("fs_write", {"path": path, "content": "pwned"}),
        "write_new": ("fs_write", {"path": path, "content": "pwned", "create_only": True}),
        "mkdir": ("fs_mkdir", {"path": path, "parents": True}),
        "move_src": ("fs_move", {"paths": [path], "destination": "public"}),
        "copy_src": ("fs_copy", {"paths": [path], "destination": "public"}),
        "copy_dst": ("fs_copy", {"paths": ["notes.txt"], "destination": path}),
        "delete": ("fs_delete", {"paths": [path]}),
        "chmod": ("fs_chmod", {"paths": [path], "mode": 0o777, "recursive": True}),
        "compress_dst": ("fs_compress", {"paths": ["public"], "format": "tar.gz", "destination": path}),
        "extract_dst": ("fs_extract", {"path": "site.zip", "destination": path}),
        "dirsize": ("fs_dirsize", {"path": path}),
    }
    return ops[op]


@pytest.mark.anyio
@pytest.mark.parametrize("op", sorted(AT_THE_END))
@pytest.mark.parametrize("use_openat2", RESOLVERS)
async def test_links_anywhere_in_a_path_never_lead_out(tmp_path: Path, op: str, use_openat2: bool | None) -> None:
    home = make_home(tmp_path)
    fs = home.handlers(use_openat2)
    await call(fs.fs_compress, **SITE, paths=["public"], format="zip", destination="site.zip")
    before = outside_state(home)
    for case, path in LINK_PATHS.items():
        name, params = link_op(op, path)
        expected = AT_THE_END[op] if case.startswith("end-") else "path_outside_scope"
        assert await _attempt(fs, name, params) == expected, (op, case)
        assert outside_state(home) == before, (op, case)
    for name in ("out_rel", "out_file", "dangling_out", "dangling_abs"):
        moved = home.site / "public" / name
        if lexists(moved):  # moved or copied: a link still, nothing taken along
            assert moved.is_symlink(), name
    assert not (home.outside / "created-through-link").exists()
    assert not (home.outside / "created-through-abs-link").exists()
    assert not (home.outside / "new").exists() and not (home.outside / "sub" / "new").exists()


@pytest.mark.anyio
async def test_uploads_through_links_never_create_outside(home: Home) -> None:
    before = outside_state(home)
    async with linked(home.handlers()) as hub:
        for case, path in LINK_PATHS.items():
            for overwrite in (False, True):
                params = {**SITE, "path": path, "overwrite": overwrite}
                with pytest.raises(Exception) as info:
                    async with hub.open_upload(SERVER_ID, "fs.upload", params) as upload:
                        await upload.send(b"pwned")
                        await upload.finish()
                assert getattr(info.value, "code", None) in SAFE_CODES, (case, overwrite, info.value)
    assert outside_state(home) == before
    assert temp_leftovers(home.site) == [] and temp_leftovers(home.outside) == []


# --- edited trash sidecars ---------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("original", "code"),
    [
        ("../../etc/x", "path_outside_scope"),
        ("../../outside/restored", "path_outside_scope"),
        ("/etc/x", "path_outside_scope"),
        (str(Path("/") / "tmp" / "x"), "path_outside_scope"),
        ("out_rel/restored", "path_outside_scope"),
        ("a/out_mid/restored", "path_outside_scope"),
        ("dangling_out/restored", "path_outside_scope"),
        ("to_other/restored", "path_outside_scope"),
        ("x\x00y", "path_outside_scope"),
        (f"{TRASH_FOLDER}/again", "validation_error"),
        ("", "validation_error"),
        (42, "validation_error"),
    ],
)
async def test_edited_sidecars_cannot_restore_outside(fs: FileHandlers, home: Home, original: Any, code: str) -> None:
    item = (await call(fs.fs_delete, **SITE, paths=["notes.txt"]))["trashed"][0]
    sidecar = home.site / TRASH_FOLDER / f"{item['id']}.json"
    record = orjson.loads(sidecar.read_bytes())
    record["original_path"] = original
    record["id"] = "../../../outside/secret.txt"  # the id inside is never used
    sidecar.write_bytes(orjson.dumps(record))
    before = outside_state(home)
    assert (await error(fs.fs_trash_restore, **SITE, ids=[item["id"]], overwrite=True)).code == code
    assert outside_state(home) == before
    assert (home.site / TRASH_FOLDER / item["id"]).exists()  # still in the trash
    listed = await call(fs.fs_trash_list, **SITE)
    assert [i["id"] for i in listed["items"]] == [item["id"]]


@pytest.mark.anyio
async def test_a_trash_that_is_a_link_is_never_used(fs: FileHandlers, home: Home) -> None:
    os.symlink(str(home.outside), home.site / TRASH_FOLDER)
    before = outside_state(home)
    assert (await error(fs.fs_delete, **SITE, paths=["notes.txt"])).code == "validation_error"
    assert (await error(fs.fs_trash_list, **SITE)).code == "validation_error"
    assert (await error(fs.fs_trash_empty, **SITE)).code == "validation_error"
    assert (home.site / "notes.txt").exists() and outside_state(home) == before


# --- a fuzz of paths ---------------------------------------------------------------------------

COMPONENTS = [
    "a",
    "b",
    "new",
    "notes.txt",
    "public",
    "..",
    ".",
    "",
    "%2e%2e",
    "....",
    "\\..",
    "out_rel",
    "out_abs",
    "out_file",
    "out_mid",
    "dangling_out",
    "dangling_abs",
    "dangling_in",
    "in_link",
    "to_other",
    "secret.txt",
    "sub",
    TRASH_FOLDER,
    "outside",
    "other-site",
    "example-com",
]

FUZZ_LINKS = {
    "out_rel": "../../outside",
    "out_abs": None,  # filled with the absolute outside path
    "out_file": "../../outside/secret.txt",
    "dangling_out": "../../outside/created-through-link",
    "in_link": "public",
    "to_other": "../other-site",
    "a/out_mid": "../../../outside",
}


@pytest.fixture(scope="module")
def fuzz_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Home, dict[str, Any]]]:
    home = make_home(tmp_path_factory.mktemp("fuzz"))
    yield home, outside_state(home)


def _rearm(home: Home) -> None:
    """Put the hostile links back (a previous example may have moved or deleted them)."""
    for name, target in FUZZ_LINKS.items():
        path = home.site / name
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if not os.path.lexists(path):
                os.symlink(target or str(home.outside), path)
        except OSError:
            pass  # "a" became a file: that link waits


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    op=st.sampled_from(["write", "mkdir", "move", "delete"]),
    parts=st.lists(st.sampled_from(COMPONENTS), min_size=1, max_size=5),
    other=st.lists(st.sampled_from(COMPONENTS), min_size=1, max_size=4),
    leading_slash=st.booleans(),
    flag=st.booleans(),
    use_walk=st.booleans(),
)
def test_fuzz_nothing_outside_changes(
    fuzz_home: tuple[Home, dict[str, Any]],
    op: str,
    parts: list[str],
    other: list[str],
    leading_slash: bool,
    flag: bool,
    use_walk: bool,
) -> None:
    home, initial = fuzz_home
    _rearm(home)
    path = ("/" if leading_slash else "") + "/".join(parts)
    second = "/".join(other)
    fs = home.handlers(False if use_walk else None)
    params: dict[str, Any] = {
        "write": {"path": path, "content": "fuzz", "create_only": flag},
        "mkdir": {"path": path, "parents": flag},
        "move": {"paths": [path], "destination": second, "overwrite": flag},
        "delete": {"paths": [path], "permanent": flag},
    }[op]
    handler = {"write": fs.fs_write, "mkdir": fs.fs_mkdir, "move": fs.fs_move, "delete": fs.fs_delete}[op]

    async def attempt() -> None:
        try:
            await handler(Call(1, f"fs.{op}", {**SITE, **params}))
        except RpcError as exc:
            assert exc.code in SAFE_CODES, (op, params, exc)

    trio.run(attempt)
    assert outside_state(home) == initial, (op, params)
    assert not temp_leftovers(home.site)


# --- races: a folder swapped for a link to the outside during recursive work -------------------


ROUNDS = 4


def build_race_tree(site: Path, n: int = 20) -> list[Path]:
    race = site / "race"
    victims = []
    for i in range(n):
        victim = race / f"v{i:02d}"
        (victim / "deeper").mkdir(parents=True)
        (victim / "f.txt").write_text("inside\n")
        (victim / "deeper" / "g.txt").write_text("inside\n")
        victims.append(victim)
    return victims


def _outside_content_in(folder: Path) -> list[str]:
    found = []
    for where, _, files in os.walk(folder):
        for name in files:
            path = Path(where) / name
            if not path.is_symlink() and "outside" in path.read_text(errors="replace"):
                found.append(str(path))
    return found


@pytest.mark.parametrize("use_openat2", RESOLVERS)
def test_race_recursive_copy_chmod_delete(home: Home, use_openat2: bool | None) -> None:
    """The walks never follow the swapped-in link, whichever moment the swap happens at."""
    before = outside_state(home)
    token = CancelToken()
    with Jail(str(home.site), use_openat2=use_openat2) as jail:
        victims = build_race_tree(home.site)
        with Flipper(victims, home.outside) as flipper:
            for round_ in range(ROUNDS):
                transfer.copy(jail, jail, ["race"], f"copy{round_}", overwrite=False, token=token)
                tree.chmod(jail, ["race"], 0o711, recursive=True, only=None, token=token)
                tree.dirsize(jail, "race", token=token)
                tree.search(jail, "race", "outside", content=True, limit=100, token=token)
            assert flipper.flips > 0
        for round_ in range(ROUNDS):
            assert _outside_content_in(home.site / f"copy{round_}") == []
        assert outside_state(home) == before
        shutil.rmtree(home.site / "race")
        for _ in range(3):
            victims = build_race_tree(home.site)
            with Flipper(victims, home.outside):
                trash.delete(jail, ["race"], permanent=True, token=token)
            if (home.site / "race").exists():  # a link the flipper left behind after the delete
                trash.delete(jail, ["race"], permanent=True, token=token)
            assert outside_state(home) == before
        for _ in range(2):
            victims = build_race_tree(home.site)
            with Flipper(victims, home.outside):
                trash.delete(jail, ["race"], permanent=False, token=token)
            assert outside_state(home) == before
            if (home.site / "race").exists():
                trash.delete(jail, ["race"], permanent=True, token=token)
    assert (home.outside / "secret.txt").read_text() == "outside secret\n"
    assert os.stat(home.outside / "secret.txt").st_mode & 0o777 == 0o600
