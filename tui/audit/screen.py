"""The org's audit log, for owners and admins: newest first, narrowed, paged as you scroll, live.

* `f`: the filters in a form (server, action, actor, outcome);
* `s` `a` `u` `o`: keep only the entries of the highlighted entry's server, action, actor or
  outcome (the same key again drops that filter; `x` drops them all). The control plane filters
  (`GET /v1/audit` with `server_id`, `action`, `actor`, `outcome`), so every page is a full page
  of matches and `before` pages on correctly;
* moving near the last row asks for the next older page (`before`: the oldest id shown);
* live: every `POLL_S` the newest page is asked for; entries newer than the newest shown go on
  top (compared by id, so none appears twice);
* Enter: the entry in full (its details and error code); `/`: search by text, on the control
  plane (`q`: the action, target, actor's email and error code), so entries not loaded yet are
  found too; a glob (`*`, `?`, `[`) narrows the rows loaded;
* at 80 columns a long action wraps in its cell (`load_balancers.` over `backend_add`).

A member gets 403 from the API: the screen says the log is for owners and admins.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.timer import Timer
from textual.widgets import DataTable, Static

from api_client import Server
from api_client import errors as api_errors
from contract.models import AuditEntry
from tui.audit.entry import AuditEntryScreen, actor_name, outcome_text
from tui.audit.filters import AuditFilterDialog, AuditFilters
from tui.bridge import TaskHandle
from tui.jobs.run import local_time
from tui.screen import FleetScreen
from tui.text import load_tcss, printable
from tui.widgets.filter_line import FilteredList, FilterLine, filter_rows
from tui.widgets.footer import FleetFooter
from tui.widgets.header import SafeHeader

PAGE = 100
POLL_S = 3.0
SERVERS = "servers"
"""What holds the keys while the org's servers are read (the filters' server dropdown lists them)."""
# Ask for the next older page when the cursor moves down this close to the last row.
PAGE_AHEAD_ROWS = 5

# (key, label, width at 80 columns, width from WIDE columns on); the target takes what is left.
COLUMNS = [
    ("at", "At", 11, 11),
    ("actor", "Actor", 14, 28),
    ("server", "Server", 8, 16),
    ("action", "Action", 14, 20),
    ("outcome", "Outcome", 9, 16),
]
WIDE = 120
TARGET_MIN_WIDTH = 8


class AuditTable(DataTable[Text]):
    """The entries; Enter (named in the footer) opens the highlighted one. Moving down near the
    last row says so (`NearTheEnd`): the screen asks for older entries. Only the user's moves do,
    not a redraw, so a few rows left by the `/` filter never page through the whole log alone."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("enter", "select_cursor", "Details")]

    class NearTheEnd(Message):
        pass

    def action_cursor_down(self) -> None:
        super().action_cursor_down()
        self._moved_down()

    def action_page_down(self) -> None:
        super().action_page_down()
        self._moved_down()

    def action_scroll_bottom(self) -> None:
        super().action_scroll_bottom()
        self._moved_down()

    def _moved_down(self) -> None:
        if self.cursor_row >= self.row_count - PAGE_AHEAD_ROWS:
            self.post_message(self.NearTheEnd())


class AuditScreen(FilteredList, FleetScreen):
    """The audit log of the org, live."""

    HELP_TITLE = "Audit log"

    DEFAULT_CSS = load_tcss(__file__)

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Servers", show=False),
        Binding("s", "filter_by('server_id')", "Same server"),
        Binding("a", "filter_by('action')", "Same action"),
        Binding("u", "filter_by('actor')", "Same actor", show=False),
        Binding("o", "filter_by('outcome')", "Same outcome", show=False),
        Binding("f", "edit_filters", "Filters"),
        Binding("x", "clear_filters", "Any server, action, actor, outcome", show=False),
        Binding("slash", "filter", "Filter the list by text", key_display="/", show=False),
        Binding("r", "reload", "Reload", show=False),
    ]

    AUTO_FOCUS = "#audit-table"

    def __init__(self) -> None:
        super().__init__()
        self.title = "Audit log"
        self.entries: dict[str, AuditEntry] = {}  # newest first
        self.filters = AuditFilters()
        self.servers: dict[str, Server] = {}
        self.refused = False
        self._complete = False  # the oldest entry is shown: no older page to ask for
        self._page_task: TaskHandle | None = None
        self._poll_task: TaskHandle | None = None
        self._poll_timer: Timer | None = None
        self._generation = 0  # grows with each new filter: answers for an older one are dropped
        self._search: str | None = None  # the `/` text the control plane searches for (`q`)

    def compose(self) -> ComposeResult:
        yield SafeHeader()
        yield Static("", id="audit-bar", markup=False)
        yield AuditTable(id="audit-table", cursor_type="row", zebra_stripes=True)
        yield FilterLine(id="audit-filter")
        yield Static("Loading the audit log…", id="audit-status", markup=False)
        yield FleetFooter()

    def on_mount(self) -> None:
        if self.dismissed:
            return
        self.hold_keys(SERVERS)  # `f` typed meanwhile: its server dropdown lists them, once they are in
        self.bridge.run(self, self.client.servers.list, on_done=self._show_servers, on_error=self._no_servers)
        self._poll_timer = self.set_interval(POLL_S, self._poll)
        self.action_reload()

    # --- data ---------------------------------------------------------------------------------

    def action_reload(self) -> None:
        """Start over from the newest entry, with the current filters."""
        self._generation += 1
        for task in (self._page_task, self._poll_task):
            if task is not None:
                task.cancel()
        self._poll_task = None
        self.entries = {}
        self._complete = False
        self._page_task = self._ask(before=None, on_done=partial(self._page_came, self._generation))
        self._update_bar()

    def _ask(self, *, before: str | None, on_done: Callable[[list[AuditEntry]], object]) -> TaskHandle:
        f = self.filters
        call = partial(
            self.client.audit.list,
            server_id=f.server_id,
            action=f.action,
            actor=f.actor,
            outcome=f.outcome,
            text=self._search,
            limit=PAGE,
            before=before,
        )
        return self.bridge.run(self, call, on_done=on_done, on_error=self._failed)

    def _page_came(self, generation: int, page: list[AuditEntry]) -> None:
        """An older page (or the first one): below what is shown."""
        self._page_task = None
        if generation != self._generation:
            return
        self._complete = len(page) < PAGE
        first = not self.entries
        for entry in page:
            self.entries.setdefault(entry.id, entry)
        self._draw(keep_cursor=not first)

    def _poll(self) -> None:
        if self.refused or not self.is_current or self._poll_task is not None or self._page_task is not None:
            return
        self._poll_task = self._ask(before=None, on_done=partial(self._newest_came, self._generation))

    def _newest_came(self, generation: int, page: list[AuditEntry]) -> None:
        """The newest page: what is newer than the newest shown goes on top."""
        self._poll_task = None
        if generation != self._generation:
            return
        newest = max((int(key) for key in self.entries), default=0)
        fresh = [entry for entry in page if int(entry.id) > newest]
        if not fresh:
            return
        if len(fresh) == len(page) == PAGE and self.entries:
            # More arrived than a page holds: what lies between would be missing. Start over.
            self.action_reload()
            return
        self.entries = {**{entry.id: entry for entry in fresh}, **self.entries}
        self._draw(keep_cursor=True)

    def _failed(self, exc: BaseException) -> None:
        self._page_task = self._poll_task = None
        if isinstance(exc, api_errors.Forbidden):
            self.refused = True
            if self._poll_timer is not None:
                self._poll_timer.stop()
            me = self.fleet.me
            role = f" (your role in {me.org.name}: {me.role})" if me else ""
            self._set_status(f"The audit log is for the org's owners and admins{role}: ask one of them.")
            self.query_one("#audit-bar", Static).update("No access to the audit log")
            return
        self._set_status("Could not load the audit log · r: try again")
        self.show_error(exc)

    def _show_servers(self, servers: list[Server]) -> None:
        self.servers = {server.id: server for server in servers}
        if self.entries:
            self._draw(keep_cursor=True)
        self._update_bar()
        self.release_keys(SERVERS)

    def _no_servers(self, exc: BaseException) -> None:
        self.show_error(exc)
        self.release_keys(SERVERS)

    def _server_name(self, server_id: str | None) -> str:
        if server_id is None:
            return "—"
        server = self.servers.get(server_id)
        return server.name if server is not None else server_id[:8]

    # --- drawing ------------------------------------------------------------------------------

    @property
    def highlighted_entry(self) -> AuditEntry | None:
        table = self.query_one(AuditTable)
        if not table.row_count:
            return None
        return self.entries.get(str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value))

    def _draw(self, *, keep_cursor: bool) -> None:
        table = self.query_one(AuditTable)
        highlighted = self.highlighted_entry if keep_cursor else None
        table.clear(columns=True)
        used = 0
        for key, label, narrow, wide in COLUMNS:
            width = wide if self.size.width >= WIDE else narrow
            table.add_column(label, key=key, width=width)
            used += width + 2  # DataTable pads each cell by one on both sides
        # What is left, less the target's own padding and the vertical scrollbar.
        table.add_column("Target", key="target", width=max(TARGET_MIN_WIDTH, self.size.width - used - 3))
        rows = {entry.id: self._cells(entry) for entry in self.entries.values()}
        # Narrow: a row as high as its longest action needs (None: fitted to its cells).
        height = 1 if self.size.width >= WIDE else None
        pattern = "" if self._search else self.filter_pattern  # a search's rows all match already
        for key, cells in filter_rows(rows, pattern).items():
            table.add_row(*cells, key=key, height=height)
        if highlighted is not None and highlighted.id in table.rows:
            table.move_cursor(row=table.get_row_index(highlighted.id), animate=False)
        self._update_status()

    def _cells(self, entry: AuditEntry) -> list[Text]:
        return [
            Text(local_time(entry.at, short=True)),
            Text(printable(actor_name(entry)), no_wrap=True, overflow="ellipsis"),
            Text(printable(self._server_name(entry.server_id)), no_wrap=True, overflow="ellipsis"),
            Text(entry.action, style="bold", overflow="fold"),  # whole: wrapped where narrow
            outcome_text(entry),
            Text(printable(entry.target or "—"), style="dim" if not entry.target else "", no_wrap=True),
        ]

    def on_resize(self) -> None:
        if self.entries:
            self._draw(keep_cursor=True)

    def _update_bar(self) -> None:
        filters = self.filters.words(self._server_name(self.filters.server_id))
        text = f"Audit log · {filters} · x: no filters" if filters else "Audit log of the org · newest first"
        self.query_one("#audit-bar", Static).update(printable(text))

    def _update_status(self) -> None:
        shown, count = self.query_one(AuditTable).row_count, len(self.entries)
        if not count:
            text = "No entries" + (" match these filters" if self.filters != AuditFilters() else " yet")
        else:
            more = "" if self._complete else " (more below)"
            if self._search:
                found = f"{count:,} entr{'y' if count == 1 else 'ies'} with {self._search!r}"
                text = f"{found}{more} · live · Esc: clear the search"
            elif self.filter_pattern:
                text = f"{shown:,} of {count:,} entries{more} · live · Esc: clear the filter"
            else:
                text = f"{count:,} entries{more} · live · s a u o: like this one · /: text"
        self._set_status(text)

    def _set_status(self, text: str) -> None:
        self.query_one("#audit-status", Static).update(text)

    # --- keys ---------------------------------------------------------------------------------

    def on_audit_table_near_the_end(self, event: AuditTable.NearTheEnd) -> None:
        event.stop()
        if not self._complete and self._page_task is None and self.entries:
            oldest = min(self.entries, key=int)
            self._page_task = self._ask(before=oldest, on_done=partial(self._page_came, self._generation))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        entry = self.entries.get(str(event.row_key.value))
        if entry is not None:
            self.app.push_screen(AuditEntryScreen(entry, self._server_name(entry.server_id)))

    def action_filter_by(self, field: str) -> None:
        """Keep only the entries like the highlighted one in `field`; again: drop that filter."""
        if getattr(self.filters, field) is not None:
            self._set_filters(replace(self.filters, **{field: None}))
            return
        entry = self.highlighted_entry
        if entry is None:
            self.notify("No entry to filter by: none is highlighted.", severity="warning")
            return
        values: dict[str, Any] = {
            "server_id": entry.server_id,
            "action": entry.action,
            "actor": entry.actor.email or entry.actor.user_id,
            "outcome": entry.outcome,
        }
        value = values[field]
        if value is None:
            self.notify(f"This entry has no {field.removesuffix('_id')}.", severity="warning")
            return
        self._set_filters(replace(self.filters, **{field: value}))

    def action_edit_filters(self) -> None:
        """`f`: all four filters in a form (a server, action or actor that no entry shown has)."""

        def chosen(filters: AuditFilters | None) -> None:
            if filters is not None and filters != self.filters:
                self._set_filters(filters)

        servers = sorted(((s.name, s.id) for s in self.servers.values()), key=lambda pair: pair[0].casefold())
        self.app.push_screen(AuditFilterDialog(self.filters, servers), chosen)

    def action_clear_filters(self) -> None:
        if self.filters != AuditFilters():
            self._set_filters(AuditFilters())

    def _set_filters(self, filters: AuditFilters) -> None:
        self.filters = filters
        self.action_reload()

    def on_filter_line_pattern_changed(self, event: FilterLine.PatternChanged) -> None:
        """Text is searched for on the control plane, through the whole log; a glob narrows the
        rows loaded (the control plane searches text, not patterns)."""
        event.stop()
        search = event.pattern if event.pattern and not any(c in event.pattern for c in "*?[") else None
        if search != self._search:
            self._search = search
            self.action_reload()
        else:
            self._draw(keep_cursor=True)

    def on_filter_line_closed(self, event: FilterLine.Closed) -> None:
        event.stop()
        self.query_one(AuditTable).focus()

    def action_back(self) -> None:
        self.dismiss()
