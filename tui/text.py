"""Small text helpers shared by the widgets: safe display of untrusted strings, sizes, times."""

from __future__ import annotations

import re
from datetime import datetime
from functools import lru_cache
from pathlib import Path

from rich.cells import cell_len
from rich.highlighter import Highlighter
from rich.text import Text

# C0 and C1 control characters (and DEL): a file name or file content must never be able to
# send escape sequences to the user's terminal.
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """`text` with control characters replaced by `?` and tabs by a space."""
    if not _CONTROL.search(text) and "\t" not in text:
        return text
    return _CONTROL.sub("?", text).replace("\t", " ")


class PrintableHighlighter(Highlighter):
    """An `Input`'s highlighter that draws its control characters as `?` while its value keeps
    them: a path it is given (the other panel's folder, a file's) may hold any character, and the
    operation needs it as it is. Each is replaced by one character, so the cursor keeps its place."""

    def highlight(self, text: Text) -> None:
        shown = printable(text.plain)
        if shown != text.plain:
            text.plain = shown


PRINTABLE = PrintableHighlighter()


def printable_line(line: str, tab_size: int = 4) -> str:
    """One line of a text file as it should be drawn: tabs expanded, control characters shown."""
    if "\t" in line:
        line = line.expandtabs(tab_size)
    if _CONTROL.search(line):
        line = _CONTROL.sub(_control_picture, line)
    return line


def _control_picture(match: re.Match[str]) -> str:
    code = ord(match.group())
    # U+2400.. are the "control pictures" (␀ ␁ … ␟); DEL is ␡; C1 controls have none.
    if code < 0x20:
        return chr(0x2400 + code)
    return "\u2421" if code == 0x7F else "?"


def fit_tail(text: str, width: int) -> str:
    """`text` in `width` cells, cut at the start when too long (`…/wp-content/uploads`): the end
    of a path is where one is. Unknown widths (0 before the first layout) keep it whole."""
    if width <= 0 or cell_len(text) <= width:
        return text
    tail = text
    while cell_len(tail) > width - 1:
        tail = tail[max(1, (cell_len(tail) - width + 1) // 2) :]
    return "…" + tail


@lru_cache(maxsize=4096)
def short_time(rfc3339: str) -> str:
    """`2026-11-22T10:00:00Z` → `2026-11-22 11:00` in the local time zone; `?` if unreadable."""
    try:
        moment = datetime.fromisoformat(rfc3339)
    except (TypeError, ValueError):
        return "?"
    if moment.tzinfo is not None:
        moment = moment.astimezone()
    return moment.strftime("%Y-%m-%d %H:%M")


def join_path(directory: str, name: str) -> str:
    """A scope-relative path: `join_path("", "a")` is `a`, `join_path("a", "b")` is `a/b`."""
    directory = directory.strip("/")
    return f"{directory}/{name}" if directory else name


def parent_path(path: str) -> str:
    """The parent of a scope-relative path (`""` is the scope root, its own parent)."""
    path = path.strip("/")
    return path.rpartition("/")[0]


def load_tcss(module_file: str, name: str | None = None) -> str:
    """The CSS kept next to a module (`widget.py` → `widget.tcss`; `name.tcss` when given), for
    `DEFAULT_CSS`: the one way the TUI's screens and widgets get their CSS."""
    path = Path(module_file)
    return (path.with_name(f"{name}.tcss") if name else path.with_suffix(".tcss")).read_text(encoding="utf-8")
