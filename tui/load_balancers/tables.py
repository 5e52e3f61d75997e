"""The two tables of the load-balancer screen: the load balancers, and the pool of the highlighted one.

Both are redrawn in place: when the rows are the same ones as before, only the cells whose text
changed are updated (no flicker, the cursor stays where it is); the rows are rebuilt only when a
row came or went, and the cursor then goes back to the row it was on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import ClassVar

from rich.text import Text
from textual.binding import Binding, BindingType
from textual.widgets import DataTable

from contract.load_balancers import Backend, LoadBalancer
from tui.text import printable

DASH = "—"
STATE_STYLES = {"active": "green", "pending_apply": "yellow", "degraded": "bold red"}
HEALTH_STYLES = {"healthy": "green", "unhealthy": "bold red", "draining": "yellow"}


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
        """Show `rows` (in order); cells are updated in place when the rows are the same."""
        longest = {
            column.key: max((cells[i].cell_len for cells in rows.values()), default=0)
            for i, column in enumerate(self.COLUMNS)
        }
        widths = fit_widths(self.COLUMNS, longest, room)
        if [column.width for column in self.columns.values()] != [widths[c.key] for c in self.COLUMNS]:
            self._rebuild(rows, widths)
            return
        if [str(key.value) for key in self.rows] != list(rows):
            self._refill(rows)
            return
        for row_key, cells in rows.items():
            for column, cell in zip(self.COLUMNS, cells, strict=True):
                if not _same(self.get_cell(row_key, column.key), cell):
                    self.update_cell(row_key, column.key, cell)

    @property
    def cursor_key(self) -> str | None:
        """The key of the row under the cursor (None: no rows)."""
        if not self.row_count:
            return None
        return str(self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value)

    def _rebuild(self, rows: Mapping[str, list[Text]], widths: Mapping[str, int]) -> None:
        keep = self.cursor_key
        self.clear(columns=True)
        for column in self.COLUMNS:
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
        Column("port", "Port", width=7),
        Column("revision", "Revision", width=11),
        Column("state", "State", narrowest=8, widest=200),
    ]


class PoolTable(LiveTable):
    """The backends of one load balancer; Enter opens the action menu of the highlighted one."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("enter", "select_cursor", "Actions")]

    COLUMNS: ClassVar[list[Column]] = [
        Column("backend", "Backend", narrowest=7, widest=24),
        Column("address", "Address", narrowest=9, widest=40),
        Column("port", "Port", width=5, numeric=True),
        Column("weight", "Wt", width=3, numeric=True),
        Column("health", "Health", width=9),
        Column("drained", "Drain", width=5),
        Column("checked", "Check", width=5),
        Column("sessions", "Sess", width=5, numeric=True),
        Column("rate", "Req/s", width=5, numeric=True),
    ]


# --- cells --------------------------------------------------------------------------------------

ServerNames = Callable[[str], str]


def lb_cells(lb: LoadBalancer, server_name: ServerNames) -> list[Text]:
    port = f"{lb.port} tls" if lb.tls else str(lb.port)
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


def backend_cells(backend: Backend, server_name: ServerNames, weight: int, now: datetime | None = None) -> list[Text]:
    """One pool row; `weight` is the one to show (the one asked for while the change travels)."""
    stats = backend.stats
    return [
        Text(printable(server_name(backend.server_id)), style="bold"),
        Text(printable(backend.address)),
        Text(str(backend.port), justify="right"),
        Text(str(weight), justify="right", style="" if weight == backend.weight else "italic"),
        Text(backend.health, style=HEALTH_STYLES.get(backend.health, "")),
        Text("yes", style="yellow") if backend.drained else Text("no", style="dim"),
        _dim_dash(ago(backend.last_check_at, now)),
        _dim_dash(DASH if stats is None else str(stats.current_sessions), justify="right"),
        _dim_dash(DASH if stats is None else rate(stats.request_rate), justify="right"),
    ]


def _dim_dash(value: str, justify: str = "left") -> Text:
    return Text(value, style="dim" if value == DASH else "", justify=justify)  # type: ignore[arg-type]


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
