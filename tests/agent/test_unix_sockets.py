"""Unix socket paths fit the kernel's 107 bytes whatever the folder they are made in
(`agent.unix_sockets`); the local stack's own are checked end to end in tests/fleetdeck/test_local.py."""

from __future__ import annotations

import os
import pwd
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from agent import unix_sockets
from agent.jobs.toolkit.host import PhpLayout
from agent.jobs.toolkit.output import JobError
from agent.jobs.toolkit.site_web import socket_path
from agent.load_balancers.haproxy import Haproxy
from agent.load_balancers.settings import LbSettings

LONGEST_SLUG = "a" * 63


def _bind(path: str) -> None:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(path)
    os.unlink(path)


def test_a_pool_socket_keeps_the_sites_name_where_it_fits_and_a_digest_where_it_would_not(tmp_path: Path) -> None:
    short = PhpLayout(run_dir=str(tmp_path))
    assert socket_path(short, "shop", "8.2") == str(tmp_path / "fleetdeck-shop.sock")
    folder = tmp_path / ("x" * (75 - len(str(tmp_path))))  # 75 bytes: a digest name fits, no site name of 63
    folder.mkdir()
    named = socket_path(PhpLayout(run_dir=str(folder)), LONGEST_SLUG, "8.2")
    assert named == str(folder / f"fleetdeck-{unix_sockets.digest(LONGEST_SLUG)}.sock")
    with pytest.raises(OSError):  # what PHP-FPM met with the site's own name
        _bind(str(folder / f"fleetdeck-{LONGEST_SLUG}.sock"))
    _bind(named)


def test_a_sockets_folder_too_long_for_any_name_is_refused_saying_why() -> None:
    layout = PhpLayout(run_dir="/" + "f" * 100)
    with pytest.raises(JobError, match=r"too long for a unix socket path \(107 bytes at most\).*php.run_dir"):
        socket_path(layout, "shop", "8.2")


def test_haproxys_sockets_leave_a_long_folder_for_a_short_one_of_its_own(tmp_path: Path) -> None:
    root = tmp_path / ("lb-root-" * 12)
    engine = Haproxy(LbSettings(port_map={80: 8080}), root)
    try:
        assert engine.master_socket.parent == engine.stats_socket.parent == unix_sockets.runtime_dir(engine.root)
        assert all(unix_sockets.fits(path) for path in (engine.master_socket, engine.stats_socket))
        near = Haproxy(LbSettings(port_map={80: 8080}), tmp_path)
        assert near.master_socket == tmp_path / "haproxy" / "master.sock"  # where it fits, in its own folder
        # 100 bytes fit the kernel, not HAProxy (97): a test's state folder under pytest-xdist's was that long
        edge = Haproxy(LbSettings(port_map={80: 8080}), tmp_path / ("e" * (100 - len(str(tmp_path)) - 21)))
        assert len(str(edge.root / "master.sock")) == 100
        assert edge.master_socket.parent == unix_sockets.runtime_dir(edge.root)
    finally:
        for root in (engine.root, tmp_path / ("e" * (100 - len(str(tmp_path)) - 21)) / "haproxy"):
            unix_sockets.remove_runtime_dir(unix_sockets.runtime_dir(root))


def test_a_runtime_folder_is_the_same_for_the_same_owner_and_removed_once_empty(tmp_path: Path) -> None:
    first = unix_sockets.runtime_dir(tmp_path)
    assert unix_sockets.runtime_dir(tmp_path) == first and unix_sockets.fits(first / f"{LONGEST_SLUG}.sock")
    assert unix_sockets.runtime_dir(tmp_path / "other") != first
    (first / "left.sock").touch()
    unix_sockets.remove_runtime_dir(first)
    assert first.is_dir()  # a socket a service left: kept
    (first / "left.sock").unlink()
    unix_sockets.remove_runtime_dir(first)
    unix_sockets.remove_runtime_dir(unix_sockets.runtime_dir(tmp_path / "other"))
    assert not first.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (a folder of another account)")
def test_a_shared_folder_made_by_another_account_or_a_link_is_refused(tmp_path: Path) -> None:
    nobody = pwd.getpwnam("nobody")
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, nobody.pw_uid, nobody.pw_gid)
    link = tmp_path / "link"
    link.symlink_to(tmp_path)
    for folder in (theirs, link):
        with pytest.raises(PermissionError, match="not a folder of this account's own"):
            unix_sockets._check_own_folder(folder)


# A process that makes a runtime folder, leaves a socket in it bound and closed (as a killed
# service does), says where, and lives until it is killed.
OWNER = """
import socket, sys
from pathlib import Path
from agent import unix_sockets
folder = unix_sockets.runtime_dir(Path(sys.argv[1]))
socket.socket(socket.AF_UNIX).bind(str(folder / "pool.sock"))
print(folder, flush=True)
sys.stdin.read()
"""


def test_a_runtime_folder_whose_owner_was_killed_is_swept_and_those_owned_or_answering_stay(tmp_path: Path) -> None:
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(tmp_path / "killed")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert owner.stdout is not None
    killed = Path(owner.stdout.readline().strip())
    ours = unix_sockets.runtime_dir(tmp_path / "ours")  # held by this process
    # no owner holds it, but a service that outlived its owner answers on its socket
    served = unix_sockets.runtime_path(tmp_path / "served")
    served.mkdir()
    listening = socket.socket(socket.AF_UNIX)
    try:
        listening.bind(str(served / "master.sock"))
        listening.listen()
        assert killed in [ours.parent / name for name in os.listdir(ours.parent)]
        assert killed not in unix_sockets.sweep_stale_runtime_dirs()  # its owner lives
        assert (killed / "pool.sock").exists()
        owner.kill()
        owner.wait()
        swept = unix_sockets.sweep_stale_runtime_dirs()
        assert killed in swept and not killed.exists()
        assert ours not in swept and served not in swept and ours.is_dir() and (served / "master.sock").exists()
        assert unix_sockets.runtime_dir(tmp_path / "killed") == killed and killed.is_dir()  # made again on demand
    finally:
        owner.kill()
        listening.close()
        for folder in (served, ours, unix_sockets.runtime_path(tmp_path / "killed")):
            (folder / "master.sock").unlink(missing_ok=True)
            unix_sockets.remove_runtime_dir(folder)
