"""The dialogs of the editor: a save conflict, the name of a copy, unsaved changes on close or on quit."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import ClassVar, Literal

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Static

from tui.text import PRINTABLE, load_tcss, printable

ConflictChoice = Literal["reload", "overwrite", "copy"]
CloseChoice = Literal["save", "discard"]


def copy_name(path: str) -> str:
    """`public_html/index.php` → `public_html/index.mine.php`."""
    pure = PurePosixPath(path)
    suffix = pure.suffix if pure.stem else ""
    stem = pure.name[: len(pure.name) - len(suffix)] if suffix else pure.name
    name = f"{stem}.mine{suffix}"
    return str(pure.with_name(name)) if str(pure.parent) not in ("", ".") else name


class SaveConflictDialog(ModalScreen[ConflictChoice | None]):
    """The file changed on the server since it was read: r reloads, o overwrites, c saves a copy."""

    DEFAULT_CSS = load_tcss(__file__)

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("r", "choose('reload')", "Reload"),
        Binding("o", "choose('overwrite')", "Overwrite"),
        Binding("c", "choose('copy')", "Save a copy"),
        Binding("escape", "choose('')", "Cancel"),
    ]

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path

    def compose(self) -> ComposeResult:
        with Vertical(id="conflict-box", classes="editor-dialog"):
            yield Static(printable(f"/{self.path} changed on the server"), classes="editor-dialog--title", markup=False)
            yield Static(
                "Someone saved it after you opened it. Reload: discard your changes and read theirs. "
                "Overwrite: replace theirs with yours. Save a copy: keep both.",
                classes="editor-dialog--text",
            )
            with Horizontal(classes="editor-dialog--buttons"):
                yield Button("Reload (r)", id="conflict-reload", compact=True)
                yield Button("Overwrite (o)", variant="warning", id="conflict-overwrite", compact=True)
                yield Button("Save a copy (c)", variant="primary", id="conflict-copy", compact=True)
            yield Static("Esc: back to editing", classes="editor-dialog--hint")

    def on_mount(self) -> None:
        self.query_one("#conflict-copy", Button).focus()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.action_choose((event.button.id or "").removeprefix("conflict-"))

    def action_choose(self, choice: str) -> None:
        if choice == "reload":
            self.dismiss("reload")
        elif choice == "overwrite":
            self.dismiss("overwrite")
        elif choice == "copy":
            self.dismiss("copy")
        else:
            self.dismiss(None)


class CopyNameDialog(ModalScreen[str | None]):
    """The path (in the same scope) of the copy to save; Enter saves, Esc cancels."""

    DEFAULT_CSS = load_tcss(__file__)

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, default_path: str) -> None:
        super().__init__()
        self.default_path = default_path

    def compose(self) -> ComposeResult:
        with Vertical(id="copy-name-box", classes="editor-dialog"):
            yield Static("Save a copy as", classes="editor-dialog--title")
            yield Input(self.default_path, id="copy-name", highlighter=PRINTABLE)
            yield Static("Enter: save (never replaces a file) · Esc: cancel", classes="editor-dialog--hint")

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        name = event.value.strip().strip("/")
        if name:
            self.dismiss(name)

    def action_cancel(self) -> None:
        self.dismiss(None)


class UnsavedChangesDialog(ModalScreen[CloseChoice | None]):
    """Closing with unsaved changes: s saves first, d discards them, Esc keeps editing."""

    DEFAULT_CSS = load_tcss(__file__)

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("s", "choose('save')", "Save"),
        Binding("d", "choose('discard')", "Discard"),
        Binding("escape", "choose('')", "Keep editing"),
    ]

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path

    def compose(self) -> ComposeResult:
        with Vertical(id="unsaved-box", classes="editor-dialog"):
            yield Static(printable(f"/{self.path} has unsaved changes"), classes="editor-dialog--title", markup=False)
            with Horizontal(classes="editor-dialog--buttons"):
                yield Button("Save (s)", variant="primary", id="unsaved-save", compact=True)
                yield Button("Discard (d)", variant="error", id="unsaved-discard", compact=True)
                yield Button("Keep editing (Esc)", id="unsaved-keep", compact=True)

    def on_mount(self) -> None:
        self.query_one("#unsaved-save", Button).focus()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.action_choose((event.button.id or "").removeprefix("unsaved-"))

    def action_choose(self, choice: str) -> None:
        if choice == "save":
            self.dismiss("save")
        elif choice == "discard":
            self.dismiss("discard")
        else:
            self.dismiss(None)


class DiscardChangesDialog(ModalScreen[bool]):
    """Quitting (or leaving for another screen) while editors have unsaved changes: d discards
    them and goes on, Esc keeps everything as it is."""

    DEFAULT_CSS = load_tcss(__file__)

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("d", "choose(True)", "Discard"),
        Binding("escape", "choose(False)", "Keep editing"),
    ]

    def __init__(self, unsaved: list[str], going: str = "quit") -> None:
        super().__init__()
        self.unsaved = unsaved
        self.going = going

    def compose(self) -> ComposeResult:
        count = len(self.unsaved)
        title = f"{self.unsaved[0]} has unsaved changes" if count == 1 else f"{count} files have unsaved changes"
        shown = self.unsaved[:5] + ([f"… and {count - 5} more"] if count > 5 else [])
        with Vertical(id="discard-box", classes="editor-dialog"):
            yield Static(printable(title), classes="editor-dialog--title", markup=False)
            if count > 1:
                yield Static(printable("\n".join(shown)), classes="editor-dialog--text", markup=False)
            with Horizontal(classes="editor-dialog--buttons"):
                yield Button(f"Discard and {self.going} (d)", variant="error", id="discard-yes", compact=True)
                yield Button("Keep editing (Esc)", variant="primary", id="discard-no", compact=True)
            yield Static("Esc: back to the editor, nothing lost", classes="editor-dialog--hint")

    def on_mount(self) -> None:
        self.query_one("#discard-no", Button).focus()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.action_choose(event.button.id == "discard-yes")

    def action_choose(self, discard: bool) -> None:
        self.dismiss(discard)
