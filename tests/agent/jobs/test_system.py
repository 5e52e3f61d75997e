"""``system.*`` through the API against the real root agent, each checked on the real
machine (the time zone changed and restored, the host name, the swap file...); a member sees the
secrets in other processes' command lines masked, an owner sees them.

Its readers of tool output are tested on recorded output too (tests/data/tool_output/): they
run where the tool is absent, and cover what a live machine rarely shows."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent.jobs.system import cpu_model, os_release
from tests.conftest import Stack
from tests.helpers import wait_until
from tests.helpers.hosting import Hosting
from tests.helpers.recorded_systemd import RECORDED


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


# --- system --------------------------------------------------------------------------------


def test_processes_are_listed_busiest_first(hosting: Hosting) -> None:
    by_memory = hosting.run("system.processes", sort="memory", limit=5).ok().result["processes"]
    assert len(by_memory) == 5
    assert [p["rss_bytes"] for p in by_memory] == sorted((p["rss_bytes"] for p in by_memory), reverse=True)
    everything = hosting.run("system.processes", sort="cpu", limit=500).ok().result["processes"]
    mine = [p for p in everything if p["pid"] == os.getpid()]
    program = Path("/proc/self/cmdline").read_bytes().split(b"\0")[0].decode()  # pytest's, or an xdist worker's
    assert mine and mine[0]["command"].split()[0] == program and mine[0]["rss_bytes"] > 0


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
    dropped = json.loads(hosting.run("system.cache-drop").ok().stdout[-1])
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


@pytest.fixture
def process_with_secrets() -> Iterator[tuple[subprocess.Popen[bytes], list[str]]]:
    """A process that calls itself mysql (its argv[0]), with secrets in its arguments."""
    found = [secrets.token_hex(8) for _ in range(4)]
    argv = [
        "mysql",
        "-c",
        "import time; time.sleep(600)",
        f"-p{found[0]}",
        f"--password={found[1]}",
        "--api-token",
        found[2],
        f"https://bob:{found[3]}@db.example.com/shop",
    ]
    process = subprocess.Popen(argv, executable=sys.executable)
    yield process, found
    process.kill()
    process.wait()


def _finished_job(http: httpx.Client, server_id: str) -> dict[str, Any]:
    created = http.post(f"/v1/servers/{server_id}/jobs", json={"kind": "system.processes", "args": {"limit": 500}})
    assert created.status_code == 201, created.text
    job: dict[str, Any] = {}

    def finished() -> bool:
        job.update(http.get(f"/v1/jobs/{created.json()['id']}").json())
        return job["status"] not in ("queued", "running")

    wait_until(finished, timeout=60)
    assert job["status"] == "succeeded", job
    return job


def _seen(http: httpx.Client, job_id: str, pid: int) -> tuple[str, str]:
    """The process's command line in the job's result, and the job's whole output stream."""
    result = http.get(f"/v1/jobs/{job_id}").json()["result"]
    [command] = [p["command"] for p in result["processes"] if p["pid"] == pid]
    return command, http.get(f"/v1/jobs/{job_id}/stream").text


def test_a_member_sees_secrets_in_command_lines_masked_and_an_owner_sees_them(
    stack: Stack, process_with_secrets: tuple[subprocess.Popen[bytes], list[str]]
) -> None:
    process, found = process_with_secrets
    email = f"member-{uuid.uuid4().hex[:6]}@demo.test"
    stack.admin("create-user", email, "--org", "demo", "--role", "member", "--password", "pw-member-1")
    with stack.http() as owner, stack.http(stack.login(email, "pw-member-1")) as member:
        for job in (_finished_job(owner, stack.server_id), _finished_job(member, stack.server_id)):
            command, stream = _seen(member, job["id"], process.pid)
            assert command == (
                "mysql -c import time; time.sleep(600) -p*** --password=*** --api-token *** "
                "https://bob:***@db.example.com/shop"
            )
            assert not any(secret in stream for secret in found) and "--password=***" in stream
            command, stream = _seen(owner, job["id"], process.pid)
            assert all(secret in command for secret in found) and all(secret in stream for secret in found)


def test_os_release_unquotes_and_skips_comments_and_blank_lines(tmp_path: Path) -> None:
    fields = os_release(str(RECORDED / "os_release.txt"))
    assert fields == {
        "PRETTY_NAME": "Debian GNU/Linux 12 (bookworm)",
        "NAME": "Debian GNU/Linux",
        "VERSION_ID": "12",
        "ID": "debian",
        "HOME_URL": "https://www.debian.org/",
    }
    assert os_release(str(tmp_path / "absent")) == {}


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("proc_cpuinfo_x86.txt", "Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz"),
        ("proc_cpuinfo_arm.txt", "Raspberry Pi 4 Model B Rev 1.1"),
    ],
)
def test_cpu_model(name: str, model: str) -> None:
    assert cpu_model(str(RECORDED / name)) == model
