"""Enter on a row: its actions in a short menu, each with the key that does the same on the screen."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from tui.text import load_tcss, printable
from tui.widgets.dialogs import Dialog


@dataclass(frozen=True)
class MenuItem:
    action: str  # an action of the screen, e.g. `weight(10)`
    label: str
    key: str  # the screen's key for it, shown beside the label


class ActionMenu(Dialog[str | None]):
    """↑↓ and Enter pick an action (its name is the result); Esc closes."""

    DEFAULT_CSS = load_tcss(__file__)

    def __init__(self, title: str, items: Sequence[MenuItem]) -> None:
        super().__init__()
        self.title_text = title
        self.items = list(items)

    def compose(self) -> ComposeResult:
        width = max(len(item.label) for item in self.items)
        with Vertical(id="action-menu-box", classes="dialog"):
            yield Static(printable(self.title_text), classes="dialog--title", markup=False)
            yield OptionList(
                *(
                    Option(Text.assemble(item.label.ljust(width + 2), (item.key, "dim")), id=item.action)
                    for item in self.items
                ),
                id="action-menu",
            )
            yield Static("Enter: do it · Esc: close", classes="dialog--hint", markup=False)

    def on_mount(self) -> None:
        options = self.query_one(OptionList)
        options.highlighted = 0
        options.focus()

    @on(OptionList.OptionSelected)
    def _picked(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.finish(event.option.id)
