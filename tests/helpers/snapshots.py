"""Text snapshots of the TUI: what a screen shows, cell for cell, compared with a stored copy.

A snapshot is the screen's text (colours left out: the states they carry must show in the text
too), so a cut word, a lost column or a footer that no longer fits shows up as a readable diff.
`FLEETDECK_UPDATE_SNAPSHOTS=1` rewrites the stored copies; read the diff before committing it.
What changes from run to run (clock times, ages, durations, ids) is masked first, so the test
fails only on a change of the screen itself.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from rich.cells import cell_len
from rich.color import Color, ColorType
from rich.style import Style
from textual.app import App

SNAPSHOTS = Path(__file__).resolve().parent.parent / "data" / "snapshots"
UPDATE = os.environ.get("FLEETDECK_UPDATE_SNAPSHOTS") == "1"

# Masked in this order; each keeps the width of what it replaces, so columns stay where they were.
# Durations apart (below): their width changes with the machine's load.
VOLATILE = [
    re.compile(r"\b\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(:\d{2}(\.\d+)?Z?)?\b"),  # timestamps (RFC 3339's too)
    re.compile(r"\b\d{1,2}:\d{2}:\d{2}\b"),  # clock times
    re.compile(r"\b\d+(\.\d+)? ?(ms|s|min|h) ago\b"),  # ages
    re.compile(r"\bj-[0-9a-f]{6,}\b|\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f-]{4,}\b"),  # ids
    re.compile(r"127\.0\.0\.1:\d+"),  # the test stack's port
    re.compile(r"/tmp/fleetdeck-snapshots-\w{8}"),  # the snapshot org's folder (`tempfile.mkdtemp`)
    # A live sparkline and the figure after it (`tui.widgets.sparkline`), from the blanks before
    # it: they shrink as it grows, and the cell keeps its width. (A scrollbar has no figure.)
    re.compile(r" *[▁▂▃▄▅▆▇█][▁▂▃▄▅▆▇█ ]* +(?:\d{1,3}%|\?|\d+(?:\.\d)?[kM]?/s)"),
]
SNAPSHOT_FOLDER_PREFIX = "fleetdeck-snapshots-"
# The tests' own folder, and the padding after the path it starts: pytest numbers its folders on
# (pytest-999, then pytest-1000), so the folder becomes one mask of a fixed width, and the padding
# after the path gives back or takes what that changed, so the cell keeps its width.
TESTS_FOLDER = re.compile(r"/tmp/pytest-of-[^/\s]+/pytest-\d+(?P<path>\S*)(?P<pad> {2,})?")
TESTS_FOLDER_MASK = "~" * 32


def screen_text(app: App[object]) -> str:
    """The current screen as text, one line per terminal row, trailing blanks dropped."""
    lines = [strip.text.rstrip() for strip in app.screen._compositor.render_strips()]
    return "\n".join(lines) + "\n"


Cell = tuple[str, Style]  # a character (or "" for the second half of a wide one) and its style


def screen_cells(app: App[object]) -> list[list[Cell]]:
    """The current screen cell by cell, one list per terminal row, as it goes to the terminal."""
    rows = []
    for strip in app.screen._compositor.render_strips():
        row: list[Cell] = []
        for text, style, _ in strip:
            for char in text:
                row.append((char, style or Style.null()))
                row.extend(("", style or Style.null()) for _ in range(cell_len(char) - 1))
        rows.append(row)
    return rows


def colours_used(app: App[object]) -> set[ColorType]:
    """The kinds of colour the screen sends (default, standard: the 16, 256, truecolor)."""
    return {
        colour.type
        for row in screen_cells(app)
        for _, style in row
        for colour in (style.color, style.bgcolor)
        if colour is not None
    }


def unreadable_cells(app: App[object]) -> list[tuple[int, int, str]]:
    """(row, column, character) of every character drawn in the colour of its own background.

    The terminal's default foreground on its default background is readable (that is what
    NO_COLOR asks for); one colour named for both is not, whichever the terminal's palette.
    """
    default = Color.default()
    found = []
    for y, row in enumerate(screen_cells(app)):
        for x, (char, style) in enumerate(row):
            foreground, background = style.color or default, style.bgcolor or default
            same = foreground.get_truecolor() == background.get_truecolor()  # `black` is `color(0)`
            if char.strip() and same and not foreground.is_default:
                found.append((y, x, char))
    return found


# A job that took 8 ms on a quiet machine takes 12 ms on a loaded one: a duration becomes one
# mask of a fixed width, and a line holding one loses its indent (a centred line moves by a
# column as the duration's width changes), so neither fails a snapshot on a slow run.
DURATION = re.compile(r"\b\d+(\.\d+)? ?(ms|s)\b(?! ago)")
DURATION_MASK = "~" * 6  # "999 ms", "59.9 s"


def masked(text: str) -> str:
    for pattern in VOLATILE:
        text = pattern.sub(lambda match: "~" * len(match.group(0)), text)
    text = TESTS_FOLDER.sub(_mask_tests_folder, text)
    return "\n".join(map(_mask_durations, text.split("\n")))


def _mask_tests_folder(match: re.Match[str]) -> str:
    path, pad = match.group("path"), match.group("pad") or ""
    folder = len(match.group(0)) - len(path) - len(pad)
    if pad:
        pad = " " * max(2, len(pad) + folder - len(TESTS_FOLDER_MASK))
    return TESTS_FOLDER_MASK + path + pad


def _mask_durations(line: str) -> str:
    line, found = DURATION.subn(DURATION_MASK, line)
    return re.sub(r"^ +", " ", line) if found else line


def assert_snapshot(app: App[object], name: str) -> str:
    """Compare the screen with `data/snapshots/<name>.txt` (written when updating); return it."""
    text = masked(screen_text(app))
    stored = SNAPSHOTS / f"{name}.txt"
    if UPDATE:
        stored.parent.mkdir(parents=True, exist_ok=True)
        stored.write_text(text)
    assert stored.exists(), f"no stored snapshot {stored.name}: run with FLEETDECK_UPDATE_SNAPSHOTS=1"
    assert text == stored.read_text(), f"{name} changed:\n{text}"
    return text
