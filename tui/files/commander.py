"""The two-pane file browser, in the style of Midnight Commander.

Each panel shows its own server and scope, so F5 (copy) and F6 (move) from one panel to the other
are same-folder, cross-site or cross-server transfers; the server decides who may do which. A panel
on a site's logs is read-only: the keys that would write there say so without asking the server,
and F5 copies a log out into the other panel. F-keys
that do not reach through SSH or tmux have a fallback: Esc, then a digit (Esc 5 is F5, Esc 0 F10);
Esc first clears an active name filter.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, Literal

from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.widget import Widget

from api_client import PATHS_PER_BATCH, BatchProgress, Entry, FileContent, KeepGoing, Listing, Scope, Server
from api_client import errors as api_errors
from contract.models import FsDestination, PresenceEvent
from tui.bridge import TaskHandle
from tui.errors import unwrap
from tui.files.dialogs import (
    ArchiveDialog,
    BulkDialog,
    ConflictPlan,
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
    resolve_conflicts,
)
from tui.files.dialogs.archive import ARCHIVE_SUFFIXES, EXTRACTABLE
from tui.files.dialogs.base import describe_items, gone_meanwhile
from tui.files.directory_pane import SORT_KEYS, DirectoryPane
from tui.files.editor_screen import EditorScreen
from tui.files.location_picker import LocationPicker
from tui.files.panel import READ_ONLY, FilePanel, scope_key
from tui.files.places import PanelPlace, places_of
from tui.files.viewer import ViewerScreen
from tui.screen import FleetScreen
from tui.text import join_path, load_tcss, printable
from tui.widgets.footer import FleetFooter
from tui.widgets.header import SafeHeader

ESCAPE_DIGIT_WINDOW_S = 1.5
"""How long after Esc a digit still counts as an F-key (Esc 1 … Esc 0 = F1 … F10)."""

Cross = Literal["site", "server", "logs"]


class CommanderScreen(FleetScreen):
    """Two panels side by side; Tab switches, F-keys act on the marked entries or the highlighted."""

    HELP_TITLE = "Files"

    DEFAULT_CSS = load_tcss(__file__)

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("tab", "switch_panel", "Other panel", key_display="Tab", show=False),
        Binding("f3", "view", "View"),
        Binding("f4", "edit", "Edit"),
        Binding("f5", "copy", "Copy"),
        Binding("f6", "move", "Move"),
        Binding("f7", "mkdir", "Mkdir"),
        Binding("f8", "delete", "Delete"),
        Binding("f2,shift+f6", "rename", "Rename", show=False),
        Binding("escape", "escape", "", show=False),
        Binding("s", "pick_location", "Scope"),
        Binding("slash", "filter", "Filter", key_display="/", show=False),
        Binding("o", "cycle_sort", "Sort: name, size, time", show=False),
        Binding("O", "reverse_sort", "Reverse sort", key_display="O", show=False),
        Binding("r,ctrl+r", "reload", "Reload", show=False),
        Binding("tilde", "go_root", "Scope root", key_display="~", show=False),
        Binding("equals_sign", "same_folder", "Same folder in the other panel", key_display="=", show=False),
        Binding("i", "properties", "Properties", show=False),
        Binding("p", "permissions", "Permissions", show=False),
        Binding("n", "new_file", "New file", show=False),
        Binding("ctrl+f", "search", "Search", show=False),
        Binding("t", "trash", "Trash", show=False),
        Binding("d", "download", "Download", show=False),
        Binding("u", "upload", "Upload", show=False),
        Binding("c", "compress", "Compress", show=False),
        Binding("x", "extract", "Extract", show=False),
    ]

    HELP_KEYS: ClassVar[list[tuple[str, str]]] = [
        ("Enter / ⌫", "Open / parent folder"),
        ("Space Insert", "Mark and move down"),
        ("* + -", "Invert, mark all, unmark all"),
        ("Esc 1…0", "F1…F10 where F-keys do not reach (SSH, tmux); Esc Esc leaves"),
        ("Esc", "Clears the name filter first, when one is set"),
    ]

    F_KEY_ACTIONS: ClassVar[dict[str, str]] = {
        "1": "app.help",
        "2": "rename",
        "3": "view",
        "4": "edit",
        "5": "copy",
        "6": "move",
        "7": "mkdir",
        "8": "delete",
        "0": "app.quit",  # F10 quits, as in Midnight Commander
    }

    def __init__(self, server: Server) -> None:
        super().__init__()
        self.server = server
        self.title = f"{server.name} · files"
        self._active = "left"
        self._escape_at: float | None = None
        self._opening_task: TaskHandle | None = None
        self._scopes_failed = False  # the panels wait for the scopes (retried when the agent is back)

    def compose(self) -> ComposeResult:
        yield SafeHeader()
        with Horizontal(id="panels"):
            yield FilePanel(id="left")
            yield FilePanel(id="right")
        yield FleetFooter()

    def on_mount(self) -> None:
        if self.dismissed:
            return
        remembered = places_of(self.app).screen(self.server.id)
        if remembered.left is not None and remembered.right is not None:
            # Back to Files for this server: both panels as they were left.
            self._restore(self.left, remembered.left)
            self._restore(self.right, remembered.right)
            self._active = remembered.active
            self.active.add_class("-active")
            self.active.pane.focus()
            return
        self.left.add_class("-active")
        self.left.pane.focus()
        self.monitor.presence.subscribe(self, self._presence_changed)
        self._load_scopes()

    def _load_scopes(self) -> None:
        self.bridge.run(
            self, self.client.files.scopes, self.server.id, on_done=self._open_first_scope, on_error=self._no_scopes
        )

    def _presence_changed(self, event: PresenceEvent) -> None:
        """The agent is back while the panels wait for the scopes it could not give: ask again."""
        if event.online and event.server_id == self.server.id and self.left.scope is None and self._scopes_failed:
            self._scopes_failed = False
            self._load_scopes()

    def _open_first_scope(self, scopes: list[Scope]) -> None:
        if not scopes:
            for panel in (self.left, self.right):
                panel.pane.show_message("You may not browse any scope of this server.")
            return
        # Both panels start on the first scope, as Midnight Commander starts on one folder twice.
        for panel in (self.left, self.right):
            self._open_remembered(panel, self.server, scopes[0])

    def _open_remembered(self, panel: FilePanel, server: Server, scope: Scope) -> None:
        """Open `scope` in `panel` at the folder it showed last in this session (its root at first)."""
        path, highlighted = places_of(self.app).folder(server, scope)
        panel.open_location(server, scope, path, select=highlighted)

    @staticmethod
    def _restore(panel: FilePanel, place: PanelPlace) -> None:
        key, reverse = place.sort
        panel.pane.sort_by(key, reverse=reverse)
        panel.keep_filter(place.filter)
        panel.open_location(place.server, place.scope, place.path, select=place.highlighted)

    @on(FilePanel.Moved)
    def _remember(self, _event: FilePanel.Moved | None = None) -> None:
        """Keep where both panels are, for the next time Files opens (see `tui.files.places`);
        a panel still loading keeps its last settled place."""
        places = places_of(self.app)
        screen = places.screen(self.server.id)
        for panel in (self.left, self.right):
            place = _place_of(panel)
            if place is None:
                continue
            places.remember(place)
            if panel is self.left:
                screen.left = place
            else:
                screen.right = place
        screen.active = self._active

    def _no_scopes(self, exc: BaseException) -> None:
        self._scopes_failed = True
        if isinstance(unwrap(exc), api_errors.AgentOffline):
            message = f"The agent of {printable(self.server.name)} is offline: the panels list once it is back."
        else:
            self.show_error(exc, server=self.server.name)
            message = "Could not load the scopes: r to try again, Esc Esc to go back."
        for panel in (self.left, self.right):
            panel.pane.show_message(message)

    # --- panels ---------------------------------------------------------------------------

    @property
    def left(self) -> FilePanel:
        return self.query_one("#left", FilePanel)

    @property
    def right(self) -> FilePanel:
        return self.query_one("#right", FilePanel)

    @property
    def active(self) -> FilePanel:
        return self.left if self._active == "left" else self.right

    @property
    def other(self) -> FilePanel:
        return self.right if self._active == "left" else self.left

    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        panel = _panel_of(event.widget)
        if panel is not None:
            self._activate(panel)

    def _activate(self, panel: FilePanel) -> None:
        if panel.id != self._active:
            self._active = panel.id or "left"
            self.left.set_class(panel is self.left, "-active")
            self.right.set_class(panel is self.right, "-active")
            self._remember()
            panel.refresh_if_changed()  # what changed on the server while the other panel had the focus

    def on_screen_resume(self) -> None:
        """Back from a dialog or the picker: the focus is in the active panel (a focus change
        still pending when the dialog opened must not leave it in the other one)."""
        if self.dismissed or not self.query(FilePanel):  # leaving, or not composed yet
            return
        if self.focused is None or _panel_of(self.focused) is not self.active:
            self.active.pane.focus()

    def action_switch_panel(self) -> None:
        # Active at once, not when the focus event arrives: a key typed right after Tab (r, s,
        # F5) acts on the panel the user switched to.
        panel = self.other
        self._activate(panel)
        panel.pane.focus()

    # --- Esc then a digit -----------------------------------------------------------------

    def action_escape(self) -> None:
        if self.active.pane.filter_text:  # Esc undoes the filter before it means anything else
            self._escape_at = None
            self.active.clear_filter()
            return
        now = time.monotonic()
        if self._escape_at is not None and now - self._escape_at < ESCAPE_DIGIT_WINDOW_S:
            self._escape_at = None
            self.action_back()  # Esc Esc
            return
        self._escape_at = now
        self.active.show_hint("Esc then 1…0: F1…F10 · Esc: leave")  # fits a panel at 80 columns

    async def on_key(self, event: events.Key) -> None:
        if event.key == "escape":
            return  # the binding above: it arms, or leaves on a second Esc
        armed, self._escape_at = self._escape_at, None
        if armed is None:
            return
        self.active.update_status()  # the hint goes
        if time.monotonic() - armed > ESCAPE_DIGIT_WINDOW_S:
            return
        action = self.F_KEY_ACTIONS.get(event.key)
        if action is not None:
            event.stop()
            event.prevent_default()
            await self.run_action(action)

    def action_back(self) -> None:
        self.dismiss()

    # --- moving around --------------------------------------------------------------------

    def action_pick_location(self) -> None:
        panel = self.active

        def picked(choice: tuple[Server, Scope] | None) -> None:
            if choice is not None:
                self._open_remembered(panel, *choice)
                panel.pane.focus()

        current = (panel.server.id, scope_key(panel.scope)) if panel.server and panel.scope else None
        self.app.push_screen(LocationPicker(current), picked)

    def action_reload(self) -> None:
        if self.active.scope is None:
            self._load_scopes()
            return
        self.active.reload()

    def action_go_root(self) -> None:
        self.active.go_root()

    def action_same_folder(self) -> None:
        """`=`: the other panel shows the folder of this one."""
        source = self.active
        if source.place is not None:
            self.other.open_location(*source.place, source.path)

    def action_filter(self) -> None:
        self.active.start_filter()

    def action_cycle_sort(self) -> None:
        pane = self.active.pane
        key, reverse = pane.ordering
        next_key = SORT_KEYS[(SORT_KEYS.index(key) + 1) % len(SORT_KEYS)]
        pane.sort_by(next_key, reverse=reverse)
        self.notify(f"Sorted by {next_key}", timeout=1.5)

    def action_reverse_sort(self) -> None:
        pane = self.active.pane
        key, reverse = pane.ordering
        pane.sort_by(key, reverse=not reverse)

    # --- view and edit --------------------------------------------------------------------

    @on(FilePanel.FileOpened)
    def _file_opened(self, event: FilePanel.FileOpened) -> None:
        self._open(event.panel, event.path, edit=False)

    def action_view(self) -> None:
        self._open_highlighted(edit=False)

    def action_edit(self) -> None:
        if self._writable(self.active):
            self._open_highlighted(edit=True)

    def _open_highlighted(self, *, edit: bool) -> None:
        panel = self.active
        entry = panel.pane.highlighted
        if entry is None:
            return
        target = join_path(panel.path, str(entry.get("name", "")))
        if entry.get("type") == "dir":
            if not edit:
                panel.load(target)
            return
        if entry.get("type") not in ("file", "symlink"):
            self.notify(f"{printable(target)} is not a file.", severity="warning")
            return
        self._open(panel, target, edit=edit)

    def _open(self, panel: FilePanel, path: str, *, edit: bool) -> None:
        """Show `path` in the viewer (any file: it reads its windows itself), or read it for the
        editor (binary and huge files are reported)."""
        if panel.place is None:
            return
        server, scope = panel.place
        if self._opening_task is not None:
            self._opening_task.cancel()
        if not edit:  # viewing changes nothing: the panel is not listed again after it
            self.app.push_screen(ViewerScreen(server, scope, path))
            return

        def show(content: FileContent) -> None:
            self.app.push_screen(EditorScreen(server, scope, content), lambda _result: panel.reload())
            self.release_keys(EditorScreen)

        self.hold_keys(EditorScreen)  # what is typed while the file is read: for the editor
        self._opening_task = self.bridge.run(
            self,
            self.client.files.read,
            server.id,
            scope,
            path,
            on_done=show,
            on_error=lambda exc: self._open_failed(exc, server, path),
        )

    def _open_failed(self, exc: BaseException, server: Server, path: str) -> None:
        self.release_keys(EditorScreen)
        self.show_error(exc, server=server.name, path=path.rpartition("/")[2] or path)

    # --- copy and move between the panels -------------------------------------------------

    def action_copy(self) -> None:
        self._transfer("copy")

    def action_move(self) -> None:
        self._transfer("move")

    def _transfer(self, operation: Literal["copy", "move"]) -> None:
        source, target = self.active, self.other
        paths = source.selected_paths()
        if not paths or source.server is None or source.scope is None:
            return
        if target.server is None or target.scope is None:
            self.notify("The other panel shows no folder yet.", severity="warning")
            return
        if not self._writable(target) or (operation == "move" and not self._writable(source)):
            return
        cross: Cross | None = None
        if target.server.id != source.server.id:
            cross = "server"
        elif source.read_only and target.scope.domain == source.scope.domain:
            cross = "logs"  # a log saved into its own site: the site's writes are enough
        elif target.scope != source.scope:
            cross = "site"
        if cross is None and target.path == source.path:
            self.notify("Both panels show the same folder: pick another destination first.", severity="warning")
            return
        dialog = CopyDialog(operation, paths, source.location, target.location, target.path, cross=cross)
        self.app.push_screen(dialog, lambda answer: self._run_transfer(operation, source, target, paths, cross, answer))

    def _run_transfer(
        self,
        operation: Literal["copy", "move"],
        source: FilePanel,
        target: FilePanel,
        paths: list[str],
        cross: Cross | None,
        answer: tuple[str, bool] | None,
    ) -> None:
        """Look for taken names in the destination folder first: each gets its question
        (overwrite, skip, rename; `resolve_conflicts`), then the items go (`_send`)."""
        if answer is None or target.place is None:
            return
        destination, overwrite = answer
        send = partial(self._send, operation, source, target, cross, destination)
        if overwrite:  # "overwrite what is already there" was ticked: no question per name
            send(ConflictPlan(overwrite=paths))
            return
        (server, scope), label = target.place, printable(f"{target.location.rpartition(':/')[0]}:/{destination}")

        def ask(listing: Listing) -> None:
            existing = {str(entry.get("name", "")): str(entry.get("type", "")) for entry in listing.entries}
            resolve_conflicts(self.app, operation, paths, existing, label, send)
            self.release_keys(ConflictPlan)

        def go(_exc: BaseException) -> None:
            send(ConflictPlan(plain=paths))
            self.release_keys(ConflictPlan)

        # What is typed while the folder is listed: for the question a taken name asks (`o`).
        self.hold_keys(ConflictPlan)
        # A folder that is not there (one item renamed on its way) or cannot be listed: the
        # operation itself then says what is wrong.
        self.bridge.run(self, self.client.files.list_all, server.id, scope, destination, on_done=ask, on_error=go)

    def _send(
        self,
        operation: Literal["copy", "move"],
        source: FilePanel,
        target: FilePanel,
        cross: Cross | None,
        destination: str,
        plan: ConflictPlan | None,
    ) -> None:
        """Copy or move as `plan` says: the items as they are, those that overwrite (a second
        request, as `overwrite` applies to a whole request), then each renamed one on its own."""
        if plan is None or source.place is None or target.scope is None:
            return
        if not plan.count:
            self.notify("Nothing done: every item was skipped.")
            return
        (server, scope), total = source.place, plan.count
        to = None
        if cross is not None and target.server is not None:
            to = FsDestination(
                server_id=target.server.id if cross == "server" else None,
                scope=target.scope.scope,
                domain=target.scope.domain,
            )
        call = partial(self.client.files.copy if operation == "copy" else self.client.files.move, server.id, scope)
        verb = "Copied" if operation == "copy" else "Moved"
        names = [*plan.plain, *plan.overwrite, *(new for _path, new in plan.renamed)]
        count = f"{total:,} items" if total > 1 else printable(names[0].rpartition("/")[2])
        skipped = f" ({len(plan.skipped):,} skipped)" if plan.skipped else ""

        async def work(progress: BatchProgress | None = None, keep_going: KeepGoing | None = None) -> list[str]:
            moved: list[str] = []

            def counted(done: int, _all: int) -> object:  # one bar over both requests
                return progress(len(moved) + done, total) if progress is not None else None

            for group, overwrite in ((plan.plain, False), (plan.overwrite, True)):
                if group:
                    moved += await call(
                        group, destination, overwrite=overwrite, to=to, progress=counted, keep_going=keep_going
                    )
            for path, name in plan.renamed:
                moved += await call([path], join_path(destination, name), to=to)
            return moved

        def done(result: list[str]) -> None:
            self.notify(f"{verb} {count} to {target.location}{skipped}.")
            source.pane.action_unmark_all()
            source.reload()
            target.reload(select=result[0].rpartition("/")[2] if result else None)

        title = f"{'Copying' if operation == 'copy' else 'Moving'} {count} to {target.location}"
        self._bulk(title, verb, total, work, done, server.name, source, target)

    def _bulk(
        self,
        title: str,
        verb: str,
        count: int,
        work: Callable[..., Any],
        done: Callable[[Any], None],
        server: str,
        *panels: FilePanel,
    ) -> None:
        """Run `work` (a client call that takes `progress` and `keep_going`): in the background
        for one batch of paths; for more, in a `BulkDialog` (bar, counts, Stop), where a failure
        part way says what was done. The `panels` are listed again whatever happened."""
        if count <= PATHS_PER_BATCH:
            self.notify(f"{title}…", timeout=2)
            self.bridge.run(self, work, on_done=done, on_error=lambda exc: self._action_failed(exc, server, *panels))
            return

        def closed(result: Any) -> None:
            if result is not None:
                done(result)
                return
            for panel in panels:
                panel.reload()

        async def run(progress: BatchProgress, keep_going: KeepGoing) -> Any:
            return await work(progress=progress, keep_going=keep_going)

        self.app.push_screen(BulkDialog(title, verb, count, run, server=server), closed)

    def _action_failed(self, exc: BaseException, server: str, *panels: FilePanel) -> None:
        self.show_error(exc, server=server)
        for panel in panels:
            panel.reload()

    # --- create, rename, delete -----------------------------------------------------------

    def action_mkdir(self) -> None:
        panel = self.active
        if panel.place is None or not self._writable(panel):
            return
        (server, scope), where = panel.place, panel.path

        def create(name: str | None) -> None:
            if not name:
                return
            shown = name.partition("/")[0]  # `a/b` makes both; the panel shows `a`
            self.bridge.run(
                self,
                partial(self.client.files.mkdir, parents="/" in name),
                server.id,
                scope,
                join_path(where, name),
                on_done=self._reload_after(panel, shown),
                on_error=lambda exc: self.show_error(exc, server=server.name, path=name),
            )

        hint = f"in {panel.location} · a/b makes both"
        self.app.push_screen(NameDialog("New folder", "", hint=hint, nested=True), create)

    def action_new_file(self) -> None:
        """`n`: a file from a template, then straight into the editor (as mc's shift+F4)."""
        panel = self.active
        if panel.place is None or not self._writable(panel):
            return

        def created(path: str | None) -> None:
            if path:
                panel.reload(select=path.rpartition("/")[2])
                self._open(panel, path, edit=True)

        self.app.push_screen(NewFileDialog(*panel.place, panel.path), created)

    def action_rename(self) -> None:
        panel = self.active
        entry = panel.pane.highlighted
        if entry is None or panel.place is None or not self._writable(panel):
            return
        (server, scope), old = panel.place, str(entry.get("name", ""))

        def rename(new: str | None) -> None:
            if not new or new == old:
                return
            if panel.pane.index_of(new) is not None:
                self.notify(f"{printable(new)} already exists here.", severity="error")
                return
            self.bridge.run(
                self,
                self._rename,
                server.id,
                scope,
                join_path(panel.path, old),
                join_path(panel.path, new),
                on_done=self._reload_after(panel, new),
                on_error=lambda exc: self._rename_failed(exc, old, server.name, panel),
            )

        def ask(current: Entry) -> None:
            # Offered as drawn: a name's control characters as `?` (the new name may not hold any).
            self.app.push_screen(NameDialog("Rename", printable(current.name), hint=f"in {panel.location}"), rename)
            self.release_keys(NameDialog)

        def unreadable(exc: BaseException) -> None:
            self.release_keys(NameDialog)
            self._rename_failed(exc, old, server.name, panel)

        # The entry as the server has it now, not as the panel listed it: gone or renamed
        # meanwhile, that is said (and the panel lists again) before a new name is asked for.
        self.hold_keys(NameDialog)  # what is typed meanwhile: the new name, for the dialog
        self.bridge.run(
            self, self.client.files.stat, server.id, scope, join_path(panel.path, old), on_done=ask, on_error=unreadable
        )

    async def _rename(self, server_id: str, scope: Scope, old: str, new: str) -> list[str]:
        """Rename `old` to `new` as the server has them now, not as the panel listed them: a name
        taken meanwhile is refused (a rename onto a folder would move into it), and a file renamed
        or deleted meanwhile fails its stat (`NotFound`) rather than being looked for."""
        await self.client.files.stat(server_id, scope, old)
        try:
            await self.client.files.stat(server_id, scope, new)
        except api_errors.NotFound:
            return await self.client.files.move(server_id, scope, [old], new)
        raise api_errors.Conflict(f"{describe_items([new])} already exists here.")

    def _rename_failed(self, exc: BaseException, old: str, server: str, panel: FilePanel) -> None:
        gone = gone_meanwhile(exc, old)
        if gone is None:
            self._action_failed(exc, server, panel)
            return
        self.notify(gone, severity="warning", timeout=8)
        panel.reload()

    def action_delete(self) -> None:
        panel = self.active
        paths = panel.selected_paths()
        if not paths or panel.place is None or not self._writable(panel):
            return
        server, scope = panel.place
        after = _row_after_delete(panel.pane, {path.rpartition("/")[2] for path in paths})

        def delete(choice: str | None) -> None:
            if choice is None:
                return
            permanent = choice == "permanent"
            word = "Deleted" if permanent else "Moved to the trash:"
            count = f"{len(paths):,} items" if len(paths) > 1 else printable(paths[0].rpartition("/")[2])

            def done(_result: Any) -> None:
                panel.pane.action_unmark_all()
                self._reload_after(panel, select=after)(None)  # the other panel too, when it shows the folder
                self.notify(f"{word} {count}" + ("" if permanent else " (t opens the trash)."))

            work = partial(self.client.files.delete, server.id, scope, paths, permanent=permanent)
            title = f"Deleting {count}" if permanent else f"Moving {count} to the trash"
            verb = "Deleted" if permanent else "Moved to the trash"
            self._bulk(title, verb, len(paths), work, done, server.name, panel)

        self.app.push_screen(DeleteDialog([p.rpartition("/")[2] for p in paths]), delete)

    # --- dialogs on the selection ---------------------------------------------------------

    def action_properties(self) -> None:
        panel = self.active
        if panel.place is not None and panel.highlighted_path is not None:
            self.app.push_screen(PropertiesDialog(*panel.place, panel.highlighted_path))

    def action_permissions(self) -> None:
        panel = self.active
        selection = panel.pane.selection
        if not selection or panel.place is None or not self._writable(panel):
            return
        has_dirs = any(entry.get("type") == "dir" for entry in selection)
        dialog = PermissionsDialog(*panel.place, panel.selected_paths(), has_dirs)  # reads the mode itself
        self.app.push_screen(dialog, self._reload_after(panel))

    def action_search(self) -> None:
        panel = self.active
        if panel.place is None:
            return

        dialog = SearchDialog(*panel.place, panel.path)

        def jump(path: str | None) -> None:
            if path:
                folder, _, name = path.strip("/").rpartition("/")
                panel.load(folder, select=name)
            hit = dialog.picked
            if path and hit is not None and hit.line is not None and panel.place is not None:
                # A line of a file: the viewer opens there, the search's text marked (n: the next).
                viewer = ViewerScreen(*panel.place, path, line=hit.line, pattern=dialog.searched_for)
                self.app.push_screen(viewer)

        self.app.push_screen(dialog, jump)

    def action_trash(self) -> None:
        panel = self.active
        if panel.place is not None and self._writable(panel):
            self.app.push_screen(TrashDialog(*panel.place), self._reload_after(panel))

    def action_download(self) -> None:
        panel = self.active
        entry, remote = panel.pane.highlighted, panel.highlighted_path
        if entry is None or remote is None or panel.place is None:
            return
        if entry.get("type") != "file":
            self.notify("Only files can be downloaded: compress a folder first (c).", severity="warning")
            return
        server, scope = panel.place
        name = str(entry.get("name", ""))

        def chosen(local: Path | None) -> None:
            if local is not None:
                self.app.push_screen(TransferDialog.download(server, scope, remote, local))

        initial = str(Path(os.getcwd()) / printable(name))  # a file made here: no control characters
        self.app.push_screen(LocalPathDialog("Download to", initial), chosen)

    def action_upload(self) -> None:
        panel = self.active
        if panel.place is None or not self._writable(panel):
            return
        (server, scope), where = panel.place, panel.path

        def chosen(local: Path | None) -> None:
            if local is not None:
                remote = join_path(where, local.name)
                self.app.push_screen(
                    TransferDialog.upload(server, scope, local, remote), self._reload_after(panel, local.name)
                )

        self.app.push_screen(LocalPathDialog("Upload a local file", os.getcwd() + os.sep, mode="open"), chosen)

    def action_compress(self) -> None:
        panel = self.active
        paths = panel.selected_paths()
        if paths and panel.place is not None and self._writable(panel):
            dialog = ArchiveDialog.compress(*panel.place, paths, panel.path)
            self.app.push_screen(dialog, self._reload_after(panel))

    def action_extract(self) -> None:
        panel = self.active
        entry = panel.pane.highlighted
        if panel.place is None or panel.highlighted_path is None or entry is None:
            return
        name = str(entry.get("name", ""))
        if not self._writable(panel):  # a read-only panel first: nothing extracts into it
            return
        # Said before any dialog opens: the server would only refuse it after one had.
        if entry.get("type") == "dir" or not name.lower().endswith(ARCHIVE_SUFFIXES):
            self.notify(f"{printable(name)} is not an archive: {EXTRACTABLE}.", severity="warning")
            return
        dialog = ArchiveDialog.extract(*panel.place, panel.highlighted_path, panel.path)
        self.app.push_screen(dialog, self._reload_after(panel))

    def _writable(self, panel: FilePanel) -> bool:
        """Whether `panel` may be written to; on a site's logs, says they are read-only instead
        (without asking the server, which would refuse)."""
        if panel.read_only:
            self.notify(READ_ONLY, severity="warning")
            return False
        return True

    def _reload_after(self, panel: FilePanel, select: str | None = None) -> Callable[[Any], None]:
        """A dialog's callback: list the panel's folder again whatever the dialog did."""

        def reload(_result: Any) -> None:
            panel.reload(select=select)
            twin = self.right if panel is self.left else self.left  # not `other`: the focus may have moved
            if twin.same_place(panel) and twin.path == panel.path:
                twin.reload()

        return reload


def _row_after_delete(pane: DirectoryPane, deleted: set[str]) -> str | None:
    """Where the cursor goes once `deleted` are gone, as in mc: the first row from the cursor
    down that stays, else the nearest one above it (None: the folder is left empty)."""
    names = [str(entry.get("name", "")) for entry in pane.entries]
    below = names[pane.cursor :]
    above = reversed(names[: pane.cursor])
    return next((name for name in (*below, *above) if name not in deleted), None)


def _place_of(panel: FilePanel) -> PanelPlace | None:
    """Where `panel` is, once its listing shows the folder it is in."""
    if panel.server is None or panel.scope is None or not panel.settled:
        return None
    entry = panel.pane.highlighted
    highlighted = str(entry.get("name", "")) if entry is not None else None
    return PanelPlace(panel.server, panel.scope, panel.path, highlighted, panel.pane.ordering, panel.pane.filter_text)


def _panel_of(widget: Widget) -> FilePanel | None:
    node: Any = widget
    while node is not None and not isinstance(node, FilePanel):
        node = node.parent
    return node
