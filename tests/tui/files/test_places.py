"""The Files screen as a Midnight Commander user expects it (issue 12, points 7 and 9), on the real
stack at 80x24: the trash stays out of the panels, the panels keep their places when Files is
left and opened again, a new file keeps its typed name and opens in the editor, F7 makes nested
folders, and copying onto taken names asks overwrite, skip or rename for each.

Trio work is not awaited by `pilot.pause()`: `wait_for` polls until the trio side has delivered.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from textual.app import App, ComposeResult
from textual.pilot import Pilot

from contract.job_kinds import json_schemas
from contract.models import TRASH_FOLDER
from tests.conftest import Stack
from tests.helpers import wait_for
from tests.helpers.tui import highlight, names, open_commander, real_app, run, show_location, site_dir
from tui.files.dialogs import ConflictDialog, CopyDialog, DeleteDialog, NameDialog, NewFileDialog, TrashDialog
from tui.files.editor_screen import EditorScreen
from tui.files.panel import FilePanel
from tui.jobs.form import JobForm
from tui.servers.screen import ServerListScreen
from tui.widgets.select import FormSelect


@pytest.fixture
def folder(stack: Stack, request: pytest.FixtureRequest) -> Iterator[Path]:
    """A fresh folder of the test's name in the site's root, removed after."""
    path = site_dir(stack) / f"p12-{request.node.name.removeprefix('test_')[:24]}"
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir()
    yield path
    shutil.rmtree(path, ignore_errors=True)


async def enter_folder(pilot: Pilot[None], panel: FilePanel, name: str) -> None:
    await wait_for(pilot, lambda: pilot.app.focused is panel.pane)
    await highlight(pilot, panel, name)
    await pilot.press("enter")
    try:
        await wait_for(pilot, lambda: panel.path.endswith(name) and panel.settled)
    except AssertionError as exc:
        where = f"{panel.id} at {panel.path!r}, settled {panel.settled}, on {panel.pane.highlighted}"
        raise AssertionError(f"{exc}; {where}, focus {pilot.app.focused}") from None


def test_the_trash_is_left_out_of_the_panels_and_opened_with_t(stack: Stack, folder: Path) -> None:
    doomed = site_dir(stack) / "p12-doomed.txt"
    doomed.write_text("bye\n")
    app = real_app(stack)

    async def scenario(pilot: Pilot[None]) -> None:
        screen = await open_commander(pilot)
        left, right = screen.left, screen.right
        await highlight(pilot, left, doomed.name)
        await pilot.press("f8")
        await wait_for(pilot, lambda: isinstance(app.screen, DeleteDialog))
        await pilot.press("enter")
        await wait_for(pilot, lambda: doomed.name not in names(left))
        assert (site_dir(stack) / TRASH_FOLDER).is_dir()  # `ls` on the server still sees it
        assert TRASH_FOLDER not in names(left)
        await pilot.press("tab", "r")
        await wait_for(pilot, lambda: right.settled and doomed.name not in names(right))
        assert TRASH_FOLDER not in names(right)
        # A folder of that name deeper down is the user's own: it is listed.
        (folder / TRASH_FOLDER).mkdir()
        await enter_folder(pilot, right, folder.name)
        assert TRASH_FOLDER in names(right)
        # The trash is one key away.
        await pilot.press("tab", "t")
        await wait_for(pilot, lambda: isinstance(app.screen, TrashDialog) and app.screen.items)
        assert isinstance(app.screen, TrashDialog)
        assert any(item.original_path == doomed.name for item in app.screen.items)

    run(app, scenario)


def test_panels_keep_their_places_when_files_is_left_and_opened_again(stack: Stack, folder: Path) -> None:
    for name, size in (("a.txt", 3), ("bb.txt", 30), ("ccc.txt", 300), ("skip.log", 1)):
        (folder / name).write_text("x" * size)
    app = real_app(stack)

    async def scenario(pilot: Pilot[None]) -> None:
        screen = await open_commander(pilot)
        left, right = screen.left, screen.right
        # Left: the test's folder, sorted by size, filtered on `.txt`, on `bb.txt`.
        await enter_folder(pilot, left, folder.name)
        await pilot.press("o")
        await pilot.press("slash", *".txt", "enter")
        await wait_for(pilot, lambda: names(left) == ["ccc.txt", "bb.txt", "a.txt"])  # the biggest first
        await highlight(pilot, left, "bb.txt")
        # Right: the server root scope, in the site's folder, on `logs`; the right panel active.
        await pilot.press("tab")
        await show_location(pilot, screen, "local · /home (server root)")
        await wait_for(pilot, lambda: right.scope is not None and right.scope.scope == "root" and right.settled)
        await enter_folder(pilot, right, "example-com")
        await highlight(pilot, right, "logs")

        await pilot.press("escape", "escape")
        await wait_for(pilot, lambda: isinstance(app.screen, ServerListScreen))
        screen = await open_commander(pilot)
        left, right = screen.left, screen.right
        await wait_for(pilot, lambda: left.settled and right.settled)
        assert left.scope is not None and left.scope.domain == "example.com" and left.path == folder.name
        assert left.pane.ordering == ("size", False) and left.pane.filter_text == ".txt"
        assert names(left) == ["ccc.txt", "bb.txt", "a.txt"] and left.has_class("-filtered")
        assert left.pane.highlighted is not None and left.pane.highlighted["name"] == "bb.txt"
        assert right.scope is not None and right.scope.scope == "root" and right.path == "example-com"
        assert right.pane.highlighted is not None and right.pane.highlighted["name"] == "logs"
        assert screen.active is right and app.focused is right.pane

        # Each scope remembers its folder: the right panel back on the site lands where the left is.
        await show_location(pilot, screen, "local · example.com")
        await wait_for(pilot, lambda: right.scope is not None and right.scope.scope == "site" and right.settled)
        assert right.path == folder.name

        # A folder removed meanwhile: back in Files, the panel shows the scope's root instead.
        await pilot.press("escape", "escape")
        await wait_for(pilot, lambda: isinstance(app.screen, ServerListScreen))
        shutil.rmtree(folder)
        screen = await open_commander(pilot)
        await wait_for(
            pilot, lambda: screen.left.settled and screen.left.path == "" and "public_html" in names(screen.left)
        )
        assert screen.left.pane.filter_text == ""

    run(app, scenario)


def test_a_new_file_keeps_a_typed_extension_and_opens_in_the_editor(stack: Stack, folder: Path) -> None:
    app = real_app(stack)

    async def scenario(pilot: Pilot[None]) -> None:
        screen = await open_commander(pilot)
        await enter_folder(pilot, screen.left, folder.name)
        await pilot.press("n")
        await wait_for(pilot, lambda: isinstance(app.screen, NewFileDialog))
        await pilot.press(*"notes.md", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, EditorScreen))
        editor = app.screen
        assert isinstance(editor, EditorScreen) and editor.path == f"{folder.name}/notes.md"
        assert (folder / "notes.md").exists() and sorted(os.listdir(folder)) == ["notes.md"]
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is screen and "notes.md" in names(screen.left))

        # A name without an extension gets the template's; Enter on the template creates (the
        # dropdown stays closed), as the dialog's hint says.
        await pilot.press("n")
        await wait_for(pilot, lambda: isinstance(app.screen, NewFileDialog))
        dialog = app.screen
        assert isinstance(dialog, NewFileDialog)
        await pilot.press(*"deploy")
        template = dialog.query_one("#new-file-template", FormSelect)
        template.value = "shell"
        await wait_for(pilot, lambda: dialog.name_to_create == "deploy.sh")
        await pilot.press("tab")
        assert app.focused is template
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, EditorScreen))
        assert not template.expanded
        script = folder / "deploy.sh"
        assert script.read_text().startswith("#!/bin/sh\n") and script.stat().st_mode & 0o100

        # A typed extension stays whatever the template: `hello.sh` is not `hello.sh.sh`.
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is screen)
        await pilot.press("n")
        await wait_for(pilot, lambda: isinstance(app.screen, NewFileDialog))
        app.screen.query_one("#new-file-template", FormSelect).value = "shell"
        await pilot.press(*"hello.sh", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, EditorScreen))
        assert (folder / "hello.sh").read_text().startswith("#!/bin/sh\n")
        assert sorted(os.listdir(folder)) == ["deploy.sh", "hello.sh", "notes.md"]

    run(app, scenario)


def test_f7_makes_nested_folders(stack: Stack, folder: Path) -> None:
    app = real_app(stack)

    async def scenario(pilot: Pilot[None]) -> None:
        screen = await open_commander(pilot)
        await enter_folder(pilot, screen.left, folder.name)
        await pilot.press("f7")
        await wait_for(pilot, lambda: isinstance(app.screen, NameDialog))
        await pilot.press(*"a/b", "enter")
        await wait_for(pilot, lambda: (folder / "a" / "b").is_dir() and "a" in names(screen.left))
        assert screen.left.pane.highlighted is not None and screen.left.pane.highlighted["name"] == "a"
        # `..` is still refused, level by level.
        await pilot.press("f7")
        await wait_for(pilot, lambda: isinstance(app.screen, NameDialog))
        await pilot.press(*"c/../d", "enter")
        await pilot.pause()
        assert isinstance(app.screen, NameDialog) and not (folder / "c").exists()

    run(app, scenario)


def test_copy_onto_taken_names_asks_overwrite_skip_or_rename(stack: Stack, folder: Path) -> None:
    source, target = folder / "src", folder / "dst"
    source.mkdir(), target.mkdir()
    for name in ("one.txt", "two.txt", "three.txt", "four.txt"):
        (source / name).write_text(f"new {name}\n")
    for name in ("one.txt", "two.txt", "three.txt"):
        (target / name).write_text(f"old {name}\n")
    app = real_app(stack)

    async def scenario(pilot: Pilot[None]) -> None:
        screen = await open_commander(pilot)
        left, right = screen.left, screen.right
        await pilot.press("tab")
        await enter_folder(pilot, right, folder.name)
        await enter_folder(pilot, right, "dst")
        await pilot.press("tab")
        await enter_folder(pilot, left, folder.name)
        await enter_folder(pilot, left, "src")
        await pilot.press("plus")  # mark all
        await wait_for(pilot, lambda: len(left.pane.marked) == 4)
        await pilot.press("f5")
        await wait_for(pilot, lambda: isinstance(app.screen, CopyDialog))
        await pilot.press("enter")

        async def asked(name: str) -> ConflictDialog:
            await wait_for(pilot, lambda: isinstance(app.screen, ConflictDialog) and app.screen.name_taken == name)
            assert isinstance(app.screen, ConflictDialog)
            return app.screen

        first = await asked("one.txt")
        assert first.left == 3 and first.query("#conflict-overwrite_all")
        await pilot.press("o")
        await asked("three.txt")  # sorted by name: one, three, two
        await pilot.press("r")
        await wait_for(pilot, lambda: isinstance(app.screen, NameDialog))
        await pilot.press("enter")  # the name proposed: three-1.txt
        last = await asked("two.txt")
        assert last.left == 1 and not last.query("#conflict-overwrite_all")
        await pilot.press("s")
        await wait_for(pilot, lambda: {"four.txt", "three-1.txt"} <= set(names(right)))
        assert (target / "one.txt").read_text() == "new one.txt\n"  # overwritten
        assert (target / "two.txt").read_text() == "old two.txt\n"  # skipped
        assert (target / "three.txt").read_text() == "old three.txt\n"  # kept, the copy renamed
        assert (target / "three-1.txt").read_text() == "new three.txt\n"
        assert (target / "four.txt").read_text() == "new four.txt\n"  # no conflict: copied as is
        assert all((source / name).exists() for name in ("one.txt", "two.txt", "three.txt", "four.txt"))

        # Again, now with every name taken: "skip all" leaves the destination as it is.
        await pilot.press("plus", "f5")
        await wait_for(pilot, lambda: isinstance(app.screen, CopyDialog))
        await pilot.press("enter")
        await asked("four.txt")
        await pilot.press("n")
        await wait_for(pilot, lambda: app.screen is screen)
        assert (target / "two.txt").read_text() == "old two.txt\n"
        # And "overwrite all" replaces them all.
        await pilot.press("plus", "f5")
        await wait_for(pilot, lambda: isinstance(app.screen, CopyDialog))
        await pilot.press("enter")
        await asked("four.txt")
        await pilot.press("a")
        await wait_for(pilot, lambda: (target / "two.txt").read_text() == "new two.txt\n")
        assert (target / "three.txt").read_text() == "new three.txt\n"

    run(app, scenario)


class FormWithSelect(App[None]):
    """A job form with a dropdown (`logs.tail`'s log), as the job dialog shows it."""

    def __init__(self) -> None:
        super().__init__()
        self.submitted = 0

    def compose(self) -> ComposeResult:
        schema = next(kind["args_schema"] for kind in json_schemas() if kind["kind"] == "logs.tail")
        yield JobForm(schema, ())

    def on_job_form_submitted(self) -> None:
        self.submitted += 1


def test_enter_on_a_closed_dropdown_submits_and_in_the_open_list_picks() -> None:
    app = FormWithSelect()

    async def scenario(pilot: Pilot[None]) -> None:
        log = app.query_one("#arg-log", FormSelect)
        log.focus()
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.submitted == 1)
        assert not log.expanded  # "Enter: run" ran; the list did not open
        await pilot.press("space")  # space (or the arrows) opens it
        await wait_for(pilot, lambda: log.expanded)
        before = log.value
        await pilot.press("down", "enter")  # Enter in the open list picks, and only picks
        await wait_for(pilot, lambda: not log.expanded)
        assert log.value != before and app.submitted == 1 and app.focused is log
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.submitted == 2)

    run(app, scenario)
