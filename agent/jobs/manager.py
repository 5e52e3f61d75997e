"""The job manager: jobs run in the agent's own nursery, and RPC calls only watch them.

``job.run {job_id, kind, argv, secrets, runs?}`` starts the job (a job id this agent already has
is attached from the start instead: the call is idempotent) and streams its lines;
``job.attach {job_id, after, acked?, runs?}`` streams the lines with ``seq > after``, then the live ones.
Both answer ``{"exit_code": n}`` once the job is over (with ``"cancelled": true`` when
``job.cancel`` stopped it), and a dropped call or link never stops the job. ``job.cancel
{job_id}`` stops one: its task is cancelled, so its child's whole process group gets TERM, then
KILL after `agent.jobs.toolkit.proc.KILL_GRACE_S` (see `stream_command`); it answers at once, ``{"ended":
true}`` when the job had already ended by itself (its exit code stands).

Each job keeps its last `max_lines` lines (500,000) with seq numbers 1, 2, 3…; a line is
``{"seq", "stream": "stdout"|"stderr", "text", "at"}``. The buffer holds texts in blocks, each
with its runs: the offsets where ``stream`` or ``at`` change (one run per write, mostly). A
caller that passes ``"runs": true`` gets its lines as run items ``{"seq", "stream", "at",
"texts": [..]}``: consecutive lines that share a stream and a time, at most `RUN_LINES` each,
which cost nothing per line to build or to decode (the control plane asks for them; without the
flag each line is its own item, as older control planes expect).

A reader sends what has piled up as one ``items`` batch: at once when 1,000 lines wait, else
after at most 20 ms of gathering. While a reader is live, a producer that would overrun it (more
than half the buffer ahead) waits at its next `Output.drain`, and no line a live reader has yet
to send is dropped; with nobody attached a producer never waits and the oldest lines go. A
finished job stays attachable for `keep_s` (10 minutes).

The jobs are also the agent's journal, which outlives a control plane: when the control plane
restarts (or its link drops) the job runs on, and the control plane that links next takes it back
with ``job.journal {job_ids}`` (each job's ``first_seq``, ``last_seq``, ``exit_code`` and the
values of its secrets, so it masks the rest of the output as the first one did) and
``job.attach {job_id, after, acked}`` (the lines after ``after``, then the exit code). ``acked``
(at most ``after``) is the last line the control plane has stored: the agent drops the lines up
to it. The journal is bounded, in memory only (it
is for a control plane that restarts, not for an agent that does): per job by lines (`max_lines`)
and bytes (`max_bytes`, in whole blocks), in jobs (`max_jobs`: the oldest finished ones go
first) and in age (`keep_s` after the end).
"""

from __future__ import annotations

import logging
import math
import signal
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import trio

from agent.jobs.kinds import all_kinds
from agent.jobs.toolkit.base import JobContext, Kind, now_at, run_kind
from agent.jobs.toolkit.output import Output
from agent.link.call import Call, Handler
from contract.link.params import JobAttach, JobCancel, JobJournal, JobRun, params_of
from contract.link.protocol import RpcError

log = logging.getLogger("fleetdeck.agent.jobs")

BLOCK = 4096  # lines per buffer block
MAX_LINES = 500_000
MAX_BYTES = 64 * 1024 * 1024  # per job, counted as text plus a newline per line
MAX_JOBS = 1000  # kept at once; only finished jobs are forgotten to stay within it
KEEP_S = 600.0
FLUSH_LINES = 1000
FLUSH_S = 0.020
MAX_BATCH = 8192  # lines handed to one send_items call
RUN_LINES = 1024  # lines in one run item at most (keeps frames far below the chunk size)
EXIT_CANCELLED = -signal.SIGTERM  # a cancelled job's exit code here (as for a child TERM ended)


class _Reader:
    __slots__ = ("pos", "sent_at")

    def __init__(self, pos: int) -> None:
        self.pos = pos
        self.sent_at = -math.inf  # when it last sent a batch (trio's clock)


class Job:
    """One job's state and line buffer (trio-only: no locks, no awaits while writing)."""

    def __init__(
        self,
        job_id: str,
        kind: str,
        argv: list[str],
        *,
        max_lines: int = MAX_LINES,
        max_bytes: int = MAX_BYTES,
        secrets: Mapping[str, str] | None = None,
    ) -> None:
        self.id = job_id
        self.kind = kind
        self.argv = argv
        self.max_lines = max_lines
        self.max_bytes = max_bytes
        # Kept while the job is, for a control plane that takes the job back after a restart:
        # it masks the output with them and stores them nowhere.
        self.secrets = dict(secrets or {})
        self.next_seq = 1  # seq of the next line
        self.first_seq = 1  # oldest seq still held
        self.exit_code: int | None = None
        self.cancelled = False  # stopped by job.cancel: it ended on our signal, not by itself
        self.cancel_scope = trio.CancelScope()  # what its run is in: cancelling it stops the job
        self.finished_at: float | None = None  # trio clock
        self.started_at = now_at()
        # blocks[i] holds seqs (base_block + i) * BLOCK + 1 ...: (texts, runs), where runs are
        # (offset in the block, stream, at), one at each offset where stream or at changes.
        self._blocks: deque[tuple[list[str], list[tuple[int, str, str]]]] = deque()
        self._block_bytes: deque[int] = deque()  # the size of each block's texts
        self.bytes = 0  # held: the sum of `_block_bytes`
        self._base_block = 0
        self._changed = trio.Event()
        self._room = trio.Event()
        self._readers: set[_Reader] = set()

    @property
    def done(self) -> bool:
        return self.exit_code is not None

    @property
    def last_seq(self) -> int:
        return self.next_seq - 1

    # --- writing ----------------------------------------------------------------------------

    def append(self, stream: str, texts: list[str]) -> None:
        if not texts:
            return
        at = now_at()
        blocks = self._blocks
        index, n = 0, len(texts)
        while index < n:
            fill = (self.next_seq - 1) % BLOCK
            if fill == 0:
                blocks.append(([], []))
                self._block_bytes.append(0)
            block_texts, runs = blocks[-1]
            if not runs or runs[-1][1] != stream or runs[-1][2] != at:
                runs.append((fill, stream, at))
            take = min(BLOCK - fill, n - index)
            part = texts[index : index + take] if index or take < n else texts
            block_texts.extend(part)
            size = sum(map(len, part)) + take
            self._block_bytes[-1] += size
            self.bytes += size
            index += take
            self.next_seq += take
        if self.next_seq - self.first_seq > self.max_lines:
            self._drop_until(min(self.next_seq - self.max_lines, self._floor()))
        while self.bytes > self.max_bytes and len(blocks) > 1:
            second_block_start = (self._base_block + 1) * BLOCK + 1
            if second_block_start > self._floor():
                break
            self._drop_until(second_block_start)
        self._changed.set()

    def _floor(self) -> int:
        """The oldest seq a live reader has yet to send: never dropped (a reader overruns the
        bounds by one write at most)."""
        return min((r.pos + 1 for r in self._readers), default=self.next_seq)

    def _drop_until(self, seq: int) -> None:
        """Forget the lines before `seq`, and the blocks that held only those."""
        self.first_seq = max(self.first_seq, min(seq, self.next_seq))
        blocks = self._blocks
        while blocks and (self._base_block + 1) * BLOCK < self.first_seq:
            blocks.popleft()
            self.bytes -= self._block_bytes.popleft()
            self._base_block += 1

    def acknowledge(self, seq: int) -> None:
        """The control plane has stored the lines up to `seq`: they need not be held any more."""
        self._drop_until(min(seq + 1, self._floor()))

    def journal_entry(self) -> dict[str, Any]:
        return {
            "job_id": self.id,
            "kind": self.kind,
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
            "exit_code": self.exit_code,
            "secrets": list(self.secrets.values()),
        }

    def end_answer(self) -> dict[str, Any]:
        """The last answer of `job.run` and `job.attach` once the job is over."""
        answer: dict[str, Any] = {"exit_code": self.exit_code}
        if self.cancelled:
            answer["cancelled"] = True
        return answer

    def finish(self, exit_code: int) -> None:
        self.exit_code = exit_code
        self.finished_at = trio.current_time()
        self._changed.set()
        self._room.set()

    async def wait_room(self) -> None:
        """Hold a producer while a live reader is more than half a buffer behind."""
        limit = self.max_lines // 2
        while self._readers and self.last_seq - min(r.pos for r in self._readers) > limit:
            if self._room.is_set():
                self._room = trio.Event()
            await self._room.wait()

    # --- reading ----------------------------------------------------------------------------

    async def wait_beyond(self, seq: int) -> None:
        """Until a line after `seq` exists or the job is over."""
        while self.last_seq <= seq and not self.done:
            if self._changed.is_set():
                self._changed = trio.Event()
            await self._changed.wait()

    async def wait_done(self) -> None:
        while not self.done:
            if self._changed.is_set():
                self._changed = trio.Event()
            await self._changed.wait()

    def _segments(self, pos: int, limit: int) -> list[tuple[int, str, str, list[str]]]:
        """Up to `limit` lines with seq > `pos` as (first seq, stream, at, texts) segments."""
        start = max(pos + 1, self.first_seq)
        end = min(self.last_seq, start + limit - 1)
        segments: list[tuple[int, str, str, list[str]]] = []
        seq = start
        while seq <= end:
            block_no, offset = divmod(seq - 1, BLOCK)
            texts, runs = self._blocks[block_no - self._base_block]
            stop = min(len(texts), offset + end - seq + 1)
            run = bisect_right(runs, offset, key=_run_offset) - 1
            while offset < stop:
                run_end = runs[run + 1][0] if run + 1 < len(runs) else len(texts)
                cut = min(stop, run_end, offset + RUN_LINES)
                segments.append((seq, runs[run][1], runs[run][2], texts[offset:cut]))
                seq += cut - offset
                offset = cut
                if offset == run_end:
                    run += 1
        return segments

    def lines_after(self, pos: int, limit: int) -> list[dict[str, Any]]:
        """Up to `limit` line objects with seq > `pos` (from the oldest held line)."""
        return [
            {"seq": s, "stream": stream, "text": t, "at": at}
            for first, stream, at, texts in self._segments(pos, limit)
            for s, t in zip(range(first, first + len(texts)), texts, strict=True)
        ]

    def runs_after(self, pos: int, limit: int) -> list[dict[str, Any]]:
        """The same lines as `lines_after`, as run items ``{"seq", "stream", "at", "texts"}``."""
        return [
            {"seq": first, "stream": stream, "at": at, "texts": texts}
            for first, stream, at, texts in self._segments(pos, limit)
        ]

    async def stream_to(self, call: Call, after: int, *, runs: bool = False) -> dict[str, Any]:
        """Send the lines after `after` (then the live ones) as items, or as run items when `runs`;
        the exit code at the end."""
        if not call.streaming:
            await self.wait_done()
            return self.end_answer()
        reader = _Reader(max(after, self.first_seq - 1))
        self._readers.add(reader)
        try:
            while True:
                pos = reader.pos = max(reader.pos, self.first_seq - 1)
                if self.last_seq - pos < FLUSH_LINES and not self.done:
                    await self.wait_beyond(pos)
                    # A line after a quiet spell goes at once (a job's first line, a prompt); lines
                    # that follow a batch closely are gathered: up to FLUSH_LINES or FLUSH_S.
                    if trio.current_time() - reader.sent_at < FLUSH_S:
                        with trio.move_on_after(FLUSH_S):
                            while self.last_seq - pos < FLUSH_LINES and not self.done:
                                await self.wait_beyond(self.last_seq)
                    pos = reader.pos = max(reader.pos, self.first_seq - 1)
                batch = self.runs_after(pos, MAX_BATCH) if runs else self.lines_after(pos, MAX_BATCH)
                if batch:
                    await call.send_items(batch)
                    reader.sent_at = trio.current_time()
                    last = batch[-1]
                    reader.pos = last["seq"] + len(last["texts"]) - 1 if runs else last["seq"]
                    self._room.set()
                elif self.done:
                    return self.end_answer()
        finally:
            self._readers.discard(reader)
            self._room.set()


def _run_offset(run: tuple[int, str, str]) -> int:
    return run[0]


def _finished_at(job: Job) -> float:
    return job.finished_at if job.finished_at is not None else float("inf")


class _JobOutput(Output):
    def __init__(self, job: Job) -> None:
        self._job = job

    def lines(self, stream: str, texts: list[str]) -> None:
        self._job.append(stream, texts)

    async def drain(self) -> None:
        await self._job.wait_room()


@dataclass
class JobManager:
    """Owns the jobs of this agent process; `run` it in the agent's nursery before serving."""

    ctx: JobContext
    kinds: Mapping[str, Kind] | None = None
    max_lines: int = MAX_LINES
    max_bytes: int = MAX_BYTES
    max_jobs: int = MAX_JOBS
    keep_s: float = KEEP_S
    # Called when a job that changes the server ends (it may have installed or removed packages):
    # the agent's `Availability.recheck`.
    after_change: Callable[[], object] | None = None

    def __post_init__(self) -> None:
        if self.kinds is None:
            self.kinds = all_kinds()
        self._jobs: dict[str, Job] = {}
        self._nursery: trio.Nursery | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled (which cancels the running jobs)."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            try:
                while True:
                    await trio.sleep(min(60.0, max(self.keep_s / 4, 0.05)))
                    self._forget_old()
            finally:
                self._nursery = None

    def handlers(self) -> dict[str, Handler]:
        return {
            "job.run": self.job_run,
            "job.attach": self.job_attach,
            "job.journal": self.job_journal,
            "job.cancel": self.job_cancel,
        }

    def get(self, job_id: str) -> Job | None:
        self._forget_old()
        return self._jobs.get(job_id)

    def start(self, job_id: str, kind: str, argv: list[str], secrets: Mapping[str, str] | None = None) -> Job:
        """The job `job_id`, started now unless this agent already has it."""
        job = self.get(job_id)
        if job is not None:
            return job
        if self._nursery is None:
            raise RpcError("internal", "the job manager is not running")
        job = Job(job_id, kind, argv, max_lines=self.max_lines, max_bytes=self.max_bytes, secrets=secrets)
        self._jobs[job_id] = job
        self._forget_old()
        self._nursery.start_soon(self._execute, job, job.secrets, name=f"job {job_id} {kind}")
        return job

    async def _execute(self, job: Job, secrets: dict[str, str]) -> None:
        assert self.kinds is not None
        out = _JobOutput(job)
        log.info("job %s: %s started", job.id, job.kind)
        try:
            with job.cancel_scope:
                exit_code = await run_kind(self.kinds, job.kind, job.argv, self.ctx.with_secrets(secrets), out)
        except BaseException:
            job.finish(-1)  # cancelled: the agent is stopping
            raise
        if job.cancel_scope.cancelled_caught:
            job.cancelled = True
            job.finish(EXIT_CANCELLED)
            log.info("job %s: %s cancelled (%d lines)", job.id, job.kind, job.last_seq)
            return
        job.finish(exit_code)
        log.info("job %s: %s exited with %d (%d lines)", job.id, job.kind, exit_code, job.last_seq)
        kind = self.kinds.get(job.kind)
        if self.after_change is not None and kind is not None and not kind.spec.read:
            self.after_change()

    def cancel(self, job_id: str) -> bool:
        """Stop the job `job_id`; False when it had already ended by itself.

        A job this agent does not have (yet) is kept as one cancelled before it started: the
        control plane marks a job running before its ``job.run`` reaches the agent, and a cancel
        may overtake it; that ``job.run`` then finds the job ended and runs nothing.
        """
        job = self.get(job_id)
        if job is None:
            job = Job(job_id, "", [], max_lines=self.max_lines, max_bytes=self.max_bytes)
            job.cancelled = True
            job.finish(EXIT_CANCELLED)
            self._jobs[job_id] = job
            return True
        if job.done:
            return job.cancelled
        job.cancel_scope.cancel()  # a job that ends by itself meanwhile keeps its own exit code
        return True

    def _forget_old(self) -> None:
        """Forget the jobs that ended over `keep_s` ago, and the oldest ended ones past `max_jobs`."""
        now = trio.current_time()
        finished = sorted((j for j in self._jobs.values() if j.finished_at is not None), key=_finished_at)
        excess = len(self._jobs) - self.max_jobs
        for index, job in enumerate(finished):
            if index < excess or now - _finished_at(job) > self.keep_s:
                del self._jobs[job.id]

    # --- RPC ------------------------------------------------------------------------------

    async def job_run(self, call: Call) -> dict[str, Any]:
        params = params_of(JobRun, call.params)
        job = self.start(params.job_id, params.kind, params.argv, params.secrets)
        return await job.stream_to(call, 0, runs=params.runs)

    async def job_attach(self, call: Call) -> dict[str, Any]:
        params = params_of(JobAttach, call.params)
        job = self.get(params.job_id)
        if job is None:
            raise RpcError("not_found", f"this agent has no job {params.job_id}", {"job_id": params.job_id})
        job.acknowledge(params.acked)
        return await job.stream_to(call, params.after, runs=params.runs)

    async def job_cancel(self, call: Call) -> dict[str, Any]:
        return {"ended": not self.cancel(params_of(JobCancel, call.params).job_id)}

    async def job_journal(self, call: Call) -> dict[str, Any]:
        """The jobs this agent still has, of those asked for (all without ``job_ids``)."""
        job_ids = params_of(JobJournal, call.params).job_ids
        self._forget_old()
        wanted = self._jobs.values() if job_ids is None else filter(None, map(self._jobs.get, job_ids))
        return {"jobs": [job.journal_entry() for job in wanted]}
