"""A bulk action over more items than one batch (move, copy, trash, delete of thousands of marked
items): the client sends them in batches (`api_client.PATHS_PER_BATCH`); this dialog shows a
bar with the counts, and Stop (Esc) ends the action after the batch in flight. A failure part way
says in words what was done before it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, ProgressBar, Static

from api_client import BatchInterrupted, BatchProgress, KeepGoing
from tui.errors import describe_error, unwrap
from tui.files.dialogs.base import plural
from tui.text import printable
from tui.widgets.dialogs import Dialog

BulkWork = Callable[[BatchProgress, KeepGoing], Awaitable[Any]]
"""The action, given where to report progress and what to ask before each further batch."""


def describe_bulk_error(exc: BaseException, verb: str, *, server: str | None = None) -> str:
    """`exc` of a bulk action in words, with what was done before it (`verb`: "Moved", "Copied"…)."""
    exc = unwrap(exc)
    if not isinstance(exc, BatchInterrupted):
        return describe_error(exc, server=server)
    done = f"{verb} {exc.done:,} of {plural(exc.total, 'item')}"
    if exc.cause is None:
        return f"Stopped: {done}."
    return f"{done}, then: {describe_error(exc.cause, server=server)}"


class BulkDialog(Dialog[Any]):
    """Runs `work` at once; dismisses with its result, or None when it was stopped or failed."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Stop")]

    def __init__(self, title: str, verb: str, total: int, work: BulkWork, *, server: str | None = None) -> None:
        super().__init__()
        self.title_text = title
        self.verb = verb
        self.total = total
        self.work = work
        self.server_name = server
        self.stopping = False
        self.ended = False

    def compose(self) -> ComposeResult:
        with Vertical(id="bulk-box", classes="dialog"):
            yield Static(printable(self.title_text), classes="dialog--title", markup=False)
            yield ProgressBar(total=self.total, show_eta=False, id="bulk-bar")
            yield Static(f"0 of {plural(self.total, 'item')}", id="bulk-numbers", markup=False)
            yield Static("", id="status", markup=False)
            with Horizontal(classes="dialog--buttons"):
                yield Button("Stop", id="bulk-stop", compact=True)
            yield Static("Esc: stop after the batch in flight", id="bulk-hint", classes="dialog--hint")

    def on_mount(self) -> None:
        self.query_one("#bulk-stop", Button).focus()
        self.bridge.run(self, self._run, on_done=self._done, on_error=self._failed)

    async def _run(self) -> Any:
        def progress(done: int, total: int) -> None:
            self.report(self._progress, done, total)

        return await self.work(progress, lambda: not self.stopping)

    def _progress(self, done: int, total: int) -> None:
        self.query_one("#bulk-bar", ProgressBar).update(total=total, progress=done)
        self.query_one("#bulk-numbers", Static).update(f"{done:,} of {plural(total, 'item')}")

    def _done(self, result: Any) -> None:
        self.ended = True
        self.notify(f"{self.verb} {plural(self.total, 'item')}.")
        self.finish(result)

    def _failed(self, exc: BaseException) -> None:
        self.ended = True
        message = describe_bulk_error(exc, self.verb, server=self.server_name)
        reason = unwrap(exc)
        if isinstance(reason, BatchInterrupted) and reason.cause is None:  # stopped as asked
            self.notify(message)
            self.finish(None)
            return
        self.set_status(message, error=True)
        self.notify(message, severity="error", timeout=8)
        self.query_one("#bulk-stop", Button).label = "Close"
        self.query_one("#bulk-hint", Static).update("Esc: close")

    @on(Button.Pressed, "#bulk-stop")
    def _pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.action_cancel()

    def action_cancel(self) -> None:
        if self.ended or self.stopping:  # a second Esc no longer waits for the batch in flight
            self.finish(None)
            return
        self.stopping = True
        self.set_status("Stopping after the batch in flight…")
