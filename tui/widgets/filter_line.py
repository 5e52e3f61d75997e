"""`/` on a list: one filter line for every list (the files panels, servers, jobs, load balancers,
the audit log), so typing, Enter and Esc behave the same everywhere.

Typing narrows the rows at once; Enter keeps the filter and goes back to the list; Esc clears it.
A screen that shows a list in a DataTable mixes in `FilteredList`: `/` opens its line, Esc on the
list clears a kept filter before the screen's own Esc (back) does anything.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

from rich.text import Text
from textual import events
from textual.dom import DOMNode
from textual.message import Message
from textual.widgets import Input

from tui.text import load_tcss

K = TypeVar("K")


def name_filter(pattern: str) -> Callable[[str], bool]:
    """What `/` filters with: a glob when `pattern` has `*`, `?` or `[`, else a substring; no case."""
    folded = pattern.casefold()
    if any(c in folded for c in "*?["):
        return lambda name: fnmatch.fnmatchcase(name.casefold(), folded)
    return lambda name: folded in name.casefold()


def filter_rows(rows: Mapping[K, Iterable[Text]], pattern: str) -> dict[K, list[Text]]:
    """The rows (cells by row key) whose text, any cell, matches `pattern`; all of them for `""`."""
    if not pattern:
        return {key: list(cells) for key, cells in rows.items()}
    matches = name_filter(f"*{pattern}*" if any(c in pattern for c in "*?[") else pattern)
    kept: dict[K, list[Text]] = {}
    for key, cells in rows.items():
        cells = list(cells)
        if matches(" ".join(cell.plain for cell in cells)):
            kept[key] = cells
    return kept


class FilterLine(Input):
    """The filter line under a list; hidden until `/` opens it.

    `kept_shown`: while a kept filter narrows the list, the line stays in sight (with the pattern)
    so the list never looks shorter than it is without a word; the files panels say it on their
    status line instead.
    """

    DEFAULT_CSS = load_tcss(__file__)

    class PatternChanged(Message):
        """The pattern changed (typed, or cleared): redraw the rows with it."""

        def __init__(self, line: FilterLine, pattern: str) -> None:
            super().__init__()
            self.line = line
            self.pattern = pattern

        @property
        def control(self) -> FilterLine:
            return self.line

    class Closed(Message):
        """Enter (filter kept) or Esc (cleared): the list takes the focus back."""

        def __init__(self, line: FilterLine) -> None:
            super().__init__()
            self.line = line

        @property
        def control(self) -> FilterLine:
            return self.line

    def __init__(
        self,
        *,
        placeholder: str = "filter: text or glob · Enter keep · Esc clear",
        kept_shown: bool = True,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(placeholder=placeholder, id=id, classes=classes, compact=True)
        self.kept_shown = kept_shown

    @property
    def pattern(self) -> str:
        return self.value

    @property
    def editing(self) -> bool:
        return self.has_class("-editing")

    def open(self) -> None:
        """`/`: show the line with the current pattern, focused."""
        self.add_class("-editing")
        self._show()
        self.focus()

    def clear_pattern(self) -> None:
        """Esc: no filter any more."""
        if self.value:
            self.value = ""  # posts Input.Changed, turned into PatternChanged below
        self._close()

    def _close(self) -> None:
        self.remove_class("-editing")
        self._show()
        self.post_message(self.Closed(self))

    def _show(self) -> None:
        self.set_class(self.editing or (self.kept_shown and bool(self.value)), "-shown")

    def _on_input_changed(self, event: Input.Changed) -> None:
        if event.input is self:
            event.stop()
            self._show()
            self.post_message(self.PatternChanged(self, self.value))

    def _on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input is self:
            event.stop()
            self._close()

    def on_key(self, event: events.Key) -> None:
        if event.key == "escape" and self.editing:
            event.stop()
            event.prevent_default()
            self.clear_pattern()

    def _on_blur(self, event: events.Blur) -> None:
        if self.editing:  # a click elsewhere: the pattern stays, as with Enter
            self.remove_class("-editing")
            self._show()


class FilteredList(DOMNode):
    """For a screen with one `FilterLine`: `/` (its `action_filter`) opens it; Esc on the list
    clears a kept filter first. The screen redraws its rows in `on_filter_line_pattern_changed`."""

    @property
    def filter_pattern(self) -> str:
        return self.query_one(FilterLine).pattern

    def action_filter(self) -> None:
        self.query_one(FilterLine).open()

    def on_key(self, event: events.Key) -> None:
        line = self.query_one(FilterLine)
        if event.key == "escape" and line.pattern and not line.editing:
            event.stop()
            event.prevent_default()
            line.clear_pattern()
