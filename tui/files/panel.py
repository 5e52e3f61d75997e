"""One pane of the two-pane browser: a server, a scope of it, a folder, and its listing.

Each panel is independent (its own server and scope), so the commander screen can copy from one
panel to the other across sites and servers. The panel lists, opens folders, goes up, filters and
keeps the marks; everything that acts on files is the screen's (`tui.files.commander`).

A panel follows its server's agent (presence, from `tui.monitor`): while the agent is offline its
title says so and the panel says why it lists nothing rather than asking and failing; while the
control plane is lost it keeps what it shows and says it cannot refresh it. Both list again when
what they wait for is back (also a listing that failed because the agent was offline).

A panel focused again lists its folder again when the folder changed on the server meanwhile:
one `fs/stat` of the folder, whose mtime moves when an entry is made, removed or renamed in it
(read before each listing, so a change made during the listing shows as a change next time).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from textual import events, on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.timer import Timer
from textual.widgets import Static

from api_client import Entry, Listing, Scope, Server
from api_client import errors as api_errors
from contract.models import TRASH_FOLDER, PresenceEvent
from tui.bridge import BridgedMixin, TaskHandle
from tui.errors import describe_error, format_size, unwrap
from tui.files.directory_pane import DirectoryPane, EntryDict
from tui.monitor import LinkState
from tui.screen import FleetAccess
from tui.text import fit_tail, join_path, load_tcss, parent_path, printable
from tui.widgets.filter_line import FilterLine

BUSY_INDICATOR_DELAY_S = 0.2
# What the title starts with while the panel cannot be trusted to be current.
AGENT_OFFLINE_MARK = "○ offline · "
CANNOT_REFRESH = "Connection lost: cannot refresh"
CONNECTION_LOST_MARK = "○ lost · "


READ_ONLY = "The logs are read-only."


def scope_label(scope: Scope) -> str:
    """`example.com` for a site scope, `example.com logs` for its logs, `/home (server root)` for
    the root scope."""
    if scope.scope == "root":
        return "/home (server root)"
    site = scope.domain or scope.slug or "site"
    return f"{site} logs" if scope.scope == "logs" else site


def scope_key(scope: Scope) -> str:
    return f"{scope.scope}:{scope.domain or ''}"


class FilePanel(FleetAccess, BridgedMixin, Vertical):
    """A title (server, scope, folder), the virtualised listing, a filter line and a status line."""

    DEFAULT_CSS = load_tcss(__file__)

    class FileOpened(Message):
        """Enter on a file (or on a link that is not a folder): the screen views it."""

        def __init__(self, panel: FilePanel, path: str) -> None:
            super().__init__()
            self.panel = panel
            self.path = path

    class Moved(Message):
        """The cursor, the folder, the order or the filter changed (the screen remembers where
        the panel is). The pane's own messages stop here when the panel posted them."""

        def __init__(self, panel: FilePanel) -> None:
            super().__init__()
            self.panel = panel

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, classes="file-panel")
        self.server: Server | None = None
        self.scope: Scope | None = None
        self.path = ""
        self._listing_task: TaskHandle | None = None
        self._busy_timer: Timer | None = None
        self._covered = False
        # True while the listing shown is the folder in `path` (not while another one loads).
        self.settled = False
        self._listed_mtime: datetime | None = None  # the folder's, read just before its listing
        self._waiting_for_agent = False  # the last listing failed because the agent was offline

    def compose(self) -> ComposeResult:
        yield Static("", classes="file-panel--title", markup=False)
        yield DirectoryPane(classes="file-panel--listing", listed_by_owner=True)
        yield FilterLine(
            placeholder="filter: text or glob (*.php) · Enter keep · Esc clear",
            kept_shown=False,
            classes="file-panel--filter",
        )
        yield Static("", classes="file-panel--status", markup=False)

    def on_mount(self) -> None:
        self.monitor.changed.subscribe(self, self._connection_changed)
        self.monitor.presence.subscribe(self, self._presence_changed)

    # --- parts ----------------------------------------------------------------------------

    @property
    def pane(self) -> DirectoryPane:
        return self.query_one(DirectoryPane)

    @property
    def location(self) -> str:
        """`web1:example.com:/public_html`: where this panel is, for titles and dialogs."""
        server = self.server.name if self.server else "?"
        scope = scope_label(self.scope) if self.scope else "?"
        return printable(f"{server}:{scope}:/{self.path}")

    @property
    def place(self) -> tuple[Server, Scope] | None:
        """The panel's server and scope, once it shows one."""
        return (self.server, self.scope) if self.server is not None and self.scope is not None else None

    @property
    def highlighted_path(self) -> str | None:
        """The scope-relative path of the entry under the cursor."""
        entry = self.pane.highlighted
        return join_path(self.path, str(entry.get("name", ""))) if entry is not None else None

    def selected_paths(self) -> list[str]:
        """The scope-relative paths an action applies to: the marked entries, else the highlighted."""
        return [join_path(self.path, str(entry.get("name", ""))) for entry in self.pane.selection]

    @property
    def read_only(self) -> bool:
        """Whether the panel shows a scope nothing may be written to (a site's logs)."""
        return self.scope is not None and self.scope.read_only

    def same_place(self, other: FilePanel) -> bool:
        return (
            self.server is not None
            and other.server is not None
            and self.server.id == other.server.id
            and self.scope == other.scope
        )

    # --- listing --------------------------------------------------------------------------

    def open_location(self, server: Server, scope: Scope, path: str = "", *, select: str | None = None) -> None:
        """Show `path` of `scope` on `server` (another server or scope than before, maybe)."""
        self.server, self.scope = server, scope
        self.load(path, select=select)

    def load(self, path: str, *, select: str | None = None, keep_marks: bool = False) -> None:
        """List `path`; put the cursor on `select` once shown."""
        if self.server is None or self.scope is None:
            return
        if not self._can_list(path):
            return
        if self._listing_task is not None:
            self._listing_task.cancel()  # a newer click wins over a slow listing
        self.settled = False
        self._set_busy(True)
        self.pane.hold_keys()
        self._set_status(f"Listing /{path}…")
        server, scope = self.server, self.scope
        self._listing_task = self.bridge.run(
            self,
            self._list,
            server.id,
            scope,
            path,
            on_done=lambda listed: self._show_listing(path, listed[1], select, keep_marks, listed[0]),
            on_error=lambda exc: self._listing_failed(exc, path),
        )

    async def _list(self, server_id: str, scope: Scope, path: str) -> tuple[datetime | None, Listing]:
        """The folder's mtime (None when it cannot be read: the listing then says why), then its
        listing."""
        try:
            mtime: datetime | None = (await self.client.files.stat(server_id, scope, path)).mtime
        except api_errors.ApiError:
            mtime = None
        return mtime, await self.client.files.list_all(server_id, scope, path)

    def refresh_if_changed(self) -> None:
        """Focused again: list the folder again if it changed on the server since it was listed."""
        listed, place, path = self._listed_mtime, self.place, self.path
        if listed is None or place is None or not self.settled or not self.agent_online:
            return
        server, scope = place

        def compare(folder: Entry) -> None:
            if self.settled and self.path == path and self._listed_mtime == listed and folder.mtime != listed:
                self.reload()

        # Quietly: a folder gone or an agent just dropped is said by the next listing, not here.
        self.bridge.run(self, self.client.files.stat, server.id, scope, path, on_done=compare, on_error=lambda _: None)

    def reload(self, *, select: str | None = None) -> None:
        """List the same folder again, keeping the cursor (or moving it to `select`) and the marks."""
        highlighted = self.pane.highlighted
        name = select or (str(highlighted.get("name")) if highlighted else None)
        self.load(self.path, select=name, keep_marks=True)

    def _show_listing(
        self, path: str, listing: Listing, select: str | None, keep_marks: bool, mtime: datetime | None = None
    ) -> None:
        self.path = path
        self.settled = True
        self._listed_mtime = mtime
        self._waiting_for_agent = False
        self._set_busy(False)
        self.pane.set_entries(shown_entries(path, listing), select=select, keep_marks=keep_marks)
        self._update_title()

    # --- the agent and the control plane ------------------------------------------------------

    @property
    def agent_online(self) -> bool | None:
        """Whether the agent of the panel's server is online; None while the control plane is lost."""
        if self.server is None or not self.monitor.state.connected:
            return None
        heard = self.monitor.online(self.server.id)
        return self.server.agent.online if heard is None else heard

    def _can_list(self, path: str) -> bool:
        """Whether listing now can work; if not, the panel says why (no request made to fail)."""
        self._update_title()
        if not self.monitor.state.connected:
            self._set_status(CANNOT_REFRESH)
            return False
        if self.server is not None and self.server.kind == "full" and self.agent_online is False:
            self.path = path
            self._set_busy(False)
            message = f"The agent of {printable(self.server.name)} is offline: this panel lists again once it is back."
            self.pane.show_message(message)
            self._set_status("Agent offline.")
            return False
        return True

    def _connection_changed(self, state: LinkState) -> None:
        was_lost = self.has_class("-connection-lost")
        self.set_class(not state.connected, "-connection-lost")
        if self.place is None:
            return
        if not state.connected and not was_lost:
            if self._listing_task is not None:
                self._listing_task.cancel()
            self._set_busy(False)
            self._can_list(self.path)  # says so
        elif state.connected and was_lost:
            self.reload()

    def _presence_changed(self, event: PresenceEvent) -> None:
        if self.server is None or event.server_id != self.server.id:
            return
        if event.online and (self.has_class("-agent-offline") or self._waiting_for_agent):
            self.reload()  # back: list what the panel shows
        elif not event.online:
            self._can_list(self.path)
        self._update_title()

    def _listing_failed(self, exc: BaseException, path: str) -> None:
        self.settled = self.path == path
        self._waiting_for_agent = isinstance(unwrap(exc), api_errors.AgentOffline)
        self._set_busy(False)
        self.pane.release_keys(replay=False)  # they were for the folder that could not be listed
        self.update_status()
        server = self.server.name if self.server else None
        if path and not self.pane.all_entries and isinstance(unwrap(exc), api_errors.NotFound):
            # A folder remembered from earlier in the session (see `tui.files.places`) that is
            # gone by now: the scope's root rather than an empty panel.
            self.app.notify(printable(f"/{path} is gone: showing the scope's root."), severity="warning")
            self.keep_filter("")  # the filter was that folder's
            self.load("")
            return
        if not self.pane.all_entries:
            self.pane.show_message(describe_error(exc, server=server))
        self.app.notify(describe_error(exc, server=server, path=f"/{path}"), severity="error", timeout=8)

    # --- moving around --------------------------------------------------------------------

    @on(DirectoryPane.Opened)
    def _opened(self, event: DirectoryPane.Opened) -> None:
        event.stop()
        entry = event.entry
        target = join_path(self.path, str(entry.get("name", "")))
        if entry.get("type") == "dir":
            self.load(target)
        elif entry.get("type") == "symlink":
            self._open_symlink(target)
        elif entry.get("type") == "file":
            self.post_message(self.FileOpened(self, target))
        else:
            self.app.notify(f"{printable(target)} is not a regular file.", severity="warning")

    def _open_symlink(self, target: str) -> None:
        """A link may point to a folder or a file: try to list it, open it as a file if that fails."""
        if self.server is None or self.scope is None:
            return
        self.bridge.run(
            self,
            self.client.files.list_all,
            self.server.id,
            self.scope,
            target,
            on_done=lambda listing: self._show_listing(target, listing, None, False),
            on_error=lambda _exc: self.post_message(self.FileOpened(self, target)),
        )

    @on(DirectoryPane.UpRequested)
    def _up(self, event: DirectoryPane.UpRequested) -> None:
        event.stop()
        if self.path:
            self.load(parent_path(self.path), select=self.path.rpartition("/")[2])
        else:
            self.pane.release_keys()  # already at the top: nothing to wait for

    def go_root(self) -> None:
        self.load("")

    # --- filter ---------------------------------------------------------------------------

    def keep_filter(self, text: str) -> None:
        """Filter by `text` as if typed and kept with Enter (a panel coming back as it was)."""
        self.pane.set_filter(text)
        self.query_one(FilterLine).value = text  # what `/` shows again
        self.set_class(bool(text), "-filtered")

    def start_filter(self) -> None:
        """`/`: show the filter line with the current filter, focused."""
        self.query_one(FilterLine).open()

    @on(FilterLine.PatternChanged)
    def _filter_changed(self, event: FilterLine.PatternChanged) -> None:
        event.stop()
        self.pane.set_filter(event.pattern)

    def clear_filter(self) -> None:
        """Show every entry again (Esc while a filter is kept)."""
        self.pane.set_filter("")  # before the line's Closed arrives, which redraws the status
        self.query_one(FilterLine).clear_pattern()

    @on(FilterLine.Closed)
    def _end_filter(self, event: FilterLine.Closed) -> None:
        event.stop()
        self.set_class(bool(self.pane.filter_text), "-filtered")
        self.pane.focus()
        self.update_status()

    # --- bars -----------------------------------------------------------------------------

    @on(DirectoryPane.CursorMoved)
    @on(DirectoryPane.MarksChanged)
    def _pane_changed(self, event: Message) -> None:
        self.update_status()
        self.post_message(self.Moved(self))

    def _update_title(self) -> None:
        offline = self.agent_online is False and self.server is not None and self.server.kind == "full"
        self.set_class(offline, "-agent-offline")
        lost = not self.monitor.state.connected
        mark = CONNECTION_LOST_MARK if lost else AGENT_OFFLINE_MARK if offline else ""
        # The panel's width, less its border: the title's, also while the title is being laid out.
        width = max(self.content_size.width - len(mark), 0)  # the marks are one cell per character
        self.query_one(".file-panel--title", Static).update(mark + fit_tail(self.location, width))

    def on_resize(self, _event: events.Resize) -> None:
        if self.place is not None:
            self._update_title()

    def update_status(self) -> None:
        pane = self.pane
        shown, total = len(pane.entries), len(pane.all_entries)
        parts = [CANNOT_REFRESH] if self.has_class("-connection-lost") else []
        if self.read_only:
            parts.append("read-only")
        marked = pane.marked
        if marked:
            files = [entry for entry in marked if entry.get("type") != "dir"]
            size = f" ({format_size(sum(int(entry.get('size', 0)) for entry in files))})" if files else ""
            parts.append(f"{len(marked):,} marked{size}")
        if pane.filter_text:
            parts.append(f"filter {printable(pane.filter_text)!r}: {shown:,} of {total:,}")
        entry = pane.highlighted
        if entry is not None and shown:
            parts.append(f"{pane.cursor + 1:,}/{shown:,} · {describe_entry(entry)}")
        elif not pane.filter_text:
            parts.append(f"{total:,} entries" if total != 1 else "1 entry")
        self._set_status(" · ".join(parts))

    def show_hint(self, text: str) -> None:
        """A word on the status line until the next key (see `update_status`)."""
        self._set_status(text)

    def _set_status(self, text: str) -> None:
        self.query_one(".file-panel--status", Static).update(text)

    def _set_busy(self, busy: bool) -> None:
        """Cover the listing with a loading indicator (after a short delay), or uncover it."""
        if self._busy_timer is not None:
            self._busy_timer.stop()
            self._busy_timer = None
        if busy:
            # Most listings arrive within a frame or two: a spinner for those would only flicker.
            self._busy_timer = self.set_timer(BUSY_INDICATOR_DELAY_S, self._show_busy)
            return
        if self._covered:
            self._covered = False
            self.pane.set_loading(False)

    def _show_busy(self) -> None:
        # `set_loading`, not `loading = True`: that would also disable the pane, which then
        # loses the focus and the keys typed meanwhile (the pane holds them for the listing).
        self._busy_timer = None
        self._covered = True
        self.pane.set_loading(True)


def shown_entries(path: str, listing: Listing) -> Sequence[EntryDict]:
    """The entries a panel lists: all but the scope's trash, which the trash dialog (t) opens.
    The folder is still there for `ls` on the server; only the panel leaves it out."""
    if path.strip("/"):
        return listing.entries
    return [e for e in listing.entries if not (e.get("name") == TRASH_FOLDER and e.get("type") == "dir")]


def describe_entry(entry: EntryDict) -> str:
    name = printable(str(entry.get("name", "")))
    kind = entry.get("type")
    if kind == "symlink" and entry.get("link_target"):
        return f"{name} → {printable(str(entry['link_target']))}"
    if kind == "dir":
        return f"{name}/"
    return f"{name} · {format_size(int(entry.get('size', 0)))} · {entry.get('owner', '')}:{entry.get('group', '')}"
