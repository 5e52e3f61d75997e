"""``updates.*`` through the API against the real agent and this machine's real apt: the machine's
own packages are not upgraded (installs are simulated, or name a package that is already the
newest); one package of the tests' own is, from a repository on disk, and is purged after; a held
package is released again; the unattended-upgrades switches are written to a folder of the
test's own, then read back by ``apt-config`` itself.

Its readers of tool output are tested on recorded output too (tests/data/tool_output/): they
run where the tool is absent, and cover what a live machine rarely shows."""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.jobs.updates import history_files, parse_history, parse_upgradable, read_history
from tests.helpers.hosting import Hosting
from tests.helpers.recorded_systemd import RECORDED

pytestmark = pytest.mark.skipif(shutil.which("apt-get") is None, reason="needs apt (Debian)")
# Installed on every test machine (scripts/test or the base image); one that is already the newest is applied for real.
CANDIDATES = ("bind9", "nginx", "supervisor", "fail2ban", "sudo", "git", "make", "less", "unzip", "jq", "zip")


def apt(*args: str) -> str:
    done = subprocess.run(["apt-get" if args[0] == "-s" else args[0], *args[1:]], capture_output=True, text=True)
    return done.stdout


def installed_version(package: str) -> str:
    done = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True)
    return done.stdout


def upgradable() -> set[str]:
    return {line.split("/")[0] for line in apt("apt", "list", "--upgradable").splitlines() if "/" in line}


def installed(package: str) -> bool:
    done = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True)
    return done.stdout.endswith(" installed")


@pytest.fixture
def system_files(hosting: Hosting, tmp_path: Path) -> Iterator[Path]:
    """The system section of the layout pointed at a folder of the test's (apt's history log and
    its configuration folder), merged with what other tests set there, and put back after."""
    folder = tmp_path / "apt"
    folder.mkdir()
    (folder / "apt.conf.d").mkdir()
    if os.path.exists("/etc/apt/apt.conf.d/50unattended-upgrades"):
        shutil.copy("/etc/apt/apt.conf.d/50unattended-upgrades", folder / "apt.conf.d")
    shutil.copy(RECORDED / "apt_history.log", folder / "history.log")
    with gzip.open(folder / "history.log.1.gz", "wt") as f:
        f.write((RECORDED / "apt_history_rotated.log").read_text())
    before = hosting.layout.get("system")
    layout = {"apt_history": str(folder / "history.log"), "apt_conf_dir": str(folder / "apt.conf.d")}
    hosting.configure("system", {**(before or {}), **layout})
    yield folder
    current = {k: v for k, v in hosting.layout.get("system", {}).items() if k not in layout}
    hosting.configure("system", {**current, **{k: v for k, v in (before or {}).items() if k in layout}})


def effective_apt_config(conf_dir: Path) -> str:
    """What apt itself reads from `conf_dir` (`APT_CONFIG` names a file that points apt there)."""
    top = conf_dir.parent / "apt.conf"
    top.write_text(f'Dir::Etc::Parts "{conf_dir}";\n')
    env = {**os.environ, "APT_CONFIG": str(top)}
    return subprocess.run(["apt-config", "dump"], capture_output=True, text=True, env=env, check=True).stdout


def test_list_and_status_read_apt(hosting: Hosting) -> None:
    listed = hosting.run("updates.list").ok().result
    assert {u["name"] for u in listed["updates"]} == upgradable()
    status = hosting.run("updates.status").ok().result
    assert status["pending"] == listed["count"]
    assert status["security_pending"] == listed["security_count"]
    assert status["reboot_required"] == os.path.exists("/run/reboot-required")
    assert status["unattended_upgrades_installed"] == (shutil.which("unattended-upgrade") is not None)


def test_apply_simulated_changes_nothing(hosting: Hosting) -> None:
    pending = sorted(upgradable() & set(CANDIDATES))
    if not pending:
        pytest.skip("no pending update among the candidates to simulate")
    before = installed_version(pending[0])
    run = hosting.run("updates.apply", packages=[pending[0]], simulate=True).ok()
    assert any(line.startswith(f"Inst {pending[0]} ") for line in run.stdout), run.text
    assert "simulated: nothing was installed" in run.stdout
    assert installed_version(pending[0]) == before


def test_apply_of_a_package_already_newest_runs_apt_for_real(hosting: Hosting) -> None:
    pending = upgradable()
    newest = [p for p in CANDIDATES if p not in pending and installed(p)]
    if not newest:
        pytest.skip("every candidate package has a pending update")
    run = hosting.run("updates.apply", packages=[newest[0]]).ok()
    assert f"{newest[0]} is already the newest version" in run.text
    if os.path.exists("/run/reboot-required"):
        assert run.stdout[-1].startswith("a reboot is needed")
    else:
        assert run.stdout[-1] == "no reboot needed"


def test_security_installs_the_security_subset(hosting: Hosting) -> None:
    security = {u["name"] for u in hosting.run("updates.list").ok().result["updates"] if u["security"]}
    run = hosting.run("updates.security", simulate=True).ok()
    if not security:
        assert "no security updates pending" in run.text
        return
    assert run.stdout[0].startswith(f"{len(security)} security updates: ")
    simulated = {line.split()[1] for line in run.stdout if line.startswith("Inst ")}
    assert security <= simulated
    assert not upgradable() ^ {u["name"] for u in hosting.run("updates.list").ok().result["updates"]}


def test_hold_and_unhold_a_real_package(hosting: Hosting) -> None:
    package = next(p for p in CANDIDATES if installed(p))
    was_held = package in apt("apt-mark", "showhold").split()
    try:
        run = hosting.run("updates.hold", package=package).ok()
        assert package in run.text
        assert package in apt("apt-mark", "showhold").split()
        assert package in hosting.run("updates.status").ok().result["held"]
        hosting.run("updates.hold", package=package).ok()  # again: apt-mark says so and it is fine
        hosting.run("updates.unhold", package=package).ok()
        assert package not in apt("apt-mark", "showhold").split()
    finally:
        subprocess.run(["apt-mark", "hold" if was_held else "unhold", package], capture_output=True, check=True)
    unknown = hosting.run("updates.hold", package="no-such-package-fleetdeck")
    assert unknown.exit_code == 1


def test_history_reads_the_log_and_its_rotated_copies(hosting: Hosting, system_files: Path) -> None:
    entries = hosting.run("updates.history", limit=10).ok().result["entries"]
    assert [e["start"] for e in entries] == [
        "2026-05-09T07:40:11",
        "2025-06-24T14:42:05",
        "2025-06-24T14:36:25",
        "2024-12-01T09:00:00",
    ]
    assert entries[0]["error"] == "Sub-process /usr/bin/dpkg returned an error code (1)"
    assert hosting.run("updates.history", limit=1).ok().result["count"] == 1


def test_history_of_this_machine(hosting: Hosting) -> None:
    path = "/var/log/apt/history.log"
    if not os.path.exists(path) or hosting.layout.get("system", {}).get("apt_history", path) != path:
        pytest.skip("no apt history on this machine, or the layout points elsewhere")
    newest = hosting.run("updates.history", limit=1).ok().result["entries"]
    with open(path) as f:
        starts = [line.split(": ", 1)[1].split() for line in f if line.startswith("Start-Date: ")]
    if starts:
        assert newest[0]["start"] == "T".join(starts[-1])


def test_auto_set_writes_what_apt_reads(hosting: Hosting, system_files: Path) -> None:
    conf_dir = system_files / "apt.conf.d"
    hosting.run("updates.auto-set", mode="security").ok()
    seen = effective_apt_config(conf_dir)
    assert 'APT::Periodic::Unattended-Upgrade "1";' in seen
    patterns = [line for line in seen.splitlines() if line.startswith("Unattended-Upgrade::Origins-Pattern:: ")]
    assert patterns and all("security" in p.lower() for p in patterns), patterns
    assert hosting.run("updates.status").ok().result["auto"] == "security"

    hosting.run("updates.auto-set", mode="all").ok()
    assert 'codename=${distro_codename}-updates"' in effective_apt_config(conf_dir)
    assert hosting.run("updates.status").ok().result["auto"] == "all"

    hosting.run("updates.auto-set", mode="off").ok()
    assert 'APT::Periodic::Unattended-Upgrade "0";' in effective_apt_config(conf_dir)
    again = hosting.run("updates.auto-set", mode="off").ok()
    assert "off already" in again.text
    assert not [p for p in conf_dir.iterdir() if p.name.endswith(".candidate")]


def test_subscriptions_have_no_handler_on_debian(hosting: Hosting) -> None:
    run = hosting.run("updates.unsubscribe", vendor="ubuntu-pro")
    assert run.exit_code == 127


# --- parsers -------------------------------------------------------------------------------


def test_history_entries_are_parsed() -> None:
    entries = parse_history((RECORDED / "apt_history.log").read_text())
    assert [e["command"] for e in entries] == [
        "apt-get -qqy upgrade",
        "apt-get install -qqy gcc python3-pip",
        "apt-get purge -y exim4-base",
    ]
    upgrade: dict[str, Any] = entries[0]
    assert upgrade["packages"]["upgrade"][0] == {
        "name": "libsystemd0",
        "arch": "amd64",
        "version": "252.38-1~deb12u1",
        "from_version": "252.36-1~deb12u1",
    }
    install = entries[1]
    assert install["requested_by"] == "admin (1000)"
    assert install["packages"]["install"][1] == {
        "name": "cpp",
        "arch": "amd64",
        "version": "4:12.2.0-3",
        "automatic": True,
    }
    assert install["count"] == 3
    assert sorted(entries[2]["packages"]) == ["purge", "remove"]
    assert (entries[2]["start"], entries[2]["end"]) == ("2026-05-09T07:40:11", "2026-05-09T07:40:13")


def test_history_files_are_read_newest_first(tmp_path: Path) -> None:
    log = tmp_path / "history.log"
    shutil.copy(RECORDED / "apt_history.log", log)
    for number in (1, 2, 10):
        with gzip.open(f"{log}.{number}.gz", "wt") as f:
            f.write((RECORDED / "apt_history_rotated.log").read_text().replace("2024-12-01", f"2024-11-{number:02d}"))
    (tmp_path / "history.log.old").write_text("not a rotated copy")
    assert [Path(p).name for p in history_files(str(log))] == [
        "history.log",
        "history.log.1.gz",
        "history.log.2.gz",
        "history.log.10.gz",
    ]
    assert [e["start"][:10] for e in read_history(str(log), 5)] == [
        "2026-05-09",
        "2025-06-24",
        "2025-06-24",
        "2024-11-01",
        "2024-11-02",
    ]
    assert read_history(str(tmp_path / "none.log"), 5) == []


PROBE = "fleetdeck-upgrade-probe"


def build_probe(folder: Path, version: str) -> Path:
    """A tiny package of the tests' own, at `version`: it installs one file saying its version."""
    root = folder / f"{PROBE}-{version}"
    share = root / "usr" / "share" / PROBE
    share.mkdir(parents=True)
    (share / "version").write_text(f"{version}\n")
    (root / "DEBIAN").mkdir()
    (root / "DEBIAN" / "control").write_text(
        f"Package: {PROBE}\nVersion: {version}\nArchitecture: all\n"
        "Maintainer: fleetdeck tests <tests@fleetdeck.invalid>\nSection: misc\nPriority: optional\n"
        "Description: a package the fleetdeck tests upgrade\n"
    )
    deb = folder / f"{PROBE}_{version}_all.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(root), str(deb)], check=True, capture_output=True)
    return deb


def flat_repository(folder: Path, debs: list[Path]) -> None:
    """`folder` as a flat apt repository of `debs` (its Packages index, as dpkg-scanpackages writes it)."""
    stanzas = []
    for deb in debs:
        shutil.copy(deb, folder / deb.name)
        control = subprocess.run(["dpkg-deb", "--field", str(deb)], check=True, capture_output=True, text=True).stdout
        digest = hashlib.sha256(deb.read_bytes()).hexdigest()
        stanzas.append(f"{control.rstrip()}\nFilename: ./{deb.name}\nSize: {deb.stat().st_size}\nSHA256: {digest}\n")
    (folder / "Packages").write_text("\n".join(stanzas))


@pytest.fixture
def probe_upgrade(tmp_path: Path) -> Iterator[None]:
    """Version 1.0 of the probe installed, 2.0 in a repository on disk that apt knows of (only its
    list fetched, the machine's others left as they are); all of it gone afterwards."""
    # apt reads a file: repository as its own unprivileged user: pytest's folders are root's alone.
    repo = Path(tempfile.mkdtemp(prefix=f"{PROBE}-"))
    repo.chmod(0o755)
    flat_repository(repo, [build_probe(tmp_path, "2.0")])
    source = Path(f"/etc/apt/sources.list.d/{PROBE}.list")
    source.write_text(f"deb [trusted=yes] file:{repo} ./\n")
    only_ours = [
        "-o",
        f"Dir::Etc::sourcelist={source}",
        "-o",
        "Dir::Etc::sourceparts=-",
        "-o",
        "APT::Get::List-Cleanup=0",
    ]
    lists_before = set(Path("/var/lib/apt/lists").iterdir())
    try:
        for argv in (["dpkg", "-i", str(build_probe(tmp_path, "1.0"))], ["apt-get", "update", "-qq", *only_ours]):
            done = subprocess.run(argv, capture_output=True, text=True)
            assert done.returncode == 0, f"{argv[0]} exited with {done.returncode}: {done.stdout}{done.stderr}"
        yield
    finally:
        subprocess.run(["dpkg", "--purge", PROBE], capture_output=True)
        source.unlink(missing_ok=True)
        for made in set(Path("/var/lib/apt/lists").iterdir()) - lists_before:
            made.unlink()
        shutil.rmtree(repo)


def test_apply_upgrades_a_package_for_real(hosting: Hosting, probe_upgrade: None) -> None:
    listed = hosting.run("updates.list").ok().result
    assert PROBE in {u["name"] for u in listed["updates"]}
    run = hosting.run("updates.apply", packages=[PROBE]).ok()
    assert any(f"Unpacking {PROBE} (2.0) over (1.0)" in line for line in run.stdout), run.text
    assert installed_version(PROBE) == "2.0"
    assert Path(f"/usr/share/{PROBE}/version").read_text() == "2.0\n"
    assert PROBE not in {u["name"] for u in hosting.run("updates.list").ok().result["updates"]}


def recorded(name: str) -> str:
    return (RECORDED / name).read_text()


# --- apt list --upgradable ---------------------------------------------------------------------


def test_upgradable_packages_skip_the_warning_listing_and_notices() -> None:
    updates = parse_upgradable(recorded("apt_list_upgradable.txt"))
    assert [u["name"] for u in updates] == [
        "appstream",
        "apt-transport-https",
        "ca-certificates",
        "libssl3",
        "firmware-misc-nonfree",
    ]
    assert updates[0] == {
        "name": "appstream",
        "version": "0.16.1-2+b1",
        "current_version": "0.16.1-2",
        "arch": "amd64",
        "suites": ["oldstable"],
        "security": False,
    }
    libssl = updates[3]
    assert libssl["suites"] == ["bookworm-updates", "bookworm-security"] and libssl["security"]
    assert libssl["version"] == "3.0.19-1~deb12u1" and libssl["current_version"] == "3.0.17-1~deb12u2"
    assert [u["name"] for u in updates if u["security"]] == ["apt-transport-https", "ca-certificates", "libssl3"]
    assert updates[-1]["current_version"] is None  # a line without "[upgradable from: ...]"


@pytest.mark.parametrize("text", ["", "Listing... Done\n", "\n\n", "garbage without a slash\n"])
def test_no_upgradable_packages(text: str) -> None:
    assert parse_upgradable(text) == []


def test_recorded_empty_listing() -> None:
    assert parse_upgradable(recorded("apt_list_upgradable_none.txt")) == []
