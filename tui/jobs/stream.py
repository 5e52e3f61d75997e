"""A job's event stream, read in trio and handed to Textual in batches.

A job may print 200,000 lines in a few seconds. One Textual message per line would flood the
screen's queue; instead a pump task in trio collects the `line` events and sends them on, at most
every `BATCH_INTERVAL_S` (or once `BATCH_MAX_LINES` pile up), as one `JobBatch` on a memory channel.
The Textual side iterates that channel with `TrioBridge.stream`, so each batch is one callback.

    send, receive = open_batch_channel()
    bridge.run(screen, pump_job_events, client, job_id, send, on_error=...)
    bridge.stream(screen, iterate, receive, on_item=..., on_end=...)

The pump is a plain coroutine with its own nursery (no async generator holds it open), so it is
cancelled cleanly with its requester; the receiving side ends when the pump closes the channel.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import trio

from api_client import Client
from tui.errors import unwrap
from tui.jobs.log_panel import LogLine

BATCH_INTERVAL_S = 1 / 30
BATCH_MAX_LINES = 5_000


@dataclass
class JobBatch:
    """Lines that arrived together; the last batch carries the `exit` data when there was one,
    and a batch the job's `status` (`running`: it started) when the stream said so."""

    lines: list[LogLine] = field(default_factory=list)
    last_seq: int | None = None
    exit: dict[str, Any] | None = None
    status: str | None = None


BatchSender = trio.MemorySendChannel[JobBatch]
BatchReceiver = trio.MemoryReceiveChannel[JobBatch]


def open_batch_channel() -> tuple[BatchSender, BatchReceiver]:
    """An unbounded channel: the pump never waits for the screen (the screen's buffer is bounded)."""
    return trio.open_memory_channel[JobBatch](math.inf)


async def iterate(receive: BatchReceiver) -> AsyncIterator[JobBatch]:
    """The batches, for `TrioBridge.stream` (which wants an async iterable factory)."""
    async with receive:
        async for batch in receive:
            yield batch


def to_log_line(data: Any) -> LogLine:
    """A `line` event's data as a `LogLine` (tolerant of a field the server left out)."""
    if not isinstance(data, dict):
        return LogLine(str(data))
    return LogLine(str(data.get("text", "")), data.get("stream") == "stderr", str(data.get("at") or ""))


async def pump_job_events(
    client: Client,
    job_id: str,
    send: BatchSender,
    last_event_id: str | None = None,
    *,
    interval: float = BATCH_INTERVAL_S,
    max_lines: int = BATCH_MAX_LINES,
) -> None:
    """Read the job's stream (resuming after `last_event_id`) and send it on in batches."""
    pending = JobBatch()

    def flush() -> None:
        nonlocal pending
        if pending.lines or pending.exit is not None or pending.status is not None:
            send.send_nowait(pending)
            pending = JobBatch()

    async def read(done: trio.CancelScope) -> None:
        async for event in client.jobs.stream(job_id, last_event_id=last_event_id):
            if event.event == "line":
                pending.lines.append(to_log_line(event.data))
                seq = event.data.get("seq") if isinstance(event.data, dict) else None
                if isinstance(seq, int):
                    pending.last_seq = seq
                if len(pending.lines) >= max_lines:
                    flush()
            elif event.event == "status" and isinstance(event.data, dict):
                pending.status = str(event.data.get("status") or "") or None
                flush()  # at once: the screen says it runs while it prints nothing yet
            elif event.event == "exit":
                pending.exit = event.data if isinstance(event.data, dict) else {}
        done.cancel()

    async def tick() -> None:
        while True:
            await trio.sleep(interval)
            flush()

    async with send:
        try:
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(tick)
                    await read(nursery.cancel_scope)
            except BaseExceptionGroup as group:
                # The nursery wraps what `read` raised: hand on the error itself (an ApiError...).
                error = unwrap(group)
                if error is group:
                    raise
                raise error from None
        finally:
            # What arrived before the end (or an error) still reaches the screen.
            try:
                flush()
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
