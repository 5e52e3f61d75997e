"""Copy or move: what goes where, an editable destination folder and overwrite; the caller runs
the operation with the answer. Cross-site and cross-server operations say so."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Literal

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Input, Label, Static

from tui.files.dialogs.base import describe_items
from tui.text import PRINTABLE, printable
from tui.widgets.dialogs import Dialog
from tui.widgets.toggles import Checkbox

Operation = Literal["copy", "move"]
Cross = Literal["site", "server", "logs"]

CROSS_NOTES = {
    "site": "Cross-site: the destination is another site of this server (owners only).",
    "server": "Cross-server: the bytes go from server to server; this needs the owner role and both agents online.",
    "logs": "Out of the site's logs into its files: the logs stay as they are.",
}


class CopyDialog(Dialog[tuple[str, bool] | None]):
    """Enter (or ctrl+s) goes ahead with (destination, overwrite); Esc cancels."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel"),
        Binding("ctrl+s", "go", "Go"),
        Binding("ctrl+o", "toggle_overwrite", "Overwrite"),
    ]

    def __init__(
        self,
        operation: Operation,
        sources: Sequence[str],
        source_label: str,
        destination_label: str,
        destination: str,
        *,
        cross: str | None,
    ) -> None:
        super().__init__()
        self.operation = operation
        self.sources = list(sources)
        self.source_label = source_label
        self.destination_label = destination_label
        self.destination = destination
        self.cross = cross

    def summary(self) -> str:
        """`Copy 3 items from web1:example.com:/public_html → web2:/home:/backup`."""
        verb = "Copy" if self.operation == "copy" else "Move"
        return printable(f"{verb} {describe_items(self.sources)} from {self.source_label} → {self.destination_label}")

    def compose(self) -> ComposeResult:
        verb = "Copy" if self.operation == "copy" else "Move"
        with Vertical(id="copy-box", classes="dialog"):
            yield Static(f"{verb} {describe_items(self.sources)}", classes="dialog--title", markup=False)
            yield Static(self.summary(), classes="dialog--text", markup=False)
            if self.cross in CROSS_NOTES:
                yield Static(CROSS_NOTES[self.cross], id="copy-cross", classes="dialog--note", markup=False)
            yield Label("To the folder", classes="dialog--label")
            yield Input(
                self.destination,
                placeholder="/ (the scope root)",
                id="copy-destination",
                compact=True,
                highlighter=PRINTABLE,
            )
            yield Checkbox("Overwrite what is already there (ctrl+o)", False, id="copy-overwrite", compact=True)
            yield Static("", id="status", markup=False)
            with Horizontal(classes="dialog--buttons"):
                yield Button(verb, id="copy-go", variant="primary", compact=True)
                yield Button("Cancel", id="copy-cancel", compact=True)
            yield Static(f"Enter: {verb.lower()} · ctrl+o: overwrite · Esc: cancel", classes="dialog--hint")

    def on_mount(self) -> None:
        self.query_one("#copy-destination", Input).focus()

    def action_toggle_overwrite(self) -> None:
        box = self.query_one("#copy-overwrite", Checkbox)
        box.value = not box.value

    @on(Input.Submitted, "#copy-destination")
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_go()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "copy-go":
            self.action_go()
        else:
            self.action_cancel()

    def action_go(self) -> None:
        destination = self.query_one("#copy-destination", Input).value.strip()
        parts = [part for part in destination.split("/") if part]
        if any(part in (".", "..") for part in parts):
            self.set_status("The destination cannot contain '.' or '..'.", error=True)
            return
        overwrite = self.query_one("#copy-overwrite", Checkbox).value
        self.finish(("/".join(parts), overwrite))
