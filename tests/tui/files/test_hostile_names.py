"""A file name may hold any byte but `/` and NUL: escape sequences too. The API carries such a
name as it is; the TUI must never let one (nor a file's content, nor a link's target) reach the
terminal raw. Every screen the files screen opens on such a file is drawn, and no control
character may be in what is drawn (the real app on the real stack; the files made on disk)."""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from textual.app import App, ComposeResult
from textual.pilot import Pilot

from tests.conftest import Stack
from tests.helpers import wait_for
from tests.helpers.tui import highlight, names, open_commander, real_app, run, site_dir
from tui.files.commander import CommanderScreen
from tui.files.dialogs import SearchDialog
from tui.files.panel import FilePanel
from tui.jobs.log_panel import LogLine, LogView

# What a hostile site user names a file: a terminal title change, a colour, a bell, a newline.
HOSTILE = "evil\x1b]0;PWNED\x07\x1b[38;5;199mred\nline"
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


@pytest.fixture
def hostile_folder(stack: Stack) -> Iterator[str]:
    """A folder of the demo site with a file, a folder and a link named `HOSTILE`, the file's
    content and the link's target holding escape sequences too."""
    folder = f"hostile-{uuid.uuid4().hex[:8]}"
    root = site_dir(stack) / folder
    root.mkdir()
    (root / f"{HOSTILE}.txt").write_text(f"first \x1b[2J\x1b]0;PWNED\x07 line\n{HOSTILE}\n")
    (root / f"{HOSTILE}-dir").mkdir()
    os.symlink(f"\x1b]0;PWNED\x07{HOSTILE}", root / f"{HOSTILE}-link")
    yield folder
    for path in sorted(root.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        path.rmdir() if path.is_dir() and not path.is_symlink() else path.unlink()
    root.rmdir()


def drawn(pilot: Pilot[Any]) -> str:
    """What every screen of the stack draws, as the terminal would get it (the text of its cells),
    its rows joined by a space."""
    return " ".join(strip.text for screen in pilot.app.screen_stack for strip in screen._compositor.render_strips())


async def assert_drawn_safely(pilot: Pilot[Any], where: str) -> None:
    await pilot.pause()
    text = drawn(pilot)
    found = sorted({repr(c) for c in CONTROL.findall(text)})
    assert not found, f"{where}: control characters drawn: {found}"
    assert "PWNED" in text or "evil" in text, f"{where}: the hostile name is not on the screen"


async def enter(pilot: Pilot[Any], panel: FilePanel, folder: str, then_listed: str | None) -> None:
    """Into `folder` of `panel`, until it lists `then_listed` (an empty folder: until it is in it)."""
    await highlight(pilot, panel, folder)
    await pilot.press("enter")
    if then_listed is None:
        await wait_for(pilot, lambda: panel.path.endswith(folder))
    else:
        await wait_for(pilot, lambda: then_listed in names(panel))


async def open_dialog(pilot: Pilot[Any], files: CommanderScreen, key: str, where: str) -> None:
    await pilot.press(key)
    await wait_for(pilot, lambda: pilot.app.screen is not files)
    await assert_drawn_safely(pilot, where)
    await pilot.press("escape")
    await wait_for(pilot, lambda: pilot.app.screen is files)


def test_hostile_names_and_contents_never_reach_the_terminal_raw(stack: Stack, hostile_folder: str) -> None:
    app = real_app(stack)

    async def scenario(pilot: Pilot[Any]) -> None:
        files = await open_commander(pilot)
        # The other panel in the hostile folder inside: where F5 and F6 would copy or move to.
        other = files.active
        await enter(pilot, other, hostile_folder, f"{HOSTILE}-dir")
        await enter(pilot, other, f"{HOSTILE}-dir", None)
        await pilot.press("tab")
        panel = files.active
        assert panel is not other
        await enter(pilot, panel, hostile_folder, f"{HOSTILE}.txt")
        for name in (f"{HOSTILE}-link", f"{HOSTILE}-dir", f"{HOSTILE}.txt"):
            await highlight(pilot, panel, name)
            await assert_drawn_safely(pilot, f"the file panel on {name!r}")
        for key, where in (
            ("f2", "rename"),
            ("f8", "delete"),
            ("i", "properties"),
            ("p", "permissions"),
            ("f5", "copy"),
            ("f6", "move"),
            ("c", "compress"),
            ("d", "download"),
        ):
            await open_dialog(pilot, files, key, where)
        # A search by name, then by content: the matches list names and lines.
        await pilot.press("ctrl+f")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, SearchDialog))
        search = pilot.app.screen
        assert isinstance(search, SearchDialog)
        for content in (False, True):
            if content:
                await pilot.press("ctrl+t")
            else:
                await pilot.press(*"PWNED", "enter")
            least = 1 if content else 3  # the lines of the file; the file, the folder, the link

            def found(least: int = least) -> bool:
                return not search.searching and len(search.matches) >= least

            await wait_for(pilot, found)
            await assert_drawn_safely(pilot, f"search ({'content' if content else 'names'})")
        await pilot.press("escape")
        await wait_for(pilot, lambda: pilot.app.screen is files)
        # A notification naming the file (as errors do: the server's message holds the path) is
        # plain text, its control characters as `?`.
        pilot.app.notify(f"Not found: {HOSTILE} [b]bold[/b]", severity="error", timeout=60)
        await wait_for(pilot, lambda: any("Not found" in n.message for n in pilot.app._notifications))
        [shown] = [n for n in pilot.app._notifications if "Not found" in n.message]
        assert not CONTROL.search(shown.message) and not shown.markup and "[b]bold[/b]" in shown.message
        await pilot.press("f3")
        await wait_for(pilot, lambda: pilot.app.screen is not files and "line" in drawn(pilot))
        await assert_drawn_safely(pilot, "the viewer")
        await pilot.press("escape")
        await wait_for(pilot, lambda: pilot.app.screen is files)
        await pilot.press("f4")
        await wait_for(pilot, lambda: pilot.app.screen is not files and "line" in drawn(pilot))
        await assert_drawn_safely(pilot, "the editor")

    run(app, scenario, size=(120, 30))


class LogApp(App[None]):
    def __init__(self, view: LogView) -> None:
        super().__init__()
        self.view = view

    def compose(self) -> ComposeResult:
        yield self.view


def test_a_job_log_draws_escape_sequences_as_pictures() -> None:
    """A job prints what its tools print (a log line, a file name): the job log never draws it raw,
    unwrapped, wrapped, with timestamps, or filtered."""
    view = LogView()
    app = LogApp(view)

    async def scenario(pilot: Pilot[Any]) -> None:
        panel = view.panel
        text = f"tail: {HOSTILE} \x9b31m"  # a C1 control too (CSI)
        panel.append_lines([LogLine(text, stderr, "2026-11-22T10:00:00Z") for stderr in (False, True)])
        panel.flush_now()
        for keys in ((), ("w",), ("t",), ("slash", *"PWNED", "enter")):
            await pilot.press(*keys)
            await assert_drawn_safely(pilot, f"the job log after {keys}")

    run(app, scenario)
