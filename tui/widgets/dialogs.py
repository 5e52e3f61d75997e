"""The modal dialogs every area uses: the frame (`Dialog`) and a yes/no confirmation.

A dialog is a `FleetModal`: its trio tasks are cancelled when it closes. Its layout is one box
(`.dialog`) with a title, the body, a status line (errors, progress words), a hint line with
the keys, and the buttons; it fits 80x24. An area's own dialogs (files, jobs, load balancers)
subclass `Dialog` in the area, with their CSS beside their module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Static

from api_client import errors as api_errors
from contract.models import PresenceEvent
from tui.errors import describe_error, unwrap
from tui.screen import FleetModal
from tui.text import load_tcss, printable

T = TypeVar("T")


class Dialog(FleetModal[T]):
    """A dialog: Esc cancels (`cancel_result`), errors go to the status line and a notification."""

    DEFAULT_CSS = load_tcss(__file__)
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    _pending_result: tuple[T] | None = None
    _when_back: tuple[str, Callable[[], None]] | None = None  # (server id, what to do again)

    def cancel_result(self) -> T:
        """What Esc dismisses with (None for most dialogs)."""
        return None  # type: ignore[return-value]

    def action_cancel(self) -> None:
        self.finish(self.cancel_result())

    @property
    def closed(self) -> bool:
        """True once the dialog left the screen stack (a late trio answer must not dismiss twice)."""
        return self not in self.app.screen_stack

    def finish(self, result: T) -> None:
        """Dismiss with `result`, once. Under another screen (a confirmation, a notification
        screen pushed over it), the dialog closes as soon as it is on top again.

        The keys typed while the dialog submitted (`hold_keys(SUBMITTING)`) then go to what its
        result opens (`dismiss_submitted`)."""
        if self.closed:
            return
        if self.app.screen is self:
            self.dismiss_submitted(result)
        else:
            self._pending_result = (result,)

    def on_screen_resume(self) -> None:
        pending = self._pending_result
        if pending is not None:
            self._pending_result = None
            self.call_later(self.finish, pending[0])

    def set_status(self, text: str, *, error: bool = False) -> None:
        """The status line of the dialog (`#status`, when it has one)."""
        for line in self.query("#status").results(Static):
            line.update(printable(text))
            line.set_class(error, "-error")

    def show_error(self, exc: BaseException, *, path: str | None = None) -> str:
        """`exc` in words, on the status line and as a notification; the words are returned."""
        server = getattr(getattr(self, "server", None), "name", None)
        message = describe_error(exc, server=server, path=path)
        self.set_status(message, error=True)
        self.notify(message, severity="error", timeout=8)
        return message

    def again_when_agent_back(self, exc: BaseException, server_id: str, again: Callable[[], None]) -> bool:
        """When `exc` says the agent of `server_id` is offline: say so on the status line (no
        notification: the dialog shows it) and call `again` once the agent is back (the monitor's
        presence stream, as the files panels follow it). Answers whether it was that.

        Args:
            exc: what a request of the dialog failed with.
            server_id: the server the request went to.
            again: the request again (it may fail so again, and wait again).
        """
        if not isinstance(unwrap(exc), api_errors.AgentOffline):
            return False
        server = getattr(getattr(self, "server", None), "name", None) or "this server"
        self.set_status(f"The agent of {server} is offline: this is read again once it is back.", error=True)
        if self._when_back is None:
            self.monitor.presence.subscribe(self, self._presence_changed)
        self._when_back = (server_id, again)
        return True

    def _presence_changed(self, event: PresenceEvent) -> None:
        if self._when_back is None or not event.online or event.server_id != self._when_back[0]:
            return
        again, self._when_back = self._when_back[1], None
        self.set_status("Reading again…")
        again()

    def report(self, callback: Callable[..., Any], *args: Any) -> None:
        """From trio: run `callback(*args)` on this dialog's message queue (the bridge's own way back).

        For progress that arrives many times during one task; trio code never touches a widget,
        it only posts a message. Dropped once the dialog is gone.
        """
        if not self.closed:
            self.post_message(events.Callback(callback=lambda: callback(*args)))


class ConfirmDialog(Dialog[bool]):
    """y confirms, n or Esc refuses; Enter presses the focused button, which for a destructive
    action is the safe one (No)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
    ]

    def __init__(self, title: str, text: str, *, confirm_label: str, destructive: bool = True) -> None:
        super().__init__()
        self.title_text = title
        self.text = text
        self.confirm_label = confirm_label
        self.destructive = destructive

    def cancel_result(self) -> bool:
        return False

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box", classes="dialog" + (" -destructive" if self.destructive else "")):
            yield Static(printable(self.title_text), classes="dialog--title", markup=False)
            if self.text:
                yield Static(self.text, classes="dialog--text", markup=False)
            with Horizontal(classes="dialog--buttons"):
                yield Button(
                    f"{self.confirm_label} (y)",
                    id="confirm-yes",
                    compact=True,
                    variant="error" if self.destructive else "primary",
                )
                yield Button("No (n)", id="confirm-no", compact=True)
            safe = "Enter: No" if self.destructive else f"Enter: {self.confirm_label}"
            yield Static(f"y: {self.confirm_label} · n/Esc: No · {safe}", classes="dialog--hint", markup=False)

    def on_mount(self) -> None:
        self.query_one("#confirm-no" if self.destructive else "#confirm-yes", Button).focus()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.finish(event.button.id == "confirm-yes")

    def action_answer(self, yes: bool) -> None:
        self.finish(yes)
