"""A read-only, syntax-highlighted view of a text file, built on the Line API.

Only visible lines are drawn, and only their blocks are lexed (see `highlight.LazyHighlighter`),
so opening a 100,000-line file costs a `split` and one screenful of lexing.
"""

from __future__ import annotations

from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from tui.files.highlight import LazyHighlighter, lexer_for_path, split_lines, themed_segments
from tui.text import load_tcss


class CodeView(ScrollView, can_focus=True):
    """Line numbers in a fixed gutter, highlighted code that scrolls in both directions."""

    DEFAULT_CSS = load_tcss(__file__)

    COMPONENT_CLASSES: ClassVar[set[str]] = {"code-view--gutter"}

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up,k", "scroll_up", "Up", show=False),
        Binding("down,j", "scroll_down", "Down", show=False),
        Binding("left,h", "scroll_left", "Left", show=False),
        Binding("right,l", "scroll_right", "Right", show=False),
        Binding("home,g", "jump_top", "Top", show=False),
        Binding("end,G", "jump_bottom", "Bottom", show=False),
        Binding("pageup,b", "jump_page(-1)", "Page up", show=False),
        Binding("pagedown,space", "jump_page(1)", "Page down", show=False),
    ]

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.highlighter = LazyHighlighter([], lexer_for_path(""))
        self._gutter_width = 0

    @property
    def line_count(self) -> int:
        return len(self.highlighter.lines)

    @property
    def language(self) -> str:
        return self.highlighter.language

    def load(self, content: str, path: str) -> None:
        """Show `content`, highlighted for the language of `path`, from the top."""
        lines = split_lines(content)
        self.highlighter = LazyHighlighter(lines, lexer_for_path(path, lines[0] if lines else ""))
        self._gutter_width = len(str(max(1, len(lines)))) + 2
        # `len` undercounts tabs and wide characters; close enough for the horizontal scroll range.
        longest = max(map(len, lines), default=0)
        self.virtual_size = Size(self._gutter_width + longest + 1, len(lines))
        self.scroll_to(0, 0, animate=False, immediate=True)
        self.refresh()

    # Jumps are not animated: an animated scroll would draw (and lex) every page on the way.

    def action_jump_top(self) -> None:
        self.scroll_to(y=0, animate=False)

    def action_jump_bottom(self) -> None:
        self.scroll_to(y=self.max_scroll_y, animate=False)

    def action_jump_page(self, direction: int) -> None:
        self.scroll_to(y=self.scroll_y + direction * self.scrollable_content_region.height, animate=False)

    def _on_theme_change(self) -> None:
        self.refresh()

    def on_mount(self) -> None:
        self.watch(self.app, "theme", lambda _: self._on_theme_change(), init=False)

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        scroll_x, scroll_y = self.scroll_offset
        index = scroll_y + y
        if index >= self.line_count:
            return Strip.blank(width, self.rich_style)
        code_width = max(0, width - self._gutter_width)
        gutter = Segment(f"{index + 1:>{self._gutter_width - 1}} ", self._gutter_style())
        code = Strip(themed_segments(self, self.highlighter.tokens(index))).crop_extend(
            scroll_x, scroll_x + code_width, self.rich_style
        )
        return Strip([gutter, *code], width)

    def _gutter_style(self) -> Style:
        return self.get_component_rich_style("code-view--gutter")
