"""``storage.*``, ``logs.*``, ``system.*`` and ``metrics.*`` through the API against the real root
agent, each checked on the real machine (files removed, logs rotated, the time zone changed and
restored...)."""

from __future__ import annotations

import json
import os
import pwd
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.files.entries import rfc3339
from agent.jobs.logs import journal_argv, line_time, matcher
from agent.jobs.storage import parse_findmnt
from contract.job_kinds.logs import LogsJournal
from tests.conftest import AgentProcess, Stack
from tests.helpers import wait_until
from tests.helpers.hosting import Hosting, JobRun

DAY = 86400


def outcome(run: JobRun) -> Any:
    """A change's JSON result: the last line of its stdout."""
    return json.loads(run.ok().stdout[-1])


def aged(path: Path, text: str, days: float) -> Path:
    path.write_text(text)
    when = time.time() - days * DAY
    os.utime(path, (when, when))
    return path


@pytest.fixture(scope="module")
def system_folders(hosting: Hosting) -> dict[str, Path]:
    """The system's log folder and apt cache of the layout, in the session's folders."""
    folder = hosting.folder / "system"
    folders = {"log_dir": folder / "log", "apt_archives": folder / "apt-archives"}
    for made in folders.values():
        (made / "partial").mkdir(parents=True)
    hosting.configure("system", {**hosting.layout.get("system", {}), **{k: str(v) for k, v in folders.items()}})
    return folders


@pytest.fixture
def site(hosting: Hosting) -> Iterator[tuple[str, Path]]:
    domain = f"ops-{uuid.uuid4().hex[:6]}.test"
    hosting.run("site.create", domain=domain, profile="static").ok()
    yield domain, hosting.home / domain.replace(".", "-")
    hosting.run("site.delete", domain=domain).ok()


# --- storage -------------------------------------------------------------------------------


def test_usage_drills_down_and_largest_finds_the_biggest_files(hosting: Hosting, site: tuple[str, Path]) -> None:
    domain, folder = site
    uploads = folder / "public_html/uploads/2026"
    uploads.mkdir(parents=True)
    (uploads / "big.bin").write_bytes(b"x" * 300_000)
    (uploads / "mid.bin").write_bytes(b"x" * 100_000)
    (folder / "public_html/small.txt").write_bytes(b"x" * 10_000)

    usage = hosting.run("storage.usage", domain=domain, path="public_html", depth=2).ok().result
    by_path = {e["path"]: e for e in usage["entries"]}
    assert by_path["public_html/uploads/2026"]["files"] == 2
    assert 400_000 <= by_path["public_html/uploads"]["bytes"] < 400_000 + 3 * 65536  # the files and 2 folders

    largest = hosting.run("storage.largest", domain=domain, limit=2).ok().result
    assert [(f["path"], f["bytes"]) for f in largest["files"]] == [
        ("public_html/uploads/2026/big.bin", 300_000),
        ("public_html/uploads/2026/mid.bin", 100_000),
    ]
    assert largest["scanned"] == 4  # the index and the three files (its logs are not in its folder)


def test_disks_and_inodes_match_statvfs(hosting: Hosting) -> None:
    disks = hosting.run("storage.disks").ok().result["filesystems"]
    root = next(d for d in disks if d["path"] == "/")
    st = os.statvfs("/")
    assert root["total"] == st.f_blocks * st.f_frsize and root["fstype"]
    inodes = hosting.run("storage.inodes").ok().result["filesystems"]
    root = next(d for d in inodes if d["path"] == "/")
    assert root["inodes_total"] == st.f_files and 0 <= root["inodes_used"] <= st.f_files


def test_findmnt_trees_are_flattened() -> None:
    text = '{"filesystems": [{"source": "/dev/sda1", "target": "/", "fstype": "ext4", "children": [{"source": "/dev/sdb", "target": "/srv", "fstype": "xfs"}]}]}'  # noqa: E501
    assert [m["target"] for m in parse_findmnt(text)] == ["/", "/srv"]


def test_cleanup_removes_only_old_rotated_logs_and_the_package_cache(
    hosting: Hosting, system_folders: dict[str, Path], site: tuple[str, Path]
) -> None:
    domain, folder = site
    logs, archives = system_folders["log_dir"], system_folders["apt_archives"]
    site_logs = hosting.site_logs(domain)  # root's folder: the cleanup never goes into the site's own
    (logs / "nginx").mkdir(exist_ok=True)
    doomed = [
        aged(logs / "syslog.1", "a" * 100, 10),
        aged(logs / "nginx/access.log.2.gz", "b" * 200, 10),
        aged(site_logs / "access.log.1", "c" * 300, 10),
    ]
    kept = [
        aged(logs / "syslog", "live", 10),
        aged(logs / "syslog.2.gz", "recent", 1),
        aged(site_logs / "error.log", "live", 10),
        aged(folder / "logs/access.log.1", "the site's own file", 10),
    ]
    package = archives / "tool_1.0_all.deb"
    package.write_bytes(b"d" * 400)

    dry = outcome(hosting.run("storage.cleanup", targets=["logs", "cache"], older_than_days=7, dry_run=True))
    assert sorted(f["path"] for f in dry["targets"]["logs"]["files"]) == sorted(str(p) for p in doomed)
    assert dry["targets"]["cache"]["files"] == [{"path": str(package), "bytes": 400}]
    assert dry["bytes"] == 1000
    assert all(p.exists() for p in [*doomed, package])

    done = outcome(hosting.run("storage.cleanup", targets=["logs", "cache"], older_than_days=7))
    assert done["bytes"] == 1000
    assert not any(p.exists() for p in [*doomed, package])
    assert all(p.exists() for p in kept)

    refused = hosting.run("storage.cleanup", targets=["docker"])
    assert refused.exit_code == 2 and "safe cleanups" in refused.text


# --- logs ----------------------------------------------------------------------------------


def access_line(when: float, request: str) -> str:
    stamp = time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(when))
    return f'127.0.0.1 - - [{stamp}] "{request} HTTP/1.1" 200 5 "-" "curl"'


def test_list_search_and_rotate_a_site_log(
    hosting: Hosting, system_folders: dict[str, Path], site: tuple[str, Path]
) -> None:
    domain, folder = site
    now = time.time()
    lines = [
        access_line(now - 2 * DAY, "POST /login"),
        access_line(now - 60, "GET /"),
        access_line(now - 30, "POST /login"),
        access_line(now - 10, "POST /login?again"),
    ]
    access = hosting.site_logs(domain) / "access.log"  # root's folder, outside the site
    access.write_text("\n".join(lines) + "\n")
    (system_folders["log_dir"] / "kern.log").write_text("boot\n")

    listed = hosting.run("logs.list", domain=domain).ok().result["logs"]
    assert {(e["path"], e["bytes"]) for e in listed} >= {(str(access), access.stat().st_size)}
    assert {e["scope"] for e in listed} == {"site"}
    everything = hosting.run("logs.list").ok().result["logs"]
    assert str(system_folders["log_dir"] / "kern.log") in {e["path"] for e in everything}

    found = hosting.run("logs.search", domain=domain, text="POST /login").ok()
    assert found.stdout == [lines[0], lines[2], lines[3]]
    recent = hosting.run("logs.search", domain=domain, text="POST /login", since="1h").ok()
    assert recent.stdout == [lines[2], lines[3]]
    limited = hosting.run("logs.search", domain=domain, text="POST /login", limit=1).ok()
    assert limited.stdout == [lines[0]] and "stopped at 1" in limited.text

    hosting.run("logs.rotate", domain=domain).ok()
    rotated = access.parent / "access.log.1"
    assert rotated.read_text() == "\n".join(lines) + "\n"
    assert access.read_text() == ""  # copytruncate: nginx keeps its descriptor
    owner = access.parent.stat()  # root's folder, which the site's group may read
    assert (owner.st_uid, owner.st_gid, rotated.stat().st_uid) == (0, pwd.getpwnam(folder.name).pw_gid, 0)


def test_the_journal_needs_systemd(hosting: Hosting) -> None:
    if os.path.isdir("/run/systemd/system"):
        pytest.skip("this machine runs systemd: the refusal cannot be seen")
    run = hosting.run("logs.journal", unit="nginx.service")
    assert run.exit_code == 69 and "no journal on this server" in run.text


def test_journal_argv_and_log_times() -> None:
    args = LogsJournal(unit="nginx.service", lines=50, priority="err", since="2h")
    assert journal_argv("/bin/journalctl", args) == [
        "/bin/journalctl",
        "--no-pager",
        "--output=short-iso",
        "--lines=50",
        "--unit=nginx.service",
        "--priority=err",
        "--since=-2h",
    ]
    assert line_time('1.2.3.4 - - [01/Jan/2026:01:00:00 +0100] "GET / HTTP/1.1"') == 1767225600.0
    assert line_time("no time here") is None
    keep = matcher("boom", 3600, now=1767225600.0 + 60)
    old, new = "[31/Dec/2025:22:00:00 +0000] boom", "[01/Jan/2026:00:00:30 +0000] boom"
    assert [keep(line) for line in (old, "  boom (trace of the old one)", new, "  boom (trace)")] == [
        False,
        False,
        True,
        True,
    ]


# --- system --------------------------------------------------------------------------------


def test_processes_are_listed_busiest_first(hosting: Hosting) -> None:
    by_memory = hosting.run("system.processes", sort="memory", limit=5).ok().result["processes"]
    assert len(by_memory) == 5
    assert [p["rss_bytes"] for p in by_memory] == sorted((p["rss_bytes"] for p in by_memory), reverse=True)
    everything = hosting.run("system.processes", sort="cpu", limit=500).ok().result["processes"]
    mine = [p for p in everything if p["pid"] == os.getpid()]
    program = Path("/proc/self/cmdline").read_bytes().split(b"\0")[0].decode()  # pytest's, or an xdist worker's
    assert mine and mine[0]["command"].split()[0] == program and mine[0]["rss_bytes"] > 0


@pytest.fixture(scope="module")
def etc(hosting: Hosting) -> Path:
    """The files the system settings write, in the session's folder (the zone files are the real ones)."""
    folder = hosting.folder / "etc"
    folder.mkdir()
    files = {
        "timezone_file": folder / "timezone",
        "localtime": folder / "localtime",
        "hostname_file": folder / "hostname",
        "locale_file": folder / "locale",
        "drop_caches": folder / "drop_caches",
    }
    hosting.configure("system", {**hosting.layout.get("system", {}), **{k: str(v) for k, v in files.items()}})
    return folder


@pytest.mark.skipif(os.path.isdir("/run/systemd/system"), reason="under systemd timedatectl sets the zone")
def test_the_timezone_is_set_by_its_files(hosting: Hosting, etc: Path) -> None:
    hosting.run("system.timezone-set", timezone="Europe/Berlin").ok()
    assert os.readlink(etc / "localtime") == "/usr/share/zoneinfo/Europe/Berlin"
    assert (etc / "timezone").read_text() == "Europe/Berlin\n"
    again = hosting.run("system.timezone-set", timezone="Europe/Berlin").ok()
    assert "already Europe/Berlin" in again.text
    assert hosting.post("system.timezone-set", timezone="Mars/Olympus").status_code == 422  # the catalog knows
    assert os.readlink(etc / "localtime") == "/usr/share/zoneinfo/Europe/Berlin"
    hosting.run("system.timezone-set", timezone="Etc/UTC").ok()
    assert os.readlink(etc / "localtime") == "/usr/share/zoneinfo/Etc/UTC"


@pytest.mark.skipif(os.path.isdir("/run/systemd/system"), reason="under systemd hostnamectl sets the name")
def test_the_hostname_is_set_for_real_and_restored(hosting: Hosting, etc: Path) -> None:
    import socket
    import subprocess

    before = socket.gethostname()
    name = f"fd-test-{uuid.uuid4().hex[:6]}"
    try:
        hosting.run("system.hostname-set", hostname=name).ok()
        assert socket.gethostname() == name
        assert (etc / "hostname").read_text() == f"{name}\n"
    finally:
        subprocess.run(["hostname", before], check=True)
    assert socket.gethostname() == before


def test_a_locale_that_is_not_generated_is_refused(hosting: Hosting, etc: Path) -> None:
    run = hosting.run("system.locale-set", locale="tlh_XX.UTF-8")  # no one generates Klingon
    assert run.exit_code == 1 and "not generated" in run.text
    assert not (etc / "locale").exists()


@pytest.mark.skipif(os.path.exists("/usr/bin/chronyc"), reason="chrony is installed")
def test_ntp_sync_names_the_missing_package(hosting: Hosting) -> None:
    if os.path.isdir("/run/systemd/system"):
        pytest.skip("systemd-timesyncd can synchronise the clock here")
    run = hosting.run("system.ntp-sync")
    assert run.exit_code == 69 and "Debian package chrony" in run.text


def test_cache_drop_writes_3_after_sync(hosting: Hosting, etc: Path) -> None:
    dropped = outcome(hosting.run("system.cache-drop"))
    assert (etc / "drop_caches").read_text() == "3\n"
    assert dropped["message"].startswith("dropped the caches") and isinstance(dropped["cached_after_bytes"], int)


def test_a_reboot_needs_the_host_name_typed_again(hosting: Hosting) -> None:
    for confirm in (None, "someone-else"):
        args = {"confirm": confirm} if confirm else {}
        run = hosting.run("system.reboot", **args)
        assert run.exit_code == 2 and "needs --confirm" in run.text


def test_reboot_argv() -> None:
    from agent.jobs.system import reboot_argv

    assert reboot_argv(0, systemd=True) == ["systemctl", "reboot"]
    assert reboot_argv(0, systemd=False) == ["shutdown", "-r", "now"]
    assert reboot_argv(5, systemd=True) == ["shutdown", "-r", "+5"]


# --- metrics -------------------------------------------------------------------------------


def test_each_get_records_a_sample_and_history_reads_them(hosting: Hosting) -> None:
    hosting.run("metrics.get").ok()
    second = hosting.run("metrics.get").ok().result
    assert second["cpu_percent"] is not None and 0 <= second["cpu_percent"] <= 100
    assert second["network"]["rx_bytes"] >= 0
    samples = (hosting.state / "metrics.jsonl").read_text().splitlines()
    assert len(samples) >= 2
    cpu = hosting.run("metrics.history", metric="cpu", period="1h").ok().result
    assert cpu["unit"] == "percent" and len(cpu["points"]) >= 2
    assert all(0 <= p["value"] <= 100 for p in cpu["points"])
    disk = hosting.run("metrics.history", metric="disk", period="1h").ok().result
    assert len(disk["points"]) >= 3 and all(0 < p["value"] < 100 for p in disk["points"])


def test_the_agent_samples_on_its_own_and_history_returns_those_samples(stack: Stack, tmp_path: Path) -> None:
    with stack.http() as http:
        created = http.post("/v1/servers", json={"name": f"sampled-{tmp_path.name[-8:]}", "kind": "full"}).json()
    home, state = tmp_path / "home", tmp_path / "state"
    home.mkdir()
    state.mkdir()
    server_id = created["server"]["id"]
    agent = AgentProcess(stack, server_id, created["agent_token"], home, state, "--metrics-interval", "0.1")
    try:
        samples = state / "metrics.jsonl"
        # no job has asked for the metrics yet: these samples are the sampler's
        wait_until(lambda: samples.exists() and len(samples.read_text().splitlines()) >= 3, timeout=30)
        sampled = [json.loads(line)["at"] for line in samples.read_text().splitlines()]
        server = Hosting(stack, stack.token, server_id, home, state, tmp_path, state / "layout.json", agent)
        history = server.run("metrics.history", metric="memory", period="1h").ok().result
        assert {rfc3339(at) for at in sampled} <= {point["at"] for point in history["points"]}
        assert len(history["points"]) > len(sampled)  # and the sample the history job took itself
        assert all(0 < point["value"] < 100 for point in history["points"])
    finally:
        agent.stop()


def test_alerts_are_stored_evaluated_and_deleted(hosting: Hosting) -> None:
    made = outcome(hosting.run("metrics.alert-set", metric="disk", threshold_percent=1, duration_min=5))
    alert_id = made["alert"]["id"]
    again = outcome(hosting.run("metrics.alert-set", metric="disk", threshold_percent=2, duration_min=5))
    assert again["replaced"] is True and again["alert"]["id"] == alert_id
    quiet = outcome(hosting.run("metrics.alert-set", metric="memory", threshold_percent=100))
    listed = {a["metric"]: a for a in hosting.run("metrics.alert-list").ok().result["alerts"]}
    assert listed["disk"]["firing"] is True and listed["disk"]["value"] > 2  # any disk in use is above 2%
    assert listed["memory"]["firing"] is False
    assert outcome(hosting.run("metrics.alert-delete", id=alert_id))["deleted"]["metric"] == "disk"
    hosting.run("metrics.alert-delete", id=quiet["alert"]["id"]).ok()
    assert hosting.run("metrics.alert-list").ok().result["alerts"] == []
    missing = hosting.run("metrics.alert-delete", id=alert_id)
    assert missing.exit_code == 1 and f"no metric alert {alert_id}" in missing.text


def test_an_alert_fires_only_when_its_whole_window_is_above() -> None:
    from agent.jobs.metrics import evaluate

    rule = {"metric": "memory", "threshold_percent": 80, "duration_min": 5}
    now = 10_000.0
    samples = [{"at": now - 400, "memory": 50.0}, {"at": now - 200, "memory": 90.0}, {"at": now, "memory": 95.0}]
    assert evaluate(rule, samples, now) == {**rule, "value": 95.0, "firing": True}
    samples[1]["memory"] = 70.0
    assert evaluate(rule, samples, now)["firing"] is False


def test_the_swap_file_is_made_turned_on_listed_and_removed(hosting: Hosting, etc: Path) -> None:
    swap, fstab = etc / "swapfile", etc / "fstab"
    fstab.write_text("/dev/vda / ext4 defaults 0 1\n")
    hosting.configure("system", {**hosting.layout["system"], "swap_file": str(swap), "fstab": str(fstab)})
    made = hosting.run("system.swap-set", size_mb=1)
    if made.exit_code != 0 and "swapon" in made.text:
        hosting.run("system.swap-set", size_mb=0).ok()
        pytest.skip(f"this machine cannot turn a swap file on: {made.text}")
    made.ok()
    try:
        assert str(swap) in Path("/proc/swaps").read_text()
        assert swap.stat().st_size == 1024 * 1024 and swap.stat().st_mode & 0o077 == 0
        assert fstab.read_text() == f"/dev/vda / ext4 defaults 0 1\n{swap} none swap sw 0 0\n"
        assert "already 1 MiB" in hosting.run("system.swap-set", size_mb=1).ok().text
    finally:
        hosting.run("system.swap-set", size_mb=0).ok()
    assert str(swap) not in Path("/proc/swaps").read_text()
    assert not swap.exists() and fstab.read_text() == "/dev/vda / ext4 defaults 0 1\n"


def test_swap_parsers() -> None:
    from agent.jobs.system import active_swaps, fstab_with_swap

    proc = "Filename\tType\tSize\tUsed\tPriority\n/swap\\040file file 1024 0 -2\n/dev/vdb partition 9 0 -3\n"
    assert active_swaps(proc) == ["/swap file", "/dev/vdb"]
    assert fstab_with_swap("# c\n\n/swapfile none swap sw 0 0\n", "/swapfile", False) == "# c\n\n"
