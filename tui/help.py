"""F1 (or `?`): the key bindings that work on the screen underneath, in a modal list."""

from __future__ import annotations

import re
from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Static

from tui.text import load_tcss

# Keys of the lists and views that the footer does not show (they are `show=False` bindings).
NAVIGATION_KEYS = [
    ("↑ ↓ / k j", "Move the cursor or scroll"),
    ("PgUp PgDn", "A page up or down"),
    ("Home End", "First or last line"),
    ("ctrl+p", "Command palette: themes, go to servers/files, …"),
    (":", "Go to: :servers :files :jobs :lb :audit (Tab completes)"),
]


class HelpScreen(ModalScreen[None]):
    """The bindings active on `screen`, with their descriptions.

    A screen may list keys handled by its widgets (not in its own bindings) in `HELP_KEYS`, and
    name itself in `HELP_TITLE` (see `screen_title`). A screen whose keys go to a text field (the
    editor) lists the keys it moves with in `HELP_NAVIGATION_KEYS`: NAVIGATION_KEYS, and the
    one-character keys of the bindings (`?` for help), are left out there, since the field types them.
    """

    DEFAULT_CSS = load_tcss(__file__)

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q,question_mark,f1", "dismiss", "Close")]

    def __init__(self, screen: Screen[object]) -> None:
        super().__init__()
        self.described = screen

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Static(self._bindings_table(), id="help-table")
            yield Static("↑ ↓ PgUp PgDn scroll · Escape closes this help.", id="help-hint")

    def on_mount(self) -> None:
        box = self.query_one("#help-box")
        box.border_title = f"Keys · {screen_title(self.described)}"

    def _bindings_table(self) -> Table:
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold", no_wrap=True)
        table.add_column()
        # The footer's bindings (plus their hidden aliases, e.g. `q` next to `ctrl+q`); the
        # widgets' many cursor bindings are summed up by NAVIGATION_KEYS instead.
        keys_by_description: dict[str, list[str]] = {}
        shown: set[str] = set()
        own_actions = {b.action for b in type(self.described).BINDINGS if isinstance(b, Binding)}
        navigation = getattr(self.described, "HELP_NAVIGATION_KEYS", None)
        for active in self.described.active_bindings.values():
            binding = active.binding
            if binding.description:
                display = binding.key_display or self.app.get_key_display(binding)
                if navigation is not None and len(display) == 1 and display.isprintable():
                    continue  # typed into the text field, never this binding
                keys = keys_by_description.setdefault(binding.description, [])
                if display not in keys:
                    keys.append(display)
                # A screen's own keys all belong here, also those the footer has no room for.
                if binding.show or (active.node is self.described and binding.action in own_actions):
                    shown.add(binding.description)
        for description, keys in keys_by_description.items():
            if description in shown:
                table.add_row(Text(" / ".join(keys)), Text(description))
        if navigation is None:
            navigation = NAVIGATION_KEYS
        for display, description in [*getattr(self.described, "HELP_KEYS", []), *navigation]:
            table.add_row(Text(display), Text(description))
        return table


def screen_title(screen: Screen[object]) -> str:
    """What the help calls `screen`: its `HELP_TITLE`, else its class name in words
    (`PermissionsDialog` → `Permissions dialog`)."""
    title = getattr(screen, "HELP_TITLE", None)
    if isinstance(title, str) and title:
        return title
    words = re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z0-9]+", type(screen).__name__.removesuffix("Screen"))
    return " ".join([words[0], *(word.lower() for word in words[1:])]) if words else "This screen"
