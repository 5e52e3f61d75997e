"""The two tables of the load-balancer screen: the load balancers, and the pool of the highlighted one.

The pool is hatop's: each backend is a `server:port` row with its state in the engine (UP, DOWN,
DRAIN, MAINT, NOLB; ↑/↓ while its checks take it up or down), its weight (`7≠2`: 7 on the node, 2
defined: drift), the time since its last change, check failures/downs, current/max sessions,
bytes in/out, errors and requests per second, and where the width allows, the request rate and
the errors over the last minutes as sparklines (`Traffic`: one sample per report of the node).
Every figure is the node's report; what the engine does not know (nginx has no traffic figures)
is a dash, never a guess. A column is a `Column` in `PoolTable.COLUMNS` and a function of
`POOL_CELLS` (same key); an `optional` one is left out when the table is too narrow for it.

Both are redrawn in place: when the rows are the same ones as before, only the cells whose text
changed are updated (no flicker, the cursor stays where it is); the rows are rebuilt only when a
row came or went, and the cursor then goes back to the row it was on.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import ClassVar

from rich.text import Text
from textual.binding import Binding, BindingType
from textual.widgets import DataTable

from contract.job_kinds.lb import BackendStatus
from contract.load_balancers import Backend, LoadBalancer
from tui.text import printable
from tui.widgets.sparkline import sparkline

DASH = "—"
STATE_STYLES = {"active": "green", "pending_apply": "yellow", "degraded": "bold red"}
HEALTH_STYLES = {"healthy": "green", "unhealthy": "bold red", "draining": "yellow"}
STATUS_STYLES: dict[BackendStatus, str] = {
    "UP": "green",
    "DOWN": "bold red",
    "DRAIN": "yellow",
    "MAINT": "bold magenta",
    "NOLB": "yellow",
}
GOING = {"up": "↑", "down": "↓"}
DRIFT = "≠"
TREND_WIDTH = 16  # cells of a sparkline column: the last 32 s at the node's report every 2 s
TREND_SAMPLES = 90  # kept per backend: 3 minutes of reports


@dataclass(frozen=True)
class Column:
    """`width` is fixed; a flexible column (`width` 0) gets a share of what is left, between
    `narrowest` and `widest` (its longest cell decides within those)."""

    key: str
    label: str
    width: int = 0
    narrowest: int = 0
    widest: int = 0
    numeric: bool = False  # right-aligned, its label too
    optional: bool = False  # shown only where the width allows (the rightmost go first)


def shown_columns(columns: Sequence[Column], room: int) -> list[Column]:
    """`columns` without the optional ones (from the right) that would not fit in `room` cells at
    their narrowest: a narrow terminal keeps the figures, a wide one adds the pictures."""
    shown = list(columns)
    while sum(c.width or c.narrowest for c in shown) + 2 * len(shown) > room:
        optional = [c for c in shown if c.optional]
        if not optional:
            break
        shown.remove(optional[-1])
    return shown


def fit_widths(columns: Sequence[Column], longest: Mapping[str, int], room: int) -> dict[str, int]:
    """Widths for `columns` in `room` cells (DataTable pads each cell by one on both sides).

    Fixed columns take their width; the flexible ones share the rest, each at least its
    `narrowest`, the last flexible one taking what is left over (up to its `widest`).
    """
    widths = {c.key: c.width for c in columns if c.width}
    flexible = [c for c in columns if not c.width]
    left = room - sum(widths.values()) - 2 * len(columns)
    for column in flexible:
        widths[column.key] = column.narrowest
        left -= column.narrowest
    for index, column in enumerate(flexible):
        wanted = max(column.narrowest, min(longest.get(column.key, 0), column.widest))
        if index == len(flexible) - 1:
            wanted = column.widest
        grow = max(0, min(wanted - widths[column.key], left))
        widths[column.key] += grow
        left -= grow
    return widths


class LiveTable(DataTable[Text]):
    """A DataTable whose rows are redrawn in place from `{row key: cells}`."""

    COLUMNS: ClassVar[list[Column]] = []

    def set_rows(self, rows: Mapping[str, list[Text]], room: int) -> None:
        """Show `rows` (in order, a cell per `COLUMNS`: those of the columns left out are not
        shown); cells are updated in place when the rows and the columns are the same."""
        shown = shown_columns(self.COLUMNS, room)
        index = [self.COLUMNS.index(column) for column in shown]
        rows = {key: [cells[i] for i in index] for key, cells in rows.items()}
        longest = {
            column.key: max((cells[i].cell_len for cells in rows.values()), default=0) for i, column in enumerate(shown)
        }
        widths = fit_widths(shown, longest, room)
        drawn = [(str(key.value), column.width) for key, column in self.columns.items()]
        if drawn != [(c.key, widths[c.key]) for c in shown]:
            self._rebuild(shown, rows, widths)
            return
        if [str(key.value) for key in self.rows] != list(rows):
            self._refill(rows)
            return
        for row_key, cells in rows.items():
            for column, cell in zip(shown, cells, strict=True):
                if not _same(self.get_cell(row_key, column.key), cell):
                    self.update_cell(row_key, column.key, cell)

    @property
    def cursor_key(self) -> str | None:
        """The key of the row under the cursor (None: no rows)."""
        if not self.row_count:
            return None
        return str(self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value)

    def _rebuild(self, shown: Sequence[Column], rows: Mapping[str, list[Text]], widths: Mapping[str, int]) -> None:
        keep = self.cursor_key
        self.clear(columns=True)
        for column in shown:
            label = Text(column.label, justify="right" if column.numeric else "left")
            self.add_column(label, key=column.key, width=widths[column.key])
        self._fill(rows, keep)

    def _refill(self, rows: Mapping[str, list[Text]]) -> None:
        keep = self.cursor_key
        row = self.cursor_row
        self.clear()
        self._fill(rows, keep, row)

    def _fill(self, rows: Mapping[str, list[Text]], keep: str | None, row: int = 0) -> None:
        for key, cells in rows.items():
            self.add_row(*cells, key=key)
        if keep is not None and keep in rows:
            self.move_cursor(row=self.get_row_index(keep), animate=False)
        elif rows:
            # The row under the cursor is gone: stay at the same height, on its neighbour.
            self.move_cursor(row=min(row, len(rows) - 1), animate=False)


def _same(shown: Text, new: Text) -> bool:
    return shown.plain == new.plain and shown.style == new.style and shown.spans == new.spans


class LbTable(LiveTable):
    """The org's load balancers; Enter opens the action menu of the highlighted one."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("enter", "select_cursor", "Actions")]

    COLUMNS: ClassVar[list[Column]] = [
        Column("name", "Name", narrowest=6, widest=24),
        Column("node", "Node", narrowest=6, widest=16),
        Column("engine", "Engine", width=7),
        Column("port", "Port", width=9),
        Column("revision", "Revision", width=11),
        Column("state", "State", narrowest=8, widest=200),
    ]


class PoolTable(LiveTable):
    """The backends of one load balancer; Enter opens the action menu of the highlighted one."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("enter", "select_cursor", "Actions")]

    COLUMNS: ClassVar[list[Column]] = [
        Column("backend", "Backend", narrowest=10, widest=32),
        Column("status", "Status", width=9),
        Column("weight", "Wt", width=5, numeric=True),
        Column("changed", "Chg", width=4, numeric=True),
        Column("checks", "Fail/Dn", width=7, numeric=True),
        Column("sessions", "Cur/Max", width=7, numeric=True),
        Column("bytes", "In/Out", width=9, numeric=True),
        Column("errors", "Err", width=4, numeric=True),
        Column("rate", "Req/s", width=5, numeric=True),
        Column("rate_trend", "Requests", width=TREND_WIDTH, optional=True),
        Column("error_trend", "Errors", width=TREND_WIDTH, optional=True),
    ]


# --- traffic over time ---------------------------------------------------------------------------


@dataclass
class Traffic:
    """A backend's request rate and new errors, one sample per report of its node (oldest
    first), None where the report had no figures (nginx, an older agent)."""

    rates: deque[float | None] = field(default_factory=lambda: deque(maxlen=TREND_SAMPLES))
    errors: deque[float | None] = field(default_factory=lambda: deque(maxlen=TREND_SAMPLES))
    _last_errors: int | None = None
    _last_report: datetime | None = None

    def add(self, backend: Backend) -> None:
        """The sample of the backend's latest report, unless it was taken already (the screen
        lists more often than a node reports, or a node away reports nothing): the rate as the
        engine measures it, the errors (HAProxy's econ + eresp, counters since it started) as
        those new since the report before."""
        if backend.last_check_at is None or backend.last_check_at == self._last_report:
            return
        self._last_report = backend.last_check_at
        stats = backend.stats
        self.rates.append(stats.request_rate if stats is not None else None)
        total = _error_total(backend)
        new = None if total is None or self._last_errors is None else max(0, total - self._last_errors)
        self.errors.append(None if new is None else float(new))
        self._last_errors = total


def _error_total(backend: Backend) -> int | None:
    stats = backend.stats
    if stats is None or stats.connection_errors is None or stats.response_errors is None:
        return None
    return stats.connection_errors + stats.response_errors


# --- cells --------------------------------------------------------------------------------------

ServerNames = Callable[[str], str]


def listen_port(lb: LoadBalancer) -> int:
    """The port the node really listens on (a port map's, as the demo has), else the definition's."""
    return lb.listen_port or lb.port


def lb_cells(lb: LoadBalancer, server_name: ServerNames) -> list[Text]:
    port = f"{listen_port(lb)} tls" if lb.tls else str(listen_port(lb))
    return [
        Text(printable(lb.name), style="bold"),
        Text(printable(server_name(lb.node_server_id))),
        Text(lb.engine),
        Text(port),
        revision_text(lb),
        state_text(lb),
    ]


def state_text(lb: LoadBalancer) -> Text:
    """`active`, `pending`, or `degraded: <the node's own error text>` (on one line)."""
    label = "pending" if lb.state == "pending_apply" else lb.state
    text = Text(label, style=STATE_STYLES.get(lb.state, ""), no_wrap=True, overflow="ellipsis")
    if lb.state == "degraded" and lb.state_error:
        text.append(": " + one_line(lb.state_error), style="red")
    return text


def revision_text(lb: LoadBalancer) -> Text:
    """`4 applied`, `4 (3 live)` while the node still serves an older revision, `1 (not yet)`."""
    if lb.applied_revision == lb.revision:
        return Text(f"{lb.revision} applied")
    live = "not yet" if lb.applied_revision is None else f"{lb.applied_revision} live"
    return Text(f"{lb.revision} ({live})", style="yellow")


@dataclass(frozen=True)
class PoolRow:
    """What a pool row is drawn from: the backend, its name, the weight to show, the time now."""

    backend: Backend
    name: str  # `server:port`
    weight: int  # the one asked for while the change travels, else the control plane's
    now: datetime | None = None
    traffic: Traffic | None = None  # the samples of the listings read so far


def backend_name(backend: Backend, server_name: ServerNames) -> str:
    """A backend is a (server, port) pair: `server:port`."""
    return f"{server_name(backend.server_id)}:{backend.port}"


def backend_cells(row: PoolRow) -> list[Text]:
    """One pool row, a cell per `PoolTable.COLUMNS`."""
    return [POOL_CELLS[column.key](row) for column in PoolTable.COLUMNS]


def _backend(row: PoolRow) -> Text:
    return Text(printable(row.name), style="bold")


def _status(row: PoolRow) -> Text:
    """The engine's word for it, with where its checks are taking it; the control plane's health
    word when the node has not said (an older agent)."""
    runtime = row.backend.runtime
    if runtime is None:
        return Text(row.backend.health, style=HEALTH_STYLES.get(row.backend.health, ""))
    going = f" {GOING[runtime.going]}" if runtime.going else ""
    return Text(runtime.status + going, style=STATUS_STYLES.get(runtime.status, ""))


def _weight(row: PoolRow) -> Text:
    """The weight defined (italic while a change travels); `7≠2` when the node applies another."""
    backend, runtime = row.backend, row.backend.runtime
    style = "" if row.weight == backend.weight else "italic"
    if runtime is not None and runtime.drift and runtime.weight is not None and runtime.weight != row.weight:
        return Text(f"{runtime.weight}{DRIFT}{row.weight}", justify="right", style="bold red")
    return Text(str(row.weight), justify="right", style=style)


def _changed(row: PoolRow) -> Text:
    runtime = row.backend.runtime
    return _dim_dash(ago(runtime.changed_at if runtime else None, row.now), justify="right")


def _checks(row: PoolRow) -> Text:
    runtime = row.backend.runtime
    if runtime is None or runtime.check_failures is None:
        return _dim_dash(DASH, justify="right")
    return Text(f"{runtime.check_failures}/{_or_dash(runtime.down_count)}", justify="right")


def _sessions(row: PoolRow) -> Text:
    stats = row.backend.stats
    if stats is None:
        return _dim_dash(DASH, justify="right")
    return Text(f"{stats.current_sessions}/{_or_dash(stats.max_sessions)}", justify="right")


def _bytes(row: PoolRow) -> Text:
    stats = row.backend.stats
    if stats is None or stats.bytes_in is None or stats.bytes_out is None:
        return _dim_dash(DASH, justify="right")
    return Text(f"{size(stats.bytes_in)}/{size(stats.bytes_out)}", justify="right")


def _errors(row: PoolRow) -> Text:
    """Failed connections and aborted responses together (HAProxy's econ + eresp)."""
    stats = row.backend.stats
    if stats is None or stats.connection_errors is None or stats.response_errors is None:
        return _dim_dash(DASH, justify="right")
    errors = stats.connection_errors + stats.response_errors
    return Text(str(errors), justify="right", style="red" if errors else "")


def _rate(row: PoolRow) -> Text:
    stats = row.backend.stats
    return _dim_dash(DASH if stats is None else rate(stats.request_rate), justify="right")


def _rate_trend(row: PoolRow) -> Text:
    return _trend(row.traffic.rates if row.traffic else (), "cyan")


def _error_trend(row: PoolRow) -> Text:
    return _trend(row.traffic.errors if row.traffic else (), "red")


def _trend(samples: Sequence[float | None], style: str) -> Text:
    """A sparkline of the newest samples (a dash while none is known), scaled to its largest."""
    if all(sample is None for sample in samples):
        return _dim_dash(DASH)
    return Text(sparkline(samples, TREND_WIDTH), style=style)


POOL_CELLS: dict[str, Callable[[PoolRow], Text]] = {
    "backend": _backend,
    "status": _status,
    "weight": _weight,
    "changed": _changed,
    "checks": _checks,
    "sessions": _sessions,
    "bytes": _bytes,
    "errors": _errors,
    "rate": _rate,
    "rate_trend": _rate_trend,
    "error_trend": _error_trend,
}
"""How each column of the pool is drawn, by its key in `PoolTable.COLUMNS`."""


def _or_dash(value: int | None) -> str:
    return DASH if value is None else str(value)


def _dim_dash(value: str, justify: str = "left") -> Text:
    return Text(value, style="dim" if value == DASH else "", justify=justify)  # type: ignore[arg-type]


def size(count: int) -> str:
    """A byte count in at most four characters: `512`, `1.2K`, `34K`, `567M`, `8.9G`."""
    value = float(count)
    for unit in ("", "K", "M", "G", "T"):
        if value < 1000 or unit == "T":
            if not unit:
                return str(count)
            return f"{value:.1f}{unit}" if value < 10 else f"{value:.0f}{unit}"
        value /= 1000
    return str(count)


def ago(moment: datetime | None, now: datetime | None = None) -> str:
    """`4s`, `3m`, `2h`, `5d` since `moment`; a dash when it never happened."""
    if moment is None:
        return DASH
    seconds = max(0, int(((now or datetime.now(UTC)) - moment).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def rate(per_second: float) -> str:
    return f"{per_second:.1f}" if per_second < 100 else f"{per_second:.0f}"


def one_line(text: str) -> str:
    """A multi-line error (nginx -t prints several) on one line, control characters made safe."""
    return printable(" ".join(text.split()))
