"""The first screen while the local stack starts: what is starting, then why it did not."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import LoadingIndicator, Static

from tui.text import load_tcss, printable_line


class StartingScreen(Screen[None]):
    """Drawn at once; `failed` replaces the spinner with the error and the stack's stderr tail."""

    HELP_TITLE = "Starting"

    DEFAULT_CSS = load_tcss(__file__)

    BINDINGS: ClassVar[list[BindingType]] = [Binding("q", "app.quit", "Quit", show=False)]

    def __init__(self, description: str) -> None:
        super().__init__()
        self.description = description

    def compose(self) -> ComposeResult:
        with Vertical(id="starting-box"):
            yield Static(self.description, id="starting-what", markup=False)
            yield LoadingIndicator(id="starting-spinner")
            yield Static("", id="starting-error", markup=False)

    def on_mount(self) -> None:
        # The title and key bars a frame later: importing, styling and laying out the header
        # alone took about 5 ms of CPU, a quarter of what the first frame cost over a bare app's
        # (`benchmarks/startup.py`), and the line saying what starts needs neither.
        self.call_after_refresh(self._mount_bars)

    def _mount_bars(self) -> None:
        from textual.widgets import Footer

        from tui.widgets.header import SafeHeader

        self.mount(SafeHeader(), before=0)
        self.mount(Footer())

    def connected(self) -> None:
        """The server list covers this screen for good: the spinner stops ticking under it."""
        self.query_one("#starting-spinner").remove()

    def failed(self, message: str) -> None:
        """Show why the start failed; the user reads it and quits."""
        self.query_one("#starting-spinner").display = False
        error = self.query_one("#starting-error", Static)
        error.update("\n".join(printable_line(line) for line in message.splitlines()) + "\n\nPress q to quit.")
        error.display = True
