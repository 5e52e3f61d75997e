"""The DataTable of the row lists (servers, jobs), with the keys the help promises for every list."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.binding import Binding, BindingType
from textual.widgets import DataTable

from tui.widgets.vi_keys import vi_keys


class ListTable(DataTable[Text]):
    """A row list: Home/End go to the first/last row (DataTable's own scroll sideways), and
    j/k move as in vim, like the files' listing (see `tui.help.NAVIGATION_KEYS`)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("home", "scroll_top", "First", show=False),
        Binding("end", "scroll_bottom", "Last", show=False),
        *vi_keys(up="cursor_up", down="cursor_down"),
    ]
