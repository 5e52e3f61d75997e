"""An asyncio event loop in a thread of its own, bridged to the anyio program beside it.

The bus clients (nats-py, like redis.asyncio and psycopg's async connections) run on asyncio
only, whereas the control plane runs on whichever loop anyio gives it: trio under hypercorn's
default worker, asyncio under uvicorn. The client therefore always lives on a loop of its own,
in a daemon thread, and the two sides meet only here:

* the anyio side sends without waiting (`send_soon`: an ordered queue the loop thread drains),
  or awaits a coroutine run there (`run`);
* the loop thread hands messages to the anyio side through an `Inbox`: a thread-safe deque and
  one wake-up per batch, scheduled on the anyio loop without blocking the loop thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import Any, Generic, TypeVar

import anyio
import sniffio

T = TypeVar("T")


def thread_waker() -> Callable[[Callable[[], object]], object]:
    """A way for another thread to run a short callback on the current anyio loop, without
    waiting for it (anyio's `from_thread.run_sync` blocks the calling thread until it ran)."""
    if sniffio.current_async_library() == "trio":
        import trio  # only under trio, which is then loaded already

        return trio.lowlevel.current_trio_token().run_sync_soon
    return asyncio.get_running_loop().call_soon_threadsafe


class Inbox(Generic[T]):
    """Items put by the loop thread, taken in batches by one anyio task."""

    def __init__(self) -> None:
        self._items: deque[T] = deque()
        self._lock = threading.Lock()
        self._woken = False
        self._event = anyio.Event()
        self._wake = thread_waker()

    def put(self, item: T) -> None:
        """From any thread."""
        with self._lock:
            self._items.append(item)
            if self._woken:
                return
            self._woken = True
        self._wake(self._set)

    def _set(self) -> None:
        self._event.set()

    async def take(self) -> list[T]:
        """Everything put since the last take (waits for at least one item)."""
        while True:
            with self._lock:
                if self._items:
                    batch = list(self._items)
                    self._items.clear()
                    self._woken = False
                    return batch
                self._woken = False
            await self._event.wait()
            self._event = anyio.Event()


class LoopThread:
    """An asyncio loop running in a daemon thread until `stop`."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._outbox: asyncio.Queue[Coroutine[Any, Any, Any]] | None = None

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start_sender(), self.loop).result()

    async def _start_sender(self) -> None:
        self._outbox = asyncio.Queue()
        self._sender = asyncio.get_running_loop().create_task(self._send_in_order())

    async def _send_in_order(self) -> None:
        assert self._outbox is not None
        while True:
            coroutine = await self._outbox.get()
            try:
                await coroutine
            except Exception:  # a failed send is the peer's timeout to notice, not the loop's end
                pass

    def send_soon(self, coroutine: Coroutine[Any, Any, Any]) -> None:
        """Run `coroutine` on the loop after those given before it; never waits (from any thread)."""
        assert self._outbox is not None, "LoopThread.start first"
        if self.loop.is_closed():
            coroutine.close()  # stopped: what a stopping replica still says goes nowhere
            return
        self.loop.call_soon_threadsafe(self._outbox.put_nowait, coroutine)

    async def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Await `coroutine` on the loop thread; cancelling the caller cancels it there too."""
        future: Future[T] = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        done = anyio.Event()
        wake = thread_waker()
        future.add_done_callback(lambda _future: wake(done.set))
        try:
            await done.wait()
        finally:
            if not future.done():
                future.cancel()
        return future.result()

    def stop(self) -> None:
        """Cancel what still runs on the loop, then end the thread."""
        if not self.loop.is_running():
            return

        async def cancel_all() -> None:
            tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(cancel_all(), self.loop).result(timeout=5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
        self.loop.close()
