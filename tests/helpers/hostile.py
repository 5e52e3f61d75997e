"""The hostile site user: what a site's own (compromised) user can plant at the paths a job kind
touches, and the checks that the kind, running as root, was not led out of the site by it.

The attacks are the ones that user can really make, with one exception said where it is made:

- a symbolic link out of the site, to a canary file (for a path the kind reads) or to a name
  that does not exist yet in the canary folder (for a path the kind writes or creates);
- a hard link to the canary file. ``fs.protected_hardlinks=1`` (this machine's setting) stops a
  user from hard-linking a file it does not own, so the harness makes that link as root: it
  models a kernel where the protection is off, which the agent must not rely on;
- a FIFO, owned by the site's user (a kind that opens it waits for a partner forever);
- a race: a child running as the site's user exchanges a folder the kind walks with a symbolic
  link to the canary folder (``renameat2(RENAME_EXCHANGE)``, in a loop of bounded length) while
  the kind runs.

The canaries are root's (a folder of mode 0700 outside every site, with a file of mode 0600 and a
folder holding one more file), each holding a token no other file has. `Canaries.snapshot` is
their content, mode, owner and modification time, and the names beside them: a kind led out of
the site changes it, or makes a token appear in the site, in the job's output or in its result.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import os
import secrets
import shutil
import signal
import stat
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import cast

AT_FDCWD = -100
RENAME_EXCHANGE = 2
RACE_SWAPS = 300_000  # the racer's bound (a few seconds of swaps): it is stopped at the job's end
FIFO_WAIT = "wait_for_partner"  # the kernel's wchan of a task opening a FIFO that has no partner


def _load_renameat2() -> Callable[..., int]:
    """libc's renameat2, as `agent.files.fdops` loads it (here for RENAME_EXCHANGE)."""
    function = ctypes.CDLL(None, use_errno=True).renameat2
    function.restype = ctypes.c_int
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return cast("Callable[..., int]", function)


def exchange(a: Path, b: Path) -> None:
    """Swap two names atomically (renameat2 RENAME_EXCHANGE)."""
    if _load_renameat2()(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), str(a))


# The racer, run as the site's user by the system's python (the venv's may be out of its reach):
# it exchanges argv[1] and argv[2] until SIGTERM or argv[3] swaps, leaves them as they were (an
# even number of swaps) and prints how many it made. It says "ready" after its first exchange, so
# the kind starts with the race under way: a loaded machine that ran the kind before the racer's
# first swap (and site.delete, which kills the user's processes, ended it) raced nothing.
RACER = r"""
import ctypes, os, signal, sys
renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
a, b, limit = os.fsencode(sys.argv[1]), os.fsencode(sys.argv[2]), int(sys.argv[3])
stopped = []
signal.signal(signal.SIGTERM, lambda *_: stopped.append(True))
swaps = 0
while swaps < limit and not stopped:
    if renameat2(-100, a, -100, b, 2) != 0:
        if swaps and ctypes.get_errno() == 2:  # the folder is gone (the kind removed the site): the race is over
            break
        sys.exit("renameat2: " + os.strerror(ctypes.get_errno()))
    swaps += 1
    if swaps == 1:
        print("ready", flush=True)
if swaps % 2 and renameat2(-100, a, -100, b, 2) == 0:
    swaps += 1
print(swaps, flush=True)
"""


@dataclass(frozen=True)
class SiteUser:
    name: str
    uid: int
    gid: int

    def chown(self, path: Path) -> None:
        os.lchown(path, self.uid, self.gid)


class Racer:
    """A folder exchanged with a symbolic link to `target`, again and again, by the site's user,
    from `start` until `stop` (which says how many exchanges it made)."""

    def __init__(self, user: SiteUser, folder: Path, target: Path) -> None:
        self.folder = folder
        self.link = folder.with_name(f".{folder.name}.hostile-swap")
        os.symlink(target, self.link)
        user.chown(self.link)
        self.process = subprocess.Popen(
            ["/usr/bin/python3", "-c", RACER, str(folder), str(self.link), str(RACE_SWAPS)],
            user=user.uid,
            group=user.gid,
            extra_groups=[],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # Reaped as soon as it ends (the folder gone: site.delete), not at `stop`: the site user's
        # zombie would count as a process of the user the kind is waiting to remove.
        threading.Thread(target=self.process.wait, daemon=True).start()
        assert self.process.stdout is not None
        ready = self.process.stdout.readline().strip()
        assert ready == "ready", (
            f"the racer did not start: {ready} {self.process.stderr.read() if self.process.stderr else ''}"
        )

    def stop(self) -> int:
        """Stop the racer; the number of exchanges it made (the folder is a folder again)."""
        if self.process.poll() is None:
            self.process.terminate()
        out, err = self.process.communicate(timeout=30)
        killed = self.process.returncode == -signal.SIGKILL  # by the kind: site.delete stops the user's processes
        assert killed or self.process.returncode == 0, f"the racer failed: {err.strip()}"
        if self.folder.is_symlink() and os.path.lexists(self.link):  # it stopped on an odd swap
            exchange(self.folder, self.link)
        if os.path.lexists(self.link):
            self.link.unlink()
        if killed:  # by the kind: how many is unknown, at least the one before "ready"
            return 1
        return int(out.split()[-1])


@dataclass(frozen=True)
class Canaries:
    """Root's files outside every site (see the module docstring). Every canary file holds
    `text`, in which the token appears (in a format the kind under attack parses, so a value it
    shows would be the token)."""

    root: Path
    token: str
    name_token: str  # the name of the file in the canary folder
    text: str

    @classmethod
    def make(cls, parent: Path, text: Callable[[str], str] = lambda token: token + "\n") -> Canaries:
        token = f"fleetdeck-canary-{secrets.token_hex(8)}"
        root = parent / f"canary-{secrets.token_hex(4)}"
        made = cls(root, token, f"canary-name-{secrets.token_hex(6)}", text(token))
        root.mkdir(mode=0o700)
        made.folder.mkdir(mode=0o700)
        for path in (made.file, made.folder / made.name_token):
            path.write_text(made.text)
            path.chmod(0o600)
        return made

    @property
    def file(self) -> Path:
        return self.root / "secret.txt"

    @property
    def folder(self) -> Path:
        return self.root / "folder"

    def missing(self, name: str) -> Path:
        """A name in the canary folder that nothing has: a link to it creates a file there if followed."""
        return self.folder / f"created-through-{name.replace('/', '-')}"

    def decoy(self, names: list[str]) -> None:
        """Files named like the ones a kind reads in a folder, in the canary folder: a kind led
        there by the race reads the token."""
        for name in names:
            path = self.folder / name
            if not path.exists():
                path.write_text(self.text)
                path.chmod(0o600)

    def snapshot(self) -> dict[str, tuple[object, ...]]:
        """Every entry under the canaries' root: type and mode, owner, access and modification
        times (a read updates the access time: relatime does on the first read after a change),
        inode and content digest. Read with O_NOATIME: the snapshot itself changes nothing."""
        found: dict[str, tuple[object, ...]] = {}
        todo = [""]
        while todo:
            rel = todo.pop()
            path = os.path.join(self.root, rel)
            st = os.lstat(path)
            digest = None
            if stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode):
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NOATIME | os.O_NONBLOCK)
                try:
                    if stat.S_ISDIR(st.st_mode):
                        todo += [os.path.join(rel, name) for name in os.listdir(fd)]
                    else:
                        digest = hashlib.sha256(_read_all(fd)).hexdigest()
                finally:
                    os.close(fd)
            found[rel or "."] = (st.st_mode, st.st_uid, st.st_gid, st.st_atime_ns, st.st_mtime_ns, st.st_ino, digest)
        return found

    def inodes(self, snapshot: dict[str, tuple[object, ...]]) -> set[int]:
        return {int(str(entry[5])) for entry in snapshot.values()}

    def found_in(self, text: str) -> bool:
        return self.token in text or self.name_token in text

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def leaks_in_tree(folder: Path, canaries: Canaries, canary_inodes: set[int]) -> list[str]:
    """The entries under `folder` (links not followed) that hold or bear a canary's token; the
    canary inodes themselves (a planted hard link) are not counted."""
    leaks = []
    for parent, dirs, files in os.walk(folder):
        for name in [*dirs, *files]:
            path = Path(parent, name)
            if canaries.found_in(name):
                leaks.append(str(path))
                continue
            try:
                st = path.lstat()
            except FileNotFoundError:
                continue
            if stat.S_ISREG(st.st_mode) and st.st_ino not in canary_inodes:
                with open(path, "rb") as f:  # the test, as root, reading its own site's files
                    if canaries.token.encode() in f.read():
                        leaks.append(str(path))
    return leaks


# --- hangs -------------------------------------------------------------------------------------


def process_tree(roots: list[int]) -> set[int]:
    """The processes `roots` and all their descendants, now."""
    parents: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int(Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    tree = {pid for pid in roots if pid in parents}
    grew = True
    while grew:
        more = {pid for pid, parent in parents.items() if parent in tree and pid not in tree}
        tree |= more
        grew = bool(more)
    return tree


def waiting_on_a_fifo(roots: list[int]) -> list[str]:
    """The tasks (threads included) of the processes under `roots` that wait in the open of a
    FIFO for a partner: ``pid/tid command``."""
    found = []
    for pid in process_tree(roots):
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except FileNotFoundError:
            continue
        for tid in tasks:
            try:
                if Path(f"/proc/{pid}/task/{tid}/wchan").read_text().strip() == FIFO_WAIT:
                    found.append(f"{pid}/{tid} {Path(f'/proc/{pid}/comm').read_text().strip()}")
            except OSError:
                continue
    return found


def release_fifo(path: Path) -> None:
    """Open a FIFO for reading and writing at once (never waits) and close it: whoever waits in
    its open finds a partner and goes on (a reader then reads its end)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENXIO, errno.ELOOP):
            return
        raise
    os.close(fd)


# --- planting ----------------------------------------------------------------------------------


def stash_aside(path: Path, stash: Path) -> Path | None:
    """Move what is at `path` into `stash` (root's, same file system); where it went, or None."""
    if not os.path.lexists(path):
        return None
    kept = stash / secrets.token_hex(6)
    os.rename(path, kept)
    return kept


def remove_entry(path: Path) -> None:
    """Remove whatever is at `path` now (a link or a FIFO itself, a folder with what it holds)."""
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def plant_symlink(user: SiteUser, path: Path, target: Path) -> None:
    os.symlink(target, path)
    user.chown(path)


def plant_hardlink(path: Path, target: Path) -> None:
    """As root: see the module docstring (protected_hardlinks would refuse the site's user)."""
    os.link(target, path)


def plant_fifo(user: SiteUser, path: Path) -> None:
    os.mkfifo(path, 0o644)
    user.chown(path)


def make_parents(user: SiteUser, folder: Path, top: Path) -> None:
    """The folders from `top` (the site's folder) down to `folder`, the site user's."""
    missing = []
    while folder != top and not os.path.lexists(folder):
        missing.append(folder)
        folder = folder.parent
    for made in reversed(missing):
        made.mkdir()
        user.chown(made)


def fifos_under(paths: list[Path]) -> Iterator[Path]:
    for path in paths:
        try:
            if stat.S_ISFIFO(path.lstat().st_mode):
                yield path
        except FileNotFoundError:
            continue
