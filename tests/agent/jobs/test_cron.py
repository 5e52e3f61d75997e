"""The cron kinds through the API against the hosting server's real root agent: entries land in
the site user's real crontab, and every run, by hand (``cron.run``) or on schedule, is recorded
where ``cron.history`` finds it.

A scheduled run is the entry's crontab line run the way cron runs it: read back from the user's
crontab, its schedule cut off and ``\\%`` turned back into ``%``, given to ``/bin/sh -c`` as the
site user in the user's home with cron's small environment. (Waiting for the cron daemon's next
minute would make the test slow, and the daemon runs every crontab of the machine.)

Its readers of tool output are tested on recorded output too (tests/data/tool_output/): they
run where the tool is absent, and cover what a live machine rarely shows."""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from agent.jobs.cron import parse_history
from tests.helpers.agent_jobs import (
    IS_ROOT,
    Env,
    linked,
    temporary_domain,
)
from tests.helpers.hosting import Hosting

pytestmark = pytest.mark.skipif(shutil.which("crontab") is None, reason="needs crontab (Debian package cron)")


@pytest.fixture(scope="module")
def site(hosting: Hosting) -> Iterator[str]:
    domain = f"cron{secrets.token_hex(3)}.example.test"
    hosting.run("site.create", domain=domain, profile="static").ok()
    yield domain
    hosting.run("site.delete", domain=domain).ok()  # its crontab and entries go with it


def add(hosting: Hosting, domain: str, command: str, schedule: str = "* * * * *") -> str:
    hosting.run("cron.add", domain=domain, schedule=schedule, command=command).ok()
    entries = hosting.run("cron.list", domain=domain).ok().result["entries"]
    entry_id: str = next(e["id"] for e in entries if e["command"] == command and e["schedule"] == schedule)
    return entry_id


def run_as_cron(domain: str, entry_id: str) -> int:
    """Run the entry's crontab line as cron would (see the module's docstring)."""
    user = pwd.getpwnam(domain.replace(".", "-"))
    crontab = subprocess.run(
        ["crontab", "-u", user.pw_name, "-l"], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    comment = next(i for i, line in enumerate(crontab) if line.startswith(f"# fleetdeck cron {entry_id} "))
    command = crontab[comment + 1].split(" ", 5)[5].replace("\\%", "%")
    env = {"HOME": user.pw_dir, "LOGNAME": user.pw_name, "PATH": "/usr/bin:/bin", "SHELL": "/bin/sh"}
    done = subprocess.run(
        ["/bin/sh", "-c", command],
        cwd=user.pw_dir,
        env=env,
        user=user.pw_uid,
        group=user.pw_gid,
        extra_groups=[],
        capture_output=True,
    )
    return done.returncode


def history(hosting: Hosting, entry_id: str, limit: int = 20) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = hosting.run("cron.history", id=entry_id, limit=limit).ok().result["runs"]
    return runs


def history_file(hosting: Hosting, domain: str, entry_id: str) -> Path:
    return hosting.home / domain.replace(".", "-") / "logs" / f"cron-{entry_id}.history"


def test_manual_and_scheduled_runs_are_in_the_history(hosting: Hosting, site: str) -> None:
    entry = add(hosting, site, "/usr/bin/id -un")
    assert history(hosting, entry) == []

    ran = hosting.run("cron.run", id=entry).ok()
    assert ran.stdout == [site.replace(".", "-")]
    [manual] = history(hosting, entry)
    assert (manual["trigger"], manual["state"], manual["exit_code"]) == ("manual", "ok", 0)
    assert manual["started_at"] <= manual["ended_at"]

    assert run_as_cron(site, entry) == 0
    scheduled, earlier = history(hosting, entry)
    assert (scheduled["trigger"], scheduled["state"], scheduled["exit_code"]) == ("schedule", "ok", 0)
    assert earlier == manual
    assert len(history(hosting, entry, limit=1)) == 1

    recorded = history_file(hosting, site, entry)
    assert recorded.stat().st_uid == pwd.getpwnam(site.replace(".", "-")).pw_uid  # written by the user, not root


def test_a_failing_scheduled_run_is_recorded_with_its_exit_code(hosting: Hosting, site: str) -> None:
    entry = add(hosting, site, "/usr/bin/ls no-such-file-here")
    assert run_as_cron(site, entry) == 2
    [failed] = history(hosting, entry)
    assert (failed["trigger"], failed["state"], failed["exit_code"]) == ("schedule", "failed", 2)
    ran = hosting.run("cron.run", id=entry)
    assert ran.exit_code == 2
    assert [(r["trigger"], r["exit_code"]) for r in history(hosting, entry)] == [("manual", 2), ("schedule", 2)]


def test_a_percent_sign_reaches_the_command_as_written(hosting: Hosting, site: str) -> None:
    entry = add(hosting, site, "/usr/bin/date +%Y")
    assert run_as_cron(site, entry) == 0  # an unescaped % would cut the line: date would get "+" only
    assert history(hosting, entry)[0]["state"] == "ok"
    assert hosting.run("cron.run", id=entry).ok().stdout[0].isdigit()


def test_a_long_history_is_cut_by_the_run_itself(hosting: Hosting, site: str) -> None:
    entry = add(hosting, site, "/usr/bin/true")
    path = history_file(hosting, site, entry)
    user = pwd.getpwnam(site.replace(".", "-"))
    old = "".join(f"start {n} 1700000000\nend {n} 1700000001 0\n" for n in range(100_000, 110_000))
    path.write_text(old)
    shutil.chown(path, user.pw_uid, user.pw_gid)
    assert path.stat().st_size > 256 * 1024
    assert run_as_cron(site, entry) == 0
    lines = path.read_text().splitlines()
    assert len(lines) == 2000 and lines[-1].startswith("end ") and lines[-1].endswith(" 0")
    runs = history(hosting, entry, limit=1000)
    assert len(runs) == 1000 and runs[0]["started_at"] > runs[1]["started_at"]


def test_deleting_an_entry_removes_its_history(hosting: Hosting, site: str) -> None:
    entry = add(hosting, site, "/usr/bin/true", schedule="@daily")
    hosting.run("cron.run", id=entry).ok()
    assert history_file(hosting, site, entry).exists()
    hosting.run("cron.delete", id=entry).ok()
    assert not history_file(hosting, site, entry).exists()
    gone = hosting.run("cron.history", id=entry)
    assert gone.exit_code == 1 and f"no cron entry {entry} on this server" in gone.text


# --- a cron entry's run history --------------------------------------------------------------------


def test_cron_runs_pair_by_key_newest_first() -> None:
    text = "\n".join(
        [
            "end 90 1700000001 0",  # its start was trimmed away
            "start 101 1700000060",
            "start run-ab12 1700000070",
            "end 101 1700000062 0",
            "end run-ab12 1700000075 3",
            "start 102 1700000120",  # never ended, its shell is gone
            "start 103 1700000180",  # still running
            "start 102 1700000240",  # pid 102 again
            "end 102 1700000241 1",
            "garbage",
        ]
    )
    runs = parse_history(text, alive=lambda pid: pid == 103)
    assert [(r["trigger"], r["state"], r["exit_code"], r["duration_s"]) for r in runs] == [
        ("schedule", "failed", 1, 1),
        ("schedule", "running", None, None),
        ("schedule", "interrupted", None, None),
        ("manual", "failed", 3, 5),
        ("schedule", "ok", 0, 2),
    ]
    assert runs[-1]["started_at"] == "2023-11-14T22:14:20Z" and runs[-1]["ended_at"] == "2023-11-14T22:14:22Z"
    assert parse_history("", alive=lambda pid: True) == []


HAS_CRONTAB = shutil.which("crontab") is not None


needs_root = pytest.mark.skipif(not IS_ROOT, reason="creates system users: runs only as root")


def set_crontab(user: str, text: str) -> None:
    subprocess.run(["crontab", "-u", user, "-"], input=text.encode(), check=True)


def crontab_of(user: str) -> str:
    return subprocess.run(["crontab", "-u", user, "-l"], capture_output=True, text=True, check=True).stdout


@needs_root
@pytest.mark.skipif(not HAS_CRONTAB, reason="crontab is not installed (Debian package: cron)")
@pytest.mark.anyio
async def test_cron_add_list_pause_run_with_a_real_crontab(env: Env) -> None:
    domain = temporary_domain("c")
    slug = domain.replace(".", "-")
    env.users.append(slug)
    async with linked(env) as agent:
        (await agent.run("site", "create", domain, "--json")).json()
        await trio.to_thread.run_sync(set_crontab, slug, "# the user's own line\n@reboot /bin/true\n")
        added = (
            await agent.run(
                "cron", "add", domain, "--schedule", "*/5 * * * *", "--command", "/usr/bin/id -un", "--json"
            )
        ).json()
        entry = added["entry"]
        assert (entry["domain"], entry["paused"], added["user"]) == (domain, False, slug)
        other = (
            await agent.run("cron", "add", domain, "--schedule", "@daily", "--command", "/bin/pwd", "--json")
        ).json()

        crontab = await trio.to_thread.run_sync(crontab_of, slug)
        assert "@reboot /bin/true" in crontab  # lines outside the block stay
        assert f"*/5 * * * * cd {env.home / slug} || exit; " in crontab  # the command, between its records:
        assert "; /usr/bin/id -un; r=$?; " in crontab and "history; /bin/pwd; r=$?; " in crontab
        assert f"@daily cd {env.home / slug} || exit; " in crontab

        listed = (await agent.run("cron", "list", "--domain", domain, "--json")).json()["entries"]
        assert [e["id"] for e in listed] == [entry["id"], other["entry"]["id"]]

        ran = await agent.run("cron", "run", entry["id"])
        assert (ran.exit_code, ran.stdout) == (0, [slug])  # as the site user
        ran = await agent.run("cron", "run", other["entry"]["id"])
        assert (ran.exit_code, ran.stdout) == (0, [str(env.home / slug)])  # in the site's folder

        paused = await agent.run("cron", "pause", entry["id"])
        assert paused.exit_code == 0 and "paused" in paused.stdout[0]
        crontab = await trio.to_thread.run_sync(crontab_of, slug)
        assert "/usr/bin/id" not in crontab and "/bin/pwd" in crontab and "@reboot /bin/true" in crontab
        listed = (await agent.run("cron", "list", "--json")).json()["entries"]
        assert [e["paused"] for e in listed] == [True, False]

        bad = await agent.run("cron", "add", domain, "--schedule", "* * * * *", "--command", "/bin/echo a;b", "--json")
        assert bad.exit_code == 2
        missing = await agent.run("cron", "run", "nope")
        assert (missing.exit_code, missing.stderr) == (1, ["no cron entry nope on this server"])

        deleted = (await agent.run("site", "delete", domain, "--json")).json()
        assert deleted["cron_entries_removed"] == 2 and deleted["user_removed"] == slug
        assert (await agent.run("cron", "list", "--json")).json() == {"entries": []}
    assert not await trio.to_thread.run_sync(os.path.exists, f"/var/spool/cron/crontabs/{slug}")
