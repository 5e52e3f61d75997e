"""Checkboxes and radio buttons that show their state in the glyph, not only in its colour.

Textual draws every toggle as `▐X▌`, ticked or not, and tells them apart by colour alone: on a
monochrome or 16-colour terminal a permissions grid cannot be read. These draw `[x]` / `[ ]` and
`(*)` / `( )` (as Midnight Commander does), in plain ASCII, and keep Textual's colours on top.
Import the toggles from here, never from `textual.widgets`.
"""

from __future__ import annotations

from typing import ClassVar

from rich.segment import Segment
from textual.content import Content
from textual.strip import Strip
from textual.widgets import Checkbox as TextualCheckbox
from textual.widgets import RadioButton as TextualRadioButton
from textual.widgets import SelectionList as TextualSelectionList
from textual.widgets._toggle_button import ToggleButton
from textual.widgets.option_list import OptionDoesNotExist
from textual.widgets.selection_list import SelectionType

CHECKBOX_GLYPHS = ("[ ]", "[x]")
RADIO_GLYPHS = ("( )", "(*)")


class _StateGlyph(ToggleButton):
    """A toggle drawn as one of `GLYPHS` (off, on), in the toggle's button style."""

    GLYPHS: ClassVar[tuple[str, str]] = CHECKBOX_GLYPHS

    @property
    def _button(self) -> Content:
        return Content.assemble((self.GLYPHS[self.value], self.get_visual_style("toggle--button")))


class Checkbox(_StateGlyph, TextualCheckbox):
    """`[x]` ticked, `[ ]` not."""


class RadioButton(_StateGlyph, TextualRadioButton):
    """`(*)` chosen, `( )` not."""

    GLYPHS = RADIO_GLYPHS


class SelectionList(TextualSelectionList[SelectionType]):
    """A list of options to tick, each drawn with `[x]` / `[ ]` in front."""

    def render_line(self, y: int) -> Strip:
        line = super().render_line(y)
        try:
            selection = self.get_option_at_index(self.scroll_offset.y + y)
        except OptionDoesNotExist:
            return line
        # The parent draws the button as its first three segments (left side, inside, right side).
        segments = list(line)
        if len(segments) < 3:
            return line
        glyph = CHECKBOX_GLYPHS[selection.value in self.selected]
        return Strip([Segment(glyph, segments[1].style), *segments[3:]], line.cell_length)
