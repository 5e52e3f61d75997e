"""The viewer (F3) on the real stack: files of any size paged with ranged reads, logs opened at
their end, search forward and backward across windows, wrap, binaries in hex. At 80x24.

Trio work is not awaited by `pilot.pause()`: `wait_for` polls until the trio side has delivered.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from textual.pilot import Pilot

from tests.conftest import Stack
from tests.helpers import wait_for
from tests.helpers.own_agent import own_agent
from tests.helpers.snapshots import screen_text
from tests.helpers.tui import highlight, highlight_server, names, real_app, run, site_dir
from tui.command_line import CommandLine
from tui.files.commander import CommanderScreen
from tui.files.dialogs import SearchDialog
from tui.files.pager import CHUNK, hex_row, is_log, looks_binary
from tui.files.viewer import PageView, ViewerScreen, go_to_target

LINES = 1_600_000  # 13 bytes a line: a 20 MB log


def log_line(n: int) -> bytes:
    return b"line %07d\n" % n


def big_log() -> bytes:
    lines = [log_line(n) for n in range(LINES)]
    lines[400_000] = b"NEEDLE early\n"  # ~5 MB in: several windows past the top
    lines[1_200_000] = b"NEEDLE late\n"  # ~15 MB in
    return b"".join(lines)


WriteFile = Callable[[str, bytes], Path]


@pytest.fixture
def site_file(stack: Stack) -> Iterator[WriteFile]:
    """Writes a file in example.com for one test, removed after it (a 20 MB log would slow the
    content searches of the tests that follow)."""
    made: list[Path] = []

    def write(path: str, data: bytes) -> Path:
        made.append(site_dir(stack) / path)
        made[-1].write_bytes(data)
        return made[-1]

    yield write
    for path in made:
        path.unlink(missing_ok=True)


async def open_viewer(pilot: Pilot[None], folder: str, name: str) -> ViewerScreen:
    """From the server list to the commander, into `folder`, then F3 on `name`."""
    app = pilot.app
    await highlight_server(pilot, "local")
    await pilot.press("enter")
    await wait_for(pilot, lambda: isinstance(app.screen, CommanderScreen) and names(app.screen.left))
    commander = app.screen
    assert isinstance(commander, CommanderScreen)
    if folder:
        await highlight(pilot, commander.left, folder)
        await pilot.press("enter")
        await wait_for(pilot, lambda: commander.left.path == folder and name in names(commander.left))
    await highlight(pilot, commander.left, name)
    await pilot.press("f3")
    await wait_for(pilot, lambda: isinstance(app.screen, ViewerScreen) and app.screen.page is not None)
    viewer = app.screen
    assert isinstance(viewer, ViewerScreen)
    return viewer


def shown(viewer: ViewerScreen) -> list[str]:
    return viewer.query_one(PageView).lines


def bar(viewer: ViewerScreen) -> str:
    return str(viewer.query_one("#viewer-bar").render())


def test_a_20_mb_log_opens_at_its_end_and_pages(stack: Stack, site_file: WriteFile) -> None:
    size = site_file("logs/viewer-big.log", big_log()).stat().st_size
    app = real_app(stack)

    async def scenario(pilot: Pilot[None]) -> None:
        viewer = await open_viewer(pilot, "logs", "viewer-big.log")
        height = viewer.query_one(PageView).size.height
        assert shown(viewer)[-1] == f"line {LINES - 1:07d}" and len(shown(viewer)) == height
        assert f"/{size:,} bytes" in bar(viewer) and "100%" in bar(viewer)

        await pilot.press("pageup")
        await wait_for(pilot, lambda: shown(viewer)[-1] == f"line {LINES - 1 - height:07d}")
        await pilot.press("up")
        await wait_for(pilot, lambda: shown(viewer)[-1] == f"line {LINES - 2 - height:07d}")
        await pilot.press("home")
        await wait_for(pilot, lambda: shown(viewer)[0] == "line 0000000")
        assert "0/" in bar(viewer)
        await pilot.press("pagedown", "down")
        await wait_for(pilot, lambda: shown(viewer)[0] == f"line {height + 1:07d}")
        await pilot.press("g", "G")  # in the order pressed, whenever their reads answer
        await wait_for(pilot, lambda: shown(viewer)[-1] == f"line {LINES - 1:07d}")
        await pilot.press("pagedown")  # at the end it stays there
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, CommanderScreen))

    run(app, scenario)


def test_search_forward_and_backward_across_windows(stack: Stack, site_file: WriteFile) -> None:
    site_file("viewer-search.txt", big_log())
    app = real_app(stack)

    async def scenario(pilot: Pilot[None]) -> None:
        viewer = await open_viewer(pilot, "", "viewer-search.txt")
        assert shown(viewer)[0] == "line 0000000"  # not a log: it opens at the top

        await pilot.press("slash", *"needle", "enter")
        await wait_for(pilot, lambda: shown(viewer)[0] == "NEEDLE early")
        assert "match on line 400,001" in bar(viewer)  # found on the server, with its line
        await pilot.press("n")
        await wait_for(pilot, lambda: shown(viewer)[0] == "NEEDLE late")
        await pilot.press("n")
        await wait_for(pilot, lambda: any("Not found" in n.message for n in app._notifications))
        assert shown(viewer)[0] == "NEEDLE late"
        await pilot.press("N")
        await wait_for(pilot, lambda: shown(viewer)[0] == "NEEDLE early")

        await pilot.press("end", "question_mark", *"NEEDLE", "enter")  # `?` searches backward
        await wait_for(pilot, lambda: shown(viewer)[0] == "NEEDLE late")
        await pilot.press("n")  # the same way: further back
        await wait_for(pilot, lambda: shown(viewer)[0] == "NEEDLE early")
        await pilot.press("N")
        await wait_for(pilot, lambda: shown(viewer)[0] == "NEEDLE late")

    run(app, scenario)


def test_go_to_a_line_an_offset_or_a_percentage(stack: Stack, site_file: WriteFile) -> None:
    """F5 (mc's viewer's Goto) then a line, `@` a byte offset, or a percentage; past the last line:
    the last line; anything else says what it takes and moves nothing."""
    size = site_file("logs/viewer-goto.log", big_log()).stat().st_size
    app = real_app(stack)

    async def scenario(pilot: Pilot[None]) -> None:
        viewer = await open_viewer(pilot, "logs", "viewer-goto.log")
        assert shown(viewer)[-1] == f"line {LINES - 1:07d}"  # a log: at its end

        await pilot.press("f5", *"1,234,567", "enter")
        await wait_for(pilot, lambda: shown(viewer)[0] == "line 1234566")
        assert "line 1,234,567" in bar(viewer)
        await pilot.press("f5", *"@0x87", "enter")  # byte 135, in the line that starts at 130
        await wait_for(pilot, lambda: shown(viewer)[0] == "line 0000010")
        assert viewer.page is not None and viewer.page.top == 130
        await pilot.press("f5", *"50%", "enter")
        await wait_for(pilot, lambda: shown(viewer)[0] == f"line {size // 2 // 13:07d}")
        await pilot.press("f5", *"99999999", "enter")  # past the end: the last screen, full
        await wait_for(pilot, lambda: shown(viewer)[-1] == f"line {LINES - 1:07d}")
        assert "line 1,600,000" in bar(viewer) and len(shown(viewer)) == viewer.query_one(PageView).size.height
        await pilot.press("f5", *"sideways", "enter")
        await wait_for(pilot, lambda: any(n.message.startswith("Go to: a line") for n in app._notifications))
        assert shown(viewer)[-1] == f"line {LINES - 1:07d}"
        await pilot.press("f1")
        await wait_for(pilot, lambda: re.search(r"F5 +Go to", screen_text(app)) is not None)
        await pilot.press("escape", "colon")  # `:` stays the command line, as on every screen
        await wait_for(pilot, lambda: isinstance(app.screen, CommandLine))

    run(app, scenario)


def test_a_content_search_hit_opens_the_viewer_at_its_line(stack: Stack, site_file: WriteFile) -> None:
    """Enter on a content match: the panel goes to the file and the viewer opens at the match's
    line, the search's text marked; `n` goes on to the next match."""
    site_file("viewer-hit.txt", big_log())
    app = real_app(stack)

    async def scenario(pilot: Pilot[None]) -> None:
        await highlight_server(pilot, "local")
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, CommanderScreen) and names(app.screen.left))
        commander = app.screen
        assert isinstance(commander, CommanderScreen)
        await pilot.press("ctrl+f")
        await wait_for(pilot, lambda: isinstance(app.screen, SearchDialog))
        search = app.screen
        assert isinstance(search, SearchDialog)
        await pilot.press(*"needle late", "ctrl+t", "enter")
        await wait_for(pilot, lambda: not search.searching and search.matches, seconds=60)
        assert [(m.entry.path, m.line) for m in search.matches] == [("viewer-hit.txt", 1_200_001)]
        await pilot.press("down", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ViewerScreen) and app.screen.page is not None)
        viewer = app.screen
        assert isinstance(viewer, ViewerScreen)
        await wait_for(pilot, lambda: shown(viewer)[0] == "NEEDLE late")
        assert "line 1,200,001" in bar(viewer) and viewer.query_one(PageView).pattern == "needle late"
        await pilot.press("N")  # backward from the hit: the same line is where it was found
        await wait_for(pilot, lambda: "match on line 1,200,001" in bar(viewer))
        await pilot.press("slash", *"needle", "enter", "n")
        await wait_for(pilot, lambda: any("Not found" in n.message for n in app._notifications))
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is commander)
        assert commander.left.pane.highlighted is not None
        assert commander.left.pane.highlighted["name"] == "viewer-hit.txt"

    run(app, scenario)


def test_wrap_toggle_and_a_character_across_a_window_boundary(stack: Stack, site_file: WriteFile) -> None:
    """The line holding `é` spans two of the viewer's windows: it is decoded whole."""
    filler = b"x" * 59 + b"\n"
    head = filler * (CHUNK // 60 - 1)
    pad = b"y" * (CHUNK - 1 - len(head) - 1)
    data = head + pad + b"\n" + "é".encode() + b" and a long line " + b"z" * 200 + b"\n" + filler * 3
    assert data.index("é".encode()) == CHUNK - 1
    site_file("viewer-wrap.txt", data)
    app = real_app(stack)

    async def scenario(pilot: Pilot[None]) -> None:
        viewer = await open_viewer(pilot, "", "viewer-wrap.txt")
        width = viewer.query_one(PageView).size.width
        await pilot.press("end")
        await wait_for(pilot, lambda: any(line.startswith("é and a long line") for line in shown(viewer)))
        assert not any("\ufffd" in line for line in shown(viewer))
        long_line = next(line for line in shown(viewer) if line.startswith("é"))
        assert len(long_line) == len("é and a long line ") + 200  # one row, cut by the screen's edge

        await pilot.press("w")
        await wait_for(pilot, lambda: "· wrap" in bar(viewer))
        rows = shown(viewer)
        start = next(i for i, line in enumerate(rows) if line.startswith("é"))
        assert len(rows[start]) == width and "".join(rows[start : start + 3]) == long_line
        await pilot.press("w")
        await wait_for(pilot, lambda: "· text" in bar(viewer))

    run(app, scenario)


def long_line(n: int) -> str:
    """Line `n` of `long_lines`: every third one, from line 1, 136 columns wide, with spaces where a
    word wrap would fold it."""
    return f"line {n:03d} {'abcdefghi ' * (12 if n % 3 == 1 else 1)}end {n:03d}"


def long_lines() -> bytes:
    return "".join(long_line(n) + "\n" for n in range(200)).encode()


def test_at_80_columns_long_lines_do_not_fold_and_end_shows_the_last_line(stack: Stack, site_file: WriteFile) -> None:
    """As `less -S`: a row is one line, cut at the screen's edge and scrolled sideways; End puts the
    file's last line on the screen's last row (folded rows pushed it ten lines below). Wrapped
    (`w`), End shows the last line's last row too, the top line's first rows above the screen."""
    site_file("viewer-long.txt", long_lines())
    app = real_app(stack)

    def rows_drawn() -> list[str]:
        return screen_text(app).split("\n")[2:-2]  # below the header and the bar, above the footer

    async def scenario(pilot: Pilot[None]) -> None:
        viewer = await open_viewer(pilot, "", "viewer-long.txt")
        width, height = viewer.query_one(PageView).size
        assert rows_drawn() == [long_line(n)[:width] for n in range(height)]

        await pilot.press("end")
        await wait_for(pilot, lambda: rows_drawn()[-1].startswith("line 199"))
        assert rows_drawn() == [long_line(n)[:width] for n in range(200 - height, 200)]
        await pilot.press(*"l" * 8)  # 64 columns to the right: the end of a long line shows
        await wait_for(pilot, lambda: rows_drawn()[-1] == long_line(199)[64:])
        assert rows_drawn()[-2] == ""  # line 198 is shorter than 64 columns

        await pilot.press("w")
        await wait_for(pilot, lambda: "· wrap" in bar(viewer) and rows_drawn()[-1] == long_line(199)[width:])
        assert rows_drawn()[-2] == long_line(199)[:width] and len(rows_drawn()) == height
        assert "" not in rows_drawn()  # a full screen: line 199 - 14's first row is above it
        await pilot.press("up")
        await wait_for(pilot, lambda: rows_drawn()[-1] == long_line(199)[:width])

    run(app, scenario)


def test_a_binary_opens_in_hex_and_h_switches_to_text(stack: Stack, site_file: WriteFile) -> None:
    site_file("viewer-blob.bin", bytes(range(256)) * 4)
    app = real_app(stack)

    async def scenario(pilot: Pilot[None]) -> None:
        viewer = await open_viewer(pilot, "", "viewer-blob.bin")
        assert "· hex" in bar(viewer)
        assert shown(viewer)[0] == "00000000  00 01 02 03 04 05 06 07  08 09 0a 0b 0c 0d 0e 0f  |................|"
        assert shown(viewer)[4] == "00000040  40 41 42 43 44 45 46 47  48 49 4a 4b 4c 4d 4e 4f  |@ABCDEFGHIJKLMNO|"
        await pilot.press("G")
        await wait_for(pilot, lambda: shown(viewer)[-1].startswith("000003f0  f0 f1"))
        await pilot.press("h")
        await wait_for(pilot, lambda: "· text" in bar(viewer))
        await pilot.press("h")
        await wait_for(pilot, lambda: "· hex" in bar(viewer))

    run(app, scenario)


def test_a_file_gone_before_f3_is_reported_and_the_viewer_closes(stack: Stack, site_file: WriteFile) -> None:
    gone = site_file("viewer-gone.txt", b"soon gone\n")
    app = real_app(stack)

    async def scenario(pilot: Pilot[None]) -> None:
        await highlight_server(pilot, "local")
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, CommanderScreen) and names(app.screen.left))
        commander = app.screen
        assert isinstance(commander, CommanderScreen)
        await highlight(pilot, commander.left, "viewer-gone.txt")
        gone.unlink()
        await pilot.press("f3")
        await wait_for(pilot, lambda: any(n.message.startswith("Not found") for n in app._notifications))
        await wait_for(pilot, lambda: app.screen is commander)

    run(app, scenario)


def test_a_viewer_whose_agent_is_offline_reads_the_file_again_where_it_was_once_it_is_back(
    stack: Stack, tmp_path: Path
) -> None:
    """Opened while the agent is offline, the viewer stays and says so, and shows the file once the
    agent is back. Open at line 1,000 with a search's match when the agent drops, it says so and,
    once the agent is back, shows what the file holds now at the same line, the match still in
    the bar and `n` going on from it."""
    with own_agent(stack, tmp_path, f"view-{tmp_path.name[-6:]}") as own:
        rows = [f"row {n:04d}" for n in range(1, 3001)]
        rows[1004], rows[1999] = "row 1005 NEEDLE", "row 2000 NEEDLE"
        viewed = own.site / "viewed.txt"
        viewed.write_text("".join(f"{row}\n" for row in rows))
        app = real_app(stack)

        async def scenario(pilot: Pilot[None]) -> None:
            await highlight_server(pilot, own.name)
            await pilot.press("enter")
            await wait_for(pilot, lambda: isinstance(app.screen, CommanderScreen) and names(app.screen.left))
            commander = app.screen
            assert isinstance(commander, CommanderScreen) and commander.left.place is not None
            await asyncio.to_thread(own.agent.kill)
            app.push_screen(ViewerScreen(*commander.left.place, "viewed.txt"))
            await wait_for(pilot, lambda: isinstance(app.screen, ViewerScreen) and app.screen.query("#viewer-bar"))
            viewer = app.screen
            assert isinstance(viewer, ViewerScreen)
            await wait_for(pilot, lambda: "agent offline · opens once it is back" in bar(viewer))
            assert f"The agent of {own.name} is offline" in str(viewer.view.render())

            await asyncio.to_thread(own.agent.restart)  # no key pressed from here to the page
            await wait_for(pilot, lambda: shown(viewer)[:1] == ["row 0001"])
            assert "offline" not in bar(viewer)

            await pilot.press("f5", *"1000", "enter")
            await wait_for(pilot, lambda: shown(viewer)[:1] == ["row 1000"])
            await pilot.press("slash", *"NEEDLE", "enter")
            await wait_for(pilot, lambda: "match on line 1,005" in bar(viewer))
            top = shown(viewer)[0]

            await asyncio.to_thread(own.agent.kill)
            await wait_for(pilot, lambda: "agent offline · reads again once it is back" in bar(viewer))
            assert shown(viewer)[0] == top  # what it showed stays
            viewed.write_text(viewed.read_text().replace(top, top.upper()))  # the same bytes' length

            await asyncio.to_thread(own.agent.restart)
            await wait_for(pilot, lambda: shown(viewer)[0] == top.upper())
            assert "offline" not in bar(viewer) and "match on line 1,005" in bar(viewer)
            await pilot.press("n")
            await wait_for(pilot, lambda: "match on line 2,000" in bar(viewer))

        run(app, scenario)


def test_which_files_open_at_their_end_and_which_in_hex() -> None:
    assert [is_log(p) for p in ("access.log", "nginx/error.log.1", "logs/app.txt", "catalog.json", "a.logo")] == [
        True,
        True,
        True,
        False,
        False,
    ]
    text = b"a" + "é".encode() * 4096  # the sniff (8 KiB) ends in the middle of a character
    assert not looks_binary(text[:8192]) and not looks_binary(text)
    assert looks_binary(b"MZ\x90\x00") and looks_binary(b"\xff\xfe\xfd text")
    assert hex_row(16, b"AB") == "00000010  41 42" + " " * 45 + "|AB|"  # the ASCII column stays in place


def test_what_go_to_takes() -> None:
    assert go_to_target("1,234", 1000) == {"line": 1234} and go_to_target(" 7 ", 1000) == {"line": 7}
    assert go_to_target("@4096", 1000) == {"offset": 4096} and go_to_target("@0x1F", 1000) == {"offset": 31}
    assert go_to_target("25%", 1000) == {"offset": 250} and go_to_target("100%", 1000) == {"offset": 1000}
    assert [go_to_target(bad, 1000) for bad in ("", "0", "-3", "@-1", "101%", "abc", "@x", "1e3")] == [None] * 8
