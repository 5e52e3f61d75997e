"""The trio bridge: trio runs in guest mode on Textual's asyncio loop.

Textual owns the thread and its asyncio loop; the API client (httpx) and everything network-facing
runs in trio. `trio.lowlevel.start_guest_run` lets both share the one thread: trio schedules its
ticks as asyncio callbacks. The two worlds meet at exactly two points:

* Textual → trio: `TrioBridge.run()` / `stream()` hand a job to trio with the `TrioToken` captured
  at start (`run_sync_soon`), never by calling trio APIs from asyncio code.
* trio → Textual: results travel back as a `events.Callback` message posted to the requesting
  widget or screen (`post_message`), so the callback runs in Textual context, on the requester's
  own message queue. trio code never touches widgets. (`App.call_from_thread` cannot be used: in
  guest mode both loops share the thread, and it refuses to run on the app's own thread.)

Every task is guarded: its exception becomes an `on_error` call on the requester (by default an
error notification), it never cancels its siblings and never reaches the screen as a traceback.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterable, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import outcome
import trio
from textual import events
from textual.message_pump import MessagePump

log = logging.getLogger(__name__)

T = TypeVar("T")

ErrorCallback = Callable[[BaseException], Any]
ShutdownHook = Callable[[], Awaitable[None]]

# How long shutdown hooks (e.g. closing the HTTP client) may take before they are abandoned.
SHUTDOWN_GRACE_SECONDS = 3.0


class BridgeClosed(RuntimeError):
    """Work was submitted to a bridge that is stopping or stopped."""


@dataclass(eq=False)
class TaskHandle:
    """A job running (or about to run) in trio on behalf of a requester; `cancel()` it at will."""

    requester: MessagePump
    name: str
    _bridge: TrioBridge = field(repr=False)
    _cancel_scope: trio.CancelScope | None = field(default=None, repr=False)
    cancelled: bool = False
    finished: bool = False

    def cancel(self) -> None:
        """Cancel the job; safe to call from Textual code, any number of times."""
        if self.cancelled or self.finished:
            return
        self.cancelled = True
        self._bridge._call_in_trio(self._cancel_in_trio)

    def _cancel_in_trio(self) -> None:
        if self._cancel_scope is not None:
            self._cancel_scope.cancel()


class TrioBridge:
    """One trio guest run per app, started on mount and stopped on unmount.

    The public methods are meant to be called from Textual code (the asyncio side). Callbacks
    (`on_done`, `on_item`, `on_error`) run in Textual context, on the requester's message queue;
    if the requester is gone by then they are dropped.
    """

    def __init__(self) -> None:
        self._token: trio.lowlevel.TrioToken | None = None
        self._nursery: trio.Nursery | None = None
        self._pending: list[Callable[[], None]] = []
        self._handles: set[TaskHandle] = set()
        self._shutdown_hooks: list[ShutdownHook] = []
        self._done: asyncio.Future[outcome.Outcome[None]] | None = None
        self._stopping = False

    # --- lifecycle (asyncio side) --------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._done is not None and not self._done.done() and not self._stopping

    def start(self) -> None:
        """Start trio as a guest of the running asyncio loop (call from Textual, e.g. on mount)."""
        if self._done is not None:
            raise RuntimeError("a TrioBridge runs once; create a new one")
        loop = asyncio.get_running_loop()
        self._done = loop.create_future()
        done = self._done

        def on_guest_done(result: outcome.Outcome[None]) -> None:
            if not done.done():
                done.set_result(result)

        trio.lowlevel.start_guest_run(
            self._main,
            run_sync_soon_threadsafe=loop.call_soon_threadsafe,
            run_sync_soon_not_threadsafe=loop.call_soon,
            done_callback=on_guest_done,
            # asyncio owns signal handling (Textual installs its handlers through the loop).
            host_uses_signal_set_wakeup_fd=True,
        )

    async def stop(self, grace_seconds: float = 10.0) -> None:
        """Cancel every task, run the shutdown hooks, and wait for the guest run to finish."""
        if self._done is None or self._stopping:
            if self._done is not None:
                await asyncio.wait_for(asyncio.shield(self._done), grace_seconds)
            return
        self._stopping = True
        self._pending.clear()
        self._call_in_trio(self._cancel_everything, even_when_stopping=True)
        try:
            result = await asyncio.wait_for(asyncio.shield(self._done), grace_seconds)
        except TimeoutError:
            log.error("the trio guest run did not finish within %ss", grace_seconds)
            return
        if isinstance(result, outcome.Error):
            log.error("the trio guest run ended with an error", exc_info=result.error)

    def add_shutdown_hook(self, hook: ShutdownHook) -> None:
        """Run `hook` in trio after every task is cancelled, before the run ends (e.g. `aclose`)."""
        self._shutdown_hooks.append(hook)

    # --- submitting work (asyncio side) --------------------------------------------------

    def run(
        self,
        requester: MessagePump,
        async_fn: Callable[..., Awaitable[T]],
        *args: Any,
        on_done: Callable[[T], Any] | None = None,
        on_error: ErrorCallback | None = None,
        name: str | None = None,
    ) -> TaskHandle:
        """Run `await async_fn(*args)` in trio; call `on_done(result)` on the requester after.

        `on_error(exc)` runs instead when it raises (default: an error notification). Nothing is
        called when the task is cancelled or the requester has been removed meanwhile.
        """

        async def job(handle: TaskHandle) -> None:
            result = await async_fn(*args)
            if on_done is not None:
                self._deliver(handle, on_done, result)

        return self._submit(requester, job, on_error, name or _name_of(async_fn))

    def stream(
        self,
        requester: MessagePump,
        open_stream: Callable[..., AsyncIterable[T]],
        *args: Any,
        on_item: Callable[[T], Any],
        on_end: Callable[[], Any] | None = None,
        on_error: ErrorCallback | None = None,
        name: str | None = None,
    ) -> TaskHandle:
        """Iterate `open_stream(*args)` in trio, calling `on_item(item)` on the requester for each.

        A long-lived task: it stops when the stream ends (`on_end`), fails (`on_error`), is
        cancelled, or when the requester can no longer receive messages (it was unmounted).
        """

        async def job(handle: TaskHandle) -> None:
            async for item in open_stream(*args):
                if not self._deliver(handle, on_item, item):
                    return  # the requester is gone: nobody listens any more
            if on_end is not None:
                self._deliver(handle, on_end)

        return self._submit(requester, job, on_error, name or _name_of(open_stream))

    def cancel_requested_by(self, requester: MessagePump) -> None:
        """Cancel every task of `requester` (called when it unmounts)."""
        for handle in [h for h in self._handles if h.requester is requester]:
            handle.cancel()

    # --- internals ------------------------------------------------------------------------

    def _submit(
        self,
        requester: MessagePump,
        job: Callable[[TaskHandle], Awaitable[None]],
        on_error: ErrorCallback | None,
        name: str,
    ) -> TaskHandle:
        if self._done is None or self._stopping:
            raise BridgeClosed("the trio bridge is not running")
        handle = TaskHandle(requester=requester, name=name, _bridge=self)
        self._handles.add(handle)

        def spawn() -> None:
            if self._nursery is None or handle.cancelled:
                self._handles.discard(handle)
                return
            self._nursery.start_soon(self._guarded, handle, job, on_error, name=name)

        self._call_in_trio(spawn)
        return handle

    async def _guarded(
        self,
        handle: TaskHandle,
        job: Callable[[TaskHandle], Awaitable[None]],
        on_error: ErrorCallback | None,
    ) -> None:
        """Run one job so that nothing it raises escapes into the nursery."""
        try:
            with trio.CancelScope() as scope:
                handle._cancel_scope = scope
                if handle.cancelled:
                    scope.cancel()
                await job(handle)
        except Exception as exc:
            log.debug("task %s of %r failed", handle.name, handle.requester, exc_info=exc)
            self._deliver(handle, on_error or _notify_error(handle.requester), exc)
        finally:
            handle.finished = True
            self._handles.discard(handle)

    def _deliver(self, handle: TaskHandle, callback: Callable[..., Any], *args: Any) -> bool:
        """Post `callback(*args)` to the requester's queue; False if it can no longer receive."""
        if handle.cancelled:
            return False
        return handle.requester.post_message(events.Callback(callback=lambda: callback(*args)))

    def _call_in_trio(self, fn: Callable[[], None], *, even_when_stopping: bool = False) -> None:
        """Run `fn` in trio context soon: queued until the guest run has opened its nursery."""
        if self._stopping and not even_when_stopping:
            return
        if self._token is None:
            self._pending.append(fn)
            return
        try:
            self._token.run_sync_soon(fn)
        except trio.RunFinishedError:
            pass

    def _cancel_everything(self) -> None:
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    async def _main(self) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self._token = trio.lowlevel.current_trio_token()
                pending, self._pending = self._pending, []
                for fn in pending:
                    fn()
                await trio.sleep_forever()
        finally:
            self._nursery = None
            await self._run_shutdown_hooks()

    async def _run_shutdown_hooks(self) -> None:
        with trio.move_on_after(SHUTDOWN_GRACE_SECONDS) as scope:
            scope.shield = True
            for hook in self._shutdown_hooks:
                try:
                    await hook()
                except Exception:
                    log.exception("a shutdown hook of the trio bridge failed")


def _name_of(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)


def _notify_error(requester: MessagePump) -> ErrorCallback:
    """The default `on_error`: an error notification worded for humans."""
    from tui.errors import describe_error

    def notify(exc: BaseException) -> None:
        requester.app.notify(describe_error(exc), severity="error", timeout=8)

    return notify


class BridgedMixin:
    """Mix into a Widget or Screen that submits trio work: its tasks end when it unmounts.

    Textual dispatches `_on_unmount` of every class in the MRO, so this runs alongside the
    subclass's own `on_unmount`.
    """

    def _on_unmount(self) -> None:
        bridge = getattr(getattr(self, "app", None), "bridge", None)
        if isinstance(bridge, TrioBridge) and isinstance(self, MessagePump):
            bridge.cancel_requested_by(self)
