"""`Batched`: calls made at once share a transaction, each gets its own result, and one call's
fault fails only that call (a real SQLite database; transactions counted by a `Database` that
counts its `run`s)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import sqlalchemy as sa
from sqlalchemy import Connection

from control_plane.storage import Database
from control_plane.storage.batches import Batched

CALLS = 50


class CountingDatabase(Database):
    """The real database, counting the transactions made through `run`."""

    transactions = 0

    async def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        self.transactions += 1
        return await super().run(fn, *args, **kwargs)


@pytest.fixture
def db(tmp_path: Path) -> Iterator[CountingDatabase]:
    database = CountingDatabase(f"sqlite:///{tmp_path / 'batches.db'}")
    with database.engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE written (item INTEGER PRIMARY KEY)"))
    yield database
    database.dispose()


def write(conn: Connection, item: int) -> int:
    if item == 13:
        conn.execute(sa.text("INSERT INTO written VALUES (:item)"), {"item": item})
        raise ValueError("unlucky")
    conn.execute(sa.text("INSERT INTO written VALUES (:item)"), {"item": item})
    return item * 2


def written(db: Database) -> list[int]:
    with db.engine.begin() as conn:
        return sorted(conn.execute(sa.text("SELECT item FROM written")).scalars())


def run_at_once(batched: Batched[int, int], items: range) -> dict[int, int | Exception]:
    outcomes: dict[int, int | Exception] = {}

    async def one(item: int) -> None:
        try:
            outcomes[item] = await batched.run(item)
        except ValueError as exc:
            outcomes[item] = exc

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            for item in items:
                tg.start_soon(one, item)

    anyio.run(main)
    return outcomes


def test_calls_made_at_once_share_transactions_and_each_gets_its_result(db: CountingDatabase) -> None:
    outcomes = run_at_once(Batched(db, write), range(100, 100 + CALLS))
    assert outcomes == {item: item * 2 for item in range(100, 100 + CALLS)}
    assert written(db) == list(range(100, 100 + CALLS))
    assert db.transactions <= 3  # the first call alone, then the others together


def test_a_lone_call_is_a_transaction_of_its_own(db: CountingDatabase) -> None:
    assert run_at_once(Batched(db, write), range(7, 8)) == {7: 14}
    assert db.transactions == 1


def test_one_calls_fault_fails_that_call_only(db: CountingDatabase) -> None:
    outcomes = run_at_once(Batched(db, write), range(CALLS))
    assert isinstance(outcomes.pop(13), ValueError)
    assert outcomes == {item: item * 2 for item in range(CALLS) if item != 13}
    assert written(db) == [item for item in range(CALLS) if item != 13]  # its transaction rolled back


def test_batches_are_no_larger_than_asked(db: CountingDatabase) -> None:
    outcomes = run_at_once(Batched(db, write, max_batch=10), range(100, 100 + CALLS))
    assert outcomes == {item: item * 2 for item in range(100, 100 + CALLS)}
    assert db.transactions >= CALLS // 10
