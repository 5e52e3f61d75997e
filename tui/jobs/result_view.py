"""The result of a read job (`job.result`, parsed JSON) shown for reading, never as raw JSON.

The shape decides the view (`result_shape`):

* a list of objects → a table, one column per key (in the order the keys first appear);
* an object holding one list of objects (`{"sites": [...], "total": 3}`) → that table, the other
  values in the caption;
* a flat object (no nested values) → a two-column table, field and value;
* anything nested → a tree, expanded;
* a list of plain values → a one-column table; a plain value → one line.

Every string is made printable and shown as plain text (a result is untrusted: no markup).
Sizes (`*_bytes`) and durations (`*_s`) are also given in human units.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import orjson
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static, Tree
from textual.widgets.tree import TreeNode

from tui.errors import format_size
from tui.jobs.log_panel import format_duration
from tui.text import load_tcss, printable

MAX_ROWS = 5_000
MAX_COLUMNS = 40
MAX_CELL_CHARS = 80
TREE_EXPAND_NODES = 500  # expand everything when the tree is this small, else the first level only

Shape = Literal["table", "keyed_table", "fields", "tree", "values", "scalar", "empty"]


def result_shape(result: Any) -> Shape:
    if result is None or result == {} or result == []:
        return "empty"
    if isinstance(result, list):
        if all(isinstance(item, Mapping) for item in result):
            return "table"
        if all(not isinstance(item, (Mapping, list)) for item in result):
            return "values"
        return "tree"
    if isinstance(result, Mapping):
        if _table_key(result) is not None:
            return "keyed_table"
        if all(not isinstance(value, (Mapping, list)) for value in result.values()):
            return "fields"
        return "tree"
    return "scalar"


def _table_key(result: Mapping[str, Any]) -> str | None:
    """The one key whose value is a non-empty list of objects, when the others are plain values."""
    lists = [
        key
        for key, value in result.items()
        if isinstance(value, list) and value and all(isinstance(item, Mapping) for item in value)
    ]
    plain = all(not isinstance(v, (Mapping, list)) for k, v in result.items() if k not in lists)
    return lists[0] if len(lists) == 1 and plain else None


def table_columns(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every key of the rows, in the order they first appear."""
    columns: dict[str, None] = {}
    for row in rows[:MAX_ROWS]:
        for key in row:
            columns.setdefault(str(key), None)
    return list(columns)[:MAX_COLUMNS]


def cell_text(value: Any, key: str = "") -> Text:
    """One value as table text: `—` for null, yes/no, compact JSON for nested values."""
    if value is None:
        return Text("—", style="dim")
    if isinstance(value, bool):
        return Text("yes" if value else "no")
    if isinstance(value, (int, float)):
        return Text(_number(value, key), justify="right")
    text = orjson.dumps(value, default=str).decode() if isinstance(value, (Mapping, list)) else str(value)
    text = printable(text)
    if len(text) > MAX_CELL_CHARS:
        text = text[: MAX_CELL_CHARS - 1] + "…"
    return Text(text)


def _number(value: float, key: str) -> str:
    """Numbers as they are, with a human reading for sizes and durations: `25 GiB (25276510208)`."""
    if key.endswith("_bytes") and isinstance(value, int) and value >= 1024:
        return f"{format_size(value)} ({value:,})"
    if (key.endswith("_s") or key == "seconds") and value >= 60:
        return f"{format_duration(float(value))} ({value:g})"
    return f"{value:,}" if isinstance(value, int) else f"{value:g}"


def _label(key: str) -> str:
    return printable(str(key)).replace("_", " ")


class ResultView(Vertical):
    """A read job's result as a table or a tree; `show(result)` replaces what is shown."""

    DEFAULT_CSS = load_tcss(__file__)

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.shape: Shape = "empty"
        self.result: Any = None

    def compose(self) -> ComposeResult:
        yield Static("", id="result-caption", markup=False)

    def show(self, result: Any) -> None:
        self.result = result
        self.shape = result_shape(result)
        for child in list(self.children):
            if child.id != "result-caption":
                child.remove()
        caption = self.query_one("#result-caption", Static)
        match self.shape:
            case "table":
                self._mount_table(result, caption, "")
            case "keyed_table":
                key = _table_key(result)
                assert key is not None
                others = "  ".join(f"{_label(k)}: {cell_text(v, k).plain}" for k, v in result.items() if k != key)
                self._mount_table(result[key], caption, f"{_label(key)} · " + others if others else _label(key))
            case "fields":
                table = self._new_table()
                table.add_column("Field", key="field")
                table.add_column("Value", key="value")
                for key, value in result.items():
                    table.add_row(Text(_label(key), style="bold"), cell_text(value, str(key)))
                caption.update(f"{len(result)} field{'s' if len(result) != 1 else ''}")
                self.mount(table)
            case "values":
                table = self._new_table()
                table.add_column("Value", key="value")
                for value in result[:MAX_ROWS]:
                    table.add_row(cell_text(value))
                caption.update(f"{len(result):,} value{'s' if len(result) != 1 else ''}")
                self.mount(table)
            case "tree":
                tree: Tree[Any] = Tree(Text("result", style="bold"), classes="result-tree")
                tree.show_root = False
                count = self._fill(tree.root, result)
                caption.update(f"{count:,} value{'s' if count != 1 else ''}")
                self.mount(tree)
                if count <= TREE_EXPAND_NODES:
                    tree.root.expand_all()
                else:
                    tree.root.expand()
            case "scalar":
                caption.update("")
                self.mount(Static(cell_text(result), classes="result-scalar"))
            case "empty":
                caption.update("The job returned no result." if result is None else "The result is empty.")

    def _new_table(self) -> DataTable[Text]:
        # No ids: the widgets of the previous result are still being removed when these mount.
        return DataTable(classes="result-table", cursor_type="row", zebra_stripes=True)

    def _mount_table(self, rows: Sequence[Mapping[str, Any]], caption: Static, prefix: str) -> None:
        columns = table_columns(rows)
        table = self._new_table()
        for column in columns:
            table.add_column(Text(_label(column), style="bold"), key=column)
        table.add_rows([cell_text(row.get(column), column) for column in columns] for row in rows[:MAX_ROWS])
        summary = f"{len(rows):,} row{'s' if len(rows) != 1 else ''}"
        if len(rows) > MAX_ROWS:
            summary += f" (the first {MAX_ROWS:,} shown)"
        caption.update(f"{prefix} · {summary}" if prefix else summary)
        self.mount(table)

    def _fill(self, node: TreeNode[Any], value: Any, budget: list[int] | None = None) -> int:
        """Add `value`'s children under `node`; how many nodes were added (capped at MAX_ROWS)."""
        budget = budget if budget is not None else [MAX_ROWS]
        added = 0
        items: list[tuple[str, Any]]
        if isinstance(value, Mapping):
            items = [(str(k), v) for k, v in value.items()]
        else:
            items = [(f"[{i}]", v) for i, v in enumerate(value)]
        for key, child in items:
            if budget[0] <= 0:
                node.add_leaf(Text("…", style="dim"))
                break
            budget[0] -= 1
            added += 1
            label = Text(_label(key) if not key.startswith("[") else key, style="bold")
            if isinstance(child, (Mapping, list)):
                label.append(self._summary(child), style="dim")
                branch = node.add(label, data=child)
                added += self._fill(branch, child, budget)
            else:
                label.append(": ")
                label.append_text(cell_text(child, key))
                node.add_leaf(label, data=child)
        return added

    @staticmethod
    def _summary(value: Mapping[str, Any] | list[Any]) -> str:
        """`  {4}` for an object, `  [12]` for a list, with the object's name when it has one."""
        if isinstance(value, Mapping):
            for key in ("name", "id", "domain", "title"):
                if isinstance(value.get(key), str):
                    return f"  {printable(value[key])}"
            return f"  {{{len(value)}}}"
        return f"  [{len(value)}]"
