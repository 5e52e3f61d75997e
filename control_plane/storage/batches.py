"""Many tasks' calls of one small write, made together in one transaction.

A relink storm makes thousands of presence writes a minute, each a transaction of its own on a
worker thread: the thread's hand-offs, the transaction's begin and commit cost more than the few
statements in it (benchmarks/fleet.py). `Batched.run` queues the call; the first caller that
finds no batch being written writes all those queued by then, in one `Database.run`, and the
calls queued meanwhile go in the next batch. No task of its own: a quiet control plane writes a
batch of one, as it did before.

anyio only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import anyio
from sqlalchemy import Connection

from control_plane.storage.db import Database
from control_plane.storage.outage import is_outage

A = TypeVar("A")
T = TypeVar("T")

MAX_BATCH = 500  # calls per transaction: a write lock held for some tens of milliseconds at most


@dataclass
class _Call(Generic[A, T]):
    item: A
    done: bool = False
    result: T | None = None
    error: Exception | None = None


class Batched(Generic[A, T]):
    """`run(item)` is `db.run(fn, item)`, made in one transaction with the other calls waiting.

    A batch that fails on an outage of the database fails each of its calls with that error (the
    caller tries again, as it would have); one that fails on any other error is made again call by
    call, each in a transaction of its own, so that one call's fault is only that call's.
    """

    def __init__(self, db: Database, fn: Callable[[Connection, A], T], max_batch: int = MAX_BATCH) -> None:
        self._db = db
        self._fn = fn
        self._max_batch = max_batch
        self._queued: list[_Call[A, T]] = []
        self._writing = anyio.Lock()

    async def run(self, item: A) -> T:
        """`fn(conn, item)` in a transaction (shared with other calls); its result, or its error."""
        call: _Call[A, T] = _Call(item)
        self._queued.append(call)
        async with self._writing:  # first come, first served: our call is written by now or by us
            if not call.done:
                batch, self._queued = self._queued[: self._max_batch], self._queued[self._max_batch :]
                try:
                    await self._write(batch)
                finally:  # cancelled: what was not written goes first in the next batch
                    self._queued[:0] = [waiting for waiting in batch if not waiting.done]
        if call.error is not None:
            raise call.error
        return call.result  # type: ignore[return-value]

    async def _write(self, batch: list[_Call[A, T]]) -> None:
        try:
            results = await self._db.run(self._each, [call.item for call in batch])
        except Exception as exc:
            if is_outage(exc) or len(batch) == 1:
                for call in batch:
                    call.done, call.error = True, exc
                return
            for call in batch:  # one call's fault: find it, and write the others
                try:
                    call.result = await self._db.run(self._fn, call.item)
                except Exception as alone:
                    call.error = alone
                call.done = True
            return
        for call, result in zip(batch, results, strict=True):
            call.done, call.result = True, result

    def _each(self, conn: Connection, items: list[A]) -> list[T]:
        return [self._fn(conn, item) for item in items]
