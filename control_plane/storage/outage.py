"""What a database outage looks like, as opposed to a bug, and what this process knows of one.

An outage is the database being away or unable to answer for now: PostgreSQL restarting or
unreachable (the driver's connection errors, a connection the pool found dead), the pool out of
connections, SQLite's file locked past its busy timeout (30 s: another process holds it) or
unreadable. It ends by itself: a request during one answers `503 unavailable` with a
`Retry-After` (`control_plane.errors`), and a long-running task waits and tries again
(`Database.run_retrying`). Anything else the database raises (a constraint, a query the schema
does not know) is a bug and surfaces as one.

`DatabaseState` is this process's view, from the outcome of every transaction: it says once when
an outage begins and once when it ends (not once per failed try), and `/v1/health` reads it.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from typing import Literal

import sqlalchemy as sa

log = logging.getLogger("fleetdeck.database")

# What SQLite says when its file cannot be used for now; its other errors are bugs.
_SQLITE_OUTAGES = ("database is locked", "database table is locked", "unable to open database", "disk i/o error")
# How long a request's client is told to wait before it tries again.
RETRY_AFTER_S = 5

Health = Literal["ok", "unavailable"]


def is_outage(exc: BaseException) -> bool:
    """Whether `exc`, raised by the database layer, says the database is away (not a bug)."""
    if isinstance(exc, sa.exc.TimeoutError):  # no connection free in the pool within its timeout
        return True
    if not isinstance(exc, sa.exc.DBAPIError):
        return False
    if exc.connection_invalidated:  # the connection was found dead (server restarted, network cut)
        return True
    if not isinstance(exc, sa.exc.OperationalError | sa.exc.InterfaceError):
        return False
    if isinstance(exc.orig, sqlite3.Error):
        return any(text in str(exc.orig).lower() for text in _SQLITE_OUTAGES)
    # PostgreSQL (psycopg): connection refused or lost, the server shutting down or starting,
    # a deadlock or serialisation failure (transient by definition): all OperationalError.
    return True


def first_line(exc: BaseException) -> str:
    """What a log line says of an outage error: its driver's first line, not SQLAlchemy's essay."""
    cause = exc.orig if isinstance(exc, sa.exc.DBAPIError) and exc.orig is not None else exc
    text = str(cause).strip().splitlines()
    return text[0] if text else type(cause).__name__


class DatabaseState:
    """The outcome of this process's latest transactions: whether the database is away, since
    when, and when it last answered. Updated from the worker threads that run transactions."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.away_since: float | None = None  # time.monotonic() of the first failure of an outage
        self.checked_at = -float("inf")  # time.monotonic() of the latest outcome, either way
        self._failures = 0

    @property
    def health(self) -> Health:
        return "ok" if self.away_since is None else "unavailable"

    def answered(self) -> None:
        with self._lock:
            self.checked_at = time.monotonic()
            if self.away_since is None:
                return
            away_s, failures = self.checked_at - self.away_since, self._failures
            self.away_since, self._failures = None, 0
        log.warning("the database is back after %.1f s away (%d failed transactions meanwhile)", away_s, failures)

    def failed(self, exc: BaseException) -> None:
        with self._lock:
            self.checked_at = time.monotonic()
            self._failures += 1
            if self.away_since is not None:
                return
            self.away_since = self.checked_at
        log.warning("the database is away: %s; requests answer 503 and background work waits for it", first_line(exc))
