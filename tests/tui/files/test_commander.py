"""The two-pane browser on the real stack: panels on different scopes, keys, copy between panes,
trash and restore. At 80x24, the size of a small SSH session.

Trio work is not awaited by `pilot.pause()`: `wait_for` polls until the trio side has delivered.
"""

from __future__ import annotations

import os
import shutil
import zipfile
from pathlib import Path
from typing import Any

import pytest
import trio
from textual.pilot import Pilot
from textual.widgets import Input, SelectionList, Static

from api_client import MAX_PATHS_PER_REQUEST, PATHS_PER_BATCH
from tests.conftest import Stack
from tests.helpers import wait_for
from tests.helpers.tui import (
    highlight,
    highlight_server,
    names,
    open_commander,
    real_app,
    run,
    show_location,
    site_dir,
    type_at_once,
)
from tui.files.commander import CommanderScreen
from tui.files.dialogs import (
    ArchiveDialog,
    BulkDialog,
    CopyDialog,
    DeleteDialog,
    LocalPathDialog,
    NameDialog,
    TrashDialog,
)
from tui.files.viewer import ViewerScreen
from tui.keys import holds_keys
from tui.widgets.dialogs import ConfirmDialog


def test_two_panels_browse_their_own_scopes_with_the_keyboard(stack: Stack) -> None:
    app = real_app(stack)

    async def scenario(pilot: Pilot[None]) -> None:
        screen = await open_commander(pilot)
        left, right = screen.left, screen.right
        assert left.scope is not None and left.scope.domain == "example.com"
        assert right.scope == left.scope and screen.active is left
        assert app.focused is left.pane and left.has_class("-active")

        # Tab: the other panel; `s` there: the server root, in that panel only.
        await pilot.press("tab")
        assert screen.active is right and app.focused is right.pane and not left.has_class("-active")
        await show_location(pilot, screen, "local · /home (server root)")
        await wait_for(pilot, lambda: "example-com" in names(right))
        assert right.scope is not None and right.scope.scope == "root"
        assert left.scope is not None and left.scope.scope == "site"
        assert "/home (server root)" in right.query_one(".file-panel--title").render().plain  # type: ignore[attr-defined]

        # Enter opens a folder, Backspace goes up with the cursor on where we came from.
        await highlight(pilot, right, "example-com")
        await pilot.press("enter")
        await wait_for(pilot, lambda: right.path == "example-com" and "public_html" in names(right))
        await pilot.press("backspace")
        await wait_for(pilot, lambda: right.path == "")
        assert right.pane.highlighted is not None and right.pane.highlighted["name"] == "example-com"

        # `/` filters as you type; Esc clears it; Enter keeps it.
        await pilot.press("tab")
        assert screen.active is left
        await pilot.press("slash", "p", "u", "b")
        await wait_for(pilot, lambda: names(left) == ["public_html"])
        assert "filter 'pub': 1 of" in left.query_one(".file-panel--status").render().plain  # type: ignore[attr-defined]
        await pilot.press("escape")
        assert len(names(left)) > 1 and app.focused is left.pane
        await pilot.press("slash", "l", "o", "g", "enter")
        assert names(left) == ["logs"] and app.focused is left.pane
        await pilot.press("slash", "backspace", "backspace", "backspace", "enter")
        assert len(names(left)) > 1

        # `o` cycles the order: size, time, name.
        await pilot.press("o")
        assert left.pane.ordering == ("size", False)
        await pilot.press("O")
        assert left.pane.ordering == ("size", True)

        # Esc then a digit is an F-key: Esc 3 views the highlighted file (F3).
        await highlight(pilot, left, ".env")
        await pilot.press("escape", "3")
        await wait_for(pilot, lambda: isinstance(app.screen, ViewerScreen))
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is screen)

        # `=`: the other panel shows this folder; Esc Esc leaves.
        await highlight(pilot, left, "public_html")
        await pilot.press("enter")
        await wait_for(pilot, lambda: left.path == "public_html")
        await pilot.press("equals_sign")
        await wait_for(pilot, lambda: right.path == "public_html" and right.scope == left.scope)
        await pilot.press("escape", "escape")
        await wait_for(pilot, lambda: app.screen is not screen)

    run(app, scenario)


def test_copy_and_move_between_panes_then_trash_and_restore(stack: Stack) -> None:
    site = site_dir(stack)
    shop = stack.data_dir / "home" / "shop-example-org"
    sources = {"pane-a.txt": b"alpha\n", "pane-b.txt": b"beta\n" * 1000}
    for name, data in sources.items():
        (site / name).write_bytes(data)
    app = real_app(stack)

    async def scenario(pilot: Pilot[None]) -> None:
        screen = await open_commander(pilot)
        left, right = screen.left, screen.right
        await pilot.press("tab")
        await show_location(pilot, screen, "local · shop.example.org")
        await wait_for(pilot, lambda: right.scope is not None and right.scope.domain == "shop.example.org")
        await pilot.press("tab")

        # Mark two files, F5: a cross-site copy into the other panel's folder.
        for name in sources:
            await highlight(pilot, left, name)
            await pilot.press("space")
        assert [entry["name"] for entry in left.pane.marked] == list(sources)
        await pilot.press("f5")
        await wait_for(pilot, lambda: isinstance(app.screen, CopyDialog))
        assert app.screen.cross == "site"  # type: ignore[attr-defined]
        await pilot.press("enter")
        await wait_for(pilot, lambda: set(sources) <= set(names(right)))
        assert {name: (shop / name).read_bytes() for name in sources} == sources
        assert all((site / name).exists() for name in sources)  # a copy: the sources stay
        assert left.pane.marked == []

        # F7 in the left panel: a folder; F6 moves a file into it (the right panel shows it first).
        await pilot.press("f7")
        await wait_for(pilot, lambda: isinstance(app.screen, NameDialog))
        await pilot.press(*"moved-here", "enter")
        await wait_for(pilot, lambda: (site / "moved-here").is_dir() and "moved-here" in names(left))
        await highlight(pilot, left, "moved-here")
        await pilot.press("enter")
        await wait_for(pilot, lambda: left.path == "moved-here")
        await pilot.press("equals_sign", "backspace")  # right: moved-here; left: back up
        await wait_for(pilot, lambda: right.path == "moved-here" and left.path == "")
        await highlight(pilot, left, "pane-a.txt")
        await pilot.press("f6")
        await wait_for(pilot, lambda: isinstance(app.screen, CopyDialog))
        await pilot.press("enter")
        await wait_for(pilot, lambda: "pane-a.txt" in names(right) and "pane-a.txt" not in names(left))
        assert (site / "moved-here" / "pane-a.txt").read_bytes() == sources["pane-a.txt"]
        assert not (site / "pane-a.txt").exists()

        # F8: to the trash (the default), then `t`: the trash dialog restores it.
        await highlight(pilot, left, "pane-b.txt")
        await pilot.press("f8")
        await wait_for(pilot, lambda: isinstance(app.screen, DeleteDialog))
        await pilot.press("enter")
        await wait_for(pilot, lambda: "pane-b.txt" not in names(left))
        assert not (site / "pane-b.txt").exists()
        await pilot.press("t")
        await wait_for(pilot, lambda: isinstance(app.screen, TrashDialog) and app.screen.items)
        trash = app.screen
        assert isinstance(trash, TrashDialog)
        position = next(i for i, item in enumerate(trash.items) if item.original_path == "pane-b.txt")
        trash.query_one(SelectionList).highlighted = position
        await pilot.press("r")
        await wait_for(pilot, lambda: (site / "pane-b.txt").exists())
        assert (site / "pane-b.txt").read_bytes() == sources["pane-b.txt"]
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is screen and "pane-b.txt" in names(left))

    try:
        run(app, scenario)
    finally:
        for path in (site / "pane-b.txt", shop / "pane-a.txt", shop / "pane-b.txt"):
            path.unlink(missing_ok=True)
        shutil.rmtree(site / "moved-here", ignore_errors=True)


def test_download_then_upload_from_the_commander(stack: Stack, tmp_path: Path) -> None:
    site = site_dir(stack)
    payload = os.urandom(2 * 1024 * 1024 + 3)
    (site / "pane-download.bin").write_bytes(payload)
    app = real_app(stack)

    async def type_path(pilot: Pilot[None], path: Path) -> None:
        await wait_for(pilot, lambda: isinstance(app.screen, LocalPathDialog))
        app.screen.query_one(Input).value = str(path)
        await pilot.press("enter")

    async def scenario(pilot: Pilot[None]) -> None:
        screen = await open_commander(pilot)
        await highlight(pilot, screen.left, "pane-download.bin")
        await pilot.press("d")
        await type_path(pilot, tmp_path / "got.bin")
        await wait_for(pilot, lambda: (tmp_path / "got.bin").exists() and app.screen is screen, seconds=60)
        assert (tmp_path / "got.bin").read_bytes() == payload

        (tmp_path / "pane-upload.bin").write_bytes(payload[::-1])
        await pilot.press("u")
        await type_path(pilot, tmp_path / "pane-upload.bin")
        await wait_for(pilot, lambda: "pane-upload.bin" in names(screen.left), seconds=60)
        assert (site / "pane-upload.bin").read_bytes() == payload[::-1]

    try:
        run(app, scenario)
    finally:
        (site / "pane-download.bin").unlink(missing_ok=True)
        (site / "pane-upload.bin").unlink(missing_ok=True)


def test_bulk_actions_over_the_request_bound_run_in_batches_with_progress(stack: Stack) -> None:
    """More marked items than one request takes: F5 and F8 go in batches behind a progress dialog;
    a batch that fails says in words what was done before it; Esc stops between batches."""
    site = site_dir(stack)
    source, target = site / "bulk-src", site / "bulk-dst"
    shutil.rmtree(source, ignore_errors=True)
    shutil.rmtree(target, ignore_errors=True)
    source.mkdir()
    target.mkdir()
    count = MAX_PATHS_PER_REQUEST + 2 * PATHS_PER_BATCH
    names_ = [f"f-{i:05d}.txt" for i in range(count)]
    for name in names_:
        (source / name).write_bytes(b"x")
    # Gone from the server once the copy is asked for (taken names are asked about before the
    # copy starts, so a missing source is what makes a batch fail): in the second batch.
    vanished = names_[PATHS_PER_BATCH + PATHS_PER_BATCH // 2]
    app = real_app(stack)

    def progress_text(dialog: BulkDialog) -> str:
        return str(dialog.query_one("#bulk-numbers", Static).render())

    async def bulk_dialog(pilot: Pilot[None]) -> BulkDialog:
        await wait_for(pilot, lambda: isinstance(app.screen, BulkDialog))
        dialog = app.screen
        assert isinstance(dialog, BulkDialog)
        return dialog

    async def scenario(pilot: Pilot[None]) -> None:
        screen = await open_commander(pilot)
        left, right = screen.left, screen.right
        await pilot.press("tab")
        await highlight(pilot, right, "bulk-dst")
        await pilot.press("enter")
        await wait_for(pilot, lambda: right.path == "bulk-dst")
        await pilot.press("tab")
        await highlight(pilot, left, "bulk-src")
        await pilot.press("enter")
        await wait_for(pilot, lambda: left.path == "bulk-src" and len(left.pane.all_entries) == count)
        await pilot.press("plus")
        assert len(left.selected_paths()) == count

        # F5: batches with progress; the second one misses a file: said in words.
        await pilot.press("f5")
        await wait_for(pilot, lambda: isinstance(app.screen, CopyDialog))
        (source / vanished).unlink()
        await pilot.press("enter")
        dialog = await bulk_dialog(pilot)
        await wait_for(pilot, lambda: dialog.ended, seconds=120)
        message = str(dialog.query_one("#status", Static).render())
        done = PATHS_PER_BATCH
        assert message.startswith(f"Copied {done:,} of {count:,} items, then: "), message
        assert "Not found" in message and "List should" not in message and "validation" not in message
        assert progress_text(dialog) == f"{done:,} of {count:,} items"
        assert all((target / name).read_bytes() == b"x" for name in names_[:done])
        assert len(os.listdir(target)) == done
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is screen)

        # F8 for good, stopped with Esc: whole batches gone, the rest left.
        await pilot.press("minus", "plus")
        await pilot.press("f8")
        await wait_for(pilot, lambda: isinstance(app.screen, DeleteDialog))
        await pilot.press("p")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmDialog))
        await pilot.press("y")
        dialog = await bulk_dialog(pilot)
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is screen, seconds=60)
        left_over = len(os.listdir(source))
        assert 0 < left_over < count - 1 and (count - 1 - left_over) % PATHS_PER_BATCH == 0, left_over
        await wait_for(pilot, lambda: len(left.pane.all_entries) == left_over)
        assert any(n.message.startswith("Stopped: Deleted ") for n in app._notifications)

        # F8 again, to the end: the folder is empty on disk.
        await pilot.press("plus", "f8")
        await wait_for(pilot, lambda: isinstance(app.screen, DeleteDialog))
        await pilot.press("p")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmDialog))
        await pilot.press("y")
        await bulk_dialog(pilot)
        await wait_for(pilot, lambda: app.screen is screen, seconds=180)
        assert os.listdir(source) == []

    try:
        run(app, scenario)
    finally:
        shutil.rmtree(source, ignore_errors=True)
        shutil.rmtree(target, ignore_errors=True)


def own_folder(stack: Stack, name: str, files: dict[str, bytes]) -> Path:
    """A fresh folder `name` at the site's root holding `files`: a test's rows, in a known order."""
    folder = site_dir(stack) / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    for file, data in files.items():
        (folder / file).write_bytes(data)
    return folder


async def enter_folder(pilot: Pilot[None], name: str) -> CommanderScreen:
    screen = await open_commander(pilot)
    await highlight(pilot, screen.left, name)
    await pilot.press("enter")
    await wait_for(pilot, lambda: screen.left.path == name and screen.left.pane.entries)
    return screen


def test_f2_saves_the_name_as_typed_with_its_own_extension(stack: Stack) -> None:
    """`renamed.md` typed over `index.html` is `renamed.md` (it was `renamed.md.html`)."""
    folder = own_folder(stack, "rename-typed", {"index.html": b"<p>hi</p>\n"})
    app = real_app(stack)

    async def scenario(pilot: Pilot[None]) -> None:
        screen = await enter_folder(pilot, "rename-typed")
        await highlight(pilot, screen.left, "index.html")
        await pilot.press("f2")
        await wait_for(pilot, lambda: isinstance(app.screen, NameDialog))
        await pilot.press(*"renamed.md", "enter")
        await wait_for(pilot, lambda: "renamed.md" in names(screen.left))
        assert sorted(os.listdir(folder)) == ["renamed.md"]
        assert (folder / "renamed.md").read_bytes() == b"<p>hi</p>\n"

    try:
        run(app, scenario)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_after_f8_the_cursor_is_on_the_next_row_or_else_the_one_above(stack: Stack) -> None:
    folder = own_folder(stack, "delete-cursor", {name: b"x" for name in ("a.txt", "b.txt", "c.txt", "d.txt")})
    app = real_app(stack)

    async def delete_for_good(pilot: Pilot[None], screen: CommanderScreen, gone: str) -> None:
        await pilot.press("f8")
        await wait_for(pilot, lambda: isinstance(app.screen, DeleteDialog))
        await pilot.press("p")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmDialog))
        await pilot.press("y")
        await wait_for(pilot, lambda: app.screen is screen and gone not in names(screen.left))

    async def scenario(pilot: Pilot[None]) -> None:
        screen = await enter_folder(pilot, "delete-cursor")
        pane = screen.left.pane
        await highlight(pilot, screen.left, "b.txt")
        await delete_for_good(pilot, screen, "b.txt")
        await wait_for(pilot, lambda: pane.highlighted is not None and pane.highlighted["name"] == "c.txt")
        # Marked rows: the cursor goes past all of them; at the end, to the nearest row above.
        await highlight(pilot, screen.left, "c.txt")
        await pilot.press("space", "space")  # c and d marked, the cursor below d
        await highlight(pilot, screen.left, "c.txt")
        await delete_for_good(pilot, screen, "d.txt")
        await wait_for(pilot, lambda: pane.highlighted is not None and pane.highlighted["name"] == "a.txt")
        assert sorted(os.listdir(folder)) == ["a.txt"]

    try:
        run(app, scenario)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_enter_on_the_compress_dialogs_format_starts_the_compression(stack: Stack) -> None:
    folder = own_folder(stack, "compress-enter", {"page.txt": b"hello\n"})
    app = real_app(stack)

    async def scenario(pilot: Pilot[None]) -> None:
        screen = await enter_folder(pilot, "compress-enter")
        await highlight(pilot, screen.left, "page.txt")
        await pilot.press("c")
        await wait_for(pilot, lambda: isinstance(app.screen, ArchiveDialog))
        dialog = app.screen
        await pilot.press("tab")  # from the name to the format
        assert app.focused is dialog.query_one("#archive-format")
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.screen is screen and "page.txt.zip" in names(screen.left), seconds=30)
        with zipfile.ZipFile(folder / "page.txt.zip") as archive:
            assert archive.read("page.txt") == b"hello\n"

    try:
        run(app, scenario)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_x_on_what_is_not_an_archive_says_so_and_opens_no_dialog(stack: Stack) -> None:
    folder = own_folder(stack, "extract-what", {"notes.md": b"# notes\n", "site.tgz": b"not really\n"})
    (folder / "sub").mkdir()
    app = real_app(stack)

    async def scenario(pilot: Pilot[None]) -> None:
        screen = await enter_folder(pilot, "extract-what")
        for name in ("notes.md", "sub"):
            await highlight(pilot, screen.left, name)
            await pilot.press("x")
            await pilot.pause()
            assert app.screen is screen, name
            said = f"{name} is not an archive: only .zip, .tar.gz, .tgz and .tar archives can be extracted."
            assert said in [n.message for n in app._notifications]
        # An archive by its name: the dialog opens (and the server says what it makes of it).
        await highlight(pilot, screen.left, "site.tgz")
        await pilot.press("x")
        await wait_for(pilot, lambda: isinstance(app.screen, ArchiveDialog))
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is screen)
        assert sorted(os.listdir(folder)) == ["notes.md", "site.tgz", "sub"]

    try:
        run(app, scenario)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_keys_typed_while_the_files_screen_opens_wait_for_its_first_listing(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`:files local`, the filter on a file, `p 7 5 5 Enter`, typed at once from the server list:
    the panel's first listing is on its way while they come, and they wait for it (they went to
    the empty panel, where `p` found nothing, and Enter later opened the viewer). The listing is
    handed over only once the keys have gone somewhere: routed, or held for it."""
    target = site_dir(stack) / "typed-before-the-first-listing.txt"
    target.write_text("x")
    target.chmod(0o644)
    app = real_app(stack)
    list_all = app.client.files.list_all

    async def list_once_the_keys_went(*args: Any, **kwargs: Any) -> Any:
        listing = await list_all(*args, **kwargs)
        # The app's state polled from trio (the client's side): no event of it to wait on.
        while app.keys.waiting and not holds_keys(app.screen):  # noqa: ASYNC110
            await trio.sleep(0.01)
        return listing

    monkeypatch.setattr(app.client.files, "list_all", list_once_the_keys_went)

    async def scenario(pilot: Pilot[None]) -> None:
        await highlight_server(pilot, "local")
        type_at_once(app, ":", *"files local", "enter", "/", *target.name, "enter", "p", "7", "5", "5", "enter")
        await wait_for(
            pilot, lambda: target.stat().st_mode & 0o777 == 0o755 and isinstance(app.screen, CommanderScreen)
        )

    run(app, scenario)
