"""The Line API widgets on their own: the directory pane with 100k entries, the lazy viewer."""

from __future__ import annotations

import random
from typing import Any

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.pilot import Pilot
from textual.widgets._footer import FooterKey

from tests.helpers import wait_for
from tests.helpers.tui import run
from tui.errors import format_size
from tui.files.directory_pane import ColumnLayout, DirectoryPane, sort_entries
from tui.files.highlight import BLOCK_LINES, LEAD_IN_LINES, LazyHighlighter, lexer_for_path, split_lines
from tui.jobs.log_panel import LogLine, LogPanel
from tui.widgets.footer import FleetFooter

ENTRY_COUNT = 100_000


def make_entries(count: int) -> list[dict[str, Any]]:
    entries = [
        {
            "name": f"dir-{i:06d}" if i % 10 == 0 else f"file-{i:06d}.txt",
            "path": "",
            "type": "dir" if i % 10 == 0 else "file",
            "size": i * 37,
            "mode": 420,
            "permissions": "rw-r--r--",
            "owner": "www-data",
            "group": "www-data",
            "mtime": "2026-11-22T10:00:00Z",
            "link_target": None,
        }
        for i in range(count)
    ]
    random.Random(7).shuffle(entries)
    return entries


class PaneApp(App[None]):
    def __init__(self) -> None:
        super().__init__()
        self.opened: list[dict[str, Any]] = []
        self.up_requests = 0
        self.marks_changes = 0

    def compose(self) -> ComposeResult:
        yield DirectoryPane()

    def on_directory_pane_opened(self, event: DirectoryPane.Opened) -> None:
        self.opened.append(dict(event.entry))

    def on_directory_pane_up_requested(self, _event: DirectoryPane.UpRequested) -> None:
        self.up_requests += 1

    def on_directory_pane_marks_changed(self, _event: DirectoryPane.MarksChanged) -> None:
        self.marks_changes += 1


def visible_names(pane: DirectoryPane) -> list[str]:
    return [pane.render_line(y).text.split()[0] for y in range(1, pane.page_rows + 1)]


def test_directory_pane_scrolls_100k_entries_to_the_end() -> None:
    app = PaneApp()

    async def scenario(pilot: Pilot[None]) -> None:
        pane = app.query_one(DirectoryPane)
        pane.set_entries(make_entries(ENTRY_COUNT))
        pane.focus()
        await pilot.pause()
        assert pane.cursor == 0
        assert pane.render_line(1).text.startswith("▸ dir-000000/")  # directories first

        await pilot.press("end")
        assert pane.cursor == ENTRY_COUNT - 1
        assert pane.scroll_y == pane.max_scroll_y
        assert visible_names(pane)[-1] == "file-099999.txt"

        await pilot.press("up", "up", "pageup")
        assert pane.cursor == ENTRY_COUNT - 3 - pane.page_rows
        assert pane.highlighted is not None
        first_visible = round(pane.scroll_y)
        assert first_visible <= pane.cursor < first_visible + pane.page_rows  # the cursor stays on screen

        await pilot.press("home", "down", "enter")
        assert app.opened[-1]["name"] == "dir-000010"
        await pilot.press("backspace")
        assert app.up_requests == 1

    run(app, scenario)


def test_directory_pane_formats_only_the_rows_on_screen_of_100k_entries() -> None:
    """Virtualised: a frame formats the visible rows, never the 100,000 (the speed is benchmarked)."""
    app = PaneApp()
    formatted: list[str] = []

    async def scenario(pilot: Pilot[None]) -> None:
        pane = app.query_one(DirectoryPane)
        real_entry_strip = pane._entry_strip

        def counting_entry_strip(entry: Any, *args: Any) -> Any:
            formatted.append(str(entry["name"]))
            return real_entry_strip(entry, *args)

        pane._entry_strip = counting_entry_strip  # type: ignore[method-assign]
        pane.set_entries(make_entries(ENTRY_COUNT))
        await pilot.pause()
        pane.move_cursor(ENTRY_COUNT // 2, center=True)
        await pilot.pause()
        formatted.clear()
        lines = [pane.render_line(y) for y in range(pane.size.height)]
        assert len(formatted) == pane.page_rows < 60
        assert pane.highlighted is not None and pane.highlighted["name"] in formatted
        assert all(line.cell_length == pane.scrollable_content_region.width for line in lines)

    run(app, scenario, size=(200, 50))


def test_directory_pane_sorts_directories_first_then_names_case_insensitively() -> None:
    names = [("b.txt", "file"), ("Z", "dir"), ("a", "dir"), ("C.txt", "file"), ("a.txt", "file")]
    entries = [{"name": name, "type": kind} for name, kind in names]
    assert [e["name"] for e in sort_entries(entries)] == ["a", "Z", "a.txt", "b.txt", "C.txt"]


def test_sorting_by_size_and_time_keeps_directories_first_and_can_be_reversed() -> None:
    entries = [
        {"name": "small", "type": "file", "size": 1, "mtime": "2026-01-03T00:00:00Z"},
        {"name": "big", "type": "file", "size": 900, "mtime": "2026-01-01T00:00:00Z"},
        {"name": "mid", "type": "file", "size": 50, "mtime": "2026-01-02T00:00:00Z"},
        {"name": "folder", "type": "dir", "size": 4096, "mtime": "2025-01-01T00:00:00Z"},
    ]
    assert [e["name"] for e in sort_entries(entries, "size")] == ["folder", "big", "mid", "small"]
    assert [e["name"] for e in sort_entries(entries, "size", reverse=True)] == ["folder", "small", "mid", "big"]
    assert [e["name"] for e in sort_entries(entries, "mtime")] == ["folder", "small", "mid", "big"]


def test_marks_survive_sorting_and_filtering_and_a_reload_keeps_them() -> None:
    app = PaneApp()

    async def scenario(pilot: Pilot[None]) -> None:
        pane = app.query_one(DirectoryPane)
        pane.set_entries(make_entries(50))
        pane.focus()
        await pilot.pause()
        # Space marks and moves down, as Insert does in Midnight Commander.
        await pilot.press("space", "space", "insert")
        assert pane.cursor == 3
        marked = [e["name"] for e in pane.marked]
        assert marked == ["dir-000000", "dir-000010", "dir-000020"]
        assert [e["name"] for e in pane.selection] == marked
        assert pane.render_line(1).text.startswith("* dir-000000")

        # The filter hides entries but not their marks; a glob or a substring, any case.
        pane.set_filter("FILE-00000?.TXT")
        assert [e["name"] for e in pane.entries] == [f"file-00000{i}.txt" for i in range(1, 10)]
        assert len(pane.all_entries) == 50 and [e["name"] for e in pane.marked] == marked
        pane.set_filter("")
        assert len(pane.entries) == 50

        # Sorting keeps the marks and the cursor's entry.
        pane.move_cursor(pane.index_of("file-000049.txt") or 0)
        pane.sort_by("size")
        assert pane.highlighted is not None and pane.highlighted["name"] == "file-000049.txt"
        assert pane.entries[5]["name"] == "file-000049.txt"  # the 5 folders, then the largest file
        assert [e["name"] for e in pane.marked] == ["dir-000020", "dir-000010", "dir-000000"]
        assert pane.render_line(0).text.split()[:2] == ["Name", "Size↓"]

        # A reload of the same folder keeps the marks of names that are still there; a new folder clears them.
        remaining = [e for e in make_entries(50) if e["name"] != "dir-000010"]
        pane.set_entries(remaining, keep_marks=True)
        assert [e["name"] for e in pane.marked] == ["dir-000020", "dir-000000"]
        await pilot.press("asterisk")  # invert
        assert len(pane.marked) == 47
        await pilot.press("minus")
        assert pane.marked == [] and pane.selection == [pane.highlighted]
        await pilot.press("plus")
        pane.set_entries(remaining)
        assert pane.marked == []
        await pilot.pause()
        assert app.marks_changes >= 6

    run(app, scenario)


def test_one_size_format_fits_the_size_column() -> None:
    """Panels, dialogs, progress, properties and the trash all write sizes with `format_size`."""
    assert [format_size(n) for n in (0, 999, 1000, 1536, 12 * 1024**2, 1234 * 1024**2)] == [
        "0 B",
        "999 B",
        "1.0 KiB",
        "1.5 KiB",
        "12 MiB",
        "1.2 GiB",
    ]
    sizes = [int(1.0001**k) for k in range(0, 340_000, 97)]  # up to 800 TiB, every unit's edges
    widest = max((format_size(size) for size in sizes), key=len)
    assert len(widest) <= ColumnLayout.fit(200, 8).size, widest


def test_directory_pane_drops_columns_when_narrow_and_shows_no_control_characters() -> None:
    assert ColumnLayout.fit(200, 8).owner == 8
    narrow = ColumnLayout.fit(40, 8)
    assert narrow.owner == 0 and narrow.permissions == 0 and narrow.name >= 20
    app = PaneApp()

    async def scenario(pilot: Pilot[None]) -> None:
        pane = app.query_one(DirectoryPane)
        pane.set_entries([{**make_entries(1)[0], "name": "evil\x1b[31mname\nx", "type": "file"}])
        await pilot.pause()
        text = pane.render_line(1).text
        assert "\x1b" not in text and "\n" not in text and "evil?[31mname?x" in text

    run(app, scenario)


def php_lines(count: int) -> str:
    header = "<?php\n/**\n * A docblock\n */\n"
    return header + "".join(f"$value{i} = compute({i}); // note {i}\n" for i in range(count - 4))


def python_source(count: int) -> str:
    return "".join(f"value_{i} = compute({i})  # note {i}\n" for i in range(count))


def test_viewer_highlights_php_in_the_middle_of_a_file() -> None:
    lines = split_lines(php_lines(1000))
    highlighter = LazyHighlighter(lines, lexer_for_path("index.php"))
    tokens = highlighter.tokens(700)  # far from `<?php`: the block is lexed as PHP code anyway
    kinds = {str(token_type) for token_type, _ in tokens}
    assert "Token.Name.Variable" in kinds and "Token.Comment.Single" in kinds
    assert highlighter.lexed_line_count <= BLOCK_LINES + LEAD_IN_LINES


def test_lexers_are_picked_from_file_names() -> None:
    expected = {
        "index.php": "PHP",
        "index.html": "HTML",
        "style.css": "CSS",
        "app.js": "JavaScript",
        "composer.json": "JSON",
        "README.md": "Markdown",
        "deploy.sh": "Bash",
        "manage.py": "Python",
        "config.yaml": "YAML",
        "nginx.conf": "Nginx configuration file",
        "etc/nginx/sites-enabled/example.conf": "Nginx configuration file",
        ".env": "Bash",
        ".env.production": "Bash",
        "notes.unknown-extension": "Text only",
    }
    assert {path: lexer_for_path(path).name for path in expected} == expected
    assert lexer_for_path("bin/tool", "#!/usr/bin/env python3").name == "Python"


def test_viewer_draws_tabs_and_control_characters_safely() -> None:
    highlighter = LazyHighlighter(split_lines("a\tb\x1b[2J\r\n"), lexer_for_path("x.txt"))
    text = "".join(value for _, value in highlighter.tokens(0))
    assert text == "a   b␛[2J"


class LogApp(App[None]):
    def compose(self) -> ComposeResult:
        yield LogPanel()


def test_the_vi_keys_move_the_directory_pane_and_scroll_the_job_log() -> None:
    panes = PaneApp()

    async def in_the_pane(pilot: Pilot[None]) -> None:
        pane = panes.query_one(DirectoryPane)
        pane.set_entries(make_entries(100))
        pane.focus()
        await pilot.press("j", "j", "j", "k")
        assert pane.cursor == 2

    run(panes, in_the_pane)
    logs = LogApp()

    async def in_the_log(pilot: Pilot[None]) -> None:
        panel = logs.query_one(LogPanel)
        panel.append_lines([LogLine(f"line {n}") for n in range(500)])
        panel.flush_now()
        panel.focus()
        await pilot.pause()
        assert panel.follow and panel.scroll_y == panel.max_scroll_y > 0
        await pilot.press("k")  # scrolling back stops following
        assert not panel.follow and panel.scroll_y == panel.max_scroll_y - 1
        await pilot.press("g")
        assert panel.scroll_y == 0
        await pilot.press("j")
        assert panel.scroll_y == 1
        await pilot.press("G")  # the end follows again
        assert panel.follow

    run(logs, in_the_log)


class CrowdedFooterApp(App[None]):
    """More keys than 80 columns hold, then F1 and F10 (as the app's own bindings)."""

    BINDINGS = [
        *(Binding(f"f{n}", f"press_{n}", f"Action {n} is long", key_display=f"F{n}") for n in range(2, 10)),
        Binding("f1", "help", "Help", key_display="F1"),
        Binding("f10", "quit", "Quit", key_display="F10"),
    ]

    def compose(self) -> ComposeResult:
        yield FleetFooter()

    def action_help(self) -> None:
        self.bell()


def test_the_footer_drops_whole_keys_that_would_be_cut_never_f1_or_f10() -> None:
    async def scenario(pilot: Pilot[Any]) -> None:
        footer = pilot.app.query_one(FleetFooter)

        def shown() -> list[FooterKey]:
            return [key for key in footer.query(FooterKey) if key.display]

        await wait_for(pilot, lambda: any(not key.display for key in footer.query(FooterKey)))
        await pilot.pause()
        assert shown() and all(key.virtual_region.right <= 80 for key in shown())
        texts = [f"{key.key_display} {key.description}" for key in shown()]
        hidden = [key for key in footer.query(FooterKey) if not key.display]
        assert texts[-2:] == ["F1 Help", "F10 Quit"] and hidden, texts
        # The first keys shown, in their order, each drawn whole; the last ones left out.
        assert texts[:-2] == [f"F{n} Action {n} is long" for n in range(2, 10)][: len(texts) - 2]
        assert all(key.region.width == key.get_content_width(footer.size, pilot.app.size) for key in shown())
        # Wider, all of them.
        await pilot.resize_terminal(200, 24)
        await wait_for(pilot, lambda: all(key.display for key in footer.query(FooterKey)))

    run(CrowdedFooterApp(), scenario, size=(80, 24))
