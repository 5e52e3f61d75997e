"""Rows a request reads again and again, kept in the process for a bounded time and forgotten at
once when this process writes to the tables they come from.

What a `KeptReads` promises, for whatever it keeps:

- any insert, update or delete of one of its `tables` through the watched engine forgets
  everything it keeps, at the statement and again at its transaction's commit or rollback (a
  read between the two could otherwise keep the row from before the commit);
- a value read before such a write is never kept after it: `keep` takes the `generation` read
  before the lookup, and a write since makes it refuse;
- a change made by another process (another replica, `fleetdeck admin`) is seen within `keep_s`:
  nothing is used longer than that after it was read.

Users: the caller's principal by token (`control_plane.auth.identities`), a server's row by org
and id (`control_plane.servers.routes.server_row`). docs/security-load.md says why each is safe.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Hashable
from typing import Any, Generic, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class KeptReads(Generic[K, V]):
    """Values by key, forgotten on this process's writes to `tables` and `keep_s` after they were
    read; at most `max_kept` (past that, all are forgotten at once: a flood costs lookups, not memory)."""

    def __init__(self, tables: frozenset[str], keep_s: float, max_kept: int = 10_000) -> None:
        self.tables = tables
        self.keep_s = keep_s
        self.max_kept = max_kept
        self._kept: dict[K, tuple[V, float, int]] = {}  # value, read at (monotonic), generation
        self._generation = 0
        self._lock = threading.Lock()  # writes run on worker threads
        self._flag = f"kept-{id(self)}-written"

    def watch(self, engine: Engine) -> None:
        """Forget everything whenever a statement through `engine` writes to one of the tables,
        and again when its transaction commits or rolls back."""
        sa.event.listen(engine, "after_execute", self._after_execute)
        sa.event.listen(engine, "commit", self._after_transaction)
        sa.event.listen(engine, "rollback", self._after_transaction)

    @property
    def generation(self) -> int:
        """Read before the lookup and passed to `keep`: a write in between makes the read stale."""
        return self._generation

    def get(self, key: K) -> V | None:
        kept = self._kept.get(key)
        if kept is None or kept[2] != self._generation or time.monotonic() - kept[1] > self.keep_s:
            return None
        return kept[0]

    def keep(self, key: K, value: V, generation: int) -> None:
        """Keep a value read at `generation` (unless a write came since)."""
        with self._lock:
            if generation != self._generation:
                return
            if len(self._kept) >= self.max_kept:
                self._kept.clear()
            self._kept[key] = (value, time.monotonic(), generation)

    def forget_all(self) -> None:
        with self._lock:
            self._generation += 1
            self._kept.clear()

    def _after_execute(self, conn: Connection, clause: Any, *_args: Any) -> None:
        table = getattr(clause, "table", None)
        if isinstance(clause, sa.sql.dml.UpdateBase) and getattr(table, "name", None) in self.tables:
            conn.info[self._flag] = True
            self.forget_all()

    def _after_transaction(self, conn: Connection) -> None:
        if conn.info.pop(self._flag, False):
            self.forget_all()
