"""The boundary's helpers (agent/jobs/toolkit/boundary.py) on real trees, as root, against a hostile user:
folders exchanged with a link to the outside while they copy, remove or move (a racing thread,
`tests.helpers.races`), a folder swapped for a link between the look and the move, hard links to
outside files, FIFOs, and a user whose processes keep starting new ones."""

from __future__ import annotations

import os
import pwd
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from agent.files.fdops import CancelToken, OperationCancelled
from agent.files.jail import Jail
from agent.jobs.toolkit.boundary import (
    OwnerMap,
    as_user,
    copy_tree,
    move_out,
    processes_of,
    remove_tree,
    stop_user_processes,
)
from agent.jobs.toolkit.common import Account
from agent.jobs.toolkit.output import JobError
from tests.helpers import wait_until
from tests.helpers.races import Flipper

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="acts for other users: runs only as root")

NOBODY = pwd.getpwnam("nobody") if os.geteuid() == 0 else None
NEW_OWNER = (54321, 54321)  # the clone's user (no account needed: root gives files to any uid)
ROUNDS = 4


class Tree:
    """A user's tree (`site`, the user's: nobody's) beside root's `outside` (secrets, a file the
    site hard-links to), in a folder of its own."""

    def __init__(self, base: Path) -> None:
        assert NOBODY is not None
        self.base = base
        self.site, self.outside = base / "site", base / "outside"
        (self.outside / "keys").mkdir(parents=True)
        (self.outside / "keys" / "secret.txt").write_text("outside secret\n")
        (self.outside / "shadow").write_text("outside shadow\n")
        os.chmod(self.outside / "shadow", 0o640)
        self.victims = []
        for i in range(12):
            victim = self.site / "race" / f"v{i:02d}"
            (victim / "deeper").mkdir(parents=True)
            (victim / "f.txt").write_text("inside\n")
            (victim / "deeper" / "g.txt").write_text("inside\n")
            self.victims.append(victim)
        (self.site / "public_html").mkdir()
        (self.site / "public_html" / "index.html").write_text("inside\n")
        os.symlink("public_html/index.html", self.site / "link")
        os.mkfifo(self.site / "fifo")
        os.link(self.outside / "shadow", self.site / "hardlink")  # root's file, two links
        for path in [self.site, *self.site.rglob("*")]:
            if path != self.site / "hardlink":
                os.chown(path, NOBODY.pw_uid, NOBODY.pw_gid, follow_symlinks=False)

    def outside_state(self) -> dict[str, tuple[int, int, int, str]]:
        """Every outside file's identity, mode and content."""
        found = {}
        for path in sorted(self.outside.rglob("*")):
            st = path.lstat()
            text = path.read_text() if stat.S_ISREG(st.st_mode) else ""
            found[str(path)] = (st.st_ino, st.st_mode, st.st_uid, text)
        return found


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    return Tree(tmp_path)


def outside_content_in(folder: Path) -> list[str]:
    return [
        str(path)
        for path in folder.rglob("*")
        if path.is_file() and not path.is_symlink() and "outside" in path.read_text(errors="replace")
    ]


def owner_map(source_uid: int) -> OwnerMap:
    def owner_of(st: os.stat_result) -> tuple[int, int]:
        return NEW_OWNER if st.st_uid == source_uid else (st.st_uid, st.st_gid)

    return owner_of


# --- copy a tree ---------------------------------------------------------------------------------


def test_a_copy_never_follows_a_folder_exchanged_with_a_link(tree: Tree) -> None:
    assert NOBODY is not None
    before = tree.outside_state()
    parent = os.open(tree.base, os.O_PATH | os.O_DIRECTORY)
    try:
        with Jail(str(tree.site)) as source, Flipper(tree.victims, tree.outside) as flipper:
            for round_ in range(ROUNDS):
                skipped = copy_tree(source, parent, f"clone{round_}", owner_map(NOBODY.pw_uid), CancelToken())
                assert {"fifo", "hardlink"} <= set(skipped)
        assert flipper.flips > 0
    finally:
        os.close(parent)
    for round_ in range(ROUNDS):
        clone = tree.base / f"clone{round_}"
        assert outside_content_in(clone) == []
        assert os.readlink(clone / "link") == "public_html/index.html"  # a link is copied as a link
        assert not (clone / "fifo").exists() and not (clone / "hardlink").exists()
        assert (clone / "public_html" / "index.html").stat().st_uid == NEW_OWNER[0]
        assert (clone.stat().st_uid, stat.S_IMODE(clone.stat().st_mode)) == (NEW_OWNER[0], 0o755)
    assert tree.outside_state() == before


def test_a_copy_that_fails_or_is_cancelled_leaves_nothing(tree: Tree) -> None:
    assert NOBODY is not None
    parent = os.open(tree.base, os.O_PATH | os.O_DIRECTORY)
    names_before = sorted(os.listdir(tree.base))
    try:
        with Jail(str(tree.site)) as source:
            cancelled = CancelToken()
            cancelled.cancel()
            with pytest.raises(OperationCancelled):
                copy_tree(source, parent, "clone", owner_map(NOBODY.pw_uid), cancelled)

            def refuse(folder: int) -> None:
                raise OSError(28, "No space left on device")

            with pytest.raises(OSError):
                copy_tree(source, parent, "clone", owner_map(NOBODY.pw_uid), CancelToken(), finish=refuse)
            (tree.base / "taken").mkdir()
            with pytest.raises(JobError, match="already exists"):
                copy_tree(source, parent, "taken", owner_map(NOBODY.pw_uid), CancelToken())
    finally:
        os.close(parent)
    assert sorted(os.listdir(tree.base)) == sorted([*names_before, "taken"])  # no temporary folder left
    assert list((tree.base / "taken").iterdir()) == []


# --- remove a tree -------------------------------------------------------------------------------


def test_a_removal_never_follows_a_folder_exchanged_with_a_link(tree: Tree) -> None:
    before = tree.outside_state()
    parent = os.open(tree.base, os.O_PATH | os.O_DIRECTORY)
    try:
        with Flipper(tree.victims, tree.outside) as flipper:
            assert remove_tree(parent, "site", CancelToken()) is True
        assert flipper.flips > 0
        assert remove_tree(parent, "site", CancelToken()) is False  # again: nothing left to do
    finally:
        os.close(parent)
    assert not (tree.base / "site").exists()
    assert tree.outside_state() == before


# --- move a file out -----------------------------------------------------------------------------


@pytest.fixture
def quarantine(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    folder = tmp_path / "quarantine"
    folder.mkdir(mode=0o700)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    yield folder, fd
    os.close(fd)


def test_a_file_is_moved_out_only_from_the_folder_it_was_found_in(tree: Tree, quarantine: tuple[Path, int]) -> None:
    folder, into = quarantine
    assert NOBODY is not None
    hit = tree.site / "public_html" / "index.html"
    with Jail(str(tree.site)) as jail:
        moved = move_out(jail, "public_html/index.html", into, "index.html")
        assert moved is not None and moved.st_uid == NOBODY.pw_uid and not hit.exists()
        kept = folder / "index.html"
        assert (kept.stat().st_uid, stat.S_IMODE(kept.stat().st_mode), kept.read_text()) == (0, 0o600, "inside\n")

        # The scan saw race/v00/f.txt; then the folder became a link to the outside, holding a
        # root file of the same name: nothing moves, nothing outside changes.
        before = tree.outside_state()
        (tree.outside / "f.txt").write_text("outside root file\n")
        before = tree.outside_state()
        os.rename(tree.victims[0], tree.base / "elsewhere")
        os.symlink(tree.outside, tree.victims[0])
        assert move_out(jail, "race/v00/f.txt", into, "f.txt") is None
        # ... even a link that stays inside the site is not taken: the tree changed since the scan
        os.unlink(tree.victims[0])
        os.symlink("v01", tree.victims[0])
        assert move_out(jail, "race/v00/f.txt", into, "f.txt") is None
        # a hard link to root's file, a FIFO, a link: never moved (nor chmodded through)
        assert move_out(jail, "hardlink", into, "hardlink") is None
        assert move_out(jail, "fifo", into, "fifo") is None
        assert move_out(jail, "link", into, "link") is None
    assert tree.outside_state() == before
    assert sorted(os.listdir(folder)) == ["index.html"]
    assert (tree.site / "race" / "v01" / "f.txt").read_text() == "inside\n"


def test_moves_out_under_a_racing_exchange_take_only_the_users_files(tree: Tree, quarantine: tuple[Path, int]) -> None:
    folder, into = quarantine
    (tree.outside / "f.txt").write_text("outside root file\n")
    before = tree.outside_state()
    moved = 0
    with Jail(str(tree.site)) as jail, Flipper(tree.victims, tree.outside) as flipper:
        for i, victim in enumerate(tree.victims):
            moved += move_out(jail, f"race/{victim.name}/f.txt", into, f"f{i}.txt") is not None
    assert flipper.flips > 0
    assert tree.outside_state() == before
    assert len(os.listdir(folder)) == moved
    assert all((folder / name).read_text() == "inside\n" for name in os.listdir(folder))


# --- run as the user, stop its processes ---------------------------------------------------------


@pytest.fixture
def user() -> Iterator[Account]:
    name = f"fdb{os.getpid() % 100000}"
    subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True)
    entry = pwd.getpwnam(name)
    yield Account(name, entry.pw_uid, entry.pw_gid, entry.pw_dir)
    subprocess.run(["pkill", "-KILL", "-u", name], check=False)
    wait_until(lambda: processes_of(entry.pw_uid) == ([], []), timeout=30)  # killed and reaped
    subprocess.run(["userdel", name], check=False)


def test_a_child_runs_as_the_user_with_its_own_groups_only(user: Account) -> None:
    done = subprocess.run(
        ["/bin/sh", "-c", "id -u; id -G"], capture_output=True, text=True, check=True, **as_user(user)
    )
    uid, groups = done.stdout.split("\n")[:2]
    assert int(uid) == user.uid and groups.split() == [str(user.gid)]  # not root's 0, nor any other


def test_every_process_of_the_user_is_stopped_even_one_that_keeps_forking(user: Account) -> None:
    respawner = "while :; do sleep 300 & sleep 0.01; done"
    # In the background of a shell that exits at once: the loop is an orphan, as a site's own
    # daemon would be (PID 1 reaps it), not a child of this test.
    subprocess.run(["/bin/sh", "-c", f"{respawner} &"], start_new_session=True, check=True, **as_user(user))
    wait_until(lambda: len(processes_of(user.uid)[0]) > 5)
    trio.run(stop_user_processes, user)
    assert processes_of(user.uid)[0] == [], "a process of the user survived"
