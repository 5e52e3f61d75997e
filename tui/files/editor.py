"""A text editor on the Line API: fast on 10 MiB files, where Textual's `TextArea` is not.

The buffer is a plain list of lines. An edit replaces a span of at most a few lines (a slice
assignment), so a keystroke costs the same on a 10-line and on a 250,000-line file: no re-join of
the text, no re-lex. Highlighting is `LazyHighlighter`'s (only blocks that are drawn get lexed);
an edit forgets the lexed blocks from the edited line on, and the visible ones are lexed again
when drawn.

Undo/redo record each edit as "replace this span with that text"; consecutive typing on one line
merges into one step.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import count
from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from tui.files.highlight import BLOCK_LINES, LazyHighlighter, lexer_for_path, split_lines, themed_segments
from tui.text import load_tcss, printable_line

TAB_SIZE = 4
UNDO_LIMIT = 10_000

Position = tuple[int, int]


class EditableHighlighter(LazyHighlighter):
    """`LazyHighlighter` that can forget what it lexed from a line on (after an edit)."""

    def invalidate_from(self, index: int) -> None:
        first = index // BLOCK_LINES
        stale = [block for block in self._lexed_blocks if block >= first]
        for block in stale:
            self._lexed_blocks.discard(block)
            for line in range(block * BLOCK_LINES, (block + 1) * BLOCK_LINES):
                self._cache.pop(line, None)


@dataclass
class Edit:
    """`removed` (from `start`) was replaced by `inserted`; cursors before and after."""

    start: Position
    removed: str
    inserted: str
    cursor_before: Position
    cursor_after: Position
    change_id: int
    typing: bool = False


def _end_of(start: Position, text: str) -> Position:
    """Where `text` ends once inserted at `start`."""
    newlines = text.count("\n")
    if not newlines:
        return start[0], start[1] + len(text)
    return start[0] + newlines, len(text) - text.rfind("\n") - 1


class Editor(ScrollView, can_focus=True):
    """Line numbers, highlighted code, a cursor; edits, undo/redo and search."""

    DEFAULT_CSS = load_tcss(__file__)

    COMPONENT_CLASSES: ClassVar[set[str]] = {"editor--gutter", "editor--cursor-line-number", "editor--match"}

    # Editing and moving keys are handled in `_on_key`, not as bindings: a non-priority binding
    # runs when its key has bubbled back up to the app, after the keys typed behind it (a fast
    # "down, x" would type x first). These two are bindings only to show in the footer.
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+z", "undo", "Undo"),
        Binding("ctrl+y", "redo", "Redo"),
    ]

    KEYS: ClassVar[dict[str, str]] = {
        "up": "move(-1)",
        "down": "move(1)",
        "left": "left",
        "right": "right",
        "home": "home",
        "end": "end",
        "pageup": "page(-1)",
        "pagedown": "page(1)",
        "ctrl+home": "top",
        "ctrl+end": "bottom",
        "enter": "newline",
        "backspace": "backspace",
        "delete": "delete",
        "tab": "tab",
        "ctrl+z": "undo",
        "ctrl+y": "redo",
    }

    class Changed(Message):
        """The text, the cursor or the modified state changed (for status bars)."""

        def __init__(self, editor: Editor) -> None:
            super().__init__()
            self.editor = editor

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.lines: list[str] = [""]
        self.highlighter = EditableHighlighter(self.lines, lexer_for_path(""))
        self.cursor: Position = (0, 0)
        self._wanted_column = 0
        self._newline = "\n"
        self._final_newline = False
        self._longest = 0
        self._gutter_width = 3
        self._undo: list[Edit] = []
        self._redo: list[Edit] = []
        self._ids = count(1)
        self._saved_id = 0
        self._group_open = False
        self.match: tuple[int, int, int] | None = None
        """The highlighted search match: (row, column, length)."""
        self.search_text = ""

    # --- content --------------------------------------------------------------------------

    def load(self, content: str, path: str) -> None:
        """Edit `content` (highlighted for the language of `path`), cursor at the top, no history."""
        lines = split_lines(content)
        self._newline = "\r\n" if "\r\n" in content else "\n"
        self._final_newline = content.endswith("\n")
        if not lines:
            lines = [""]
        self.lines = lines
        self.highlighter = EditableHighlighter(lines, lexer_for_path(path, lines[0]))
        self._longest = max(map(len, lines), default=0)
        self._undo.clear()
        self._redo.clear()
        self._saved_id = 0
        self._group_open = False
        self.cursor = (0, 0)
        self._wanted_column = 0
        self.match = None
        self._update_virtual_size()
        self.scroll_to(0, 0, animate=False, immediate=True)
        self.refresh()
        self._changed()

    @property
    def text(self) -> str:
        """The whole text, as it would be saved (line endings as they were read)."""
        body = self._newline.join(self.lines)
        return body + self._newline if self._final_newline else body

    @property
    def line_count(self) -> int:
        return len(self.lines)

    @property
    def language(self) -> str:
        return self.highlighter.language

    @property
    def version(self) -> int:
        """Identifies the current state of the text (pass to `mark_saved`)."""
        return self._undo[-1].change_id if self._undo else 0

    @property
    def modified(self) -> bool:
        return self.version != self._saved_id

    def mark_saved(self, version: int | None = None) -> None:
        """The text at `version` (default: now) is what the file holds."""
        self._saved_id = self.version if version is None else version
        self._group_open = False
        self._changed()

    # --- the one primitive edit -------------------------------------------------------------

    def _replace(self, start: Position, end: Position, text: str) -> tuple[str, Position]:
        """Replace the span `start`..`end` with `text`; the removed text and the new end."""
        (r1, c1), (r2, c2) = start, end
        lines = self.lines
        removed = lines[r1][c1:c2] if r1 == r2 else "\n".join([lines[r1][c1:], *lines[r1 + 1 : r2], lines[r2][:c2]])
        head, tail = lines[r1][:c1], lines[r2][c2:]
        pieces = text.split("\n")
        pieces[0] = head + pieces[0]
        new_end = (r1 + len(pieces) - 1, len(pieces[-1]))
        pieces[-1] += tail
        if len(pieces) == 1 and r1 == r2:
            lines[r1] = pieces[0]
        else:
            lines[r1 : r2 + 1] = pieces
        self._longest = max(self._longest, *map(len, pieces))
        self.highlighter.invalidate_from(r1)
        if self.match is not None and self.match[0] >= r1:
            self.match = None
        self._update_virtual_size()
        return removed, new_end

    def _edit(self, start: Position, end: Position, text: str, *, typing: bool = False) -> None:
        """Replace a span as one undoable step (merged into the last one when typing on)."""
        before = self.cursor
        removed, new_end = self._replace(start, end, text)
        self._redo.clear()
        last = self._undo[-1] if self._undo else None
        if (
            typing
            and self._group_open
            and last is not None
            and last.typing
            and not removed
            and last.cursor_after == before == start
        ):
            last.inserted += text
            last.cursor_after = new_end
        else:
            self._undo.append(Edit(start, removed, text, before, new_end, next(self._ids), typing=typing))
            if len(self._undo) > UNDO_LIMIT:
                del self._undo[0]
        self._group_open = typing
        self._set_cursor(new_end)

    # --- editing ----------------------------------------------------------------------------

    def insert(self, text: str) -> None:
        """Type `text` at the cursor (a newline in it splits the line)."""
        if text:
            self._edit(self.cursor, self.cursor, text, typing="\n" not in text)

    def action_newline(self) -> None:
        row, col = self.cursor
        line = self.lines[row]
        indent = line[: len(line) - len(line.lstrip(" \t"))][:col]
        self._edit(self.cursor, self.cursor, "\n" + indent)

    def action_tab(self) -> None:
        self._edit(self.cursor, self.cursor, " " * (TAB_SIZE - self.cursor[1] % TAB_SIZE))

    def action_backspace(self) -> None:
        row, col = self.cursor
        if col:
            self._edit((row, col - 1), self.cursor, "")
        elif row:
            self._edit((row - 1, len(self.lines[row - 1])), self.cursor, "")

    def action_delete(self) -> None:
        row, col = self.cursor
        if col < len(self.lines[row]):
            self._edit(self.cursor, (row, col + 1), "")
        elif row + 1 < len(self.lines):
            self._edit(self.cursor, (row + 1, 0), "")

    def action_undo(self) -> None:
        if not self._undo:
            return
        step = self._undo.pop()
        self._replace(step.start, _end_of(step.start, step.inserted), step.removed)
        self._redo.append(step)
        self._group_open = False
        self._set_cursor(step.cursor_before)

    def action_redo(self) -> None:
        if not self._redo:
            return
        step = self._redo.pop()
        self._replace(step.start, _end_of(step.start, step.removed), step.inserted)
        self._undo.append(step)
        self._group_open = False
        self._set_cursor(step.cursor_after)

    @property
    def can_undo(self) -> bool:
        return bool(self._undo)

    @property
    def can_redo(self) -> bool:
        return bool(self._redo)

    async def _on_key(self, event: events.Key) -> None:
        action = self.KEYS.get(event.key)
        if action is not None:
            event.stop()
            event.prevent_default()
            name, _, argument = action.partition("(")
            method = getattr(self, f"action_{name}")
            if argument:
                method(int(argument.rstrip(")")))
            else:
                method()
        elif event.is_printable and event.character:
            event.stop()
            event.prevent_default()
            self.insert(event.character)

    def _on_paste(self, event: events.Paste) -> None:
        event.stop()
        self.insert(event.text.replace("\r\n", "\n").replace("\r", "\n"))

    # --- moving -----------------------------------------------------------------------------

    def _set_cursor(self, position: Position, *, keep_column: bool = False) -> None:
        row = min(max(0, position[0]), len(self.lines) - 1)
        col = min(max(0, position[1]), len(self.lines[row]))
        self.cursor = (row, col)
        if not keep_column:
            self._wanted_column = col
        self._scroll_to_cursor()
        self.refresh()
        self._changed()

    def move_to(self, row: int, col: int = 0) -> None:
        self._group_open = False
        self._set_cursor((row, col))

    def action_move(self, rows: int) -> None:
        self._group_open = False
        self._set_cursor((self.cursor[0] + rows, self._wanted_column), keep_column=True)

    def action_left(self) -> None:
        row, col = self.cursor
        self.move_to(*((row, col - 1) if col else (row - 1, len(self.lines[row - 1])) if row else (0, 0)))

    def action_right(self) -> None:
        row, col = self.cursor
        if col < len(self.lines[row]):
            self.move_to(row, col + 1)
        elif row + 1 < len(self.lines):
            self.move_to(row + 1, 0)

    def action_home(self) -> None:
        row, col = self.cursor
        line = self.lines[row]
        indent = len(line) - len(line.lstrip(" \t"))
        self.move_to(row, 0 if col == indent else indent)  # smart Home: indentation first

    def action_end(self) -> None:
        self.move_to(self.cursor[0], len(self.lines[self.cursor[0]]))

    def action_page(self, direction: int) -> None:
        height = max(1, self.scrollable_content_region.height)
        self.action_move(direction * height)

    def action_top(self) -> None:
        self.move_to(0, 0)

    def action_bottom(self) -> None:
        self.move_to(len(self.lines) - 1, len(self.lines[-1]))

    def _display_column(self, row: int, col: int) -> int:
        """The screen column of character `col` of line `row` (tabs expand)."""
        prefix = self.lines[row][:col]
        return len(printable_line(prefix, TAB_SIZE)) if "\t" in prefix else col

    def _scroll_to_cursor(self) -> None:
        region = self.scrollable_content_region
        height = max(1, region.height)
        width = max(1, region.width - self._gutter_width)
        row, col = self.cursor
        x_col = self._display_column(row, col)
        x, y = int(self.scroll_x), int(self.scroll_y)
        if row < y:
            y = row
        elif row >= y + height:
            y = row - height + 1
        if x_col < x:
            x = max(0, x_col - width // 4)
        elif x_col >= x + width:
            x = x_col - width + width // 4
        if (x, y) != (int(self.scroll_x), int(self.scroll_y)):
            self.scroll_to(x, y, animate=False, immediate=True)

    # --- search -----------------------------------------------------------------------------

    def find(self, query: str, *, from_next: bool = True) -> bool:
        """Put the cursor on the next match of `query` (case-insensitive), wrapping; False if none."""
        self.search_text = query
        if not query:
            self.match = None
            self.refresh()
            return False
        needle = query.lower()
        row, col = self.cursor
        start_col = col + 1 if from_next and self.match is not None and self.match[:2] == self.cursor else col
        total = len(self.lines)
        for step in range(total + 1):
            index = (row + step) % total
            line = self.lines[index].lower()
            if step == 0:
                found = line.find(needle, start_col)
            elif step == total:
                found = line.find(needle, 0, start_col + len(needle) - 1)
            else:
                found = line.find(needle)
            if found >= 0:
                self.match = (index, found, len(query))
                self.move_to(index, found)
                return True
        self.match = None
        self.refresh()
        return False

    def clear_match(self) -> None:
        self.match = None
        self.refresh()

    # --- drawing ----------------------------------------------------------------------------

    def _update_virtual_size(self) -> None:
        self._gutter_width = len(str(len(self.lines))) + 2
        size = Size(self._gutter_width + self._longest + 2, len(self.lines))
        if size != self.virtual_size:
            self.virtual_size = size

    def _changed(self) -> None:
        self.post_message(self.Changed(self))

    def on_mount(self) -> None:
        self.watch(self.app, "theme", self._theme_changed, init=False)

    def _theme_changed(self) -> None:
        self.refresh()

    def on_focus(self) -> None:
        self.refresh()

    def on_blur(self) -> None:
        self.refresh()

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        row = int(self.scroll_y) + offset.y
        if row >= len(self.lines):
            row = len(self.lines) - 1
        screen_col = int(self.scroll_x) + max(0, offset.x - self._gutter_width)
        line = self.lines[row]
        col = 0
        while col < len(line) and self._display_column(row, col + 1) <= screen_col:
            col += 1
        self.move_to(row, col)

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        scroll_x, scroll_y = int(self.scroll_x), int(self.scroll_y)
        index = scroll_y + y
        if index >= len(self.lines):
            return Strip.blank(width, self.rich_style)
        row, col = self.cursor
        gutter_style = self.get_component_rich_style("editor--cursor-line-number" if index == row else "editor--gutter")
        gutter = Segment(f"{index + 1:>{self._gutter_width - 1}} ", gutter_style)
        code_width = max(0, width - self._gutter_width)
        strip = Strip(themed_segments(self, self.highlighter.tokens(index)))
        if self.match is not None and self.match[0] == index:
            start = self._display_column(index, self.match[1])
            end = self._display_column(index, min(len(self.lines[index]), self.match[1] + self.match[2]))
            strip = _overlay(strip, start, end, self.get_component_rich_style("editor--match", partial=True))
        if index == row and self.has_focus:
            at = self._display_column(row, col)
            strip = _overlay(strip.extend_cell_length(at + 1), at, at + 1, Style(reverse=True))
        code = strip.crop_extend(scroll_x, scroll_x + code_width, self.rich_style)
        return Strip([gutter, *code], width)


def _overlay(strip: Strip, start: int, end: int, style: Style) -> Strip:
    """`strip` with `style` laid over the cells `start`..`end`."""
    if end <= start:
        return strip
    strip = strip.extend_cell_length(end)
    before, middle, after = strip.divide([start, end, strip.cell_length])
    middle = Strip([Segment(seg.text, (seg.style or Style()) + style) for seg in middle])
    return Strip.join([before, middle, after])
