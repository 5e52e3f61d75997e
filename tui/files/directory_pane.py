"""A virtualised directory listing built on Textual's Line API.

Only the rows on screen are ever turned into text: `render_line` formats one entry on demand, so
100,000 entries cost a sort and nothing more. (DataTable builds every row up front: ~11 s for 100k
rows; this view draws a frame of 100k to 1M rows in well under 100 ms.)

Line 0 of the view is a sticky column header; entry `i` is drawn on virtual line `i + 1`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding, BindingType
from textual.dom import NoScreen
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from tui.errors import format_size
from tui.screen import KeepsEarlyKeys
from tui.text import load_tcss, printable, short_time
from tui.widgets.filter_line import name_filter
from tui.widgets.vi_keys import vi_keys

EntryDict = Mapping[str, Any]

TYPE_MARKERS = {"dir": "▸", "symlink": "@", "file": " ", "other": "?"}
TINTED_TYPES = frozenset({"dir", "symlink", "other"})


@dataclass(frozen=True)
class ColumnLayout:
    """Widths of the columns for one view width; a width of 0 hides the column."""

    name: int
    size: int
    permissions: int
    owner: int
    mtime: int

    MARKER: ClassVar[int] = 2  # the type marker and a space
    GAP: ClassVar[int] = 2

    @classmethod
    def fit(cls, width: int, owner_width: int, longest_name: int = 1000) -> ColumnLayout:
        """Give the name what is left after the metadata columns, dropping them when too narrow.

        On wide screens the name column stops a little past the longest name, so the metadata
        stays next to the names instead of being pushed to the far right edge.
        """
        size, permissions, mtime = 7, 9, 16
        owner = max(5, min(owner_width, 12))
        # Least useful first: owner, then permissions, then the time, then the size.
        for candidate in (
            (size, permissions, owner, mtime),
            (size, permissions, 0, mtime),
            (size, 0, 0, mtime),
            (size, 0, 0, 0),
            (0, 0, 0, 0),
        ):
            used = sum(column + cls.GAP for column in candidate if column)
            name = width - cls.MARKER - used
            if name >= 20 or candidate == (0, 0, 0, 0):
                return cls(max(1, min(name, max(longest_name + 2, 40))), *candidate)
        raise AssertionError("unreachable")


SortKey = Literal["name", "size", "mtime"]
SORT_KEYS: tuple[SortKey, ...] = ("name", "size", "mtime")


def sort_entries(entries: Iterable[EntryDict], by: SortKey = "name", *, reverse: bool = False) -> list[EntryDict]:
    """Directories first, then everything else (as in Midnight Commander, whatever the order).

    Within each group: by name, case-insensitively; or by size or modification time, largest or
    newest first (`reverse` turns either order around), ties broken by name.
    """
    by_name = sorted(entries, key=lambda e: (e.get("name", "").casefold(), e.get("name", "")))
    if by == "size":
        by_name.sort(key=lambda e: int(e.get("size", 0)), reverse=True)
    elif by == "mtime":
        by_name.sort(key=lambda e: str(e.get("mtime", "")), reverse=True)
    if reverse:
        by_name.reverse()
    # A stable sort keeps the order above within each group.
    by_name.sort(key=lambda e: e.get("type") != "dir")
    return by_name


class DirectoryPane(ScrollView, can_focus=True):
    """The entries of one directory, a cursor row, Enter to open, Backspace to go up.

    Entries can be marked (Insert or Space) for actions on many at once, sorted by name, size or
    time, and narrowed by a name filter; the marks survive sorting and filtering (a mark hidden
    by the filter still counts, as in Midnight Commander).
    """

    DEFAULT_CSS = load_tcss(__file__)

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "directory-pane--header",
        "directory-pane--cursor",
        "directory-pane--dir",
        "directory-pane--symlink",
        "directory-pane--other",
        "directory-pane--meta",
        "directory-pane--empty",
        "directory-pane--marked",
    }

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "cursor_up", "Up", show=False),
        Binding("down", "cursor_down", "Down", show=False),
        *vi_keys(up="cursor_up", down="cursor_down"),
        Binding("pageup", "page_up", "Page up", show=False),
        Binding("pagedown", "page_down", "Page down", show=False),
        Binding("home", "first", "First", show=False),
        Binding("end", "last", "Last", show=False),
        Binding("enter", "open", "Open", show=False),
        Binding("backspace", "up_directory", "Parent", show=False),
        Binding("insert,space", "toggle_mark", "Mark", show=False),
        Binding("asterisk", "invert_marks", "Invert marks", key_display="*", show=False),
        Binding("plus", "mark_all", "Mark all", key_display="+", show=False),
        Binding("minus", "unmark_all", "Unmark all", key_display="-", show=False),
    ]

    cursor: reactive[int] = reactive(0, always_update=False, init=False)
    """Index of the highlighted entry."""

    class Opened(Message):
        """Enter (or a double click) on an entry."""

        def __init__(self, pane: DirectoryPane, entry: EntryDict) -> None:
            super().__init__()
            self.pane = pane
            self.entry = entry

    class UpRequested(Message):
        """Backspace: the user wants the parent directory."""

        def __init__(self, pane: DirectoryPane) -> None:
            super().__init__()
            self.pane = pane

    class CursorMoved(Message):
        """The highlighted entry changed (`entry` is None when the directory is empty)."""

        def __init__(self, pane: DirectoryPane, index: int, entry: EntryDict | None) -> None:
            super().__init__()
            self.pane = pane
            self.index = index
            self.entry = entry

    class MarksChanged(Message):
        """The set of marked names changed."""

        def __init__(self, pane: DirectoryPane) -> None:
            super().__init__()
            self.pane = pane

    EMPTY_DIRECTORY = "This directory is empty."
    NO_MATCH = "Nothing matches the filter."

    def __init__(
        self,
        *,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
        listed_by_owner: bool = False,
    ) -> None:
        """`listed_by_owner`: whoever holds the pane lists the folders it opens (the file panel),
        so the keys typed after Enter on a folder or Backspace wait for that listing."""
        super().__init__(name=name, id=id, classes=classes)
        self._listed_by_owner = listed_by_owner
        self._all_entries: list[EntryDict] = []
        self._entries: list[EntryDict] = []
        self._marked: set[str] = set()
        self._sort_by: SortKey = "name"
        self._sort_reverse = False
        self._filter = ""
        self._owner_width = 5
        self._longest_name = 0
        self.message = ""
        """What to show instead of entries when there are none (nothing before a first listing)."""
        self._held_keys: list[str] | None = [] if listed_by_owner else None
        """The keys typed while a listing is on its way (see `hold_keys`); None: none on its way.
        Held from the start: the first listing is on its way as soon as the pane is shown."""

    # --- data ---------------------------------------------------------------------------

    @property
    def entries(self) -> list[EntryDict]:
        """The entries shown, in display order (directories first), after the filter."""
        return self._entries

    @property
    def all_entries(self) -> list[EntryDict]:
        """Every entry of the directory, filter or not, in display order."""
        return self._all_entries

    @property
    def highlighted(self) -> EntryDict | None:
        """The entry under the cursor, if any."""
        return self._entries[self.cursor] if self._entries else None

    @property
    def marked(self) -> list[EntryDict]:
        """The marked entries, in display order (including those the filter hides)."""
        return [entry for entry in self._all_entries if entry.get("name") in self._marked]

    @property
    def selection(self) -> list[EntryDict]:
        """What an action applies to: the marked entries, or else the highlighted one."""
        if self._marked:
            return self.marked
        return [self.highlighted] if self.highlighted is not None else []

    @property
    def ordering(self) -> tuple[SortKey, bool]:
        return self._sort_by, self._sort_reverse

    @property
    def filter_text(self) -> str:
        return self._filter

    def set_entries(self, entries: Iterable[EntryDict], *, select: str | None = None, keep_marks: bool = False) -> None:
        """Show `entries` (sorted here); put the cursor on the one named `select`, or the first.

        Marks are cleared (a new directory), unless `keep_marks` (a reload of the same one), in
        which case the marks of names that still exist stay.
        """
        self._all_entries = sort_entries(entries, self._sort_by, reverse=self._sort_reverse)
        names = {entry.get("name") for entry in self._all_entries}
        self._marked = {name for name in self._marked if name in names} if keep_marks else set()
        self._owner_width = max((len(str(e.get("owner", ""))) for e in self._all_entries), default=5)
        # +2: the `/` after directory names, and some air.
        self._longest_name = max(map(_display_name_length, self._all_entries), default=0) + 2
        self._show(select, top=True)
        self.post_message(self.MarksChanged(self))
        self.release_keys()

    def _show(self, select: str | None, *, top: bool = False) -> None:
        """Apply the filter to the sorted entries and redraw, the cursor on `select` if shown."""
        if self._filter:
            matches = name_filter(self._filter)
            self._entries = [entry for entry in self._all_entries if matches(str(entry.get("name", "")))]
            self.message = self.NO_MATCH
        else:
            self._entries = self._all_entries
            self.message = self.EMPTY_DIRECTORY
        self.virtual_size = Size(1, len(self._entries) + 1)
        index = self.index_of(select) if select is not None else None
        self.set_reactive(DirectoryPane.cursor, self.validate_cursor(index or 0))
        if top:
            self.scroll_to(y=0, animate=False, immediate=True)
        if index or not top:
            self._scroll_cursor_into_view(center=True)
            # A list that just grew past the screen (a filter cleared) has no scrollbar until it
            # is laid out again, and cannot scroll before: once more, after that refresh.
            self.call_after_refresh(self._scroll_cursor_into_view, center=True)
        self.refresh()
        self._post_cursor()

    def sort_by(self, key: SortKey, *, reverse: bool = False) -> None:
        """Re-sort in place, keeping the cursor on the same entry."""
        self._sort_by, self._sort_reverse = key, reverse
        current = self.highlighted
        self._all_entries = sort_entries(self._all_entries, key, reverse=reverse)
        self._show(str(current["name"]) if current else None)

    def set_filter(self, text: str) -> None:
        """Show only the names matching `text` (see `name_filter`); `""` shows everything."""
        if text == self._filter:
            return
        self._filter = text
        current = self.highlighted
        self._show(str(current["name"]) if current else None)

    def show_message(self, message: str) -> None:
        """Clear the entries and show `message` in their place (e.g. why nothing could be listed)."""
        self._all_entries = []
        self._entries = []
        self._marked = set()
        self.message = message
        self.virtual_size = Size(1, 1)
        self.set_reactive(DirectoryPane.cursor, 0)
        self.refresh()
        self._post_cursor()
        self.release_keys(replay=False)

    def index_of(self, name: str) -> int | None:
        """The position of the entry called `name`, or None."""
        for index, entry in enumerate(self._entries):
            if entry.get("name") == name:
                return index
        return None

    # --- keys typed ahead -----------------------------------------------------------------

    def on_mount(self) -> None:
        """The first listing is on its way since the pane was made (`_held_keys` is set): the
        screen's keys wait for it from now, as for every listing after (`/`, a name and `p`
        typed while the files screen opens went to an empty pane: `p` found nothing to act on)."""
        if self._held_keys is not None:
            self._hold_screen_keys(hold=True)

    def hold_keys(self) -> None:
        """A listing is on its way: keep the pane's keys typed meanwhile for it (Enter on a folder
        then ↓↓ Enter goes down in the folder opened, not in the one left)."""
        if self._held_keys is None and self._listed_by_owner:
            self._held_keys = []
            self._hold_screen_keys(hold=True)

    def release_keys(self, *, replay: bool = True) -> None:
        """The listing is shown: do what the held keys ask, in order (a key that opens another
        folder holds the rest again). Without `replay` (nothing listed) they are dropped."""
        held, self._held_keys = self._held_keys or [], None
        for position, key in enumerate(held if replay else []):
            if self._held_keys is not None:
                self._held_keys.extend(held[position:])
                return
            action = self._action_of(key)
            if action is not None:
                getattr(self, f"action_{action}")()
        if self._held_keys is None:
            self._hold_screen_keys(hold=False)

    def _hold_screen_keys(self, *, hold: bool) -> None:
        """Every key typed while the listing comes waits on the screen's keys (`tui.keys`): the
        filter `/` and the name typed after it, Tab, `p`... reach what the listing shows, in order."""
        try:
            screen = self.screen
        except NoScreen:
            return  # not mounted yet: the screen is not ready for keys either
        if isinstance(screen, KeepsEarlyKeys):
            (screen.hold_keys if hold else screen.release_keys)(self)

    def _action_of(self, key: str) -> str | None:
        """The action of the pane's own binding for `key` (None: not the pane's key)."""
        for binding in self.BINDINGS:
            if isinstance(binding, Binding) and key in binding.key.split(","):
                return binding.action
        return None

    def on_key(self, event: events.Key) -> None:
        if self._held_keys is not None and self._action_of(event.key) is not None:
            event.stop()
            event.prevent_default()
            self._held_keys.append(event.key)

    # --- cursor ---------------------------------------------------------------------------

    @property
    def page_rows(self) -> int:
        """How many entries fit on screen (the header takes one line)."""
        return max(1, self.scrollable_content_region.height - 1)

    def validate_cursor(self, value: int) -> int:
        return max(0, min(value, len(self._entries) - 1))

    def watch_cursor(self) -> None:
        self._scroll_cursor_into_view()
        self.refresh()
        self._post_cursor()

    def move_cursor(self, index: int, *, center: bool = False) -> None:
        """Highlight the entry at `index` (clamped) and scroll so it is visible (centred if asked)."""
        previous = self.cursor
        # Bypass the watcher: it would scroll the minimum, before we could centre.
        self.set_reactive(DirectoryPane.cursor, self.validate_cursor(index))
        self._scroll_cursor_into_view(center=center)
        self.refresh()
        if self.cursor != previous:
            self._post_cursor()

    def _scroll_cursor_into_view(self, *, center: bool = False) -> None:
        top = round(self.scroll_y)
        rows = self.page_rows
        if center and not (top <= self.cursor < top + rows):
            target = self.cursor - rows // 2
        elif self.cursor < top:
            target = self.cursor
        elif self.cursor >= top + rows:
            target = self.cursor - rows + 1
        else:
            return
        self.scroll_to(y=max(0, target), animate=False, immediate=True)

    def _post_cursor(self) -> None:
        self.post_message(self.CursorMoved(self, self.cursor, self.highlighted))

    def action_cursor_up(self) -> None:
        self.cursor -= 1

    def action_cursor_down(self) -> None:
        self.cursor += 1

    def action_page_up(self) -> None:
        self.cursor -= self.page_rows

    def action_page_down(self) -> None:
        self.cursor += self.page_rows

    def action_first(self) -> None:
        self.cursor = 0

    def action_last(self) -> None:
        self.cursor = len(self._entries) - 1

    def action_open(self) -> None:
        if (entry := self.highlighted) is not None:
            if entry.get("type") == "dir":
                self.hold_keys()  # from now: the keys after Enter are for the folder it opens
            self.post_message(self.Opened(self, entry))

    def action_up_directory(self) -> None:
        self.hold_keys()  # the panel releases them at once when there is no parent
        self.post_message(self.UpRequested(self))

    # --- marks ----------------------------------------------------------------------------

    def action_toggle_mark(self) -> None:
        """Mark or unmark the highlighted entry and move on to the next (as in Midnight Commander)."""
        entry = self.highlighted
        if entry is None:
            return
        name = str(entry.get("name", ""))
        self._marked.symmetric_difference_update({name})
        self._marks_changed()
        self.cursor += 1

    def action_invert_marks(self) -> None:
        """Invert the marks of the entries shown."""
        self._marked.symmetric_difference_update(str(entry.get("name", "")) for entry in self._entries)
        self._marks_changed()

    def action_mark_all(self) -> None:
        self._marked.update(str(entry.get("name", "")) for entry in self._entries)
        self._marks_changed()

    def action_unmark_all(self) -> None:
        self._marked.clear()
        self._marks_changed()

    def _marks_changed(self) -> None:
        self.refresh()
        self.post_message(self.MarksChanged(self))

    def on_click(self, event: events.Click) -> None:
        index = round(self.scroll_y) + event.y - 1
        if event.y < 1 or not 0 <= index < len(self._entries):
            return
        self.cursor = index
        if event.chain >= 2:
            self.action_open()

    # --- drawing --------------------------------------------------------------------------

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        layout = ColumnLayout.fit(width, self._owner_width, self._longest_name)
        if y == 0:
            return self._header_strip(layout, width)
        index = round(self.scroll_y) + y - 1
        if index >= len(self._entries):
            if index == 0 and self.message:
                return Strip([Segment(_fit(self.message.center(width), width), self._style("empty"))], width)
            return Strip.blank(width, self.rich_style)
        entry = self._entries[index]
        return self._entry_strip(entry, layout, width, index == self.cursor, entry.get("name") in self._marked)

    def _header_strip(self, layout: ColumnLayout, width: int) -> Strip:
        arrow = "↑" if self._sort_reverse else "↓"
        titles = {"name": "Name", "size": "Size", "mtime": "Modified"}
        titles[self._sort_by] = f"{titles[self._sort_by]}{arrow}"
        cells = ["", titles["name"], titles["size"], "Mode", "Owner", titles["mtime"]]
        text = self._join_cells(layout, cells, right_aligned={2})
        return Strip([Segment(text.ljust(width)[:width], self._style("header"))], width)

    def _entry_strip(
        self, entry: EntryDict, layout: ColumnLayout, width: int, is_cursor: bool, is_marked: bool
    ) -> Strip:
        kind = entry.get("type", "other")
        name = printable(str(entry.get("name", "")))
        if kind == "dir":
            name += "/"
        elif kind == "symlink" and entry.get("link_target"):
            name += f" → {printable(str(entry['link_target']))}"
        base = self._style("cursor") if is_cursor else self.rich_style
        # On the cursor row the cursor's colours win; elsewhere the type tints the name.
        name_style = base + self._style(kind) if kind in TINTED_TYPES and not is_cursor else base
        meta_style = base if is_cursor else base + self._style("meta")
        if is_marked:
            # A mark shows on every row, the cursor's too: its colour on top, and a `*` marker.
            name_style = meta_style = base + self._style("marked")
        marker = "*" if is_marked else TYPE_MARKERS.get(kind, "?")

        segments = [
            Segment(marker + " ", name_style),
            Segment(_fit(name, layout.name), name_style),
        ]
        metadata = [
            (layout.size, "" if kind == "dir" else format_size(int(entry.get("size", 0))), True),
            (layout.permissions, str(entry.get("permissions", "")), False),
            (layout.owner, printable(str(entry.get("owner", ""))), False),
            (layout.mtime, short_time(str(entry.get("mtime", ""))), False),
        ]
        for column_width, value, right in metadata:
            if column_width:
                cell = value.rjust(column_width) if right else value.ljust(column_width)
                segments.append(Segment(" " * ColumnLayout.GAP + cell[:column_width], meta_style))
        used = Segment.get_line_length(segments)
        if used < width:
            segments.append(Segment(" " * (width - used), base))
        return Strip(segments, width).crop(0, width)

    def _join_cells(self, layout: ColumnLayout, cells: list[str], right_aligned: set[int]) -> str:
        widths = [ColumnLayout.MARKER, layout.name, layout.size, layout.permissions, layout.owner, layout.mtime]
        parts = []
        for position, (cell, column_width) in enumerate(zip(cells, widths, strict=True)):
            if not column_width:
                continue
            gap = " " * ColumnLayout.GAP if position >= 2 else ""
            text = cell.rjust(column_width) if position in right_aligned else cell.ljust(column_width)
            parts.append(gap + text[:column_width])
        return "".join(parts)

    def _style(self, part: str) -> Style:
        return self.get_component_rich_style(f"directory-pane--{part}")


def _display_name_length(entry: EntryDict) -> int:
    """Cells taken by the name column of `entry`: its name, and ` → target` for a symlink."""
    length = len(str(entry.get("name", "")))
    target = entry.get("link_target")
    return length + 3 + len(str(target)) if entry.get("type") == "symlink" and target else length


def _fit(text: str, width: int) -> str:
    """Pad or cut `text` to `width` terminal cells, marking a cut with an ellipsis."""
    if cell_len(text) <= width:
        return set_cell_size(text, width)
    return set_cell_size(text, max(0, width - 1)) + "…"
