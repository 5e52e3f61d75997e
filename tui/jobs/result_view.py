"""The result of a job (`job.result`, parsed JSON) shown for reading, never as raw JSON.

The shape decides the view (`result_shape`):

* a list of objects → a table, one column per key;
* an object holding one list of objects (`{"sites": [...], "total": 3}`) → that table, the other
  values in the caption;
* a flat object (no nested objects) → a two-column table, field and value;
* anything nested → a tree, expanded;
* a list of plain values → a one-column table; a plain value → one line.

When the kind declares its result (`JobKindInfo.result_schema`), the schema says the rest: the
columns and fields in its order, titled from their names in words, with their descriptions beside
the fields, and the unit of a number (`x-unit`, or "bytes"/"seconds" in its description) read in
human units; an empty list is still a table with its columns. Without a schema the columns come in
the order the keys first appear, and sizes (`*_bytes`) and durations (`*_s`) are guessed from
their names. A write's result (`show(..., summary=True)`) puts its `message` first, as a headline.

Every string is made printable and shown as plain text (a result is untrusted: no markup).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static, Tree
from textual.widgets.tree import TreeNode

from tui.errors import format_size
from tui.jobs.form import humanize
from tui.jobs.log_panel import format_duration
from tui.text import load_tcss, printable

MAX_ROWS = 5_000
MAX_COLUMNS = 40
MAX_CELL_CHARS = 80
TREE_EXPAND_NODES = 500  # expand everything when the tree is this small, else the first level only

Shape = Literal["table", "keyed_table", "fields", "tree", "values", "scalar", "empty"]
Unit = Literal["bytes", "seconds"]
Node = Mapping[str, Any]  # one resolved node of a result schema ({} when there is none)


# --- the schema -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    """One field of a result: its key, its title, what it is and its unit."""

    key: str
    title: str
    description: str = ""
    unit: Unit | None = None


class ResultSchema:
    """A kind's `result_schema` (what pydantic writes: `$ref` into `$defs`, `anyOf: [X, null]`),
    read for showing: the node of a value, the fields of an object, the items of a list."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        self.root = schema
        self.definitions: Mapping[str, Any] = schema.get("$defs") or {}

    def resolve(self, node: Any) -> Node:
        """`node` with its `$ref` followed and a nullable alternative unwrapped ({} if it is no schema)."""
        if not isinstance(node, Mapping):
            return {}
        out: dict[str, Any] = dict(node)
        alternatives = [alt for alt in out.pop("anyOf", None) or () if isinstance(alt, Mapping)]
        others = [alt for alt in alternatives if alt.get("type") != "null"]
        if len(others) == 1:
            out = {**self.resolve(others[0]), **out}
        elif alternatives:
            out["anyOf"] = alternatives
        ref = out.pop("$ref", None)
        if isinstance(ref, str):
            target = self.definitions.get(ref.rsplit("/", 1)[-1])
            out = {**(target if isinstance(target, Mapping) else {}), **out}
        return out

    def properties(self, node: Node) -> dict[str, Node]:
        props = node.get("properties")
        if not isinstance(props, Mapping):
            return {}
        return {str(key): self.resolve(value) for key, value in props.items()}

    def items(self, node: Node) -> Node:
        return self.resolve(node.get("items")) if node.get("type") == "array" else {}

    def columns(self, node: Node) -> list[Column]:
        return [_column(key, prop) for key, prop in self.properties(node).items()]


def _column(key: str, prop: Node) -> Column:
    description = str(prop.get("description") or "")
    return Column(key, humanize(key), printable(description), _unit(prop, description))


_UNIT_WORDS: list[tuple[re.Pattern[str], Unit]] = [
    (re.compile(r"\bbytes\b"), "bytes"),
    (re.compile(r"\bseconds\b"), "seconds"),
]


def _unit(prop: Node, description: str) -> Unit | None:
    """A number's unit: the schema's `x-unit`, else the one its description names."""
    declared = prop.get("x-unit")
    if declared in ("bytes", "seconds"):
        return declared  # type: ignore[no-any-return]
    if prop.get("type") not in ("integer", "number"):
        return None
    return next((unit for words, unit in _UNIT_WORDS if words.search(description)), None)


def _guessed_unit(key: str) -> Unit | None:
    """Without a schema: the unit a name suggests (`disk_bytes`, `uptime_s`)."""
    if key.endswith("_bytes"):
        return "bytes"
    if key.endswith("_s") or key == "seconds":
        return "seconds"
    return None


# --- the shape ------------------------------------------------------------------------------------


def result_shape(result: Any, schema: ResultSchema | None = None) -> Shape:
    if isinstance(result, Mapping) and _table_key(result, schema) is not None:
        return "keyed_table"
    if result is None or result == {} or result == []:
        return "empty"
    if isinstance(result, list):
        if all(isinstance(item, Mapping) for item in result):
            return "table"
        if all(not isinstance(item, (Mapping, list)) for item in result):
            return "values"
        return "tree"
    if isinstance(result, Mapping):
        return "fields" if all(_plain(value) for value in result.values()) else "tree"
    return "scalar"


def _plain(value: Any) -> bool:
    """A value that fits one cell: not an object, nor a list holding one."""
    if isinstance(value, list):
        return all(not isinstance(item, (Mapping, list)) for item in value)
    return not isinstance(value, Mapping)


def _table_key(result: Mapping[str, Any], schema: ResultSchema | None = None) -> str | None:
    """The one key whose value is a list of objects (non-empty, or declared so), when the others
    are plain values."""
    declared = schema.properties(schema.resolve(schema.root)) if schema is not None else {}

    def is_table(key: str, value: Any) -> bool:
        if not isinstance(value, list) or not all(isinstance(item, Mapping) for item in value):
            return False
        return bool(value) or (schema is not None and schema.items(declared.get(key, {})).get("type") == "object")

    lists = [str(key) for key, value in result.items() if is_table(str(key), value)]
    plain = all(not isinstance(v, (Mapping, list)) for k, v in result.items() if k not in lists)
    return lists[0] if len(lists) == 1 and plain else None


def table_columns(rows: Sequence[Mapping[str, Any]], declared: Sequence[Column] = ()) -> list[Column]:
    """The declared columns in their order, then any other key of the rows in the order it first
    appears (titled from its name)."""
    columns: dict[str, Column] = {column.key: column for column in declared}
    for row in rows[:MAX_ROWS]:
        for key in row:
            if str(key) not in columns:
                columns[str(key)] = Column(
                    str(key), _label(str(key)), unit=None if declared else _guessed_unit(str(key))
                )
    return list(columns.values())[:MAX_COLUMNS]


# --- the text of a value --------------------------------------------------------------------------


def cell_text(value: Any, key: str = "", unit: Unit | None = None) -> Text:
    """One value as table text: `—` for null, yes/no, a list of plain values joined with commas,
    compact JSON for other nested values; a number in
    its `unit` (or the one `key` suggests) also in human units."""
    if value is None:
        return Text("—", style="dim")
    if isinstance(value, bool):
        return Text("yes" if value else "no")
    if isinstance(value, (int, float)):
        return Text(_number(value, unit or _guessed_unit(key)), justify="right")
    if isinstance(value, list) and _plain(value):
        text = ", ".join("—" if item is None else str(item) for item in value)
    elif isinstance(value, (Mapping, list)):
        text = orjson.dumps(value, default=str).decode()
    else:
        text = str(value)
    text = printable(text)
    if len(text) > MAX_CELL_CHARS:
        text = text[: MAX_CELL_CHARS - 1] + "…"
    return Text(text)


def _number(value: float, unit: Unit | None) -> str:
    """Numbers as they are, with a human reading for sizes and durations: `25 GiB (25276510208)`."""
    if unit == "bytes" and isinstance(value, int) and value >= 1024:
        return f"{format_size(value)} ({value:,})"
    if unit == "seconds" and value >= 60:
        return f"{format_duration(float(value))} ({value:g})"
    return f"{value:,}" if isinstance(value, int) else f"{value:g}"


def _label(key: str) -> str:
    return printable(str(key)).replace("_", " ")


# --- the view -------------------------------------------------------------------------------------


class ResultView(Vertical):
    """A job's result as a table or a tree; `show(result, schema)` replaces what is shown."""

    DEFAULT_CSS = load_tcss(__file__)

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.shape: Shape = "empty"
        self.result: Any = None
        self.headline = ""
        self.schema: ResultSchema | None = None

    def compose(self) -> ComposeResult:
        yield Static("", id="result-headline", markup=False)
        yield Static("", id="result-caption", markup=False)

    def show(self, result: Any, schema: Mapping[str, Any] | None = None, *, summary: bool = False) -> None:
        """Show `result`, read with the kind's result `schema` when it declares one. `summary`: the
        result of a write, whose `message` (when it has one) is the headline, the rest below it."""
        self.result = result
        self.schema = ResultSchema(schema) if schema else None
        node = self.schema.resolve(self.schema.root) if self.schema is not None else {}
        self.headline = ""
        if summary and isinstance(result, Mapping) and isinstance(result.get("message"), str):
            self.headline = printable(result["message"])
            result = {key: value for key, value in result.items() if key != "message"}
        headline = self.query_one("#result-headline", Static)
        headline.update(Text(self.headline, style="bold"))
        headline.display = bool(self.headline)
        self.shape = result_shape(result, self.schema)
        for child in list(self.children):
            if child.id not in ("result-caption", "result-headline"):
                child.remove()
        caption = self.query_one("#result-caption", Static)
        caption.display = True
        match self.shape:
            case "table":
                self._mount_table(result, self._columns(self._items(node)), caption, "")
            case "keyed_table":
                key = _table_key(result, self.schema)
                assert key is not None
                fields = self._fields(node, result)
                others = "  ".join(
                    f"{column.title}: {cell_text(result[column.key], unit=column.unit).plain}"
                    for column in fields.values()
                    if column.key != key
                )
                title = fields[key].title
                declared = self._columns(self._items(self._property(node, key)))
                self._mount_table(result[key], declared, caption, f"{title} · " + others if others else title)
            case "fields":
                self._mount_fields(result, node, caption)
            case "values":
                table = self._new_table()
                table.add_column("Value", key="value")
                unit = _column("", self._items(node)).unit if self.schema is not None else None
                for value in result[:MAX_ROWS]:
                    table.add_row(cell_text(value, unit=unit))
                caption.update(f"{len(result):,} value{'s' if len(result) != 1 else ''}")
                self.mount(table)
            case "tree":
                tree: Tree[Any] = Tree(Text("result", style="bold"), classes="result-tree")
                tree.show_root = False
                count = self._fill(tree.root, result, node)
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
                caption.display = not (self.headline and result == {})

    # --- the schema's view of a value ---------------------------------------------------------

    def _property(self, node: Node, key: str) -> Node:
        return self.schema.properties(node).get(key, {}) if self.schema is not None else {}

    def _items(self, node: Node) -> Node:
        return self.schema.items(node) if self.schema is not None else {}

    def _columns(self, node: Node) -> list[Column]:
        return self.schema.columns(node) if self.schema is not None else []

    def _fields(self, node: Node, value: Mapping[str, Any]) -> dict[str, Column]:
        """The fields `value` has, in the schema's order (then the undeclared ones, in its own)."""
        present = {str(key) for key in value}
        return {column.key: column for column in table_columns([value], self._columns(node)) if column.key in present}

    # --- widgets ------------------------------------------------------------------------------

    def _new_table(self) -> DataTable[Text]:
        # No ids: the widgets of the previous result are still being removed when these mount.
        return DataTable(classes="result-table", cursor_type="row", zebra_stripes=True)

    def _mount_table(
        self, rows: Sequence[Mapping[str, Any]], declared: Sequence[Column], caption: Static, prefix: str
    ) -> None:
        columns = table_columns(rows, declared)
        table = self._new_table()
        for column in columns:
            table.add_column(Text(column.title, style="bold"), key=column.key)
        table.add_rows(
            [cell_text(row.get(column.key), unit=column.unit) for column in columns] for row in rows[:MAX_ROWS]
        )
        summary = f"{len(rows):,} row{'s' if len(rows) != 1 else ''}"
        if len(rows) > MAX_ROWS:
            summary += f" (the first {MAX_ROWS:,} shown)"
        caption.update(f"{prefix} · {summary}" if prefix else summary)
        self.mount(table)

    def _mount_fields(self, result: Mapping[str, Any], node: Node, caption: Static) -> None:
        """A flat object: field and value, and what the field is when the schema says."""
        fields = self._fields(node, result)
        described = any(column.description for column in fields.values())
        table = self._new_table()
        table.add_column("Field", key="field")
        table.add_column("Value", key="value")
        if described:
            table.add_column("About", key="about")
        for column in fields.values():
            row = [Text(column.title, style="bold"), cell_text(result[column.key], unit=column.unit)]
            table.add_row(*row, *([Text(column.description, style="dim")] if described else []))
        caption.update(f"{len(result)} field{'s' if len(result) != 1 else ''}")
        self.mount(table)

    def _fill(self, node: TreeNode[Any], value: Any, schema: Node, budget: list[int] | None = None) -> int:
        """Add `value`'s children under `node`; how many nodes were added (capped at MAX_ROWS)."""
        budget = budget if budget is not None else [MAX_ROWS]
        added = 0
        items: list[tuple[Column, Any, Node]]
        if isinstance(value, Mapping):
            fields = self._fields(schema, value)
            items = [(column, value[column.key], self._property(schema, column.key)) for column in fields.values()]
        else:
            element = self._items(schema)
            unit = _column("", element).unit if element else None
            items = [(Column(f"[{i}]", f"[{i}]", unit=unit), v, element) for i, v in enumerate(value)]
        for column, child, child_schema in items:
            if budget[0] <= 0:
                node.add_leaf(Text("…", style="dim"))
                break
            budget[0] -= 1
            added += 1
            label = Text(column.title, style="bold")
            if isinstance(child, (Mapping, list)):
                label.append(self._summary(child), style="dim")
                branch = node.add(label, data=child)
                added += self._fill(branch, child, child_schema, budget)
            else:
                label.append(": ")
                label.append_text(cell_text(child, unit=column.unit))
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
