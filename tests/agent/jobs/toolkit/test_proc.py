"""The toolkit's processes (`agent.jobs.toolkit.proc`): output split into lines at any chunk
boundary, a cancelled capture, a tool run as an account."""

from __future__ import annotations

import os
import pwd
from functools import partial
from pathlib import Path

import pytest
import trio

from agent.jobs.toolkit.output import JobError
from agent.jobs.toolkit.proc import LineSplitter, all_of, capture_command, pid_alive
from tests.helpers import eventually
from tests.helpers.agent_jobs import IS_ROOT, live_members

needs_root = pytest.mark.skipif(not IS_ROOT, reason="creates system users: runs only as root")


def test_line_splitter_handles_chunk_boundaries() -> None:
    data = "one\ntwo é\n\nthree ü and more\nlast".encode()
    for size in (1, 2, 3, 7, len(data)):
        splitter, lines = LineSplitter(), []
        for offset in range(0, len(data), size):
            lines += splitter.feed(data[offset : offset + size])
        lines += splitter.close()
        assert lines == ["one", "two é", "", "three ü and more", "last"], size


@pytest.mark.anyio
async def test_a_cancelled_capture_stops_what_is_left_of_the_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    script = f"(trap '' TERM; exec sleep 300) & echo $! > {pidfile}; sleep 301"
    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(capture_command, ["/bin/sh", "-c", script]))
        await eventually(lambda: pidfile.exists() and pidfile.read_text().strip())
        child = int(pidfile.read_text())
        assert live_members(os.getpgid(child))
        nursery.cancel_scope.cancel()
    await eventually(lambda: not pid_alive(child))  # it ignored TERM: the KILL after the grace period stops it


@needs_root
@pytest.mark.anyio
async def test_a_tool_run_as_an_account_has_that_accounts_groups_not_roots() -> None:
    """Popen's ``user`` alone would keep gid 0 and root's groups: `child_identity` brings the
    account's own (or none, when the caller says so)."""
    account = pwd.getpwnam("nobody")
    own = sorted(os.getgrouplist("nobody", account.pw_gid))
    code, text, _ = await capture_command(["/bin/sh", "-c", "id -u; id -g; id -G"], user="nobody")
    uid, gid, groups = text.splitlines()
    assert code == 0 and (int(uid), int(gid)) == (account.pw_uid, account.pw_gid)
    assert sorted(int(g) for g in groups.split()) == own and 0 not in own
    code, text, _ = await capture_command(["id", "-G"], user=account.pw_uid, extra_groups=[])
    assert text.split() == [str(account.pw_gid)]
    with pytest.raises(JobError, match="no system user"):
        await capture_command(["id"], user="no-such-user-here")


@pytest.mark.anyio
async def test_all_of_runs_its_steps_at_once_and_raises_the_first_failure_once_all_ended() -> None:
    released = trio.Event()
    ended: list[str] = []

    async def waits_for_the_other() -> None:
        await released.wait()  # run one after the other, this would never end
        ended.append("waiter")

    async def releases_and_fails() -> None:
        released.set()
        raise JobError("nginx -t refused the block")

    with trio.fail_after(5), pytest.raises(JobError, match="nginx -t refused"):
        await all_of(waits_for_the_other, releases_and_fails)
    assert ended == ["waiter"]  # the failure did not cut the other step short
