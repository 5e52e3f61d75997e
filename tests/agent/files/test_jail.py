"""The jail: both resolvers (openat2 and the forced walk) on a tree full of hostile symlinks."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.files.jail import Jail, openat2_supported, split_path
from contract.link.protocol import RpcError

IMPLEMENTATIONS = [
    pytest.param(True, id="openat2", marks=pytest.mark.skipif(not openat2_supported(), reason="no openat2")),
    pytest.param(False, id="walk"),
]


def build_tree(base: Path) -> Path:
    """base/home/site1 is the root; base/home/site10 and base/outside are not."""
    root = base / "home" / "site1"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "c.txt").write_text("c")
    (root / "file.txt").write_text("file")
    (root / "dir").mkdir()
    (base / "home" / "site10").mkdir()
    (base / "home" / "site10" / "secret").write_text("site10 secret")
    (base / "outside").mkdir()
    (base / "outside" / "secret.txt").write_text("secret")
    links = {
        "a/up": "..",
        "a/upup": "../..",
        "link_in": "a/b",
        "link_file": "file.txt",
        "chain": "link_in/../b/c.txt",
        "self_dot": ".",
        "etc_link": "/etc",
        "abs_in": str(root / "file.txt"),
        "mid_out": "../../outside",
        "end_out": "../../outside/secret.txt",
        "escape": "a/../../..",
        "evil": "../site10/secret",
        "loop1": "loop2",
        "loop2": "loop1",
        "dangling": "nothere",
        "file_slash": "file.txt/",
        "dir/back": "../a",
    }
    for name, target in links.items():
        os.symlink(target, root / name)
    os.mkfifo(root / "fifo")
    return root


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tree(tmp_path_factory.mktemp("jail")).resolve()


@pytest.fixture(params=IMPLEMENTATIONS)
def jail(request: pytest.FixtureRequest, root: Path) -> Iterator[Jail]:
    with Jail(str(root), use_openat2=request.param) as jail:
        assert jail.uses_openat2 is request.param
        yield jail


def code_of(jail: Jail, path: str, *, follow_last: bool = True, flags: int = os.O_PATH) -> str:
    with pytest.raises(RpcError) as info:
        os.close(jail.open(path, flags, follow_last=follow_last))
    return info.value.code


def identity(jail: Jail, path: str, *, follow_last: bool = True) -> tuple[int, int]:
    with jail.opened(path, os.O_PATH, follow_last=follow_last) as fd:
        st = os.fstat(fd)
        return st.st_dev, st.st_ino


def inode(path: Path) -> tuple[int, int]:
    st = os.lstat(path)
    return st.st_dev, st.st_ino


OUTSIDE = [
    "..",
    "../etc/passwd",
    "../nonexistent",
    "a/../../x",
    "a/../b",  # stays inside, but ".." is refused lexically
    "/etc/passwd",
    "//etc",
    "etc_link",
    "etc_link/passwd",
    "abs_in",
    "mid_out/secret.txt",
    "end_out",
    "a/upup",
    "a/upup/outside/secret.txt",
    "escape",
    "evil",
    "with\x00nul",
    "file.txt\x00",
]


@pytest.mark.parametrize("path", OUTSIDE)
def test_escapes_are_path_outside_scope(jail: Jail, path: str) -> None:
    assert code_of(jail, path) == "path_outside_scope"
    assert code_of(jail, path, flags=os.O_RDONLY) == "path_outside_scope"


def test_outside_answers_reveal_nothing(jail: Jail) -> None:
    answers = []
    for path in ("../etc/passwd", "../nonexistent", "../home/site10/secret"):
        with pytest.raises(RpcError) as info:
            jail.open(path, os.O_RDONLY, follow_last=True)
        answers.append((info.value.code, info.value.message, info.value.details))
    assert answers[0] == answers[1] == answers[2] == ("path_outside_scope", "path is outside the scope", {})


def test_root_spellings(jail: Jail, root: Path) -> None:
    for path in ("", "/", ".", "./", "a/..b"[:0]):
        assert identity(jail, path) == inode(root)
    assert identity(jail, "a//b/./c.txt") == identity(jail, "a/b/c.txt") == inode(root / "a/b/c.txt")
    assert identity(jail, "a/b/") == inode(root / "a/b")


@pytest.mark.parametrize(
    ("path", "target"),
    [
        ("link_in/c.txt", "a/b/c.txt"),
        ("link_in", "a/b"),
        ("link_file", "file.txt"),
        ("a/up/file.txt", "file.txt"),
        ("a/up", ""),
        ("chain", "a/b/c.txt"),
        ("self_dot/self_dot/file.txt", "file.txt"),
        ("dir/back/b", "a/b"),
    ],
)
def test_in_root_symlinks_resolve(jail: Jail, root: Path, path: str, target: str) -> None:
    assert identity(jail, path) == inode(root / target)


def test_a_final_symlink_is_opened_itself_without_following(jail: Jail, root: Path) -> None:
    for name in ("end_out", "etc_link", "link_in", "dangling", "loop1"):
        assert identity(jail, name, follow_last=False) == inode(root / name)
        assert stat.S_ISLNK(jail.lstat(name).st_mode)
    # Opening it for I/O without following is refused rather than silently following.
    assert code_of(jail, "link_file", follow_last=False, flags=os.O_RDONLY) == "validation_error"
    # Only the last component is left alone: a symlink in the middle still resolves in the jail.
    assert code_of(jail, "mid_out/secret.txt", follow_last=False) == "path_outside_scope"


@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("nothere", "not_found"),
        ("a/nothere/x", "not_found"),
        ("file.txt/x", "not_found"),
        ("dangling", "not_found"),
        ("file_slash", "not_found"),
        ("loop1", "validation_error"),
        ("loop1/x", "validation_error"),
        ("x" * 300, "validation_error"),
    ],
)
def test_errors_inside(jail: Jail, path: str, code: str) -> None:
    assert code_of(jail, path) == code


def test_open_parent_and_subjail(jail: Jail, root: Path) -> None:
    dir_fd, name = jail.open_parent("link_in/c.txt")
    try:
        assert name == "c.txt"
        assert os.stat(name, dir_fd=dir_fd).st_ino == inode(root / "a/b/c.txt")[1]
    finally:
        os.close(dir_fd)
    with pytest.raises(RpcError) as info:
        jail.open_parent("")
    assert info.value.code == "validation_error"
    with pytest.raises(RpcError) as info:
        jail.open_parent("mid_out/secret.txt")
    assert info.value.code == "path_outside_scope"
    with jail.subjail("a") as sub:
        assert identity(sub, "b/c.txt") == inode(root / "a/b/c.txt")
        assert code_of(sub, "up") == "path_outside_scope"  # ".." from a is above the sub-root


def test_create_through_the_jail(jail: Jail, root: Path) -> None:
    name = f"created-{jail.uses_openat2}"
    fd = jail.open(f"link_in/{name}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, follow_last=False, mode=0o600)
    os.close(fd)
    assert (root / "a/b" / name).exists()
    assert code_of(jail, "etc_link/evil", flags=os.O_WRONLY | os.O_CREAT) == "path_outside_scope"


def test_fifo_opens_without_blocking(jail: Jail) -> None:
    with jail.opened("fifo", os.O_RDONLY | os.O_NONBLOCK, follow_last=True) as fd:
        assert stat.S_ISFIFO(os.fstat(fd).st_mode)


def test_split_path() -> None:
    assert split_path("") == split_path("/") == split_path("./.") == ()
    assert split_path("a//b/./c/") == ("a", "b", "c")
    for path in ("..", "a/..", "/a", "a\x00"):
        with pytest.raises(RpcError):
            split_path(path)


# --- both resolvers agree, and nothing ever resolves outside -------------------------------

COMPONENTS = [
    "a",
    "b",
    "c.txt",
    "file.txt",
    "dir",
    "back",
    "up",
    "upup",
    "link_in",
    "link_file",
    "chain",
    "self_dot",
    "etc_link",
    "abs_in",
    "mid_out",
    "end_out",
    "escape",
    "evil",
    "loop1",
    "dangling",
    "file_slash",
    "fifo",
    "nothere",
    "..",
    ".",
    "",
    "secret",
    "outside",
    "site10",
]


def outcome(jail: Jail, path: str, follow_last: bool) -> tuple[str, object]:
    try:
        fd = jail.open(path, os.O_PATH, follow_last=follow_last)
    except RpcError as exc:
        return "error", exc.code
    try:
        real = os.readlink(f"/proc/self/fd/{fd}")
        st = os.fstat(fd)
    finally:
        os.close(fd)
    return "fd", (real, st.st_dev, st.st_ino)


@settings(max_examples=400, deadline=None)
@given(
    parts=st.lists(st.sampled_from(COMPONENTS), max_size=7),
    leading_slash=st.booleans(),
    follow_last=st.booleans(),
)
def test_fuzz_never_resolves_outside_and_resolvers_agree(
    root: Path, parts: list[str], leading_slash: bool, follow_last: bool
) -> None:
    path = ("/" if leading_slash else "") + "/".join(parts)
    results = []
    for use_openat2 in [True, False] if openat2_supported() else [False]:
        with Jail(str(root), use_openat2=use_openat2) as jail:
            result = outcome(jail, path, follow_last)
        if result[0] == "fd":
            real = result[1][0]  # type: ignore[index]
            assert real == str(root) or real.startswith(str(root) + "/"), (path, real)
        else:
            assert result[1] in {"path_outside_scope", "not_found", "validation_error"}
        results.append(result)
    assert all(r == results[0] for r in results), (path, results)
