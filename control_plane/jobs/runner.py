"""Running jobs: dispatch to the agent, capture and mask lines, feed live streams, finish the row.

The runner owns one task group, opened by the app's lifespan, so every job task is a child of
the server's own structure (cancelled with it). A job cut off that way, or by a crash, is found
`running` at the next start and taken back from its agent, which kept running it (see the job
manager's journal in `agent.jobs.manager`): once the agent links again, the runner attaches after
the last stored line and finishes the job with its real exit code. It ends `interrupted` when its
agent does not link within the grace period, has restarted since (another ``boot_id``) or no
longer has it. A job is never run twice.

An outage of the database does not end a job: its agent keeps running it, its start, lines and
end are written once the database is back (`Database.run_retrying`: the lines wait in memory,
and the agent, told what is stored, keeps them too), and its streams wait for it.

What one job keeps, in memory and in the database, is capped (`output_cap` bytes of output,
counted as UTF-8 text and a newline per line): the lines past the cap are counted, not kept, and
the stored output ends with one line that says how many lines and bytes were left out.

While a job runs, its lines live in memory (`LiveJob`, as runs: see `lines`) for the streams
that follow it and are written to the database in batches by a writer task beside it. A job's
row is finished only after all its lines are stored, so a stream that starts after that reads
everything from the database.
"""

from __future__ import annotations

import bisect
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from itertools import chain, islice
from typing import Any

import anyio
import orjson
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from contract.job_kinds import lookup
from control_plane import sse
from control_plane.clock import now_iso
from control_plane.hub import AgentCallError, AgentHub, AgentOfflineError, AgentSession, AgentTimeoutError
from control_plane.jobs import lines as output
from control_plane.jobs import store
from control_plane.jobs.lines import BadOutput, Run
from control_plane.masking import Masker
from control_plane.storage import Database
from control_plane.storage.outage import is_outage

log = logging.getLogger("fleetdeck.jobs")

STREAM_WINDOW = 8 * 1024 * 1024
EVENTS_PER_WRITE = 10_000
DB_PAGE = 20_000
QUEUED_POLL_S = 0.25
WRITE_GATHER_S = 0.05
DEFAULT_OUTPUT_CAP = 16 * 1024 * 1024
JOURNAL_TIMEOUT_S = 30.0
# A replica that lost a job's link notices it elsewhere within ELSEWHERE_POLL_S and stores its
# last lines within WRITE_GATHER_S: the replica that got the link waits that long before it
# reads where the stored output ends.
HANDOVER_S = 1.0


@dataclass(frozen=True)
class JobEnd:
    """What a finish hook learns of a job that ended: its row as dispatched, how it ended, and
    what it printed (stdout whole, as kept; the last non-blank stderr line)."""

    job: dict[str, Any]
    exit_code: int | None
    status: str
    stdout: str
    last_stderr: str | None


FinishHook = Callable[[JobEnd], Awaitable[None]]
# How a caller sees a job's output lines (`JobRunner.events`): their texts, changed.
OutputView = Callable[[list[str]], list[str]]
# With replicas: whether a server's agent is linked to another live replica.
LinkedElsewhere = Callable[[str], Awaitable[bool]]
# How often a job whose link dropped asks whether it came back on another replica.
ELSEWHERE_POLL_S = 0.5


class JobMoved(Exception):
    """The job's agent linked to another replica, which takes the job back: let it go, unfinished."""


def exit_event(exit_code: int | None, status: str, last_seq: int) -> bytes:
    return sse.event("exit", {"exit_code": exit_code, "status": status}, last_seq + 1)


def running_event(last_seq: int) -> bytes:
    """The job runs (its id the last line's: a stream resumed from it misses no line)."""
    return sse.event("status", {"status": "running"}, last_seq)


def output_size(texts: list[str]) -> int:
    """The bytes of `texts` as the job printed them: UTF-8 and a newline after each."""
    if not texts:
        return 0
    joined = "\n".join(texts)
    return (len(joined) if joined.isascii() else len(joined.encode())) + 1


def lost_note(first: int, last: int) -> str:
    return (
        f"fleetdeck: lines {first:,} to {last:,} were lost while the control plane was away: "
        "the agent keeps a bounded journal of each job's output"
    )


def cap_note(cap: int, lines: int, size: int) -> str:
    return f"fleetdeck: {lines:,} lines ({size:,} bytes) left out: a job keeps at most {cap:,} bytes of output"


class LiveJob:
    """The lines of a running job, in memory, and a way to wait for more.

    Lines up to `from_seq` are in the database only (a job taken back after a restart); the
    ones after it are held here, up to `cap` bytes in all with the stored ones (`kept_bytes`).
    """

    def __init__(self, job_id: str, *, cap: int = DEFAULT_OUTPUT_CAP, from_seq: int = 0, kept_bytes: int = 0) -> None:
        self.job_id = job_id
        self.runs: list[Run] = []
        self._ends: list[int] = []  # each run's last seq, for bisect
        self.exit: tuple[int | None, str] | None = None
        self._changed = anyio.Event()
        self.from_seq = from_seq
        self.received_seq = from_seq  # the agent's last seq: kept, left out, or a note of ours
        self.stored_seq = from_seq  # what the database holds: what the agent may forget
        self.cap = cap
        self.kept_bytes = kept_bytes
        self.left_out_lines = 0
        self.left_out_bytes = 0
        self.moved = False  # another replica took the job over: followers resume from the database

    @property
    def last_seq(self) -> int:
        return self._ends[-1] if self._ends else self.from_seq

    def extend(self, runs: list[Run]) -> None:
        self.runs.extend(runs)
        self._ends.extend([run.last_seq for run in runs])
        self._wake()

    def admit(self, runs: list[Run]) -> list[Run]:
        """The part of `runs` within the cap; the lines past it are only counted."""
        kept: list[Run] = []
        for run in runs:
            self.received_seq = run.last_seq
            size = 0 if self.left_out_lines else output_size(run.texts)
            if size and self.kept_bytes + size <= self.cap:
                kept.append(run)
                self.kept_bytes += size
                continue
            fit = 0 if self.left_out_lines else _lines_within(run.texts, self.cap - self.kept_bytes)
            if fit:
                kept.append(run.head(fit))
                self.kept_bytes += output_size(run.texts[:fit])
            self.left_out_lines += len(run.texts) - fit
            self.left_out_bytes += output_size(run.texts[fit:])
        return kept

    def note(self, text: str) -> list[Run]:
        """A stderr line of the control plane's own after the job's lines (kept past the cap)."""
        self.received_seq += 1
        runs = [Run(self.received_seq, "stderr", now_iso(), [text])]
        self.extend(runs)
        return runs

    def finish(self, exit_code: int | None, status: str) -> None:
        self.exit = (exit_code, status)
        self._wake()

    def let_go(self) -> None:
        self.moved = True
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def follow(self, after: int, view: OutputView | None = None) -> AsyncIterator[bytes]:
        """Chunks of SSE bytes: every line after `after` (at least `from_seq`) as it comes, then
        the `exit` event; `view` changes the lines' texts on their way out (as a caller may see them)."""
        while True:
            start = bisect.bisect_right(self._ends, after)
            if start < len(self.runs):
                batch, count = [], 0
                for run in islice(self.runs, start, None):
                    run = run.after(after)
                    batch.append(run)
                    after = run.last_seq
                    count += len(run.texts)
                    if count >= EVENTS_PER_WRITE:
                        break
                yield output.sse(_viewed(batch, view))
                continue
            if self.exit is not None:
                yield exit_event(self.exit[0], self.exit[1], after)
                return
            if self.moved:
                return  # the client resumes after its Last-Event-ID, from the database
            await self._changed.wait()


def _lines_within(texts: list[str], room: int) -> int:
    """How many of the first `texts` fit in `room` bytes of output."""
    used = 0
    for count, text in enumerate(texts):
        used += len(text.encode()) + 1
        if used > room:
            return count
    return len(texts)


class JobRunner:
    def __init__(self, db: Database, hub: AgentHub, *, grace_s: float, output_cap: int = DEFAULT_OUTPUT_CAP) -> None:
        self._db = db
        self._hub = hub
        self.grace_s = grace_s
        self._output_cap = output_cap
        self._group: TaskGroup | None = None
        self._finish_hooks: dict[str, list[FinishHook]] = {}
        self.live: dict[str, LiveJob] = {}
        # Set when replicas share the database (`control_plane.replicas`): where a job's agent is,
        # and how the others hear that a job's stored lines or status changed.
        self.linked_elsewhere: LinkedElsewhere | None = None
        self.on_stored: Callable[[str], None] | None = None
        self._stored: dict[str, anyio.Event] = {}

    def on_finish(self, kind: str, hook: FinishHook) -> None:
        """Call `hook` when a job of `kind` ends, after its row is final: how an area reads the
        outcome of its own jobs (a load balancer's apply) without the runner knowing of it."""
        self._finish_hooks.setdefault(kind, []).append(hook)

    def bind(self, group: TaskGroup) -> None:
        """Give the runner the task group its jobs run in (the app's lifespan owns it)."""
        self._group = group

    def start(self, job: dict[str, Any], *, secrets: dict[str, str], read: bool) -> None:
        if self._group is None:
            raise RuntimeError("the job runner is not running (no lifespan task group)")
        if job["id"] in self.live:
            return
        self.live[job["id"]] = LiveJob(job["id"], cap=self._output_cap)
        self._group.start_soon(self._run, job, secrets, read, name=f"job {job['id']}")

    def start_queued(self, queued: list[dict[str, Any]], is_read: Any) -> None:
        """Start the jobs that waited for a server's agent (load-balancer applies), as
        `store.queued_jobs` read them when it linked."""
        for job in queued:
            self.start(job, secrets={}, read=bool(is_read(job["kind"])))

    async def resume_unfinished(self, is_read: Any) -> None:
        """At start-up: take back the jobs a previous process left running, from their agents."""
        await self._take_back_jobs(await self._db.run_retrying(store.running_jobs), is_read)

    def take_back_soon(self, server_id: str, is_read: Any) -> None:
        """With replicas: the server's agent linked here, so its running jobs are this replica's
        to follow (the one that ran them lets them go when it sees the link here)."""
        if self._group is not None:
            self._group.start_soon(self._take_back_server, server_id, is_read)

    async def _take_back_server(self, server_id: str, is_read: Any) -> None:
        await anyio.sleep(HANDOVER_S)
        await self._take_back_jobs(await self._db.run_retrying(store.running_jobs, server_id), is_read)

    async def _take_back_jobs(self, jobs: list[dict[str, Any]], is_read: Any) -> None:
        if self._group is None:
            raise RuntimeError("the job runner is not running (no lifespan task group)")
        for job in jobs:
            if job["id"] in self.live:
                continue
            from_seq, kept_bytes = await self._db.run_retrying(store.stored_output, job["id"])
            self.live[job["id"]] = LiveJob(job["id"], cap=self._output_cap, from_seq=from_seq, kept_bytes=kept_bytes)
            # A read's result is its whole output: not known when part of it came before the restart.
            read = bool(is_read(job["kind"])) and from_seq == 0
            self._group.start_soon(self._run, job, None, read, name=f"job {job['id']} (taken back)")

    async def _run(self, job: dict[str, Any], secrets: dict[str, str] | None, read: bool) -> None:
        """Run the job (`secrets` given) or take it back from its agent (None: after a restart)."""
        live = self.live[job["id"]]
        send, receive = anyio.create_memory_object_stream[list[Run]](max_buffer_size=math.inf)
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self._store_lines, live, receive)
                with send:
                    try:
                        if secrets is None:
                            exit_code, status = await self._take_back(job, live, send)
                        else:
                            exit_code, status = await self._follow(job, secrets, live, send)
                    except JobMoved:
                        log.info("job %s: its agent linked to another replica, which takes it back", job["id"])
                        live.let_go()
                        return
                    if live.left_out_lines:
                        send.send_nowait(live.note(cap_note(live.cap, live.left_out_lines, live.left_out_bytes)))
                # Finish while the writer drains: the row, the result and the exit event do not
                # wait for the last lines to reach the database. Until they have, the job stays
                # in `live`, so a stream that starts meanwhile is served from memory.
                if self.on_stored is None:
                    await self._finish(job, live, exit_code, status, read)
            if self.on_stored is not None:
                # With replicas, streams on the others have only the database: the row ends
                # once every line is stored, so an ended row means a complete output.
                await self._finish(job, live, exit_code, status, read)
        finally:
            self.live.pop(job["id"], None)

    async def _finish(self, job: dict[str, Any], live: LiveJob, exit_code: int | None, status: str, read: bool) -> None:
        result = _json_result(live) if status == "succeeded" and _has_result(job["kind"], live, read) else None
        await self._db.run_retrying(
            store.update_job,
            job["id"],
            status=status,
            exit_code=exit_code,
            finished_at=now_iso(),
            result=orjson.dumps(result).decode() if result is not None else None,
        )
        if read and status == "succeeded":
            key = store.args_key(orjson.loads(job["args"]))
            await self._db.run_retrying(store.remember_read, job["server_id"], job["kind"], key, job["id"], result)
        live.finish(exit_code, status)
        self._tell_stored(job["id"])
        hooks = self._finish_hooks.get(job["kind"], [])
        if hooks:
            runs = live.runs
            if live.from_seq:  # taken back after a restart: the lines before are in the database only
                runs = await self._db.run_retrying(store.lines_through, job["id"], live.from_seq) + runs
            end = JobEnd(job, exit_code, status, _stdout_text(runs), _last_stderr(runs))
            for hook in hooks:
                try:
                    await hook(end)
                except Exception:
                    log.exception("job %s: a finish hook of %s failed", job["id"], job["kind"])

    async def _follow(
        self,
        job: dict[str, Any],
        secrets: dict[str, str],
        live: LiveJob,
        lines: MemoryObjectSendStream[list[Run]],
    ) -> tuple[int | None, str]:
        """Start the job on its agent and stream it."""
        session = self._hub.session(job["server_id"])
        if session is None:
            return None, "interrupted"
        if not await self._db.run_retrying(store.start_job, job["id"], session.boot_id, now_iso()):
            return None, "cancelled"  # it ended while it waited (superseded): never run it
        params: dict[str, Any] = {
            "job_id": job["id"],
            "kind": job["kind"],
            "argv": orjson.loads(job["argv"]),
            "secrets": secrets,
            "runs": True,  # lines as runs (an older agent ignores this and sends line items)
        }
        return await self._stream(job, session, Masker(secrets.values()), live, lines, "job.run", params)

    async def _take_back(
        self, job: dict[str, Any], live: LiveJob, lines: MemoryObjectSendStream[list[Run]]
    ) -> tuple[int | None, str]:
        """Follow a job a previous process of the control plane started, once its agent is back."""
        session = await self._next_session(job["server_id"], after=None)
        if session is None or session.boot_id != job["agent_boot_id"]:
            return None, "interrupted"  # away past the grace period, or a new process: the run is gone
        entry = await self._journal_entry(job, session)
        if entry is None:
            return None, "interrupted"
        if entry["first_seq"] > live.received_seq + 1:
            first, last = live.received_seq + 1, entry["first_seq"] - 1
            log.warning("job %s: its agent no longer holds lines %d to %d", job["id"], first, last)
            # Said in the output itself, where the gap is (the note takes the first missing seq).
            lines.send_nowait(live.note(lost_note(first, last)))
        log.info(
            "job %s: taken back from the agent of server %s after line %d",
            job["id"],
            job["server_id"],
            live.received_seq,
        )
        params = self._attach_params(job["id"], live)
        return await self._stream(job, session, Masker(entry["secrets"]), live, lines, "job.attach", params)

    async def _journal_entry(self, job: dict[str, Any], session: AgentSession) -> dict[str, Any] | None:
        """What the agent's journal says of `job`: None when it has no such job (or no journal)."""
        if "job.journal" not in session.handlers:
            return None  # an agent older than the journal: it cannot say which secrets to mask
        try:
            answer = await self._hub.call(
                job["server_id"], "job.journal", {"job_ids": [job["id"]]}, timeout=JOURNAL_TIMEOUT_S
            )
        except (AgentOfflineError, AgentCallError, AgentTimeoutError) as exc:
            log.warning("job %s: the agent's journal did not answer: %s", job["id"], exc)
            return None
        entries = answer.get("jobs") if isinstance(answer, dict) else None
        for entry in entries if isinstance(entries, list) else []:
            if (
                isinstance(entry, dict)
                and entry.get("job_id") == job["id"]
                and type(entry.get("first_seq")) is int
                and isinstance(entry.get("secrets"), list)
                and all(isinstance(secret, str) for secret in entry["secrets"])
            ):
                return entry
        return None

    @staticmethod
    def _attach_params(job_id: str, live: LiveJob) -> dict[str, Any]:
        """`job.attach` after what this process received; the agent may forget what is stored."""
        return {"job_id": job_id, "after": live.received_seq, "acked": live.stored_seq, "runs": True}

    async def _stream(
        self,
        job: dict[str, Any],
        session: AgentSession,
        mask: Masker,
        live: LiveJob,
        lines: MemoryObjectSendStream[list[Run]],
        method: str,
        params: dict[str, Any],
    ) -> tuple[int | None, str]:
        """Stream the job from its agent; across a short link drop, re-attach to the same run."""
        server_id = job["server_id"]
        while True:
            try:
                async with self._hub.open_stream(server_id, method, params, window=STREAM_WINDOW) as stream:
                    async for chunk in stream:
                        if isinstance(chunk, list):
                            runs = live.admit(output.from_items(chunk, live.received_seq))
                            if mask:
                                runs = [run.masked(mask.many) for run in runs]
                            if runs:
                                live.extend(runs)
                                lines.send_nowait(runs)
                    if stream.result.get("cancelled") is True:
                        return None, "cancelled"  # stopped on the agent by `job.cancel`
                    exit_code = int(stream.result["exit_code"])
                    return exit_code, "succeeded" if exit_code == 0 else "failed"
            except AgentOfflineError:
                returned = await self._next_session(server_id, after=session)
                if returned is None or returned.boot_id != session.boot_id:
                    return None, "interrupted"  # gone past the grace period, or a new process
                session = returned
                method, params = "job.attach", self._attach_params(job["id"], live)
            except AgentCallError as exc:
                if method == "job.attach" and exc.code == "not_found":
                    return None, "interrupted"  # the agent restarted: the run is gone, never re-run it
                return self._fail(live, lines, f"agent error: {exc.message}")
            except BadOutput as exc:
                log.warning("job %s: the agent of server %s sent bad output: %s", job["id"], server_id, exc)
                return self._fail(live, lines, f"agent error: {exc}")

    @staticmethod
    def _fail(live: LiveJob, lines: MemoryObjectSendStream[list[Run]], text: str) -> tuple[int | None, str]:
        """End the job `failed`, with `text` as its last line."""
        lines.send_nowait(live.note(text))
        return None, "failed"

    async def _next_session(self, server_id: str, *, after: AgentSession | None) -> AgentSession | None:
        """The agent's next link after the one that dropped (any link for None), if one comes
        within the grace period.

        The hub may still list the dropped link for a moment: only a newer link counts, or the
        runner would re-attach to a dead link in a loop that never yields.
        """
        asked_at = -math.inf
        with anyio.move_on_after(self.grace_s):
            while True:
                session = self._hub.session(server_id)
                if session is not None and (after is None or session.connected_at > after.connected_at):
                    return session
                if self.linked_elsewhere is not None and anyio.current_time() - asked_at >= ELSEWHERE_POLL_S:
                    asked_at = anyio.current_time()
                    if await self._linked_elsewhere(server_id):
                        raise JobMoved(server_id)
                await anyio.sleep(0.1)
        return None

    async def _linked_elsewhere(self, server_id: str) -> bool:
        """Whether the agent linked to another replica; not known (False) while the database is away."""
        assert self.linked_elsewhere is not None
        try:
            return await self.linked_elsewhere(server_id)
        except Exception as exc:
            if not is_outage(exc):
                raise
            return False

    async def _store_lines(self, live: LiveJob, batches: MemoryObjectReceiveStream[list[Run]]) -> None:
        """Write lines in few transactions: gather up to a chunk's worth, or what came in 50 ms."""
        async with batches:
            async for batch in batches:
                pending = list(batch)
                count = output.line_count(pending)
                with anyio.move_on_after(WRITE_GATHER_S):
                    while count < store.CHUNK_LINES:
                        try:
                            more = await batches.receive()
                        except anyio.EndOfStream:
                            break
                        pending.extend(more)
                        count += output.line_count(more)
                # Through an outage: the job runs on, its lines wait here (and on the agent).
                await self._db.run_retrying(store.insert_lines, live.job_id, pending)
                live.stored_seq = pending[-1].last_seq
                self._tell_stored(live.job_id)

    async def events(
        self, org_id: str, job_id: str, after: int, *, view: OutputView | None = None
    ) -> AsyncIterator[bytes]:
        """The SSE body of a job stream: its lines after `after` (stored, then live), then `exit`;
        `view` as in `LiveJob.follow`. A job that runs says so once (`status`) before its lines
        from then on: a follower of a queued job learns it started even while it prints nothing."""
        said_running = False
        while True:
            live = self.live.get(job_id)
            if live is not None and after >= live.from_seq:
                if live.exit is None and not said_running:
                    yield running_event(after)
                async for chunk in live.follow(after, view):
                    yield chunk
                return
            # Through an outage the stream waits for the database, rather than end without `exit`.
            runs = await self._db.run_retrying(store.lines_after, job_id, after, DB_PAGE)
            if runs:
                after = runs[-1].last_seq
                yield output.sse(_viewed(runs, view))
                continue
            job = await self._db.run_retrying(store.get_job, org_id, job_id)
            if job is None:
                return
            if job["status"] not in store.RUNNING_STATUSES:
                # Lines stored between the read above and the row's end come first.
                runs = await self._db.run_retrying(store.lines_after, job_id, after, DB_PAGE)
                if runs:
                    after = runs[-1].last_seq
                    yield output.sse(_viewed(runs, view))
                    continue
                self._stored.pop(job_id, None)  # ended: no word of it is to come
                yield exit_event(job["exit_code"], job["status"], after)
                return
            if job["status"] == "running" and not said_running:  # run by another replica
                said_running = True
                yield running_event(after)
            # Queued for an offline agent, or run by another replica: wait for a word of it
            # (replicas say when they store lines), else poll.
            with anyio.move_on_after(QUEUED_POLL_S):
                await self._stored.setdefault(job_id, anyio.Event()).wait()

    def _tell_stored(self, job_id: str) -> None:
        self.stored(job_id)
        if self.on_stored is not None:
            self.on_stored(job_id)

    def stored(self, job_id: str) -> None:
        """The job's stored lines or status changed (here, or on another replica): wake its streams."""
        waiting = self._stored.pop(job_id, None)
        if waiting is not None:
            waiting.set()


def _viewed(runs: list[Run], view: OutputView | None) -> list[Run]:
    return runs if view is None else [run.masked(view) for run in runs]


def _stdout_text(runs: list[Run]) -> str:
    return "\n".join(chain.from_iterable(run.texts for run in runs if run.stream == "stdout"))


def _last_stderr(runs: list[Run]) -> str | None:
    for run in reversed(runs):
        if run.stream == "stderr":
            for text in reversed(run.texts):
                if text.strip():
                    return text.strip()
    return None


def _has_result(kind_name: str, live: LiveJob, read: bool) -> bool:
    """Whether the job's stdout is its result: a read's, or a mutation's that declares a result
    model (it printed it with --json), when the whole output is here (not taken back mid-way)."""
    if read:
        return True
    spec = lookup(kind_name)
    return spec is not None and spec.result is not None and live.from_seq == 0


def _json_result(live: LiveJob) -> Any:
    """A JSON kind's result is its parsed stdout (None when it is not JSON)."""
    stdout = [run.texts for run in live.runs if run.stream == "stdout"]
    if not stdout or stdout[0][0].lstrip()[:1] not in ("{", "["):
        return None  # not JSON (e.g. log lines): don't join and parse a million lines to find out
    text = "\n".join(chain.from_iterable(stdout))
    try:
        return orjson.loads(text) if text.strip() else None
    except orjson.JSONDecodeError:
        return None
