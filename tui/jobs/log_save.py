"""ctrl+s in a job log: ask where to save it (a path, `./<kind>-<job id>.log` offered)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from tui.text import load_tcss


class LogSavePrompt(ModalScreen[str | None]):
    """A path; Enter saves (a second Enter when the file exists replaces it), Esc cancels."""

    DEFAULT_CSS = load_tcss(__file__, "dialogs")

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, default_path: str) -> None:
        super().__init__()
        self.default_path = default_path
        self._confirmed_overwrite: str | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="log-save-box", classes="job-dialog"):
            yield Static("Save the log to", classes="job-dialog--title")
            yield Input(self.default_path, id="log-save-path")
            yield Static("Enter: save · Esc: cancel", id="log-save-hint", classes="job-dialog--hint")

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    @on(Input.Changed)
    def _path_changed(self) -> None:
        self._confirmed_overwrite = None
        self._hint("Enter: save · Esc: cancel")

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        raw = event.value.strip()
        if not raw:
            self._hint("Type a file name.", warning=True)
            return
        path = Path(raw).expanduser()
        if path.is_dir():
            self._hint(f"{raw} is a directory: add a file name.", warning=True)
            return
        if not path.parent.is_dir():
            self._hint(f"No directory {path.parent}.", warning=True)
            return
        if path.exists() and self._confirmed_overwrite != raw:
            self._confirmed_overwrite = raw
            self._hint(f"{raw} exists: Enter again to replace it.", warning=True)
            return
        self.dismiss(raw)

    def action_cancel(self) -> None:
        self.dismiss(None)

    def _hint(self, text: str, *, warning: bool = False) -> None:
        hint = self.query_one("#log-save-hint", Static)
        hint.update(text)
        hint.set_class(warning, "-warning")
