"""The file dialogs (`tui/files/dialogs`) at 80x24, pushed over the real TUI on the real
stack (`fleetdeck local`): each dialog's effect is checked on disk, in the demo's site folder.

Trio work is not awaited by `pilot.pause()`: `wait_for` polls until the trio side has delivered.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import re
import stat
import zipfile
from datetime import datetime
from pathlib import Path
from typing import Any

from textual import events
from textual.app import App
from textual.pilot import Pilot
from textual.widgets import Checkbox, Input, OptionList, RadioSet, Select, SelectionList, Static

from api_client import Scope, Server
from tests.conftest import Stack
from tests.helpers import wait_for
from tests.helpers.own_agent import own_agent
from tests.helpers.tui import highlight, open_commander, real_app, run, site_dir
from tui.app import FleetdeckApp
from tui.files.dialogs import (
    ArchiveDialog,
    CopyDialog,
    DeleteDialog,
    LocalPathDialog,
    NameDialog,
    NewFileDialog,
    PermissionsDialog,
    PropertiesDialog,
    SearchDialog,
    TransferDialog,
    TrashDialog,
)
from tui.servers.screen import ServerListScreen
from tui.widgets.dialogs import ConfirmDialog, Dialog

SIZE = (80, 24)
SITE = Scope(scope="site", domain="example.com")
MIB = 1024 * 1024


def demo_server(stack: Stack) -> Server:
    with stack.http() as http:
        answer = http.get(f"/v1/servers/{stack.server_id}")
        answer.raise_for_status()
        return Server.model_validate(answer.json())


async def push(pilot: Pilot[Any], dialog: Dialog[Any]) -> list[Any]:
    """Open `dialog` (over the server list of the real app); its result lands in the list returned."""
    app = pilot.app
    if isinstance(app, FleetdeckApp):  # its server list first, or it would open over the dialog
        await wait_for(pilot, lambda: any(isinstance(s, ServerListScreen) for s in app.screen_stack))
    results: list[Any] = []
    app.push_screen(dialog, results.append)
    await wait_for(pilot, lambda: app.screen is dialog)
    await pilot.pause()
    if app.screen is dialog:  # a fast transfer may be over already
        assert_fits(dialog)
    return results


def assert_fits(dialog: Dialog[Any]) -> None:
    """The dialog's box, buttons and hint are inside an 80x24 screen (the buttons shown: a dialog
    may swap some for others, as extract swaps Start for Skip and Overwrite)."""
    box = dialog.query_one(".dialog")
    width, height = SIZE
    assert box.region.right <= width and box.region.bottom <= height, box.region
    for part in dialog.query(".dialog--hint, .dialog--buttons Button"):
        if not part.display:
            continue
        assert part.region.height >= 1 and part.region.bottom <= box.region.bottom, part


def status(dialog: Dialog[Any]) -> str:
    return str(dialog.query_one("#status", Static).render())


# --- the small dialogs (no server needed) -------------------------------------------------------


class Bare(App[None]):
    pass


def test_confirm_defaults_to_no_when_destructive_and_delete_defaults_to_the_trash() -> None:
    async def scenario(pilot: Pilot[Any]) -> None:
        # Destructive: Enter is No; y is yes; Esc is No.
        for keys, expected in ((["enter"], False), (["y"], True), (["escape"], False), (["n"], False)):
            confirm = ConfirmDialog("Empty the trash?", "For good.", confirm_label="Empty")
            answers = await push(pilot, confirm)
            assert pilot.app.focused is not None and pilot.app.focused.id == "confirm-no"
            await pilot.press(*keys)
            await wait_for(pilot, lambda answers=answers: answers)  # type: ignore[misc]
            assert answers == [expected], keys
        # Not destructive: Enter confirms.
        results = await push(pilot, ConfirmDialog("Go?", "", confirm_label="Go", destructive=False))
        await pilot.press("enter")
        await wait_for(pilot, lambda: results)
        assert results == [True]

        # Delete: Enter is the trash.
        results = await push(pilot, DeleteDialog(["a.txt", "b"]))
        await pilot.press("enter")
        await wait_for(pilot, lambda: results)
        assert results == ["trash"]
        # Permanent needs a second, explicit yes: Enter there is No and leaves the choice open.
        dialog = DeleteDialog(["a.txt"])
        results = await push(pilot, dialog)
        await pilot.press("p")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, ConfirmDialog))
        await pilot.press("enter")
        await wait_for(pilot, lambda: pilot.app.screen is dialog)
        assert results == []
        await pilot.press("p")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, ConfirmDialog))
        await pilot.press("y")
        await wait_for(pilot, lambda: results)
        assert results == ["permanent"]
        results = await push(pilot, DeleteDialog(["a.txt"]))
        await pilot.press("escape")
        await wait_for(pilot, lambda: results)
        assert results == [None]

    run(Bare(), scenario)


def test_name_dialog_refuses_bad_names() -> None:
    async def scenario(pilot: Pilot[Any]) -> None:
        dialog = NameDialog("Rename", "index.php", hint="In the same folder.")
        results = await push(pilot, dialog)
        field = dialog.query_one("#name-input", Input)
        assert pilot.app.focused is field and field.selected_text == "index.php"  # the whole name, as mc
        for bad in ("a/b", "..", ".", "   ", "x" * 300):
            field.value = bad
            await pilot.press("enter")
            await pilot.pause()
            assert results == [] and "-error" in dialog.query_one("#status").classes, bad
        field.value = "home.php"
        await pilot.press("enter")
        await wait_for(pilot, lambda: results)
        assert results == ["home.php"]
        results = await push(pilot, NameDialog("New folder", ""))
        await pilot.press("escape")
        await wait_for(pilot, lambda: results)
        assert results == [None]

    run(Bare(), scenario)


def test_copy_dialog_says_what_goes_where(tmp_path: Path) -> None:
    async def scenario(pilot: Pilot[Any]) -> None:
        dialog = CopyDialog(
            "copy",
            ["public_html/a", "public_html/b", "x"],
            "web1:example.com:/public_html",
            "web2:/home:/backup",
            "backup",
            cross="server",
        )
        results = await push(pilot, dialog)
        assert dialog.summary() == "Copy 3 items from web1:example.com:/public_html → web2:/home:/backup"
        assert "needs the owner role and both agents online" in str(dialog.query_one("#copy-cross").render())
        assert pilot.app.focused is dialog.query_one("#copy-destination", Input)
        await pilot.press("end", *"/old", "ctrl+o", "enter")
        await wait_for(pilot, lambda: results)
        assert results == [("backup/old", True)]

        dialog = CopyDialog("move", ["a.txt"], "web1:example.com:/", "web1:example.com:/", "", cross=None)
        results = await push(pilot, dialog)
        assert not dialog.query("#copy-cross")
        dialog.query_one("#copy-destination", Input).value = "../etc"
        await pilot.press("enter")
        await pilot.pause()
        assert results == [] and "'..'" in status(dialog)
        dialog.query_one("#copy-destination", Input).value = "/"
        await pilot.press("enter")
        await wait_for(pilot, lambda: results)
        assert results == [("", False)]  # the scope root, no overwrite

    run(Bare(), scenario)


def test_local_path_dialog_checks_the_path(tmp_path: Path) -> None:
    existing = tmp_path / "there.bin"
    existing.write_bytes(b"x")

    async def scenario(pilot: Pilot[Any]) -> None:
        dialog = LocalPathDialog("Upload", str(tmp_path / "missing.bin"), mode="open")
        results = await push(pilot, dialog)
        await pilot.press("enter")
        await pilot.pause()
        assert results == [] and "does not exist" in status(dialog)
        dialog.query_one("#local-path", Input).value = str(existing)
        await pilot.press("enter")
        await wait_for(pilot, lambda: results)
        assert results == [existing]

        dialog = LocalPathDialog("Save as", str(tmp_path / "no-such-folder" / "x.bin"))
        results = await push(pilot, dialog)
        await pilot.press("enter")
        await pilot.pause()
        assert results == [] and "does not exist" in status(dialog)
        dialog.query_one("#local-path", Input).value = str(existing)
        await pilot.press("enter")
        await pilot.pause()
        assert results == [] and "Enter again to replace" in status(dialog)
        await pilot.press("enter")
        await wait_for(pilot, lambda: results)
        assert results == [existing]

    run(Bare(), scenario)


# --- on the real stack ---------------------------------------------------------------------------


def fresh_dir(stack: Stack, name: str) -> Path:
    """An empty folder of the example.com site, owned by nobody else's test."""
    folder = site_dir(stack) / name
    if folder.exists():
        for path in sorted(folder.rglob("*"), key=lambda p: -len(p.parts)):
            path.unlink() if not path.is_dir() or path.is_symlink() else path.rmdir()
        folder.rmdir()
    folder.mkdir()
    return folder


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_properties_show_owner_mode_and_folder_size(stack: Stack) -> None:
    folder = fresh_dir(stack, "dlg-props")
    target = folder / "notes.txt"
    target.write_text("hello properties\n")
    target.chmod(0o640)
    (folder / "sub").mkdir()
    (folder / "sub" / "more.txt").write_bytes(b"x" * 2000)
    owner = pwd.getpwuid(target.stat().st_uid).pw_name
    app = real_app(stack)
    server = demo_server(stack)

    async def scenario(pilot: Pilot[Any]) -> None:
        dialog = PropertiesDialog(server, SITE, "dlg-props/notes.txt")
        results = await push(pilot, dialog)
        await wait_for(pilot, lambda: dialog.entry is not None)
        rows = dict(dialog.rows())
        assert rows["Type"] == "File" and rows["Size"] == "17 B"
        assert rows["Owner"].startswith(f"{owner}:")
        assert rows["Permissions"] == "rw-r----- (0640)"
        modified = datetime.fromtimestamp(target.stat().st_mtime).astimezone()
        assert rows["Modified"].startswith(f"{modified:%Y-%m-%d %H:%M:%S}")
        await pilot.press("escape")
        await wait_for(pilot, lambda: results)
        assert results == [None]

        dialog = PropertiesDialog(server, SITE, "dlg-props")
        results = await push(pilot, dialog)
        await wait_for(pilot, lambda: dialog.totals is not None)
        rows = dict(dialog.rows())
        assert rows["Type"] == "Folder"
        assert rows["Size"] == "2.0 KiB (2,017 bytes) in 2 files, 1 folder"
        assert rows["Permissions"] == f"{stat.filemode(folder.stat().st_mode)[1:]} (0{mode_of(folder):o})"
        await pilot.press("enter")
        await wait_for(pilot, lambda: results)

    run(app, scenario)


def test_permissions_grid_sets_the_mode_and_recursive_files_only_leaves_folders(stack: Stack) -> None:
    folder = fresh_dir(stack, "dlg-perms")
    top = folder / "top.txt"
    top.write_text("top\n")
    top.chmod(0o644)
    sub = folder / "sub"
    sub.mkdir()
    sub.chmod(0o755)
    inner = sub / "inner.txt"
    inner.write_text("inner\n")
    inner.chmod(0o644)
    app = real_app(stack)
    server = demo_server(stack)

    async def scenario(pilot: Pilot[Any]) -> None:
        # One file: tick group write in the grid; the octal field follows; ctrl+s applies.
        dialog = PermissionsDialog(server, SITE, ["dlg-perms/top.txt"], has_dirs=False)
        results = await push(pilot, dialog)
        await wait_for(pilot, lambda: dialog.current is not None)
        octal_field = dialog.query_one("#permissions-octal", Input)
        assert pilot.app.focused is octal_field and octal_field.value == "644"
        assert not dialog.query("#permissions-recursive")
        await pilot.click("#bit-group-write")
        await wait_for(pilot, lambda: octal_field.value == "664")
        assert str(dialog.query_one("#permissions-symbolic", Static).render()) == "rw-rw-r--"
        # The field drives the grid too; setuid is refused before anything is sent.
        octal_field.value = "4755"
        await pilot.pause()
        assert "setuid" in status(dialog)
        await pilot.press("ctrl+s")
        await pilot.pause(0.3)
        assert results == [] and mode_of(top) == 0o644
        octal_field.value = "660"
        await wait_for(pilot, lambda: not dialog.query_one("#bit-other-read", Checkbox).value)
        assert dialog.query_one("#bit-group-write", Checkbox).value
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: results)
        assert results == [1] and mode_of(top) == 0o660

        # The folder, recursive, files only: files get 600, folders keep 755.
        dialog = PermissionsDialog(server, SITE, ["dlg-perms"], has_dirs=True)
        results = await push(pilot, dialog)
        await wait_for(pilot, lambda: dialog.current is not None)
        octal_field = dialog.query_one("#permissions-octal", Input)
        apply_to = dialog.query_one("#permissions-apply-to", RadioSet)
        assert apply_to.disabled
        await pilot.click("#permissions-recursive")
        await wait_for(pilot, lambda: not apply_to.disabled)
        await pilot.click("#apply-files")
        await wait_for(pilot, lambda: dialog.apply_to == "files")
        octal_field.value = "600"
        octal_field.focus()
        await pilot.press("enter")
        await wait_for(pilot, lambda: results)
        assert results == [2]
        assert mode_of(top) == 0o600 and mode_of(inner) == 0o600
        assert mode_of(folder) == 0o755 and mode_of(sub) == 0o755

        # Folders only, recursive: the files stay as they are.
        dialog = PermissionsDialog(server, SITE, ["dlg-perms"], has_dirs=True)
        results = await push(pilot, dialog)
        await wait_for(pilot, lambda: dialog.current is not None)
        await pilot.click("#permissions-recursive")
        await pilot.click("#apply-dirs")
        await wait_for(pilot, lambda: dialog.apply_to == "dirs")
        dialog.query_one("#permissions-octal", Input).value = "750"
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: results)
        assert results == [2] and mode_of(folder) == 0o750 and mode_of(sub) == 0o750
        assert mode_of(top) == 0o600 and mode_of(inner) == 0o600
        folder.chmod(0o755)

    run(app, scenario)


def burst(pilot: Pilot[Any], *keys: str) -> None:
    """`keys` handed to the app all at once, as a terminal delivers fast typing: no key waits for
    the screen to handle the one before it (`pilot.press` does wait)."""
    for key in keys:
        event = events.Key(key, key if len(key) == 1 else None)
        event.set_sender(pilot.app)
        pilot.app.post_message(event)


def test_permissions_octal_field_is_not_rewritten_under_fast_typing(stack: Stack) -> None:
    """End and a burst of Backspaces leave the field empty (the grid never writes into it while it
    has focus); then 755 and Enter, as fast, give the file exactly 755."""
    folder = fresh_dir(stack, "dlg-perms-fast")
    target = folder / "fast.txt"
    target.write_text("fast\n")
    app = real_app(stack)
    server = demo_server(stack)

    async def scenario(pilot: Pilot[Any]) -> None:
        for round_ in range(8):
            target.chmod(0o644)
            dialog = PermissionsDialog(server, SITE, ["dlg-perms-fast/fast.txt"], has_dirs=False)
            results = await push(pilot, dialog)
            await wait_for(pilot, lambda dialog=dialog: dialog.current is not None)  # type: ignore[misc]
            field = dialog.query_one("#permissions-octal", Input)
            burst(pilot, "end", *["backspace"] * 4)
            await pilot.pause()
            await pilot.pause()
            assert field.value == "", (round_, field.value)
            # Textual inserts characters in the field at once but runs Backspace and Enter (bindings)
            # after a round through the screen: the digits come only once the Backspaces are done.
            burst(pilot, "7", "5", "5", "enter")
            await wait_for(pilot, lambda results=results: results)  # type: ignore[misc]
            assert results == [1], round_
            assert mode_of(target) == 0o755, (round_, oct(mode_of(target)))

    run(app, scenario)


def test_permissions_start_from_the_mode_on_the_server_not_the_listing(stack: Stack) -> None:
    """A chmod 600 made outside after the panel listed the file (644): `p` shows 600 and its
    owner, and Enter keeps 600 (it set the listing's 644 back, undoing the other change). Keys
    typed while the mode is read wait for it: `p 7 5 5 Enter` at once gives 755."""
    folder = fresh_dir(stack, "dlg-perms-fresh")
    target = folder / "shared.txt"
    target.write_text("shared\n")
    target.chmod(0o644)
    owner = pwd.getpwuid(target.stat().st_uid).pw_name
    app = real_app(stack)

    async def scenario(pilot: Pilot[Any]) -> None:
        commander = await open_commander(pilot)
        await highlight(pilot, commander.left, "dlg-perms-fresh")
        await pilot.press("enter")
        await highlight(pilot, commander.left, "shared.txt")
        assert commander.left.pane.highlighted is not None
        assert int(commander.left.pane.highlighted["mode"]) & 0o777 == 0o644
        target.chmod(0o600)  # someone else, meanwhile

        await pilot.press("p")
        await wait_for(pilot, lambda: isinstance(app.screen, PermissionsDialog))
        dialog = app.screen
        assert isinstance(dialog, PermissionsDialog)
        await wait_for(pilot, lambda: dialog.current is not None)
        assert dialog.query_one("#permissions-octal", Input).value == "600"
        assert str(dialog.query_one("#permissions-symbolic", Static).render()) == "rw-------"
        assert owner in str(dialog.query_one("#permissions-owner", Static).render())
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.screen is commander)
        assert mode_of(target) == 0o600

        await pilot.press("p", "7", "5", "5", "enter")
        await wait_for(pilot, lambda: mode_of(target) == 0o755)
        await wait_for(pilot, lambda: app.screen is commander)
        listed = commander.left.pane
        await wait_for(pilot, lambda: listed.highlighted is not None and int(listed.highlighted["mode"]) == 0o100755)

        # Gone meanwhile: said in the dialog, and nothing can be applied.
        target.unlink()
        await pilot.press("p")
        await wait_for(pilot, lambda: isinstance(app.screen, PermissionsDialog))
        dialog = app.screen
        assert isinstance(dialog, PermissionsDialog)
        await wait_for(pilot, lambda: status(dialog).startswith("shared.txt is no longer there"))
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert dialog.current is None and app.screen is dialog and not dialog.applying
        await pilot.press("escape")

    run(app, scenario)


def test_dialogs_opened_while_the_agent_is_offline_say_so_and_read_once_it_is_back(
    stack: Stack, tmp_path: Path
) -> None:
    """Properties, permissions and the trash, opened while the agent is offline, say so on their
    status line (no toast) and read the server by themselves once the agent is back."""
    with own_agent(stack, tmp_path, f"dlgs-{tmp_path.name[-6:]}") as own:
        (own.site / "a.txt").write_text("a\n")
        (own.site / "a.txt").chmod(0o640)
        own.agent.kill()
        with stack.http() as http:
            server = Server.model_validate(http.get(f"/v1/servers/{own.server_id}").json())
        scope = Scope(scope="site", domain="a.example")
        app = real_app(stack)

        async def scenario(pilot: Pilot[Any]) -> None:
            properties = PropertiesDialog(server, scope, "a.txt")
            permissions = PermissionsDialog(server, scope, ["a.txt"], has_dirs=False)
            trash = TrashDialog(server, scope)
            for dialog in (properties, permissions, trash):  # each over the one before
                await push(pilot, dialog)
                await wait_for(pilot, lambda: f"The agent of {own.name} is offline" in status(dialog))  # noqa: B023
            assert properties.rows() == [] and permissions.current is None
            assert not any("offline" in n.message for n in app._notifications)

            await asyncio.to_thread(own.agent.restart)
            await wait_for(pilot, lambda: status(trash) == "The trash is empty.")
            await wait_for(pilot, lambda: ("Size", "2 B") in properties.rows() and status(properties) == "")
            await wait_for(pilot, lambda: permissions.octal_field.value == "640")
            assert not permissions.octal_field.disabled

        run(app, scenario)


def test_rename_goes_by_the_names_on_the_server_not_the_listing(stack: Stack) -> None:
    """F2 on a file renamed outside after the listing reads it on the server first: it says it is
    no longer there and lists the folder again, with no name asked for; a new name taken outside
    meanwhile (by a folder) is refused, not moved into; F2, a name and Enter typed at once rename."""
    folder = fresh_dir(stack, "dlg-rename-fresh")
    (folder / "a.txt").write_text("a\n")
    app = real_app(stack)

    async def scenario(pilot: Pilot[Any]) -> None:
        commander = await open_commander(pilot)
        await highlight(pilot, commander.left, "dlg-rename-fresh")
        await pilot.press("enter")
        await highlight(pilot, commander.left, "a.txt")
        (folder / "a.txt").rename(folder / "moved.txt")  # someone else, meanwhile

        async def rename_to(new: str) -> None:
            await pilot.press("f2")
            await wait_for(pilot, lambda: isinstance(app.screen, NameDialog))
            app.screen.query_one("#name-input", Input).value = new
            await pilot.press("enter")
            await wait_for(pilot, lambda: app.screen is commander)

        await pilot.press("f2")
        await wait_for(pilot, lambda: any("a.txt is no longer there" in n.message for n in app._notifications))
        await wait_for(pilot, lambda: commander.left.pane.index_of("moved.txt") is not None)
        assert app.screen is commander  # no dialog: nothing to rename
        assert sorted(p.name for p in folder.iterdir()) == ["moved.txt"]

        await highlight(pilot, commander.left, "moved.txt")
        (folder / "target.txt").mkdir()  # the new name, taken meanwhile
        await rename_to("target.txt")
        await wait_for(pilot, lambda: any("target.txt already exists" in n.message for n in app._notifications))
        assert (folder / "moved.txt").read_text() == "a\n" and not any((folder / "target.txt").iterdir())

        await highlight(pilot, commander.left, "moved.txt")
        await rename_to("free.txt")
        await wait_for(pilot, lambda: (folder / "free.txt").exists())
        await wait_for(pilot, lambda: commander.left.pane.index_of("free.txt") is not None)

        await highlight(pilot, commander.left, "free.txt")
        await pilot.press("f2", *"pasted.txt", "enter")  # at once, while the server is asked
        await wait_for(pilot, lambda: (folder / "pasted.txt").exists())
        assert sorted(p.name for p in folder.iterdir()) == ["pasted.txt", "target.txt"]

    run(app, scenario)


def test_new_file_from_a_template_and_a_taken_name(stack: Stack) -> None:
    folder = fresh_dir(stack, "dlg-new")
    app = real_app(stack)
    server = demo_server(stack)

    async def scenario(pilot: Pilot[Any]) -> None:
        dialog = NewFileDialog(server, SITE, "dlg-new")
        results = await push(pilot, dialog)
        name = dialog.query_one("#new-file-name", Input)
        assert pilot.app.focused is name and name.value == "" and name.placeholder == "untitled.txt"
        await pilot.press(*"hello")  # no extension typed: the template's is added
        assert dialog.name_to_create == "hello.txt" and "Creates hello.txt" in status(dialog)
        dialog.query_one("#new-file-template", Select).value = "php"
        await wait_for(pilot, lambda: dialog.name_to_create == "hello.php")
        assert name.value == "hello"
        name.focus()
        await pilot.press("enter")
        await wait_for(pilot, lambda: results)
        assert results == ["dlg-new/hello.php"]
        assert (folder / "hello.php").read_text() == "<?php\n\n"

        # The same name again: 409, said plainly, and the dialog stays open.
        dialog = NewFileDialog(server, SITE, "dlg-new")
        results = await push(pilot, dialog)
        dialog.query_one("#new-file-template", Select).value = "php"
        name = dialog.query_one("#new-file-name", Input)
        name.value = "hello.php"
        name.focus()
        await pilot.press("enter")
        await wait_for(pilot, lambda: "already exists" in status(dialog))
        assert pilot.app.screen is dialog and results == []
        assert (folder / "hello.php").read_text() == "<?php\n\n"

        # Another template from the same dialog: a shell script is made executable.
        dialog.query_one("#new-file-template", Select).value = "shell"
        name.value = "deploy"
        await pilot.pause()
        dialog.query_one("#new-file-template", Select).value = "markdown"
        await wait_for(pilot, lambda: dialog.name_to_create == "deploy.md")
        dialog.query_one("#new-file-template", Select).value = "shell"
        await wait_for(pilot, lambda: dialog.name_to_create == "deploy.sh")
        name.focus()
        await pilot.press("enter")
        await wait_for(pilot, lambda: results)
        script = folder / "deploy.sh"
        assert results == ["dlg-new/deploy.sh"] and script.read_text().startswith("#!/bin/sh\n")
        assert mode_of(script) & 0o100

    run(app, scenario)


def trash_via_api(stack: Stack, *paths: str) -> list[dict[str, Any]]:
    with stack.http() as http:
        answer = http.post(
            f"/v1/servers/{stack.server_id}/fs/delete",
            json={"scope": "site", "domain": "example.com", "paths": list(paths)},
        )
        answer.raise_for_status()
        trashed: list[dict[str, Any]] = answer.json()["trashed"]
        return trashed


def test_trash_restores_asks_before_overwriting_and_empties(stack: Stack) -> None:
    folder = fresh_dir(stack, "dlg-trash")
    (folder / "one.txt").write_text("one\n")
    (folder / "two.txt").write_text("two\n")
    one, two = trash_via_api(stack, "dlg-trash/one.txt", "dlg-trash/two.txt")
    (folder / "two.txt").write_text("a new two\n")  # something took two's place meanwhile
    app = real_app(stack)
    server = demo_server(stack)

    async def scenario(pilot: Pilot[Any]) -> None:
        dialog = TrashDialog(server, SITE)
        results = await push(pilot, dialog)
        await wait_for(pilot, lambda: {one["id"], two["id"]} <= {item.id for item in dialog.items})
        assert "in the trash" in status(dialog)
        listing: SelectionList[str] = dialog.query_one("#trash-items", SelectionList)
        assert pilot.app.focused is listing

        listing.select(one["id"])
        # Ticked or not shows in the glyph, not only in its colour (as in Midnight Commander).
        rows = range(listing.option_count)  # from the top: the list is not scrolled
        ticks = {listing.get_option_at_index(y).value: listing.render_line(y).text[:3] for y in rows}
        assert (ticks[one["id"]], ticks[two["id"]]) == ("[x]", "[ ]")
        await pilot.press("r")
        await wait_for(pilot, lambda: (folder / "one.txt").exists())
        assert (folder / "one.txt").read_text() == "one\n"
        await wait_for(pilot, lambda: one["id"] not in {item.id for item in dialog.items})

        # two.txt is taken: restoring asks; No keeps the new one, Yes overwrites it.
        listing.deselect_all()
        listing.select(two["id"])
        await pilot.press("r")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, ConfirmDialog))
        await pilot.press("enter")
        await wait_for(pilot, lambda: pilot.app.screen is dialog)
        assert (folder / "two.txt").read_text() == "a new two\n"
        await pilot.press("r")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, ConfirmDialog))
        await pilot.press("y")
        await wait_for(pilot, lambda: (folder / "two.txt").read_text() == "two\n")
        await wait_for(pilot, lambda: not dialog.busy and two["id"] not in {item.id for item in dialog.items})

        # Empty: asks first (Enter is No), then y empties it.
        (folder / "three.txt").write_text("three\n")
        trash_via_api(stack, "dlg-trash/three.txt")
        dialog.load()
        await wait_for(pilot, lambda: not dialog.busy and dialog.items)
        await pilot.press("e")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, ConfirmDialog))
        await pilot.press("enter")
        await wait_for(pilot, lambda: pilot.app.screen is dialog)
        assert dialog.items
        await pilot.press("e")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, ConfirmDialog))
        await pilot.press("y")
        await wait_for(pilot, lambda: not dialog.busy and not dialog.items)
        assert "The trash is empty." in status(dialog)
        await pilot.press("escape")
        await wait_for(pilot, lambda: results)
        assert sorted(results[0]) == ["dlg-trash/one.txt", "dlg-trash/two.txt"]

    run(app, scenario)


def test_search_by_name_and_by_content(stack: Stack) -> None:
    app = real_app(stack)
    server = demo_server(stack)

    async def scenario(pilot: Pilot[Any]) -> None:
        dialog = SearchDialog(server, SITE, "public_html")
        results = await push(pilot, dialog)
        query = dialog.query_one("#search-query", Input)
        assert pilot.app.focused is query
        await pilot.press(*"wp-conf", "enter")
        await wait_for(pilot, lambda: dialog.matches)
        assert [m.entry.path for m in dialog.matches] == ["public_html/wp-config.php"]
        await pilot.press("down", "enter")
        await wait_for(pilot, lambda: results)
        assert results == ["public_html/wp-config.php"]

        dialog = SearchDialog(server, SITE, "")
        results = await push(pilot, dialog)
        await pilot.press(*"db_password", "ctrl+t", "enter")
        await wait_for(pilot, lambda: dialog.matches and not dialog.searching)
        found = {(m.entry.path, m.line) for m in dialog.matches}
        assert {(".env", 2), ("public_html/wp-config.php", 4)} <= found
        options = dialog.query_one("#search-results", OptionList)
        prompts = [str(options.get_option_at_index(i).prompt) for i in range(options.option_count)]
        assert any(p.startswith(".env:2") and "DB_PASSWORD=change-me" in p for p in prompts)
        assert "match" in status(dialog)
        await pilot.press("escape")
        await wait_for(pilot, lambda: results)
        assert results == [None]

    run(app, scenario)


def test_download_writes_the_exact_bytes_and_cancel_leaves_no_file(stack: Stack, tmp_path: Path) -> None:
    folder = fresh_dir(stack, "dlg-down")
    payload = os.urandom(3 * MIB + 12345)
    (folder / "data.bin").write_bytes(payload)
    big = folder / "big.bin"
    with open(big, "wb") as out:
        out.truncate(400 * MIB)  # sparse: cheap to make, as long to send as any
    app = real_app(stack)
    server = demo_server(stack)
    target = tmp_path / "data.bin"

    async def scenario(pilot: Pilot[Any]) -> None:
        dialog = TransferDialog.download(server, SITE, "dlg-down/data.bin", target)
        results = await push(pilot, dialog)
        await wait_for(pilot, lambda: results, seconds=60)
        assert results == [True]
        assert target.read_bytes() == payload
        assert dialog.done == len(payload) and dialog.total == len(payload)

        cancelled = tmp_path / "big.bin"
        dialog = TransferDialog.download(server, SITE, "dlg-down/big.bin", cancelled)
        results = await push(pilot, dialog)
        await wait_for(pilot, lambda: dialog.done > 0, seconds=60)
        assert_fits(dialog)
        # A rate is shown (its unit follows the speed: KiB/s on a loaded machine).
        assert re.search(r" · [0-9.]+ [KMG]?i?B/s", str(dialog.query_one("#transfer-numbers", Static).render()))
        await pilot.press("c")
        await wait_for(pilot, lambda: results, seconds=30)
        assert results == [False]
        assert not cancelled.exists()

    run(app, scenario)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.bin"]  # no partial file left
    big.unlink()


def test_upload_lands_byte_exact_and_asks_before_replacing(stack: Stack, tmp_path: Path) -> None:
    folder = fresh_dir(stack, "dlg-up")
    payload = os.urandom(5 * MIB + 7)
    local = tmp_path / "up.bin"
    local.write_bytes(payload)
    app = real_app(stack)
    server = demo_server(stack)

    async def scenario(pilot: Pilot[Any]) -> None:
        dialog = TransferDialog.upload(server, SITE, local, "dlg-up/up.bin")
        results = await push(pilot, dialog)
        await wait_for(pilot, lambda: results, seconds=60)
        assert results == [True]
        assert (folder / "up.bin").read_bytes() == payload

        # The name is taken now: the upload asks; Replace sends it again with overwrite.
        local.write_bytes(payload[::-1])
        dialog = TransferDialog.upload(server, SITE, local, "dlg-up/up.bin")
        results = await push(pilot, dialog)
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, ConfirmDialog), seconds=30)
        await pilot.press("y")
        await wait_for(pilot, lambda: results, seconds=60)
        assert results == [True]
        assert (folder / "up.bin").read_bytes() == payload[::-1]

    run(app, scenario)


def test_compress_then_extract_round_trips_with_progress(stack: Stack) -> None:
    folder = fresh_dir(stack, "dlg-arch")
    source = folder / "src"
    (source / "deep").mkdir(parents=True)
    files = {"a.txt": b"alpha\n", "deep/b.bin": os.urandom(300_000), "deep/c.txt": b"gamma\n" * 1000}
    for name, data in files.items():
        (source / name).write_bytes(data)
    app = real_app(stack)
    server = demo_server(stack)

    async def scenario(pilot: Pilot[Any]) -> None:
        dialog = ArchiveDialog.compress(server, SITE, ["dlg-arch/src"], "dlg-arch")
        results = await push(pilot, dialog)
        name = dialog.query_one("#archive-name", Input)
        assert pilot.app.focused is name and name.value == "src.zip"
        dialog.query_one("#archive-format", Select).value = "tar.gz"
        await wait_for(pilot, lambda: name.value == "src.tar.gz")
        name.focus()
        await pilot.press("enter")
        await wait_for(pilot, lambda: results, seconds=60)
        assert results == [True]
        assert (folder / "src.tar.gz").is_file()
        assert dialog.last_progress.get("total_files") == 3
        assert dialog.last_progress.get("total_bytes") == sum(len(d) for d in files.values())

        dialog = ArchiveDialog.extract(server, SITE, "dlg-arch/src.tar.gz", "dlg-arch")
        results = await push(pilot, dialog)
        destination = dialog.query_one("#archive-destination", Input)
        await wait_for(pilot, lambda: destination.value == "/dlg-arch")  # one root, src/: here
        destination.value = "dlg-arch/out"
        destination.focus()
        await pilot.press("enter")
        await wait_for(pilot, lambda: results, seconds=60)
        assert results == [True]
        out = folder / "out"
        extracted = {
            p.relative_to(out).as_posix().removeprefix("src/"): p.read_bytes() for p in out.rglob("*") if p.is_file()
        }
        assert extracted == files

    run(app, scenario)


def test_extract_puts_a_single_root_archive_here_and_lists_conflicts_before_writing(stack: Stack) -> None:
    """`wp-content.zip` (all under `wp-content/`) extracts into the folder it sits in, not into
    `wp-content/wp-content/`; the files already there are listed before anything is written, and
    Skip keeps them while Overwrite replaces them. An archive of several entries gets a folder."""
    folder = fresh_dir(stack, "dlg-extract")
    with zipfile.ZipFile(folder / "wp-content.zip", "w") as archive:
        archive.writestr("wp-content/index.php", "<?php // new")
        archive.writestr("wp-content/themes/new.css", "new {}")
    (folder / "wp-content").mkdir()
    (folder / "wp-content" / "index.php").write_text("<?php // mine")
    with zipfile.ZipFile(folder / "two.zip", "w") as archive:
        archive.writestr("a.txt", "a")
        archive.writestr("b.txt", "b")
    wp = folder / "wp-content"
    app = real_app(stack)
    server = demo_server(stack)

    async def open_conflicts(pilot: Pilot[Any], *, early: bool = False) -> tuple[ArchiveDialog, list[Any], list[str]]:
        """Extract wp-content.zip up to its list of conflicts; `early`: Enter at once, maybe while
        the archive is still being read (the start waits for the destination, it is not lost)."""
        dialog = ArchiveDialog.extract(server, SITE, "dlg-extract/wp-content.zip", "dlg-extract")
        results = await push(pilot, dialog)
        destination = dialog.query_one("#archive-destination", Input)
        if not early:
            await wait_for(pilot, lambda: destination.value == "/dlg-extract")
        await pilot.press("enter")
        await wait_for(pilot, lambda: dialog.conflicts_shown)
        assert destination.value == "/dlg-extract"
        assert_fits(dialog)
        listing = dialog.query_one("#archive-conflict-list", OptionList)
        shown = [str(listing.get_option_at_index(i).prompt) for i in range(listing.option_count)]
        return dialog, results, shown

    async def scenario(pilot: Pilot[Any]) -> None:
        dialog, results, shown = await open_conflicts(pilot, early=True)
        title = str(dialog.query_one("#archive-conflicts-title", Static).render())
        assert title == "1 item of the archive already exists in /dlg-extract:" and shown == ["wp-content/index.php"]
        assert not (wp / "themes").exists()  # nothing written before the choice
        await pilot.press("s")
        await wait_for(pilot, lambda: results, seconds=60)
        assert results == [True]
        assert (wp / "index.php").read_text() == "<?php // mine" and (wp / "themes" / "new.css").read_text() == "new {}"
        assert not (wp / "wp-content").exists()

        dialog, results, shown = await open_conflicts(pilot)
        assert shown == ["wp-content/index.php", "wp-content/themes/new.css"]
        await pilot.press("escape")  # cancel: still nothing written
        await wait_for(pilot, lambda: results)
        assert results == [False] and (wp / "index.php").read_text() == "<?php // mine"

        dialog, results, shown = await open_conflicts(pilot)
        await pilot.press("o")
        await wait_for(pilot, lambda: results, seconds=60)
        assert results == [True] and (wp / "index.php").read_text() == "<?php // new"

        dialog = ArchiveDialog.extract(server, SITE, "dlg-extract/two.zip", "dlg-extract")
        results = await push(pilot, dialog)
        destination = dialog.query_one("#archive-destination", Input)
        await wait_for(pilot, lambda: destination.value == "/dlg-extract/two")
        await pilot.press("enter")  # no conflict: extracts at once
        await wait_for(pilot, lambda: results, seconds=60)
        assert results == [True] and (folder / "two" / "a.txt").read_text() == "a"

    run(app, scenario)
