"""A load balancer's edit refused because the definition changed since the form read it (the
control plane's 409 `conflict` on `if_revision`): what differs, theirs beside yours, and the way
out, as the editor's `SaveConflictDialog` offers for a file.

r reloads (the form shows theirs, mine is lost), o overwrites (my changes are sent again over
their revision: the fields I did not change keep theirs), Esc goes back to the form as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Static

from tui.text import load_tcss, printable
from tui.widgets.dialogs import Dialog

LbConflictChoice = Literal["reload", "overwrite"]


@dataclass(frozen=True)
class Difference:
    """A field of the definition whose value on the server is not the form's."""

    field: str
    theirs: str
    yours: str


class LbConflictDialog(Dialog[LbConflictChoice | None]):
    """r reloads theirs, o overwrites with mine, Esc (or Back) returns to the form."""

    DEFAULT_CSS = load_tcss(__file__)

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("r", "choose('reload')", "Reload"),
        Binding("o", "choose('overwrite')", "Overwrite"),
        Binding("escape", "choose('')", "Back to the form"),
    ]

    def __init__(self, name: str, read: int, current: int, differences: list[Difference]) -> None:
        super().__init__()
        self.lb_name = name
        self.read_revision = read
        self.current_revision = current
        self.differences = differences

    def compose(self) -> ComposeResult:
        with Vertical(id="lb-conflict-box", classes="dialog"):
            yield Static(printable(f"{self.lb_name} changed on the server"), classes="dialog--title", markup=False)
            yield Static(
                f"Someone saved it after you opened it (revision {self.read_revision}, now "
                f"{self.current_revision}): nothing of yours was saved over it.",
                classes="dialog--text",
                markup=False,
            )
            yield Static(self._table(), id="lb-conflict-fields")
            yield Static(
                "Reload: discard your changes and edit theirs. Overwrite: send your changes over "
                "theirs (what you did not change keeps their value).",
                classes="dialog--text",
                markup=False,
            )
            with Horizontal(classes="dialog--buttons"):
                yield Button("Reload (r)", id="lb-conflict-reload", compact=True)
                yield Button("Overwrite (o)", variant="warning", id="lb-conflict-overwrite", compact=True)
                yield Button("Back (Esc)", variant="primary", id="lb-conflict-back", compact=True)
            yield Static("r: reload · o: overwrite · Esc: back to the form", classes="dialog--hint", markup=False)

    def _table(self) -> Table | Text:
        if not self.differences:
            return Text("Your fields and theirs are the same; the pool or its health changed.")
        table = Table(box=None, padding=(0, 1, 0, 0), expand=True, show_edge=False)
        table.add_column("", style="bold", no_wrap=True)
        table.add_column(f"Theirs (revision {self.current_revision})", ratio=1)
        table.add_column("Yours", ratio=1)
        for difference in self.differences:
            table.add_row(
                *(Text(printable(value)) for value in (difference.field, difference.theirs, difference.yours))
            )
        return table

    def on_mount(self) -> None:
        self.query_one("#lb-conflict-back", Button).focus()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.action_choose((event.button.id or "").removeprefix("lb-conflict-"))

    def action_choose(self, choice: str) -> None:
        if choice == "reload":
            self.finish("reload")
        elif choice == "overwrite":
            self.finish("overwrite")
        else:
            self.finish(None)
