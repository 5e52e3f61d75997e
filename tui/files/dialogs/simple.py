"""The small dialogs of the files: delete (trash or permanent) and one file name."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Literal

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Input, Static
from textual.widgets.input import Selection

from tui.files.dialogs.base import folder_path_problem, name_problem, plural
from tui.text import PRINTABLE, printable
from tui.widgets.dialogs import ConfirmDialog, Dialog

DeleteChoice = Literal["trash", "permanent"]

# How many names a delete confirmation lists before "and N more".
LISTED_NAMES = 6


class DeleteDialog(Dialog[DeleteChoice | None]):
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
        with Vertical(id="delete-box", classes="dialog -destructive"):
            count = plural(len(self.names), "item")
            yield Static(f"Delete {count}?", classes="dialog--title")
            listed = [f"  {printable(name)}" for name in self.names[:LISTED_NAMES]]
            if len(self.names) > LISTED_NAMES:
                listed.append(f"  … and {len(self.names) - LISTED_NAMES} more")
            yield Static("\n".join(listed), classes="dialog--text", markup=False)
            yield Static(
                "The trash keeps them for 30 days: they can be restored from it.",
                classes="dialog--hint",
            )
            with Horizontal(classes="dialog--buttons"):
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


class NameDialog(Dialog[str | None]):
    """One file or folder name (rename, new folder): Enter accepts a valid name, Esc cancels.
    With `nested`, a path of names (`a/b`, new folders made level by level) is accepted too."""

    def __init__(self, title: str, initial: str, *, hint: str = "", nested: bool = False) -> None:
        super().__init__()
        self.title_text = title
        self.initial = initial
        self.hint = hint
        self.problem = folder_path_problem if nested else name_problem

    def compose(self) -> ComposeResult:
        with Vertical(id="name-box", classes="dialog"):
            yield Static(printable(self.title_text), classes="dialog--title", markup=False)
            yield Input(
                self.initial,
                placeholder="name",
                id="name-input",
                compact=True,
                select_on_focus=False,
                highlighter=PRINTABLE,
            )
            yield Static(printable(self.hint), id="status", markup=False)
            yield Static("Enter: OK · Esc: cancel", classes="dialog--hint")

    def on_mount(self) -> None:
        name = self.query_one("#name-input", Input)
        name.focus()
        # As mc's rename: the whole name is selected, so what is typed is the new name as typed
        # (with the stem alone selected, `renamed.md` typed over `index.html` gave
        # `renamed.md.html`); End or an arrow keeps the name to edit it.
        name.selection = Selection(0, len(self.initial))

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
