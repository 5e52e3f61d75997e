"""The waiters every test uses: results of the real stack, the agent and trio arrive on their own schedule.

One waiter per way a test can wait: `wait_until` (plain code), `eventually` (inside trio), `wait_for`
(inside a Textual `Pilot`, whose `pause()` does not await the trio side) and `soon` (on the app's loop,
past a screen too busy for the pilot). Each polls its condition and, when it does not hold in time,
fails with a message naming it.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import Callable
from typing import Any

import trio
from textual.pilot import Pilot

POLL_S = 0.05


def describe(predicate: Callable[[], object]) -> str:
    """The condition in words: the source line of a lambda, else the callable's name."""
    try:
        source = inspect.getsource(predicate).strip()
    except (OSError, TypeError):
        return repr(predicate)
    return " ".join(source.split()) if getattr(predicate, "__name__", "") == "<lambda>" else predicate.__qualname__


def wait_until(predicate: Callable[[], object], timeout: float = 15.0) -> None:
    """Poll until `predicate()` holds, from plain (non-async) test code."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            raise AssertionError(f"not met within {timeout} s: {describe(predicate)}")
        time.sleep(POLL_S)


async def eventually(predicate: Callable[[], object], within: float = 5.0) -> None:
    """Poll until `predicate()` holds, inside trio (e.g. what the agent does to its file system)."""
    with trio.move_on_after(within):
        while not predicate():  # noqa: ASYNC110 (what it watches sends no event)
            await trio.sleep(0.01)
        return
    raise AssertionError(f"not met within {within} s: {describe(predicate)}")


async def wait_for(pilot: Pilot[Any], predicate: Callable[[], object], seconds: float = 20) -> None:
    """Poll until `predicate()` holds in a running app; the failure also shows the screen and notifications."""
    for _ in range(int(seconds / POLL_S)):
        if predicate():
            return
        await pilot.pause(POLL_S)
    notes = [n.message for n in pilot.app._notifications]
    raise AssertionError(
        f"not met within {seconds} s: {describe(predicate)}; screen {pilot.app.screen!r}, notifications {notes}"
    )


async def soon(predicate: Callable[[], object], seconds: float = 30) -> None:
    """Poll `predicate()` on the asyncio loop itself, for the moment a busy screen passes through:
    `wait_for` goes through `pilot.pause()`, which first waits for the screen to process its messages."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            while not predicate():  # noqa: ASYNC110 (what it watches sends no event)
                await asyncio.sleep(0.002)
            return
    raise AssertionError(f"not met within {seconds} s: {describe(predicate)}")
