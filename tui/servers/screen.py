"""The server list: every server of the org, its agent's presence updated live over SSE."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import ClassVar

from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.color import Color, ColorParseError
from textual.theme import Theme
from textual.widgets import DataTable, Footer, Static

from api_client import Server
from api_client import errors as api_errors
from api_client.models import PresenceEvent
from tui.bridge import TaskHandle
from tui.screen import FleetScreen
from tui.text import load_tcss, printable
from tui.widgets.filter_line import FilteredList, FilterLine, filter_rows
from tui.widgets.header import SafeHeader

# After the presence stream is lost for good (the client already retried with Last-Event-ID),
# wait this long, reload the list (it has the state we may have missed) and subscribe again.
PRESENCE_RETRY_S = 10.0
# "Last seen 3 min ago" grows old on its own: redraw the times this often.
RELATIVE_TIME_REFRESH_S = 15.0

# (key, label, minimum width, maximum width): widths fit the data, within these bounds.
COLUMNS = [
    ("status", "", 1, 1),
    ("name", "Name", 4, 28),
    ("kind", "Kind", 4, 4),
    ("address", "Address", 7, 24),
    ("agent", "Agent", 7, 7),
    ("version", "Version", 7, 14),
    ("seen", "Last seen", 9, 12),
]


class ServerTable(DataTable[Text]):
    """The DataTable, with Enter named in the footer (DataTable's own binding is hidden)."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("enter", "select_cursor", "Files")]


class ServerListScreen(FilteredList, FleetScreen):
    """Servers in a table; Enter opens the files of the highlighted one."""

    DEFAULT_CSS = load_tcss(__file__)

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("j", "open_jobs", "Jobs"),
        Binding("b", "app.go_load_balancers", "Load balancers"),
        Binding("a", "app.go_audit", "Audit log"),
        Binding("r", "reload", "Reload"),
        Binding("slash", "filter", "Filter the list by text", key_display="/", show=False),
        Binding("q", "app.quit", "Quit", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.servers: dict[str, Server] = {}
        self._presence: TaskHandle | None = None
        self._presence_supported = True

    def compose(self) -> ComposeResult:
        yield SafeHeader()
        yield ServerTable(id="servers", cursor_type="row", zebra_stripes=True)
        yield FilterLine(id="servers-filter")
        yield Static("Loading servers…", id="servers-status")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(DataTable).focus()
        self.app.theme_changed_signal.subscribe(self, self._on_theme_changed)
        self.set_interval(RELATIVE_TIME_REFRESH_S, self._redraw_rows)
        self.action_reload()
        self._subscribe_presence()

    # --- data -----------------------------------------------------------------------------

    @property
    def highlighted_server(self) -> Server | None:
        table = self.query_one(DataTable)
        if not table.row_count or not table.columns:
            return None
        row_key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key
        return self.servers.get(str(row_key.value))

    def action_reload(self) -> None:
        self.bridge.run(self, self.client.servers.list, on_done=self._show_servers, on_error=self._list_failed)

    def _show_servers(self, servers: list[Server]) -> None:
        self.servers = {server.id: server for server in sorted(servers, key=lambda s: s.name.casefold())}
        self._draw_table()
        self._update_status()

    def _draw_table(self) -> None:
        """The rows that match the `/` filter; the columns are sized to every server, filter or not."""
        highlighted = self.highlighted_server
        table = self.query_one(DataTable)
        rows = {server.id: self._cells(server) for server in self.servers.values()}
        # Explicit widths: the columns are rebuilt with each list, sized to what they hold.
        table.clear(columns=True)
        for position, (key, label, narrowest, widest) in enumerate(COLUMNS):
            longest = max((cells[position].cell_len for cells in rows.values()), default=0)
            table.add_column(label, key=key, width=max(narrowest, min(longest, widest)))
        shown = filter_rows(rows, self.filter_pattern)
        for server_id, cells in shown.items():
            table.add_row(*cells, key=server_id)
        if highlighted is not None and highlighted.id in shown:
            table.move_cursor(row=table.get_row_index(highlighted.id))

    def on_filter_line_pattern_changed(self, event: FilterLine.PatternChanged) -> None:
        event.stop()
        self._draw_table()
        self._update_status()

    def on_filter_line_closed(self, event: FilterLine.Closed) -> None:
        event.stop()
        self.query_one(DataTable).focus()

    def _list_failed(self, exc: BaseException) -> None:
        self.query_one("#servers-status", Static).update("Could not load the servers.")
        self.show_error(exc)

    # --- presence -------------------------------------------------------------------------

    def _subscribe_presence(self) -> None:
        self._presence = self.bridge.stream(
            self,
            self.client.servers.presence,
            on_item=self._on_presence,
            on_end=self._presence_lost,
            on_error=self._presence_failed,
        )

    def _on_presence(self, event: PresenceEvent) -> None:
        server = self.servers.get(event.server_id)
        if server is None:
            self.action_reload()  # a server we have not seen yet
            return
        agent = server.agent.model_copy(
            update={
                "online": event.online,
                "version": event.version or server.agent.version,
                "job_kinds": event.job_kinds,
                "last_seen_at": event.at,
                "connected_at": event.at if event.online else server.agent.connected_at,
            }
        )
        self.servers[server.id] = updated = server.model_copy(update={"agent": agent})
        self._redraw_row(updated)
        self._update_status()

    def _presence_failed(self, exc: BaseException) -> None:
        if isinstance(exc, api_errors.ApiError):
            # Refused (no such stream here, no right, expired session): retrying would not help.
            # The list still works, without live updates.
            self._presence_supported = False
            self._update_status()
            if isinstance(exc, api_errors.NotFound | api_errors.Forbidden):
                self.notify("Live agent status is not available on this control plane.", severity="warning")
            else:
                self.show_error(exc)
            return
        self.notify(f"Live agent status interrupted ({exc}); retrying.", severity="warning")
        self._presence_lost()

    def _presence_lost(self) -> None:
        def resubscribe() -> None:
            self.action_reload()
            self._subscribe_presence()

        self.set_timer(PRESENCE_RETRY_S, resubscribe)

    # --- drawing --------------------------------------------------------------------------

    def _cells(self, server: Server) -> list[Text]:
        agent = server.agent
        online = agent.online
        state_style = self._theme_style("text-success" if online else "text-error")
        muted = self._theme_style("text-muted")
        if server.kind == "lite":
            status, state = Text("◌", style=muted), Text("lite", style=muted)
        else:
            status = Text("●" if online else "○", style=state_style)
            state = Text("online" if online else "offline", style=state_style)
        return [
            status,
            Text(printable(server.name), style="bold"),
            Text(server.kind),
            Text(printable(server.address or "—"), style=Style() if server.address else muted),
            state,
            Text(agent.version or "—", style=Style() if agent.version else muted),
            Text(_last_seen(server), style=muted),
        ]

    def _redraw_row(self, server: Server) -> None:
        table = self.query_one(DataTable)
        if server.id not in table.rows:
            return  # hidden by the `/` filter
        for (key, *_), cell in zip(COLUMNS, self._cells(server), strict=True):
            table.update_cell(server.id, key, cell)

    def _redraw_rows(self) -> None:
        for server in self.servers.values():
            self._redraw_row(server)

    def _on_theme_changed(self, _theme: Theme) -> None:
        self._redraw_rows()

    def _theme_style(self, variable: str) -> Style:
        try:
            color = Color.parse(self.app.theme_variables.get(variable, ""))
        except ColorParseError:
            return Style()
        return Style(color=color.rich_color)

    def _update_status(self) -> None:
        full = [s for s in self.servers.values() if s.kind == "full"]
        online = sum(1 for s in full if s.agent.online)
        live = "" if self._presence_supported else " · no live updates"
        servers = f"{len(self.servers)} server" + ("" if len(self.servers) == 1 else "s")
        keys = " · Enter: files · j: jobs · b: load balancers"
        if self.filter_pattern:  # the keys are in the footer too: room for the filter's count
            servers, keys = f"{self.query_one(DataTable).row_count} of {servers}", ""
        text = f"{servers} · {online}/{len(full)} agents online{live}{keys}"
        self.query_one("#servers-status", Static).update(text)

    # --- actions --------------------------------------------------------------------------

    def action_open_files(self) -> None:
        if (server := self.highlighted_server) is not None:
            self.fleet.open_files(server)

    def action_open_jobs(self) -> None:
        if (server := self.highlighted_server) is not None:
            self.fleet.open_jobs(server)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_open_files()


def _last_seen(server: Server, now: datetime | None = None) -> str:
    agent = server.agent
    if server.kind == "lite":
        return "—"
    if agent.online:
        return "now"
    if agent.last_seen_at is None:
        return "never"
    return f"{_ago((now or datetime.now(UTC)) - agent.last_seen_at)} ago"


def _ago(delta: timedelta) -> str:
    seconds = max(0, int(delta.total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"
