"""The files of one server: a scope picker, a path bar, and the virtualised directory pane."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.timer import Timer
from textual.widgets import Footer, Select, Static

from api_client import FileContent, Listing, Scope, Server
from api_client import errors as api_errors

from ..bridge import TaskHandle
from ..errors import describe_error, format_size
from ..text import join_path, parent_path, printable
from ..widgets.directory_pane import DirectoryPane, EntryDict
from ..widgets.header import SafeHeader
from .base import FleetScreen
from .editor import EditorScreen
from .viewer import ViewerScreen

BUSY_INDICATOR_DELAY_S = 0.2


def scope_label(scope: Scope) -> str:
    """`example.com` for a site scope, `/home (server root)` for the root scope."""
    if scope.scope == "root":
        return "/home (server root)"
    return scope.domain or scope.slug or "site"


def scope_key(scope: Scope) -> str:
    return f"{scope.scope}:{scope.domain or ''}"


class FilesScreen(FleetScreen):
    """Browse a scope of a server: Enter opens, Backspace goes up, `s` picks another scope."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Servers"),
        Binding("s", "pick_scope", "Scope"),
        Binding("r", "reload", "Reload"),
        Binding("f4", "edit", "Edit"),
        Binding("tilde", "go_root", "Scope root", key_display="~", show=False),
    ]

    AUTO_FOCUS = "#directory"

    def __init__(self, server: Server) -> None:
        super().__init__()
        self.server = server
        self.title = server.name
        self.scopes: dict[str, Scope] = {}
        self.scope: Scope | None = None
        self.path = ""
        self._listing_task: TaskHandle | None = None
        self._opening_task: TaskHandle | None = None
        self._busy_timer: Timer | None = None

    def compose(self) -> ComposeResult:
        yield SafeHeader()
        with Horizontal(id="files-bar"):
            yield Select[str]([], prompt="Scope…", id="scope-picker", compact=True, allow_blank=True)
            yield Static("", id="path-bar", markup=False)
        yield DirectoryPane(id="directory")
        yield Static("", id="files-status", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        if self.dismissed:
            return
        self.watch(self.query_one("#scope-picker", Select), "expanded", self._scope_menu_toggled, init=False)
        self._load_scopes()

    def _load_scopes(self) -> None:
        self._set_busy(True)
        self._set_status(f"Loading the scopes of {self.server.name}…")
        self.bridge.run(
            self, self.client.files.scopes, self.server.id, on_done=self._show_scopes, on_error=self._failed
        )

    # --- scopes ---------------------------------------------------------------------------

    def _show_scopes(self, scopes: list[Scope]) -> None:
        self.scopes = {scope_key(scope): scope for scope in scopes}
        picker: Select[str] = self.query_one("#scope-picker", Select)
        picker.set_options((scope_label(scope), key) for key, scope in self.scopes.items())
        if not scopes:
            pane = self.query_one(DirectoryPane)
            self._set_busy(False)
            pane.show_message("You may not browse any scope of this server.")
            self._set_status("")
            return
        # Setting the value posts Select.Changed, which loads the scope's root.
        picker.value = next(iter(self.scopes))

    def on_select_changed(self, event: Select.Changed) -> None:
        event.stop()
        scope = self.scopes.get(str(event.value)) if event.value is not Select.BLANK else None
        if scope is not None and scope != self.scope:
            self.scope = scope
            self.load("")

    def _scope_menu_toggled(self, expanded: bool) -> None:
        # Picked or dismissed: either way the keys belong to the listing again (once the menu
        # has handed the focus back to the picker).
        if not expanded:
            self.call_after_refresh(self.query_one(DirectoryPane).focus)

    def action_pick_scope(self) -> None:
        picker: Select[str] = self.query_one("#scope-picker", Select)
        picker.focus()
        picker.expanded = True

    # --- listing --------------------------------------------------------------------------

    def load(self, path: str, *, select: str | None = None) -> None:
        """List `path` of the current scope; put the cursor on `select` once shown."""
        if self.scope is None:
            return
        if self._listing_task is not None:
            self._listing_task.cancel()  # a newer click wins over a slow listing
        self._set_busy(True)
        self._set_status(f"Listing /{path}…")
        self._listing_task = self.bridge.run(
            self,
            self.client.files.list_all,
            self.server.id,
            self.scope,
            path,
            on_done=lambda listing: self._show_listing(path, listing, select),
            on_error=lambda exc: self._listing_failed(exc, path),
        )

    def _show_listing(self, path: str, listing: Listing, select: str | None) -> None:
        self.path = path
        pane = self.query_one(DirectoryPane)
        self._set_busy(False)
        pane.set_entries(listing.entries, select=select)
        self._update_path_bar()

    def _listing_failed(self, exc: BaseException, path: str) -> None:
        self._set_busy(False)
        self._update_status_for(self.query_one(DirectoryPane).highlighted)
        self.show_error(exc, server=self.server.name, path=f"/{path}")

    def _failed(self, exc: BaseException) -> None:
        pane = self.query_one(DirectoryPane)
        self._set_busy(False)
        pane.show_message(describe_error(exc, server=self.server.name))
        self._set_status("r: try again · Escape: back to the servers")
        self.show_error(exc, server=self.server.name)

    def action_reload(self) -> None:
        if self.scope is None:
            self._load_scopes()
            return
        highlighted = self.query_one(DirectoryPane).highlighted
        self.load(self.path, select=highlighted.get("name") if highlighted else None)

    def action_go_root(self) -> None:
        self.load("")

    def action_back(self) -> None:
        self.dismiss()

    # --- pane events ----------------------------------------------------------------------

    def on_directory_pane_opened(self, event: DirectoryPane.Opened) -> None:
        entry = event.entry
        target = join_path(self.path, str(entry.get("name", "")))
        if entry.get("type") == "dir":
            self.load(target)
        elif entry.get("type") == "symlink":
            self._open_symlink(target)
        elif entry.get("type") == "file":
            self.open_file(target)
        else:
            self.notify(f"{printable(target)} is not a regular file.", severity="warning")

    def on_directory_pane_up_requested(self, _event: DirectoryPane.UpRequested) -> None:
        if self.path:
            self.load(parent_path(self.path), select=self.path.rpartition("/")[2])

    def on_directory_pane_cursor_moved(self, event: DirectoryPane.CursorMoved) -> None:
        self._update_status_for(event.entry)

    def _open_symlink(self, target: str) -> None:
        """A link may point to a directory or a file: try to list it, view it if that fails."""
        assert self.scope is not None
        self.bridge.run(
            self,
            self.client.files.list_all,
            self.server.id,
            self.scope,
            target,
            on_done=lambda listing: self._show_listing(target, listing, None),
            on_error=lambda _exc: self.open_file(target),
        )

    # --- viewer ---------------------------------------------------------------------------

    def open_file(self, path: str) -> None:
        """Read `path` and show it in the viewer; binary or too large files are only reported."""
        if self.scope is None:
            return
        if self._opening_task is not None:
            self._opening_task.cancel()
        self._set_status(f"Opening /{path}…")
        self._opening_task = self.bridge.run(
            self,
            self.client.files.read,
            self.server.id,
            self.scope,
            path,
            on_done=self._show_file,
            on_error=lambda exc: self._open_failed(exc, path),
        )

    def _show_file(self, content: FileContent) -> None:
        self._update_status_for(self.query_one(DirectoryPane).highlighted)
        assert self.scope is not None
        self.app.push_screen(ViewerScreen(self.server, self.scope, content))

    def _open_failed(self, exc: BaseException, path: str) -> None:
        self._update_status_for(self.query_one(DirectoryPane).highlighted)
        self.show_error(exc, server=self.server.name, path=path.rpartition("/")[2] or path)

    # --- editor ---------------------------------------------------------------------------

    def action_edit(self) -> None:
        """F4: open the highlighted file in the editor."""
        entry = self.query_one(DirectoryPane).highlighted
        if entry is None or self.scope is None:
            return
        target = join_path(self.path, str(entry.get("name", "")))
        if entry.get("type") not in ("file", "symlink"):
            self.notify(f"{printable(target)} is not a file: only files can be edited.", severity="warning")
            return
        if self._opening_task is not None:
            self._opening_task.cancel()
        self._set_status(f"Opening /{target} for editing…")
        scope = self.scope
        self._opening_task = self.bridge.run(
            self,
            self.client.files.read,
            self.server.id,
            scope,
            target,
            on_done=lambda content: self._edit_file(scope, content),
            on_error=lambda exc: self._edit_failed(exc, target),
        )

    def _edit_file(self, scope: Scope, content: FileContent) -> None:
        self._update_status_for(self.query_one(DirectoryPane).highlighted)
        self.app.push_screen(EditorScreen(self.server, scope, content))

    def _edit_failed(self, exc: BaseException, path: str) -> None:
        self._update_status_for(self.query_one(DirectoryPane).highlighted)
        name = printable(path.rpartition("/")[2] or path)
        if isinstance(exc, api_errors.BinaryFile):
            self.notify(f"{name} is binary: download it instead.", severity="error", timeout=8)
        elif isinstance(exc, api_errors.TooLarge):
            limit = exc.details.get("limit")
            limit_text = f" (the limit is {format_size(limit)})" if isinstance(limit, int) else ""
            self.notify(f"{name} is too large to edit{limit_text}: download it instead.", severity="error", timeout=8)
        else:
            self.show_error(exc, server=self.server.name, path=name)

    # --- bars -----------------------------------------------------------------------------

    def _update_path_bar(self) -> None:
        where = f"/{self.path}" if self.path else "/"
        self.query_one("#path-bar", Static).update(printable(f"{self.server.name}:{where}"))

    def _update_status_for(self, entry: EntryDict | None) -> None:
        pane = self.query_one(DirectoryPane)
        count = len(pane.entries)
        summary = f"{count:,} entries" if count != 1 else "1 entry"
        if entry is not None and count:
            summary = f"{pane.cursor + 1:,}/{count:,} · {_describe(entry)}"
        self._set_status(summary)

    def _set_busy(self, busy: bool) -> None:
        """Cover the listing with a loading indicator (after a short delay), or uncover it."""
        if self._busy_timer is not None:
            self._busy_timer.stop()
            self._busy_timer = None
        if busy:
            # Most listings arrive within a frame or two: a spinner for those would only flicker.
            self._busy_timer = self.set_timer(BUSY_INDICATOR_DELAY_S, self._show_busy)
            return
        pane = self.query_one(DirectoryPane)
        if pane.loading:
            pane.loading = False
            # A loading widget counts as disabled, so its bindings (Open, Parent) left the
            # footer: bring them back.
            self.refresh_bindings()

    def _show_busy(self) -> None:
        self._busy_timer = None
        self.query_one(DirectoryPane).loading = True

    def _set_status(self, text: str) -> None:
        self.query_one("#files-status", Static).update(text)


def _describe(entry: EntryDict) -> str:
    name = printable(str(entry.get("name", "")))
    kind = entry.get("type")
    if kind == "symlink" and entry.get("link_target"):
        return f"{name} → {printable(str(entry['link_target']))}"
    if kind == "dir":
        return f"{name}/"
    return f"{name} · {entry.get('size', 0):,} bytes · {entry.get('owner', '')}:{entry.get('group', '')}"
