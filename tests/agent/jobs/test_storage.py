"""``storage.*`` through the API against the real root agent, each checked on the real
machine (the files a cleanup removes, the sizes statvfs gives)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from agent.jobs.storage import parse_findmnt
from tests.helpers.agent_jobs import (
    Env,
    linked,
)
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


# --- storage -------------------------------------------------------------------------------


def test_usage_drills_down_and_largest_finds_the_biggest_files(hosting: Hosting, static_site: tuple[str, Path]) -> None:
    domain, folder = static_site
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
    hosting: Hosting, system_folders: dict[str, Path], static_site: tuple[str, Path]
) -> None:
    domain, folder = static_site
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


@pytest.mark.anyio
async def test_storage_usage(env: Env) -> None:
    (env.home / "a/deep/er").mkdir(parents=True)
    (env.home / "a/deep/er/big.bin").write_bytes(b"x" * 300_000)
    (env.home / "a/small.txt").write_bytes(b"y" * 1000)
    (env.home / "b").mkdir()
    (env.home / "b/mid.bin").write_bytes(b"z" * 50_000)
    (env.home / "b/hard.bin").hardlink_to(env.home / "b/mid.bin")
    os.symlink("/usr", env.home / "b/escape")  # never followed
    async with linked(env) as agent:
        usage = (await agent.run("storage", "usage", "--depth", "2", "--json")).json()
        sub = (await agent.run("storage", "usage", "--path", "a/deep", "--depth", "1", "--json")).json()
    entries = {e["path"]: e for e in usage["entries"]}
    assert [e["path"] for e in usage["entries"]][:2] == ["a", "a/deep"]
    assert entries["a"]["bytes"] >= 301_000 and entries["a"]["files"] == 2
    assert entries["b"]["files"] == 3 and entries["b"]["bytes"] < 60_000 + 3 * 4096  # hard link once, no /usr
    assert entries["b/escape"]["type"] == "symlink"
    sizes = [e["bytes"] for e in usage["entries"]]
    assert sizes == sorted(sizes, reverse=True)
    assert max(e["depth"] for e in usage["entries"]) == 2 and "a/deep/er" not in entries
    assert sub["path"] == "a/deep" and [e["path"] for e in sub["entries"]] == ["a/deep/er"]
