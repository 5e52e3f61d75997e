"""The file editor: F4 → edit → ctrl+s on the real stack (`fleetdeck local`), save conflicts, and
the `Editor` widget alone (undo/redo, search, a 10 MiB file).

Trio work is not awaited by `pilot.pause()`: `wait_for` polls until the trio side has delivered.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from textual import events
from textual.app import App, ComposeResult
from textual.command import CommandList, CommandPalette
from textual.pilot import Pilot

from tests.conftest import Stack
from tests.helpers import wait_for
from tests.helpers.own_agent import own_agent
from tests.helpers.tui import edit, highlight_server, press_f4_on, real_app, run, site_dir
from tui.files.commander import CommanderScreen
from tui.files.editor import Editor
from tui.files.editor_screen import EditorScreen
from tui.files.highlight import BLOCK_LINES, LEAD_IN_LINES
from tui.files.save_conflict import CopyNameDialog, DiscardChangesDialog, SaveConflictDialog, UnsavedChangesDialog
from tui.help import HelpScreen

# --- on the real stack --------------------------------------------------------------------------


def test_f4_edits_a_file_and_ctrl_s_saves_it(stack: Stack) -> None:
    target = site_dir(stack) / "editor-save.py"
    target.write_text("def hello():\n    return 'world'\n")
    app = real_app(stack)

    async def scenario(pilot: Pilot[None]) -> None:
        screen = await edit(pilot, "editor-save.py")
        editor = screen.editor
        assert app.focused is editor
        assert editor.lines == ["def hello():", "    return 'world'"]
        assert editor.language == "Python"
        assert not editor.modified

        await pilot.press("down", "end", "enter", "p", "a", "s", "s")
        assert editor.lines == ["def hello():", "    return 'world'", "    pass"]
        assert editor.modified
        assert str(screen.query_one("#editor-bar").render()).startswith("● /editor-save.py")

        # Escape with unsaved changes asks first; Escape there goes back to editing.
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, UnsavedChangesDialog))
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is screen)

        # Search: ctrl+f, a word, Enter puts the cursor on it.
        await pilot.press("ctrl+f", *"world", "enter")
        assert editor.match == (1, 12, 5) and editor.cursor == (1, 12)
        await pilot.press("escape")
        assert editor.match is None and app.focused is editor

        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: target.read_text() == "def hello():\n    return 'world'\n    pass\n")
        await wait_for(pilot, lambda: not editor.modified and not screen.saving)

        # Saved: Escape closes at once.
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, CommanderScreen))

        # A binary file is not opened.
        files = app.screen
        assert isinstance(files, CommanderScreen)
        files.active.load("public_html")
        await wait_for(pilot, lambda: files.active.path == "public_html")
        await press_f4_on(pilot, files, "favicon.ico")
        await wait_for(
            pilot, lambda: any("is a binary file: it cannot be edited" in n.message for n in app._notifications)
        )
        assert app.screen is files

    run(app, scenario)


def test_an_editor_whose_agent_is_offline_says_so_and_is_current_once_it_is_back(stack: Stack, tmp_path: Path) -> None:
    """While the agent is offline the bar says so. Back: a file with no unsaved edits is read
    again (the cursor where it was); one with unsaved edits keeps them (a save that failed
    meanwhile lost nothing), says ctrl+s saves, and ctrl+s does."""
    with own_agent(stack, tmp_path, f"edit-{tmp_path.name[-6:]}") as own:
        edited = own.site / "edited.txt"
        edited.write_text("one\ntwo\nthree\n")
        app = real_app(stack)

        async def scenario(pilot: Pilot[None]) -> None:
            await highlight_server(pilot, own.name)
            await pilot.press("enter")
            await wait_for(pilot, lambda: isinstance(app.screen, CommanderScreen))
            files = app.screen
            assert isinstance(files, CommanderScreen)
            await press_f4_on(pilot, files, "edited.txt")
            await wait_for(pilot, lambda: isinstance(app.screen, EditorScreen))
            screen = app.screen
            assert isinstance(screen, EditorScreen)
            editor = screen.editor

            def bar() -> str:
                return str(screen.query_one("#editor-bar").render())

            await pilot.press("down", "right")
            await asyncio.to_thread(own.agent.kill)
            await wait_for(pilot, lambda: "agent offline" in bar())
            edited.write_text("one\nTWO, changed while the agent was away\nthree\n")
            await asyncio.to_thread(own.agent.restart)  # no key pressed until it is read again
            await wait_for(pilot, lambda: editor.lines[1] == "TWO, changed while the agent was away")
            assert editor.cursor == (1, 1) and not editor.modified and "offline" not in bar()

            await asyncio.to_thread(own.agent.kill)
            await wait_for(pilot, lambda: "agent offline" in bar())
            await pilot.press("end", *" and mine", "ctrl+s")
            await wait_for(pilot, lambda: any("is offline" in n.message for n in app._notifications))
            assert editor.modified and edited.read_text() == "one\nTWO, changed while the agent was away\nthree\n"
            await asyncio.to_thread(own.agent.restart)
            await wait_for(pilot, lambda: any("is back: ctrl+s saves" in n.message for n in app._notifications))
            assert editor.lines[1].endswith(" and mine") and editor.modified and "offline" not in bar()
            await pilot.press("ctrl+s")
            await wait_for(
                pilot, lambda: edited.read_text() == "one\nTWO, changed while the agent was away and mine\nthree\n"
            )

        run(app, scenario)


def test_quitting_with_unsaved_edits_asks_first(stack: Stack) -> None:
    """ctrl+q (and the palette's Quit) with unsaved edits asks: Esc keeps the app and the edits,
    d quits without writing them."""
    target = site_dir(stack) / "editor-quit.txt"
    target.write_text("first line\n")
    app = real_app(stack)

    async def scenario(pilot: Pilot[None]) -> None:
        screen = await edit(pilot, "editor-quit.txt")
        editor = screen.editor
        await pilot.press("end", "!", "!")
        assert editor.modified

        await pilot.press("ctrl+q")
        await wait_for(pilot, lambda: isinstance(app.screen, DiscardChangesDialog))
        assert "/editor-quit.txt has unsaved changes" in str(app.screen.query_one(".editor-dialog--title").render())
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is screen)
        assert not app._exit and editor.modified and editor.lines[0] == "first line!!"

        # The command palette's Quit asks the same way; d discards and quits.
        await pilot.press("ctrl+p")
        await wait_for(pilot, lambda: isinstance(app.screen, CommandPalette))
        await pilot.press(*"quit")
        await wait_for(pilot, lambda: app.screen.query_one(CommandList).option_count)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, DiscardChangesDialog))
        assert not app._exit
        await pilot.press("d")
        await wait_for(pilot, lambda: app._exit)
        assert target.read_text() == "first line\n"

    run(app, scenario)


def test_a_save_conflict_offers_overwrite_reload_or_a_copy(stack: Stack) -> None:
    target = site_dir(stack) / "editor-conflict.txt"
    copy = site_dir(stack) / "editor-conflict.mine.txt"
    copy.unlink(missing_ok=True)
    target.write_text("original\n")
    app = real_app(stack)

    async def conflict(pilot: Pilot[None], screen: EditorScreen, theirs: str, key: str) -> None:
        """Someone else saves `theirs`; we type `key` and ctrl+s: the conflict dialog opens."""
        target.write_text(theirs)
        await pilot.press("ctrl+home", key, "ctrl+s")
        await wait_for(pilot, lambda: isinstance(app.screen, SaveConflictDialog))
        assert target.read_text() == theirs

    async def scenario(pilot: Pilot[None]) -> None:
        screen = await edit(pilot, "editor-conflict.txt")
        editor = screen.editor

        # Overwrite: our text replaces theirs.
        await conflict(pilot, screen, "theirs 1\n", "x")
        await pilot.press("o")
        await wait_for(pilot, lambda: target.read_text() == "xoriginal\n")
        await wait_for(pilot, lambda: app.screen is screen and not editor.modified and not screen.saving)

        # Reload: their text replaces ours in the editor.
        await conflict(pilot, screen, "theirs 2\n", "y")
        await pilot.press("r")
        await wait_for(pilot, lambda: editor.text == "theirs 2\n")
        assert not editor.modified and target.read_text() == "theirs 2\n"

        # Save a copy: ours goes to a new file, theirs stays.
        await conflict(pilot, screen, "theirs 3\n", "z")
        await pilot.press("c")
        await wait_for(pilot, lambda: isinstance(app.screen, CopyNameDialog))
        await pilot.press("enter")  # the offered name: editor-conflict.mine.txt
        await wait_for(pilot, lambda: copy.exists() and copy.read_text() == "ztheirs 2\n")
        assert target.read_text() == "theirs 3\n"
        await wait_for(pilot, lambda: screen.path == "editor-conflict.mine.txt" and not editor.modified)

        # And the etag of the copy is the one the next save sends.
        await pilot.press("ctrl+home", "w", "ctrl+s")
        await wait_for(pilot, lambda: copy.read_text() == "wztheirs 2\n")

    run(app, scenario)


# --- the widget alone ---------------------------------------------------------------------------


class EditorApp(App[None]):
    def __init__(self, content: str, path: str = "example.py") -> None:
        super().__init__()
        self.content = content
        self.path = path

    def compose(self) -> ComposeResult:
        yield Editor()

    def on_mount(self) -> None:
        editor = self.query_one(Editor)
        editor.load(self.content, self.path)
        editor.focus()


def test_editing_keys_and_undo_redo() -> None:
    app = EditorApp("hello\nworld\n")

    async def scenario(pilot: Pilot[None]) -> None:
        editor = app.query_one(Editor)
        await pilot.pause()
        await pilot.press("a", "b", "c")
        assert editor.lines == ["abchello", "world"] and editor.cursor == (0, 3)
        await pilot.press("enter")
        assert editor.lines == ["abc", "hello", "world"] and editor.cursor == (1, 0)
        await pilot.press("backspace")
        assert editor.lines == ["abchello", "world"]
        await pilot.press("end", "delete")
        assert editor.lines == ["abchelloworld"]
        await pilot.press("tab")
        assert editor.lines == ["abchello    world"]

        # One undo per step; the three typed letters are one step.
        for expected in (["abchelloworld"], ["abchello", "world"], ["abc", "hello", "world"], ["abchello", "world"]):
            await pilot.press("ctrl+z")
            assert editor.lines == expected
        await pilot.press("ctrl+z")
        assert editor.lines == ["hello", "world"] and editor.cursor == (0, 0)
        assert not editor.modified and not editor.can_undo
        await pilot.press("ctrl+y", "ctrl+y")
        assert editor.lines == ["abc", "hello", "world"] and editor.modified
        await pilot.press("ctrl+y", "ctrl+y", "ctrl+y")
        assert editor.lines == ["abchello    world"] and not editor.can_redo
        assert editor.text == "abchello    world\n"

        # Typing after undo drops the redo steps; a move starts a new undo group.
        await pilot.press("ctrl+z", "q")
        assert editor.lines == ["abchelloqworld"] and not editor.can_redo
        await pilot.press("left", "right", "r")
        await pilot.press("ctrl+z")
        assert editor.lines == ["abchelloqworld"]

        # Moving: ctrl+end / ctrl+home, Home is smart about indentation.
        editor.load("  x\n  y\nlast", "a.txt")
        await pilot.press("ctrl+end")
        assert editor.cursor == (2, 4)
        await pilot.press("ctrl+home", "down", "end", "home")
        assert editor.cursor == (1, 2)
        await pilot.press("home")
        assert editor.cursor == (1, 0)
        assert editor.text == "  x\n  y\nlast"

        # A burst of keys (a fast typist, a terminal paste without brackets) is applied in order.
        for key, character in [("down", None), ("end", None), ("enter", "\r"), ("z", "z")]:
            app.post_message(events.Key(key, character))
        await pilot.pause(0.2)
        assert editor.lines == ["  x", "  y", "last", "z"]

    run(app, scenario)


def test_search_finds_the_next_match_and_wraps() -> None:
    app = EditorApp("alpha\nbeta Alpha\ngamma\nalphabet\n")

    async def scenario(pilot: Pilot[None]) -> None:
        editor = app.query_one(Editor)
        await pilot.pause()
        assert editor.find("alpha")
        assert editor.match == (0, 0, 5) and editor.cursor == (0, 0)
        assert editor.find("alpha")
        assert editor.match == (1, 5, 5)  # case-insensitive
        assert editor.find("alpha")
        assert editor.match == (3, 0, 5)
        assert editor.find("alpha")
        assert editor.match == (0, 0, 5)  # wrapped
        assert not editor.find("delta")
        assert editor.match is None
        # The match is drawn in its own style.
        editor.find("gamma")
        await pilot.pause()
        match_style = editor.get_component_rich_style("editor--match", partial=True)
        line = editor.render_line(2)
        assert any(seg.text.startswith("amma") and match_style.bgcolor == seg.style.bgcolor for seg in line)

    run(app, scenario)


def generated_python(size: int) -> str:
    chunk = "".join(f"def function_{i}(value):\n    '''Doc {i}.'''\n    return value * {i} + 1\n\n" for i in range(100))
    return chunk * (size // len(chunk) + 1)


def test_a_10_mib_file_types_without_lexing_the_whole_file() -> None:
    content = generated_python(10 * 1024 * 1024)
    app = EditorApp(content, "big.py")

    async def scenario(pilot: Pilot[None]) -> None:
        editor = app.query_one(Editor)
        await pilot.pause()
        line_count = editor.line_count
        assert line_count > 250_000
        block = BLOCK_LINES + LEAD_IN_LINES
        assert 0 < editor.highlighter.lexed_line_count <= 2 * block

        for key in ("x", "y", "z", "enter", "backspace"):
            await pilot.press(key)
        await pilot.press("ctrl+end")
        await pilot.press("k", "enter", "m")
        await pilot.press("pageup", "pageup", "q")
        await pilot.pause()
        assert editor.lines[0].startswith("xyzdef function_0")
        assert editor.lines[-2:] == ["k", "m"]
        assert editor.line_count == line_count + 1
        # Lexed: the visible blocks, again after each edit; never the whole file.
        assert editor.highlighter.lexed_line_count < 40 * block
        assert editor.text.startswith("xyzdef function_0(value):\n")

    run(app, scenario)


def test_the_editors_help_lists_only_keys_that_work_in_the_editor(stack: Stack) -> None:
    """No `k j`, `:` or `?` (the editor types them), its own moves instead; each one listed moves."""
    target = site_dir(stack) / "editor-help.txt"
    target.write_text("one\ntwo\nthree\n")
    app = real_app(stack)

    async def scenario(pilot: Pilot[None]) -> None:
        screen = await edit(pilot, "editor-help.txt")
        editor = screen.editor
        await pilot.press("f1")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        help_screen = app.screen
        assert isinstance(help_screen, HelpScreen)
        keys = [str(cell) for cell in help_screen._bindings_table().columns[0].cells]
        assert "k j" not in " ".join(keys) and ":" not in keys and not any("?" in key for key in keys)
        assert {"F1", "ctrl+Home ctrl+End", "Home End", "PgUp PgDn", "Tab", "ctrl+p"} <= set(keys), keys
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is screen)
        await pilot.press("ctrl+end")
        assert editor.cursor[0] == len(editor.lines) - 1
        await pilot.press("ctrl+home", "end")
        assert editor.cursor == (0, 3)
        await pilot.press("home", "tab")
        assert editor.lines[0] == "    one"
        await pilot.press("question_mark", "colon", "k")  # typed, as the help says by leaving them out
        assert editor.lines[0] == "    ?:kone" and app.screen is screen

    try:
        run(app, scenario)
    finally:
        target.unlink(missing_ok=True)
