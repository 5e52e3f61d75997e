"""Copy or move onto names that are taken, as Midnight Commander asks: for each such item,
overwrite, skip or rename it, with "all" variants while more than one is left.

The API checks a whole batch before it does anything (`409 conflict` for a taken name, unless
`overwrite`, which then applies to the batch): so the caller lists the destination first, asks
here about each taken name, and sends the items in groups (see `ConflictPlan`).
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Static

from tui.files.dialogs.base import plural
from tui.files.dialogs.simple import NameDialog
from tui.text import printable
from tui.widgets.dialogs import Dialog

Choice = Literal["overwrite", "skip", "rename", "overwrite_all", "skip_all"]
Operation = Literal["copy", "move"]


@dataclass
class ConflictPlan:
    """What to send, once every taken name has its answer: the items that go as they are, those
    that replace what is there (`overwrite`), those that go under a new name, and those left out."""

    plain: list[str] = field(default_factory=list)
    overwrite: list[str] = field(default_factory=list)
    renamed: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    @property
    def count(self) -> int:
        """How many items go."""
        return len(self.plain) + len(self.overwrite) + len(self.renamed)


def free_name(name: str, taken: Collection[str]) -> str:
    """`index.php` → `index-1.php` (or -2, …): a name of the same kind that is not `taken`."""
    stem, extension = posixpath.splitext(name)
    number = 1
    while f"{stem}-{number}{extension}" in taken:
        number += 1
    return f"{stem}-{number}{extension}"


class ConflictDialog(Dialog[Choice | None]):
    """One taken name: o overwrite, s skip, r rename; with more left, a (overwrite all) and n
    (skip all, mc's "None"); Esc cancels the whole operation."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("o", "choose('overwrite')", "Overwrite"),
        Binding("s", "choose('skip')", "Skip"),
        Binding("r", "choose('rename')", "Rename"),
        Binding("a", "choose_all('overwrite_all')", "Overwrite all"),
        Binding("n", "choose_all('skip_all')", "Skip all"),
        Binding("escape", "cancel", "Cancel"),
    ]

    def __init__(self, operation: Operation, name: str, destination_label: str, left: int, *, folder: bool) -> None:
        super().__init__()
        self.operation = operation
        self.name_taken = name
        self.folder = folder
        self.destination_label = destination_label
        self.left = left

    def compose(self) -> ComposeResult:
        verb = "Copy" if self.operation == "copy" else "Move"
        with Vertical(id="conflict-box", classes="dialog -destructive"):
            yield Static(f"{verb}: the name is taken", classes="dialog--title", markup=False)
            what = f"The folder {self.name_taken}/" if self.folder else self.name_taken
            yield Static(
                printable(f"{what} already exists in {self.destination_label}."),
                classes="dialog--text",
                markup=False,
            )
            if self.folder:  # the API replaces a folder as a whole: no merge, unlike mc
                yield Static("Overwrite replaces it and all it holds.", classes="dialog--note")
            if self.left > 1:
                yield Static(f"{plural(self.left, 'taken name')} left to decide.", classes="dialog--hint")
            with Horizontal(classes="dialog--buttons"):
                yield Button("Overwrite (o)", id="conflict-overwrite", variant="error", compact=True)
                yield Button("Skip (s)", id="conflict-skip", variant="primary", compact=True)
                yield Button("Rename… (r)", id="conflict-rename", compact=True)
            if self.left > 1:
                with Horizontal(classes="dialog--buttons"):
                    yield Button("Overwrite all (a)", id="conflict-overwrite_all", variant="error", compact=True)
                    yield Button("Skip all (n)", id="conflict-skip_all", compact=True)
            yield Static("Enter: the focused button · Esc: cancel it all", classes="dialog--hint")

    def on_mount(self) -> None:
        self.query_one("#conflict-skip", Button).focus()  # the safe answer

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.action_choose((event.button.id or "").removeprefix("conflict-"))

    def action_choose(self, choice: str) -> None:
        if choice in ("overwrite", "skip", "rename", "overwrite_all", "skip_all"):
            self.finish(choice)  # type: ignore[arg-type]

    def action_choose_all(self, choice: str) -> None:
        if self.left > 1:
            self.action_choose(choice)


def resolve_conflicts(
    app: App[Any],
    operation: Operation,
    paths: Sequence[str],
    existing: Mapping[str, str],
    destination_label: str,
    done: Callable[[ConflictPlan | None], None],
) -> None:
    """Ask about each of `paths` whose name is in `existing` (names and their types in the
    destination folder), one dialog after the other; then
    call `done` with the plan (None when the user cancelled). No taken name: `done` at once."""
    plan = ConflictPlan()
    taken = set(existing)  # grows with the new names picked, so two renames never collide
    conflicts = [path for path in paths if _name(path) in taken]
    plan.plain = [path for path in paths if _name(path) not in taken]

    def ask(index: int) -> None:
        if index == len(conflicts):
            done(plan)
            return
        path = conflicts[index]
        left = len(conflicts) - index

        def answered(choice: Choice | None) -> None:
            if choice is None:
                done(None)
            elif choice in ("overwrite_all", "skip_all"):
                rest = conflicts[index:]
                (plan.overwrite if choice == "overwrite_all" else plan.skipped).extend(rest)
                done(plan)
            elif choice == "rename":
                rename(index)
            else:
                (plan.overwrite if choice == "overwrite" else plan.skipped).append(path)
                ask(index + 1)

        folder = existing.get(_name(path)) == "dir"
        app.push_screen(ConflictDialog(operation, _name(path), destination_label, left, folder=folder), answered)

    def rename(index: int) -> None:
        path = conflicts[index]

        def named(name: str | None) -> None:
            if not name:
                ask(index)  # back to the question for this item
                return
            if name in taken:
                app.notify(f"{printable(name)} is taken too: pick another name.", severity="warning")
                rename(index)
                return
            taken.add(name)
            plan.renamed.append((path, name))
            ask(index + 1)

        hint = f"in {destination_label}"
        app.push_screen(NameDialog("Rename to", free_name(_name(path), taken), hint=hint), named)

    ask(0)


def _name(path: str) -> str:
    return path.rstrip("/").rpartition("/")[2]
