"""Sparklines in one line of block characters, for a table cell: k9s's pulses, lazydocker's graphs.

A cell is text, so a sparkline is too (Textual's `Sparkline` widget cannot sit in a DataTable
cell). Every value is a glyph's height, not only a colour, so it reads in monochrome as well.
"""

from __future__ import annotations

from collections.abc import Sequence

BLOCKS = "▁▂▃▄▅▆▇█"
GAP = " "  # a value not known (an agent's first CPU figure, a sample missing)


def sparkline(values: Sequence[float | None], width: int, top: float | None = None) -> str:
    """The last `width` of `values` as block characters, right-aligned (the newest on the right).

    Args:
        values: oldest first; None is drawn as a gap.
        width: characters; fewer values leave blanks on the left.
        top: the value of a full block (100 for percentages); None: the largest value shown,
            so a rate's shape shows whatever its size (all zeros are all low blocks).
    """
    shown = list(values)[-width:] if width > 0 else []
    known = [v for v in shown if v is not None]
    full = top if top is not None else max(known, default=0.0)
    glyphs = [GAP if v is None else _block(v, full) for v in shown]
    return " " * (width - len(glyphs)) + "".join(glyphs)


def _block(value: float, full: float) -> str:
    if full <= 0:
        return BLOCKS[0]
    level = round(max(0.0, min(value, full)) / full * (len(BLOCKS) - 1))
    return BLOCKS[level]
