"""Who a bearer token is, remembered for a second: most requests skip the identity lookup.

Profiled under 50 concurrent clients (benchmarks/concurrency.py, py-spy --gil), the token's lookup
(`identity_for_token`: four tables joined, built and compiled by SQLAlchemy on each request) held
the interpreter's lock for some 23 % of the control plane's time. A client sends many requests with
one token, so the principal it resolves to is kept here.

How a kept principal stays correct (a security decision; docs/security-load.md):

- Any write that this process makes to the tables a principal comes from (tokens, users, orgs,
  memberships: a revoked API token, and any role, membership, user or plan change made
  through this process) forgets every kept principal, at the statement and again at its commit (a read
  between the two could otherwise keep the row from before the commit). The watch is on the engine,
  so no route has to remember to call it.
- A change made by another process (another replica on the same database, `fleetdeck admin
  set-plan`) takes effect within `KEEP_S`: no principal is used longer than that after it was read.
- A token's expiry is checked on every request, kept or not; an unknown, expired or refused token
  is never kept, so each of its requests is looked up (and refused) as before.
- Tokens are kept by their hash (`hash_token`), never as the secret itself.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from control_plane.auth.principal import Principal

KEEP_S = 1.0  # the longest a principal is used after it was read (another process's change)
MAX_KEPT = 10_000  # tokens; past it, all are forgotten at once (a flood of logins, not a leak)
# The tables a principal is read from (`control_plane.auth.store.identity_for_token`).
WATCHED_TABLES = frozenset({"tokens", "users", "orgs", "memberships"})


@dataclass(frozen=True)
class _Kept:
    principal: Principal
    expires_at: datetime | None
    read_at: float  # time.monotonic()
    generation: int


class IdentityCache:
    """Principals by token hash, forgotten on this process's writes to the identity tables and
    `KEEP_S` after they were read."""

    def __init__(self) -> None:
        self._kept: dict[str, _Kept] = {}
        self._generation = 0
        self._lock = threading.Lock()  # writes run on worker threads

    def watch(self, engine: Engine) -> None:
        """Forget every principal whenever a statement through `engine` writes to a watched
        table, and again when its transaction commits or rolls back."""
        sa.event.listen(engine, "after_execute", self._after_execute)
        sa.event.listen(engine, "commit", self._after_transaction)
        sa.event.listen(engine, "rollback", self._after_transaction)

    @property
    def generation(self) -> int:
        """Read before the lookup and passed to `keep`: a write in between makes the read stale."""
        return self._generation

    def get(self, token_hash: str, now: datetime) -> Principal | None:
        """The principal kept for `token_hash`, if it is still current and its token unexpired."""
        kept = self._kept.get(token_hash)
        if kept is None or kept.generation != self._generation or time.monotonic() - kept.read_at > KEEP_S:
            return None
        if kept.expires_at is not None and kept.expires_at <= now:
            return None
        return kept.principal

    def keep(self, token_hash: str, principal: Principal, expires_at: datetime | None, generation: int) -> None:
        """Keep a principal read at `generation` (unless a write came since)."""
        with self._lock:
            if generation != self._generation:
                return
            if len(self._kept) >= MAX_KEPT:
                self._kept.clear()
            self._kept[token_hash] = _Kept(principal, expires_at, time.monotonic(), generation)

    def forget_all(self) -> None:
        with self._lock:
            self._generation += 1
            self._kept.clear()

    def _after_execute(self, conn: Connection, clause: Any, *_args: Any) -> None:
        table = getattr(clause, "table", None)
        if isinstance(clause, sa.sql.dml.UpdateBase) and getattr(table, "name", None) in WATCHED_TABLES:
            conn.info["identities_written"] = True
            self.forget_all()

    def _after_transaction(self, conn: Connection) -> None:
        if conn.info.pop("identities_written", False):
            self.forget_all()
