"""The small dialogs: a yes/no confirmation, delete (trash or permanent), and one file name."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Literal

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Input, Static
from textual.widgets.input import Selection

from tui.files.dialogs.base import FileDialog, folder_path_problem, name_problem, plural
from tui.text import PRINTABLE, printable

DeleteChoice = Literal["trash", "permanent"]

# How many names a delete confirmation lists before "and N more".
LISTED_NAMES = 6


class ConfirmDialog(FileDialog[bool]):
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
        with Vertical(id="confirm-box", classes="file-dialog" + (" -destructive" if self.destructive else "")):
            yield Static(printable(self.title_text), classes="file-dialog--title", markup=False)
            if self.text:
                yield Static(self.text, classes="file-dialog--text", markup=False)
            with Horizontal(classes="file-dialog--buttons"):
                yield Button(
                    f"{self.confirm_label} (y)",
                    id="confirm-yes",
                    compact=True,
                    variant="error" if self.destructive else "primary",
                )
                yield Button("No (n)", id="confirm-no", compact=True)
            safe = "Enter: No" if self.destructive else f"Enter: {self.confirm_label}"
            yield Static(f"y: {self.confirm_label} · n/Esc: No · {safe}", classes="file-dialog--hint", markup=False)

    def on_mount(self) -> None:
        self.query_one("#confirm-no" if self.destructive else "#confirm-yes", Button).focus()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.finish(event.button.id == "confirm-yes")

    def action_answer(self, yes: bool) -> None:
        self.finish(yes)


class DeleteDialog(FileDialog[DeleteChoice | None]):
    """Delete `names`: to the trash by default (t, or Enter); p deletes them for good, after a
    second, explicit confirmation; Esc cancels."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("t", "trash", "To the trash"),
        Binding("p", "permanent", "Delete permanently"),
        Binding("escape", "cancel", "Cancel"),
    ]

    def __init__(self, names: Sequence[str]) -> None:
        super().__init__()
        self.names = list(names)

    def compose(self) -> ComposeResult:
        with Vertical(id="delete-box", classes="file-dialog -destructive"):
            count = plural(len(self.names), "item")
            yield Static(f"Delete {count}?", classes="file-dialog--title")
            listed = [f"  {printable(name)}" for name in self.names[:LISTED_NAMES]]
            if len(self.names) > LISTED_NAMES:
                listed.append(f"  … and {len(self.names) - LISTED_NAMES} more")
            yield Static("\n".join(listed), classes="file-dialog--text", markup=False)
            yield Static(
                "The trash keeps them for 30 days: they can be restored from it.",
                classes="file-dialog--hint",
            )
            with Horizontal(classes="file-dialog--buttons"):
                yield Button("Move to trash (t)", id="delete-trash", variant="primary", compact=True)
                yield Button("Delete permanently… (p)", id="delete-permanent", variant="error", compact=True)
                yield Button("Cancel (Esc)", id="delete-cancel", compact=True)

    def on_mount(self) -> None:
        self.query_one("#delete-trash", Button).focus()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "delete-trash":
            self.action_trash()
        elif event.button.id == "delete-permanent":
            self.action_permanent()
        else:
            self.action_cancel()

    def action_trash(self) -> None:
        self.finish("trash")

    def action_permanent(self) -> None:
        """Permanent deletion needs a second yes: the default of that question is No."""

        def answered(yes: bool | None) -> None:
            if yes:
                self.finish("permanent")

        count = plural(len(self.names), "item")
        self.app.push_screen(
            ConfirmDialog(
                f"Delete {count} permanently?",
                "They do not go to the trash: this cannot be undone.",
                confirm_label="Delete permanently",
            ),
            answered,
        )


class NameDialog(FileDialog[str | None]):
    """One file or folder name (rename, new folder): Enter accepts a valid name, Esc cancels.
    With `nested`, a path of names (`a/b`, new folders made level by level) is accepted too."""

    def __init__(self, title: str, initial: str, *, hint: str = "", nested: bool = False) -> None:
        super().__init__()
        self.title_text = title
        self.initial = initial
        self.hint = hint
        self.problem = folder_path_problem if nested else name_problem

    def compose(self) -> ComposeResult:
        with Vertical(id="name-box", classes="file-dialog"):
            yield Static(printable(self.title_text), classes="file-dialog--title", markup=False)
            yield Input(
                self.initial,
                placeholder="name",
                id="name-input",
                compact=True,
                select_on_focus=False,
                highlighter=PRINTABLE,
            )
            yield Static(printable(self.hint), id="status", markup=False)
            yield Static("Enter: OK · Esc: cancel", classes="file-dialog--hint")

    def on_mount(self) -> None:
        name = self.query_one("#name-input", Input)
        name.focus()
        # Like a file manager's rename: the stem is selected, the extension kept.
        stem, dot, _ = self.initial.rpartition(".")
        end = len(stem) if dot and stem else len(self.initial)
        name.selection = Selection(0, end)

    @on(Input.Changed, "#name-input")
    def _changed(self, event: Input.Changed) -> None:
        event.stop()
        problem = self.problem(event.value) if event.value else None
        if problem:
            self.set_status(problem, error=True)
        else:
            self.set_status(self.hint)

    @on(Input.Submitted, "#name-input")
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        problem = self.problem(event.value)
        if problem:
            self.set_status(problem, error=True)
            return
        self.finish(event.value.strip("/"))
