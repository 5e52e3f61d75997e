"""Sparklines in a cell (issue 25, point 11): a glyph's height per value, newest on the right."""

from __future__ import annotations

from tui.widgets.sparkline import sparkline


def test_values_are_heights_scaled_to_the_top_or_to_the_largest_shown() -> None:
    assert sparkline([0, 50, 100], 3, top=100) == "▁▅█"
    assert sparkline([150, -5], 2, top=100) == "█▁"  # clamped: a glitch never draws past the cell
    assert sparkline([1, 2, 4], 3) == "▃▅█"  # a rate: its own largest is the top
    assert sparkline([0, 0], 2) == "▁▁"


def test_fewer_values_leave_blanks_on_the_left_and_unknown_ones_a_gap() -> None:
    assert sparkline([100], 4, top=100) == "   █"
    assert sparkline([None, 100, None], 3, top=100) == " █ "
    assert sparkline(range(10), 3, top=9) == "▆▇█"  # only the newest that fit
    assert sparkline([1.0], 0) == ""
