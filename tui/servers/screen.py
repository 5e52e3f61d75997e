"""The server list: every server of the org, its agent's presence updated live over SSE (the
app's one presence stream, followed by `tui.monitor`); unknown while the control plane is lost.
Its CPU, memory and disk use of the last minutes are sparklines, from the agent's pulses on the
same stream, in as many columns as the width leaves (CPU first)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import ClassVar

from rich.style import Style
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.color import Color, ColorParseError
from textual.theme import Theme
from textual.widgets import DataTable, Static

from api_client import Server
from contract.models import PresenceEvent
from tui.monitor import LinkState
from tui.screen import FleetScreen
from tui.text import load_tcss, printable
from tui.widgets.filter_line import FilteredList, FilterLine, filter_rows
from tui.widgets.footer import FleetFooter
from tui.widgets.header import SafeHeader
from tui.widgets.list_table import ListTable
from tui.widgets.sparkline import sparkline

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
# The pulses' columns, in the order they appear as the width allows: (key, label). A cell is a
# sparkline and the last value ("▂▃▅▇ 42%"), from PULSE_WIDTH[0] to PULSE_WIDTH[1] wide.
PULSE_COLUMNS = [("cpu", "CPU"), ("memory", "Mem"), ("disk", "Disk")]
# Columns that give way in a narrow terminal, the widest first, down to these widths (their cells
# then end in "…"), so that at 80 columns no column is cut off and the CPU column still shows.
GIVING_WAY = {"name": 10, "address": 13, "version": 7}
PULSE_WIDTH = (10, 24)
PULSE_VALUE = 5  # " 100%"
CELL_PADDING = 2  # DataTable's, either side of each column


class ServerTable(ListTable):
    """The DataTable, with Enter named in the footer (DataTable's own binding is hidden)."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("enter", "select_cursor", "Files")]


class ServerListScreen(FilteredList, FleetScreen):
    """Servers in a table; Enter opens the files of the highlighted one."""

    HELP_TITLE = "Servers"

    DEFAULT_CSS = load_tcss(__file__)

    BINDINGS: ClassVar[list[BindingType]] = [
        # J, not j: j and k move the cursor, as in every list (vim's keys).
        Binding("J", "open_jobs", "Jobs", key_display="J"),
        Binding("b", "app.go_load_balancers", "Load balancers"),
        Binding("a", "app.go_audit", "Audit log"),
        Binding("r", "reload", "Reload"),
        Binding("slash", "filter", "Filter the list by text", key_display="/", show=False),
        Binding("q", "app.quit", "Quit", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.servers: dict[str, Server] = {}
        self._connected = True
        self._pulse_columns: list[tuple[str, str]] = []  # those shown (the width decides)
        self._pulse_width = PULSE_WIDTH[0]

    def compose(self) -> ComposeResult:
        yield SafeHeader()
        yield ServerTable(id="servers", cursor_type="row", zebra_stripes=True)
        yield FilterLine(id="servers-filter")
        yield Static("Loading servers…", id="servers-status")
        yield FleetFooter()

    def on_mount(self) -> None:
        self.query_one(DataTable).focus()
        self.app.theme_changed_signal.subscribe(self, self._on_theme_changed)
        self.set_interval(RELATIVE_TIME_REFRESH_S, self._redraw_rows)
        self.monitor.presence.subscribe(self, self._on_presence)
        self.monitor.pulse.subscribe(self, self._on_pulse)
        self.monitor.changed.subscribe(self, self._connection_changed)
        self.action_reload()

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
        for server in servers:
            self.monitor.remember(server.id, server.agent.online)
        self._draw_table()
        self._update_status()

    def _draw_table(self) -> None:
        """The rows that match the `/` filter; the columns are sized to every server, filter or not."""
        highlighted = self.highlighted_server
        table = self.query_one(DataTable)
        rows = {server.id: self._cells(server) for server in self.servers.values()}
        # Explicit widths: the columns are rebuilt with each list, sized to what they hold.
        table.clear(columns=True)
        widths = self._text_widths(rows.values())
        for (key, label, *_), width in zip(COLUMNS, widths, strict=True):
            table.add_column(label, key=key, width=width)
        self._fit_pulse_columns(sum(widths) + CELL_PADDING * len(widths))
        for key, label in self._pulse_columns:  # over the newest pulse and the value, on the right
            table.add_column(Text(label, justify="right"), key=key, width=self._pulse_width)
        shown = filter_rows(rows, self.filter_pattern)  # on the text columns: a sparkline is no name
        for server_id, cells in shown.items():
            table.add_row(*cells, *self._pulse_cells(self.servers[server_id]), key=server_id)
        if highlighted is not None and highlighted.id in shown:
            table.move_cursor(row=table.get_row_index(highlighted.id))

    def _text_widths(self, rows: Iterable[list[Text]]) -> list[int]:
        """The text columns' widths: each fits its longest cell within its bounds, then the
        GIVING_WAY columns narrow, the widest first, until a CPU column fits beside them."""
        rows = list(rows)
        widths = [
            max(narrowest, min(max((cells[position].cell_len for cells in rows), default=0), widest))
            for position, (_, _, narrowest, widest) in enumerate(COLUMNS)
        ]
        room = self.size.width - 1 - CELL_PADDING * (len(COLUMNS) + 1) - PULSE_WIDTH[0]
        keys = [key for key, *_ in COLUMNS]
        while sum(widths) > room:
            giving = [keys.index(key) for key, floor in GIVING_WAY.items() if widths[keys.index(key)] > floor]
            if not giving:
                break
            widths[max(giving, key=lambda position: widths[position])] -= 1
        return widths

    def _fit_pulse_columns(self, used: int) -> None:
        """As many pulse columns as the width left by `used` cells holds, as wide as it allows."""
        room = self.size.width - used - 1  # the scrollbar's column
        count = min(len(PULSE_COLUMNS), max(0, room // (PULSE_WIDTH[0] + CELL_PADDING)))
        self._pulse_columns = PULSE_COLUMNS[:count]
        if count:
            self._pulse_width = min(PULSE_WIDTH[1], room // count - CELL_PADDING)

    def on_resize(self, event: events.Resize) -> None:
        if self.servers:
            self._draw_table()

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

    def _on_pulse(self, server_id: str) -> None:
        table = self.query_one(DataTable)
        if (server := self.servers.get(server_id)) is None or server_id not in table.rows:
            return  # not listed yet, or hidden by the `/` filter
        for (key, _), cell in zip(self._pulse_columns, self._pulse_cells(server), strict=True):
            table.update_cell(server_id, key, cell)

    def _connection_changed(self, state: LinkState) -> None:
        """Lost: every agent's presence becomes unknown. Back: the list again (presence changed
        meanwhile, maybe servers too); the monitor follows the presence stream again by itself."""
        if state.connected and not self._connected:
            self.action_reload()
        self._connected = state.connected
        self._redraw_rows()
        self._update_status()

    # --- drawing --------------------------------------------------------------------------

    def _cells(self, server: Server) -> list[Text]:
        agent = server.agent
        online = agent.online
        state_style = self._theme_style("text-success" if online else "text-error")
        muted = self._theme_style("text-muted")
        if server.kind == "lite":
            status, state = Text("◌", style=muted), Text("lite", style=muted)
        elif not self._connected:  # the last word heard may be stale: say nothing we do not know
            status, state = Text("?", style=muted), Text("unknown", style=muted)
        else:
            status = Text("●" if online else "○", style=state_style)
            state = Text("online" if online else "offline", style=state_style)
        return [
            status,
            Text(printable(server.name), style="bold", overflow="ellipsis", no_wrap=True),
            Text(server.kind),
            Text(
                printable(server.address or "—"),
                style=Style() if server.address else muted,
                overflow="ellipsis",
                no_wrap=True,
            ),
            state,
            Text(agent.version or "—", style=Style() if agent.version else muted)
            + (Text(" ⚠", style=self._theme_style("text-warning")) if links_unprotected(server) else Text()),
            Text(_last_seen(server) if self._connected or server.kind == "lite" else "?", style=muted),
        ]

    def _pulse_cells(self, server: Server) -> list[Text]:
        """A sparkline of each pulse column shown, and the last value; "—" with no pulses."""
        pulses = self.monitor.pulses_of(server.id) if self._connected else []
        if not pulses:
            return [Text("—", style=self._theme_style("text-muted"), justify="right") for _ in self._pulse_columns]
        cells = []
        for key, _ in self._pulse_columns:
            values: list[float | None] = [getattr(sample, key) for sample in pulses]
            last = "?" if values[-1] is None else f"{values[-1]:.0f}%"
            line = sparkline(values, self._pulse_width - PULSE_VALUE, top=100)
            cells.append(Text(line + last.rjust(PULSE_VALUE)))
        return cells

    def _redraw_row(self, server: Server) -> None:
        table = self.query_one(DataTable)
        if server.id not in table.rows:
            return  # hidden by the `/` filter
        for (key, *_), cell in zip(COLUMNS, self._cells(server), strict=True):
            table.update_cell(server.id, key, cell)
        self._on_pulse(server.id)

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
        live = "" if self.monitor.live_presence else " · no live updates"
        servers = f"{len(self.servers)} server" + ("" if len(self.servers) == 1 else "s")
        agents = f"{online}/{len(full)} agents online" if self._connected else "connection lost"
        keys = " · Enter: files · J: jobs · b: load balancers"
        if warning := unprotected_note(self.servers.values()):  # the keys are in the footer too
            keys = f" · {warning}"
        if self.filter_pattern:  # the keys are in the footer too: room for the filter's count
            servers, keys = f"{self.query_one(DataTable).row_count} of {servers}", ""
        text = f"{servers} · {agents}{live}{keys}"
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


def links_unprotected(server: Server) -> bool:
    """Whether the server's linked agent said its kernel does not protect hard links
    (``fs.protected_hardlinks`` off): its site users can link any file of the disk into a site."""
    protections = server.agent.kernel_protections
    return server.agent.online and protections is not None and protections.protected_hardlinks is False


def unprotected_note(servers: Iterable[Server]) -> str:
    """The status line's warning naming the servers whose hard links are unprotected ("" if none)."""
    names = [printable(server.name) for server in servers if links_unprotected(server)]
    return f"⚠ hard links unprotected on {', '.join(names)}" if names else ""


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
