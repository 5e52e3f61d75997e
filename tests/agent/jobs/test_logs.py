"""``logs.*`` through the API against the real root agent: a site's logs listed, searched
and rotated for real; the journal's argv and times."""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.jobs.logs import journal_argv, line_time, matcher
from contract.job_kinds.logs import LogsJournal
from tests.conftest import ROOT
from tests.helpers.agent_jobs import (
    Env,
    write_log,
)
from tests.helpers.hosting import Hosting

DAY = 86400


# --- logs ----------------------------------------------------------------------------------


def access_line(when: float, request: str) -> str:
    stamp = time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(when))
    return f'127.0.0.1 - - [{stamp}] "{request} HTTP/1.1" 200 5 "-" "curl"'


def test_list_search_and_rotate_a_site_log(
    hosting: Hosting, system_folders: dict[str, Path], static_site: tuple[str, Path]
) -> None:
    domain, folder = static_site
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


def run_cli(*args: str, env: Env | None = None) -> subprocess.CompletedProcess[str]:
    options = ["--home", str(env.home), "--state-dir", str(env.state), "--host-layout", str(env.layout)] if env else []
    environ = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "fleetdeck", "agent", "run", *options, *args]
    return subprocess.run(command, capture_output=True, text=True, env=environ, timeout=60, check=False)


def test_logs_tail_of_a_million_lines_counts_right(env: Env) -> None:
    folder = env.add_site("big.example.com")
    count = 1_000_000
    write_log(env.site_logs(folder) / "access.log", count + 500)
    done = run_cli("logs", "tail", "big.example.com", "--log", "access", "--lines", str(count), env=env)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split("\n")
    assert lines[-1] == "" and len(lines) - 1 == count
    assert (lines[0], lines[-2]) == ("line 501", f"line {count + 500}")
    # Fewer lines than asked, and a last line without newline.
    (env.site_logs(folder) / "error.log").write_bytes(b"a\nb\nc")
    done = run_cli("logs", "tail", "big.example.com", "--log", "error", "--lines", "2", env=env)
    assert (done.returncode, done.stdout) == (0, "b\nc\n")
    done = run_cli("logs", "tail", "big.example.com", "--log", "error", "--lines", "10", env=env)
    assert done.stdout == "a\nb\nc\n"
