"""The job machinery end to end: the job manager (`agent.jobs.manager`) over a real link,
its journal and buffers, cancels, the control plane's runner storing and replaying a real agent's
runs, and read jobs of several domains printing valid JSON; the handlers on a temporary home
(`tests.helpers.agent_jobs`). Needs, on Debian: ``openssl``, ``apt``, ``util-linux``."""

from __future__ import annotations

import json
import pwd
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import trio

from agent import __version__
from agent.jobs.manager import BLOCK, RUN_LINES, Job, JobManager
from agent.jobs.toolkit.base import JobContext, Kind
from agent.jobs.toolkit.output import Output
from agent.sites import SiteRegistry
from api_client import SSEParser
from contract.job_kinds import JobKind, argtypes
from contract.job_kinds.base import Args
from contract.link import protocol
from control_plane.hub import AgentCallError
from control_plane.jobs import store
from control_plane.jobs.runner import JobRunner
from control_plane.masking import Masker
from control_plane.storage import Database
from control_plane.storage.schema import orgs, servers
from tests.helpers import eventually
from tests.helpers.agent_jobs import (
    IS_ROOT,
    SERVER_ID,
    Env,
    assert_complete,
    linked,
    live_members,
    write_log,
)

NOBODY = pwd.getpwnam("nobody") if IS_ROOT else None
needs_root = pytest.mark.skipif(not IS_ROOT, reason="creates system users: runs only as root")


def expand_runs(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for run in runs:
        assert set(run) == {"seq", "stream", "at", "texts"} and 0 < len(run["texts"]) <= RUN_LINES
    return [
        {"seq": run["seq"] + i, "stream": run["stream"], "text": text, "at": run["at"]}
        for run in runs
        for i, text in enumerate(run["texts"])
    ]


def make_certificates(ssl_dir: Path, key: Path) -> bool:
    """A self-signed certificate and a junk .pem in `ssl_dir`; whether openssl made the first."""
    ssl_dir.mkdir()
    (ssl_dir / "junk.pem").write_text("not a certificate\n")
    if shutil.which("openssl") is None:
        return False
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "30",
            "-subj",
            "/CN=cert.example.com",
            "-addext",
            "subjectAltName=DNS:cert.example.com,DNS:www.cert.example.com",
            "-keyout",
            str(key),
            "-out",
            str(ssl_dir / "cert.pem"),
        ],
        capture_output=True,
        check=True,
    )
    return True


# --- the control plane's runner over a real link ---------------------------------------------

SECRET = 'hunter2+Pa/ss=w"rd'


class EchoSecretArgs(Args):
    blocks: argtypes.Int = 40
    password: argtypes.Secret


async def _echo_secret(args: EchoSecretArgs, ctx: JobContext, out: Output) -> int:
    """A handler that leaks its secret in every form, between many clean lines and runs."""
    secret = ctx.secrets["password"]
    for block in range(args.blocks):
        out.lines("stdout", [f"clean {block}-{i}" for i in range(997)])
        out.lines("stderr", [f"auth {secret} at {block}", f"url https://ci:{quote(secret, safe='')}@r.example.com/"])
        out.stdout(json.dumps({"password": secret}))
        await out.drain()
    return 3


# A kind the catalog does not have (its domain is no catalog domain): a handler for this test only.
ECHO_SECRET = Kind(
    JobKind(
        kind="echo.secret",
        domain="echo",
        action="secret",
        summary="test only",
        args=EchoSecretArgs,
        read=False,
        group="infra",
        min_plan="free",
        secret_fields=("password",),
        flags=frozenset({"--blocks"}),
    ),
    _echo_secret,
)


def _files_bytes(folder: Path, pattern: str) -> bytes:
    return b"".join(path.read_bytes() for path in folder.glob(pattern))


async def _sse(runner: JobRunner, org_id: str, job_id: str, after: int = 0) -> tuple[bytes, list[Any]]:
    body = b"".join([chunk async for chunk in runner.events(org_id, job_id, after)])
    return body, SSEParser().feed(body)


# --- cancelling a job ------------------------------------------------------------------------

# A parent that TERM stops and a child that ignores TERM: only KILL stops the child, after the
# parent is gone. Each says where it is, so the test cancels once both run.
STUBBORN_SCRIPT = """#!/bin/sh
(trap '' TERM; echo "child ignores TERM"; exec sleep 300) &
echo "parent $$ started"
sleep 301
"""


# --- the manager ---------------------------------------------------------------------------


@pytest.mark.anyio
async def test_200k_lines_arrive_complete_and_in_order(env: Env) -> None:
    count = 200_000
    folder = env.add_site("logs.example.com")
    write_log(env.site_logs(folder) / "access.log", count)
    async with linked(env) as agent:
        outcome = await agent.run("logs", "tail", "logs.example.com", "--log", "access", "--lines", str(count))
    assert outcome.exit_code == 0
    assert_complete(outcome.items, count)
    assert outcome.stdout == [f"line {i}" for i in range(1, count + 1)]
    first = outcome.items[0]
    assert set(first) == {"seq", "stream", "text", "at"} and first["at"].endswith("Z")


@needs_root
@pytest.mark.anyio
async def test_subprocess_output_streams_exact(env: Env) -> None:
    count = 200_000
    folder = env.add_site("seq.example.com", owner=NOBODY)
    env.add_cron_entry("seq", "seq.example.com", f"/usr/bin/seq 1 {count}")
    # Partial lines, bad UTF-8 and a last line without its newline.
    (folder / "odd.bin").write_bytes(b"h\xc3\xa9llo\n\xff\xfe bad\n\nlast without newline")
    env.add_cron_entry("odd", "seq.example.com", "/bin/cat odd.bin")
    async with linked(env) as agent:
        outcome = await agent.run("cron", "run", "seq")
        odd = await agent.run("cron", "run", "odd")
    assert outcome.exit_code == 0, outcome.stderr
    assert_complete(outcome.items, count)
    assert outcome.stdout == [str(i) for i in range(1, count + 1)]
    assert odd.exit_code == 0 and odd.stdout == ["héllo", "\ufffd\ufffd bad", "", "last without newline"]


@pytest.mark.anyio
async def test_attach_after_a_dropped_stream_resumes_without_loss_or_repeat(env: Env) -> None:
    count = 300_000
    folder = env.add_site("logs.example.com")
    write_log(env.site_logs(folder) / "error.log", count)
    argv = ["logs", "tail", "logs.example.com", "--log", "error", "--lines", str(count)]
    async with linked(env) as agent:
        # A small window: the reader falls behind, then leaves mid-way; the job goes on.
        first = await agent.run(*argv, job_id="job-drop", window=64 * 1024, stop_after=20_000)
        assert first.exit_code is None and len(first.items) >= 20_000
        assert_complete(first.items, len(first.items))
        after = first.items[-1]["seq"]
        rest = await agent.stream("job.attach", {"job_id": "job-drop", "after": after})
        assert rest.exit_code == 0
        assert_complete(rest.items, count - after, first=after + 1)
        assert [i["text"] for i in first.items + rest.items] == [f"line {i}" for i in range(1, count + 1)]
        # job.run of a job id the agent has attaches from the start: the job does not run twice.
        again = await agent.run(*argv, job_id="job-drop")
        assert again.exit_code == 0
        assert_complete(again.items, count)
        assert len(agent.jobs._jobs) == 1


def test_runs_carry_exactly_the_lines_of_per_line_items(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter(range(10**6))
    monkeypatch.setattr("agent.jobs.manager.now_at", lambda: f"2026-11-22T10:00:00.{next(clock) // 3:03d}Z")
    job = Job("runs", "x.y", [], max_lines=3 * BLOCK)
    writes = [("stdout", 1), ("stdout", 2), ("stderr", 1), ("stdout", BLOCK + 5), ("stderr", 3000), ("stdout", 7)]
    for round_ in range(4):  # past max_lines: the oldest blocks go, mid-run
        for stream, n in writes:
            job.append(stream, [f"{round_}-{stream}-{i}" for i in range(n)])
    assert job.first_seq > 1
    runs = job.runs_after(0, 10**6)
    assert runs[0]["seq"] == job.first_seq and len(runs) < job.last_seq - job.first_seq
    assert expand_runs(runs) == job.lines_after(0, 10**6)
    for pos in (0, job.first_seq, job.first_seq + BLOCK - 1, job.last_seq - 4000, job.last_seq - 1, job.last_seq):
        for limit in (1, 5, 1000, BLOCK + 1, 8192):
            assert expand_runs(job.runs_after(pos, limit)) == job.lines_after(pos, limit), (pos, limit)


def test_the_journal_of_a_job_is_bounded_in_bytes_and_forgets_what_is_acknowledged() -> None:
    job = Job("bounded", "x.y", [], max_bytes=3 * BLOCK * 10)  # three blocks of 9-character lines
    for i in range(10 * BLOCK):
        job.append("stdout", [f"{i:09d}"[-9:]])
    assert job.bytes <= 3 * BLOCK * 10 and job.first_seq == 7 * BLOCK + 1  # whole blocks went
    assert job.lines_after(0, 1)[0] == {**job.lines_after(0, 1)[0], "seq": job.first_seq}
    job.acknowledge(9 * BLOCK + 5)  # stored by the control plane: it need not be held
    assert job.first_seq == 9 * BLOCK + 6 and job.bytes == BLOCK * 10
    assert [line["seq"] for line in job.lines_after(0, 10)][:1] == [9 * BLOCK + 6]
    job.acknowledge(job.last_seq + 100)
    assert job.lines_after(0, 10) == [] and job.first_seq == job.last_seq + 1


@pytest.mark.anyio
async def test_the_journal_keeps_at_most_max_jobs_and_hands_back_secrets(env: Env) -> None:
    async with linked(env, max_jobs=3) as agent:
        for n in range(5):
            secrets = {"password": f"pw-{n}"} if n == 4 else {}
            await agent.stream(
                "job.run",
                {"job_id": f"j{n}", "kind": "site.list", "argv": ["site", "list", "--json"], "secrets": secrets},
            )
        journal = await agent.hub.call(SERVER_ID, "job.journal", {})
        assert [entry["job_id"] for entry in journal["jobs"]] == ["j2", "j3", "j4"]  # the oldest finished went
        one = await agent.hub.call(SERVER_ID, "job.journal", {"job_ids": ["j4", "j0"]})
        (entry,) = one["jobs"]  # j0 is gone
        assert entry["job_id"] == "j4" and entry["secrets"] == ["pw-4"] and entry["first_seq"] == 1
        assert entry["exit_code"] == agent.jobs.get("j4").exit_code and entry["last_seq"] >= 1  # type: ignore[union-attr]
        with pytest.raises(AgentCallError) as info:
            await agent.hub.call(SERVER_ID, "job.journal", {"job_ids": "j4"})
        assert info.value.code == "validation_error"


@pytest.mark.anyio
async def test_runs_over_the_link_resume_without_loss_or_repeat(env: Env) -> None:
    count = 50_000
    folder = env.add_site("logs.example.com")
    write_log(env.site_logs(folder) / "access.log", count)
    argv = ["logs", "tail", "logs.example.com", "--lines", str(count)]
    params = {"job_id": "runs", "kind": "logs.tail", "argv": argv, "secrets": {}, "runs": True}
    async with linked(env) as agent:
        first = await agent.stream("job.run", params, window=64 * 1024, stop_after=10)
        lines = expand_runs(first.items)
        rest = await agent.stream("job.attach", {"job_id": "runs", "after": lines[-1]["seq"] - 3, "runs": True})
    assert rest.exit_code == 0
    lines = lines[:-3] + expand_runs(rest.items)
    assert_complete(lines, count)
    assert [line["text"] for line in lines] == [f"line {i}" for i in range(1, count + 1)]
    assert len(first.items) + len(rest.items) < count / 10


@needs_root
@pytest.mark.anyio
async def test_a_job_outlives_its_link(env: Env) -> None:
    folder = env.add_site("slow.example.com", owner=NOBODY)
    script = folder / "slow.sh"
    script.write_text("#!/bin/sh\nfor i in $(seq 1 30); do echo tick $i; sleep 0.02; done\necho done >&2\nexit 3\n")
    script.chmod(0o755)
    env.add_cron_entry("slow", "slow.example.com", "./slow.sh")
    async with linked(env) as agent:
        first = await agent.run("cron", "run", "slow", job_id="job-slow", stop_after=1)
        await agent.disconnect()
        job = agent.jobs.get("job-slow")
        assert job is not None
        await eventually(lambda: job.last_seq > first.items[-1]["seq"] + 3)  # lines keep coming with no link
        await agent.connect()
        after = first.items[-1]["seq"]
        rest = await agent.stream("job.attach", {"job_id": "job-slow", "after": after})
    lines = first.items + rest.items
    assert_complete(lines, 31)
    assert [i["text"] for i in lines if i["stream"] == "stdout"] == [f"tick {i}" for i in range(1, 31)]
    assert lines[-1] == {**lines[-1], "stream": "stderr", "text": "done"}
    assert rest.exit_code == 3


@pytest.mark.anyio
async def test_unknown_kind_bad_argv_errors_and_retention(env: Env) -> None:
    async with linked(env, keep_s=0.3) as agent:
        unknown = await agent.stream(
            "job.run", {"job_id": "j1", "kind": "ai.status", "argv": ["ai", "status", "--json"], "secrets": {}}
        )
        assert unknown.exit_code == 127
        assert unknown.stderr == [f"this agent (fleetdeck-agent {__version__}) has no handler for ai.status"]
        assert unknown.stdout == []

        bad = await agent.run("site", "inspect", "--json")
        assert bad.exit_code == 2
        assert bad.stderr == ["usage: site inspect DOMAIN [--json]", "site inspect: error: domain: Field required"]
        bad = await agent.run("storage", "usage", "--depth", "9", "--json")
        assert bad.exit_code == 2
        assert bad.stderr[-1] == "storage usage: error: depth: Input should be less than or equal to 5"
        bad = await agent.run("storage", "usage", "--deep", "9")
        assert bad.exit_code == 2 and bad.stderr[1:] == [
            "storage usage: error: --deep: unknown flag",
            "storage usage: error: argv: unexpected argument(s): 9",
        ]

        outside = await agent.run("storage", "usage", "--path", "../etc", "--depth", "1", "--json")
        assert outside.exit_code == 2 and outside.stderr[-1].startswith("storage usage: error: path: Value error")

        # A handler's error: exit 1 and one line, no traceback.
        missing = await agent.run("logs", "tail", "nope.example.com", "--log", "access", "--lines", "5")
        assert (missing.exit_code, missing.stderr) == (1, ["no site nope.example.com on this server"])

        with pytest.raises(AgentCallError) as info:
            await agent.stream("job.attach", {"job_id": "never-ran", "after": 0})
        assert info.value.code == "not_found"
        with pytest.raises(AgentCallError) as info:
            await agent.stream("job.run", {"job_id": "", "kind": "site.list", "argv": []})
        assert info.value.code == "validation_error"

        # A finished job stays attachable for keep_s, then goes.
        replay = await agent.stream("job.attach", {"job_id": "j1", "after": 0})
        assert replay.exit_code == 127 and len(replay.items) == 1
        await eventually(lambda: agent.jobs.get("j1") is None)
        with pytest.raises(AgentCallError) as info:
            await agent.stream("job.attach", {"job_id": "j1", "after": 0})
        assert info.value.code == "not_found"


@pytest.mark.anyio
async def test_a_handler_crash_is_one_line_and_a_logged_traceback(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    missing = env.home / "missing"
    jobs = JobManager(JobContext(str(missing), str(env.state), SiteRegistry(str(env.state)), __version__))
    async with trio.open_nursery() as nursery:
        await nursery.start(jobs.run)
        job = jobs.start("crash", "metrics.get", ["metrics", "get", "--json"])
        with trio.fail_after(5):
            await job.wait_done()
        nursery.cancel_scope.cancel()
    lines = job.lines_after(0, 100)
    assert job.exit_code == 1 and [line["stream"] for line in lines] == ["stderr"]
    assert lines[0]["text"].startswith("error: metrics.get failed: FileNotFoundError")
    assert "Traceback" in caplog.text and "job metrics.get" in caplog.text


@pytest.mark.anyio
async def test_the_buffer_keeps_the_last_lines_unless_a_reader_is_live(env: Env) -> None:
    folder = env.add_site("logs.example.com")
    write_log(env.site_logs(folder) / "access.log", 20_000)
    async with linked(env, max_lines=1000) as agent:
        job = agent.jobs.start("small", "logs.tail", ["logs", "tail", "logs.example.com", "--lines", "20000"])
        with trio.fail_after(5):
            await job.wait_done()
        outcome = await agent.stream("job.attach", {"job_id": "small", "after": 0})
        tail = await agent.stream("job.attach", {"job_id": "small", "after": 19_990})
        # A live reader, however slow (a small window), holds the producer instead: nothing is lost.
        live = await agent.run("logs", "tail", "logs.example.com", "--lines", "20000", window=16 * 1024)
        assert live.exit_code == 0
        assert_complete(live.items, 20_000)
    assert outcome.exit_code == 0
    assert_complete(outcome.items, 1000, first=19_001)  # nobody was attached: the oldest lines went
    assert outcome.stdout == [f"line {i}" for i in range(19_001, 20_001)]
    assert tail.stdout == [f"line {i}" for i in range(19_991, 20_001)]


@pytest.mark.anyio
async def test_read_jobs_print_valid_json(env: Env, tmp_path: Path) -> None:
    have_openssl = await trio.to_thread.run_sync(make_certificates, env.state / "ssl", tmp_path / "key.pem")
    async with linked(env) as agent:
        metrics = (await agent.run("metrics", "get", "--json")).json()
        info = (await agent.run("system", "info", "--json")).json()
        updates = (await agent.run("updates", "list", "--json")).json()
        certificates = (await agent.run("ssl", "list", "--json")).json()["certificates"]
        missing = await agent.run("service", "status", "no-such-service-xyz", "--json")
        restart = await agent.run("service", "restart", "no-such-service-xyz")
    assert metrics["cpu_count"] >= 1 and metrics["memory"]["total"] > 0 and metrics["uptime_s"] > 0
    assert set(metrics["load"]) == {"1m", "5m", "15m"} and metrics["disk"]["path"] == str(env.home)
    assert 0 < metrics["disk"]["used"] <= metrics["disk"]["total"]
    assert info["agent_version"] == __version__ and info["hostname"] and info["kernel"]["release"]
    assert info["python"].startswith("3.") and info["memory_bytes"] > 0 and info["os"]["name"]
    kernel = {n: (await trio.Path("/proc/sys/fs", n).read_text()).strip() != "0" for n in protocol.KERNEL_PROTECTIONS}
    assert info["kernel_protections"] == kernel
    assert isinstance(updates["updates"], list) and updates["count"] == len(updates["updates"])
    for update in updates["updates"]:
        assert update["name"] and update["version"]
    by_name = {Path(c["path"]).name: c for c in certificates}
    assert "error" in by_name["junk.pem"]
    if have_openssl:
        cert = by_name["cert.pem"]
        assert cert["names"] == ["cert.example.com", "www.cert.example.com"] and "cert.example.com" in cert["subject"]
        assert 28 <= cert["days_left"] <= 30 and cert["expired"] is False and cert["not_after"].endswith("Z")
    assert (
        missing.exit_code == 1
        and len(missing.stderr) == 1
        and "no service named no-such-service-xyz" in missing.stderr[0]
    )
    assert restart.exit_code == 1 and "no service named" in restart.stderr[0]


@pytest.mark.anyio
async def test_the_runner_masks_stores_and_replays_runs_from_a_real_agent(env: Env, tmp_path: Path) -> None:

    db = Database(f"sqlite:///{tmp_path / 'cp.db'}")
    db.migrate()
    with db.engine.begin() as conn:
        at = "2026-11-22T00:00:00Z"
        conn.execute(orgs.insert().values(id="org-1", name="o", plan="max", created_at=at))
        conn.execute(servers.insert().values(id=SERVER_ID, org_id="org-1", name="s", kind="full", created_at=at))
    kinds = {"echo.secret": ECHO_SECRET}
    async with linked(env, kinds=kinds) as agent, trio.open_nursery() as nursery:
        runner = JobRunner(db, agent.hub, grace_s=1)
        runner.bind(nursery)
        job = db.run_sync(
            store.create_job,
            org_id="org-1",
            server_id=SERVER_ID,
            kind="echo.secret",
            args={},
            argv=["echo", "secret"],
            created_by=None,
            idempotency_key=None,
        )
        runner.start(job, secrets={"password": SECRET}, read=False)
        with trio.fail_after(30):
            live_body, live = await _sse(runner, "org-1", job["id"])
            await eventually(lambda: job["id"] not in runner.live, within=30)  # the writer has stored every line
            stored_body, _ = await _sse(runner, "org-1", job["id"])
            resumed_body, resumed = await _sse(runner, "org-1", job["id"], after=1234)
        nursery.cancel_scope.cancel()
    mask = Masker([SECRET])
    expected = [
        text
        for block in range(40)
        for text in (
            *(f"clean {block}-{i}" for i in range(997)),
            mask(f"auth {SECRET} at {block}"),
            mask(f"url https://ci:{quote(SECRET, safe='')}@r.example.com/"),
            mask(json.dumps({"password": SECRET})),
        )
    ]
    lines = [event.data for event in live if event.event == "line"]
    assert [line["text"] for line in lines] == expected and "***" in expected[997]
    line_ids = [int(e.id) for e in live if e.event == "line"]  # the `status` event before them has the last seq
    assert [line["seq"] for line in lines] == list(range(1, len(expected) + 1)) == line_ids
    assert {line["stream"] for line in lines[997:999]} == {"stderr"} and lines[0]["stream"] == "stdout"
    assert live[-1].event == "exit" and live[-1].data == {"exit_code": 3, "status": "failed"}
    # The replay of the stored job is the live stream, byte for byte, but the live stream's
    # `status` event (the job was running when it was opened; a replay is of a finished job).
    assert live[0].event == "status"
    lines_onward = live_body[live_body.index(b"\n\n") + 2 :]
    assert stored_body == lines_onward
    assert resumed_body == live_body[live_body.index(b"id: 1235\n") :] and resumed[0].id == "1235"
    stored_bytes = _files_bytes(tmp_path, "cp.db*")
    assert b"clean 39-996" in stored_bytes
    for form in (SECRET, quote(SECRET, safe=""), json.dumps(SECRET)[1:-1]):
        assert form.encode() not in stored_bytes


@pytest.mark.anyio
async def test_lines_the_journal_no_longer_holds_are_said_lost_where_they_were(env: Env, tmp_path: Path) -> None:
    """A job taken back after a control-plane restart whose first lines the agent's bounded journal
    already dropped: the stored output says which lines were lost, at their place, then goes on."""
    count = 5 * BLOCK
    folder = env.add_site("lost.example.com")
    write_log(env.site_logs(folder) / "access.log", count)
    db = Database(f"sqlite:///{tmp_path / 'cp.db'}")
    db.migrate()
    with db.engine.begin() as conn:
        at = "2026-11-22T00:00:00Z"
        conn.execute(orgs.insert().values(id="org-1", name="o", plan="max", created_at=at))
        conn.execute(servers.insert().values(id=SERVER_ID, org_id="org-1", name="s", kind="full", created_at=at))
    argv = ["logs", "tail", "lost.example.com", "--lines", str(count)]
    async with linked(env, max_bytes=2 * BLOCK * 12) as agent, trio.open_nursery() as nursery:
        job = db.run_sync(
            store.create_job,
            org_id="org-1",
            server_id=SERVER_ID,
            kind="logs.tail",
            args={},
            argv=argv,
            created_by=None,
            idempotency_key=None,
            status="running",
        )
        session = agent.hub.session(SERVER_ID)
        assert session is not None
        db.run_sync(store.update_job, job["id"], agent_boot_id=session.boot_id)
        # The previous control plane started the job and died before storing any line of it.
        agent.jobs.start(job["id"], "logs.tail", argv)
        await eventually(lambda: agent.jobs.get(job["id"]).exit_code is not None, within=30)  # type: ignore[union-attr]
        first_kept = agent.jobs.get(job["id"]).first_seq  # type: ignore[union-attr]
        assert first_kept > 1  # the journal dropped whole blocks from the start

        runner = JobRunner(db, agent.hub, grace_s=5)
        runner.bind(nursery)
        await runner.resume_unfinished(lambda kind: False)
        with trio.fail_after(30):
            await eventually(lambda: job["id"] not in runner.live, within=30)
            _, events = await _sse(runner, "org-1", job["id"])
        nursery.cancel_scope.cancel()
    lines = [event.data for event in events if event.event == "line"]
    note, kept = lines[0], lines[1:]
    assert (note["seq"], note["stream"]) == (1, "stderr")
    assert f"lines 1 to {first_kept - 1:,} were lost while the control plane was away" in note["text"]
    assert [line["seq"] for line in kept] == list(range(first_kept, count + 1))
    assert [line["text"] for line in kept] == [f"line {i}" for i in range(first_kept, count + 1)]
    assert events[-1].event == "exit" and events[-1].data == {"exit_code": 0, "status": "succeeded"}


@needs_root
@pytest.mark.anyio
async def test_cancel_stops_the_whole_process_group_and_keeps_the_output(env: Env) -> None:
    folder = env.add_site("stubborn.example.com", owner=NOBODY)
    (folder / "stubborn.sh").write_text(STUBBORN_SCRIPT)
    (folder / "stubborn.sh").chmod(0o755)
    env.add_cron_entry("stubborn", "stubborn.example.com", "./stubborn.sh")
    async with linked(env) as agent:
        job = agent.jobs.start("job-stubborn", "cron.run", ["cron", "run", "stubborn"])
        await eventually(lambda: len(job.lines_after(0, 10)) >= 2 or job.done)
        texts = [line["text"] for line in job.lines_after(0, 10)]
        assert not job.done, texts
        parent = int(next(t for t in texts if t.startswith("parent ")).split()[1])
        assert "child ignores TERM" in texts
        # The shell prints "parent" before it forks its own sleep: wait for all three.
        await eventually(lambda: len(live_members(parent)) >= 3)
        answer = await agent.hub.call(SERVER_ID, "job.cancel", {"job_id": "job-stubborn"}, timeout=5)
        assert answer == {"ended": False}
        with trio.fail_after(30):
            await job.wait_done()
        replay = await agent.hub.call(SERVER_ID, "job.attach", {"job_id": "job-stubborn", "after": 0}, timeout=5)
    assert job.cancelled and replay == {"exit_code": job.exit_code, "cancelled": True}
    assert live_members(parent) == []  # the child that ignored TERM was killed too
    assert [line["text"] for line in job.lines_after(0, 10)][: len(texts)] == texts


@pytest.mark.anyio
async def test_cancel_of_an_ended_job_says_so_and_an_overtaken_run_runs_nothing(env: Env) -> None:
    async with linked(env) as agent:
        ended = await agent.run("site", "list", "--json", job_id="job-ended")
        answer = await agent.hub.call(SERVER_ID, "job.cancel", {"job_id": "job-ended"}, timeout=5)
        assert answer == {"ended": True}
        assert agent.jobs.get("job-ended") is not None and not agent.jobs.get("job-ended").cancelled  # type: ignore[union-attr]
        assert ended.exit_code == 0
        # The cancel reached the agent before the job.run it overtook: that run runs nothing.
        assert await agent.hub.call(SERVER_ID, "job.cancel", {"job_id": "job-later"}, timeout=5) == {"ended": False}
        params = {"job_id": "job-later", "kind": "site.list", "argv": ["site", "list", "--json"], "secrets": {}}
        later = await agent.hub.call(SERVER_ID, "job.run", params, timeout=5)
        assert later == {"exit_code": agent.jobs.get("job-later").exit_code, "cancelled": True}  # type: ignore[union-attr]
        assert agent.jobs.get("job-later").lines_after(0, 10) == []  # type: ignore[union-attr]
        with pytest.raises(AgentCallError) as info:
            await agent.hub.call(SERVER_ID, "job.cancel", {"job_id": ""}, timeout=5)
        assert info.value.code == "validation_error"
