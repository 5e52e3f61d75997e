"""A form generated from a job kind's JSON Schema, validated as you type.

`parse_schema` turns the `args_schema` of a kind (what pydantic's `model_json_schema` writes:
`properties`, `required`, `anyOf: [X, null]` for optional values, `$ref` into `$defs`) into
`FieldSpec`s; `check_value` validates one field's raw input against its schema (`pattern`,
`minLength`/`maxLength`, `minimum`/`maximum`, `enum`, `minItems`/`maxItems`) and converts it.
Both are pure, so they are tested without a screen.

`JobForm` builds one row per field: a label (`*` marks a required field), an input fitting the
type (text, integer, checkbox, select, a comma-separated list, a multi-select, JSON for the rest),
a hint, and an error line filled as you type and by the server's `validation_error` details.
Secret fields (the kind's `secret_fields`) are masked inputs and are never pre-filled. A field that
names a thing of the server (its `Source`, see `tui.jobs.choices`) is a text input that also
offers a picker of what exists: ↓ or F2 asks for it (`JobForm.PickRequested`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, ClassVar, Literal

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Input, Label, Select, Static

from tui.jobs.choices import Source
from tui.text import load_tcss, printable
from tui.widgets.select import FormSelect
from tui.widgets.toggles import Checkbox, SelectionList

FieldKind = Literal["string", "integer", "number", "boolean", "enum", "string_list", "enum_list", "const", "json"]


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()
"""No default in the schema (distinct from a default of `null`)."""


@dataclass(frozen=True)
class FieldSpec:
    """One argument of a job kind, as the form needs it."""

    name: str
    title: str
    kind: FieldKind
    required: bool = False
    nullable: bool = False
    default: Any = MISSING
    description: str = ""
    secret: bool = False
    pattern: str | None = None
    min_length: int | None = None
    max_length: int | None = None
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: float | None = None
    exclusive_maximum: float | None = None
    choices: tuple[Any, ...] = ()
    min_items: int | None = None
    max_items: int | None = None
    item: FieldSpec | None = None  # the items of a list

    @property
    def has_default(self) -> bool:
        return self.default is not MISSING and self.default is not None

    def hint(self) -> str:
        """The description and the constraints in words, e.g. `a port · 1-65535 · default 8080`."""
        parts: list[str] = []
        if self.description:
            parts.append(self.description)
        if self.kind in ("string_list", "enum_list"):
            parts.append("comma-separated" if self.kind == "string_list" else "space toggles")
            if self.item is not None and self.item.description and self.item.description not in parts:
                parts.append(self.item.description)
        constraints = _constraint_words(self)
        if constraints:
            parts.append(constraints)
        if self.has_default and not self.secret and self.kind not in ("boolean", "const"):
            parts.append(f"default {_show(self.default)}")
        return " · ".join(parts)


def _constraint_words(spec: FieldSpec) -> str:
    words: list[str] = []
    low, high = spec.minimum, spec.maximum
    if low is not None and high is not None:
        words.append(f"{_num(low)}-{_num(high)}")
    elif low is not None:
        words.append(f"at least {_num(low)}")
    elif high is not None:
        words.append(f"at most {_num(high)}")
    if spec.kind == "string" and not spec.secret:
        if spec.min_length and spec.max_length:
            words.append(f"{spec.min_length}-{spec.max_length} characters")
        elif spec.max_length:
            words.append(f"up to {spec.max_length} characters")
    if spec.secret and spec.min_length:
        words.append(f"at least {spec.min_length} characters")
    if spec.max_items:
        words.append(f"up to {spec.max_items} items")
    return ", ".join(words)


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list):
        return ", ".join(map(str, value)) or "none"
    return str(value)


# --- the schema ----------------------------------------------------------------------------------


def parse_schema(schema: Mapping[str, Any], secret_fields: Iterable[str] = ()) -> list[FieldSpec]:
    """The fields of an object schema, in its order (required first is not imposed: the kind decides)."""
    secrets = set(secret_fields)
    definitions = schema.get("$defs") or schema.get("definitions") or {}
    required = set(schema.get("required") or ())
    properties = schema.get("properties") or {}
    return [
        _field(name, dict(prop), name in required, name in secrets, definitions)
        for name, prop in properties.items()
        if isinstance(prop, Mapping)
    ]


def _resolve(prop: Mapping[str, Any], definitions: Mapping[str, Any]) -> dict[str, Any]:
    """Follow a local `$ref` (and a one-item `allOf` wrapping one), keeping the outer keywords."""
    out = dict(prop)
    all_of = out.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and isinstance(all_of[0], Mapping):
        out.pop("allOf")
        out = {**all_of[0], **out}
    ref = out.pop("$ref", None)
    if isinstance(ref, str) and ref.startswith("#/"):
        target = definitions.get(ref.rsplit("/", 1)[-1])
        if isinstance(target, Mapping):
            out = {**target, **out}
    return out


# Words that read as letters: `tls` is shown `TLS`, `php_version` `PHP version`.
ACRONYMS = frozenset(
    {"api", "cidr", "cpu", "db", "dns", "gb", "gid", "http", "https", "id", "ip", "lb", "mb", "php", "rpm", "sql"}
    | {"ssh", "ssl", "tls", "tpm", "ttl", "uid", "url", "usd"}
)


def humanize(name: str) -> str:
    """A field name in words: `health_check` → `Health check`, `tls` → `TLS`."""
    words = [word for word in re.split(r"[_\-\s]+", name) if word]
    shown = [word.upper() if word.lower() in ACRONYMS else word.lower() for word in words]
    if shown and shown[0].islower():
        shown[0] = shown[0].capitalize()
    return " ".join(shown) or name


def _title(name: str, prop: Mapping[str, Any]) -> str:
    """The field's own title when one was written, else its name in words: never the title of a
    model or enum it refers to (`LbHealthCheck` for `health_check`), which names a class, nor
    pydantic's default (`Php Version`)."""
    title = prop.get("title")
    if isinstance(title, str) and title.strip() and title != name.replace("_", " ").title():
        return title.strip()
    return humanize(name)


def _field(name: str, prop: dict[str, Any], required: bool, secret: bool, definitions: Mapping[str, Any]) -> FieldSpec:
    title = _title(name, prop)  # before `$ref` is followed: the target's title names its class
    prop = _resolve(prop, definitions)
    nullable = False
    alternatives = prop.get("anyOf") or prop.get("oneOf")
    if isinstance(alternatives, list):
        rest = [alt for alt in alternatives if not (isinstance(alt, Mapping) and alt.get("type") == "null")]
        nullable = len(rest) < len(alternatives)
        if len(rest) == 1 and isinstance(rest[0], Mapping):
            outer = {k: v for k, v in prop.items() if k not in ("anyOf", "oneOf")}
            prop = {**_resolve(rest[0], definitions), **outer}
        else:
            prop = {k: v for k, v in prop.items() if k not in ("anyOf", "oneOf")} | {"type": "json"}
    type_ = prop.get("type")
    if isinstance(type_, list):
        nullable = nullable or "null" in type_
        others = [t for t in type_ if t != "null"]
        type_ = others[0] if len(others) == 1 else "json"
    common: dict[str, Any] = {
        "name": name,
        "title": title,
        "required": required,
        "nullable": nullable,
        "default": prop.get("default", MISSING),
        "description": str(prop.get("description") or ""),
        "secret": secret or prop.get("format") == "password" or bool(prop.get("writeOnly")),
    }
    if "const" in prop:
        return FieldSpec(kind="const", choices=(prop["const"],), **common)
    if isinstance(prop.get("enum"), list):
        return FieldSpec(kind="enum", choices=tuple(prop["enum"]), **common)
    if type_ == "string":
        return FieldSpec(kind="string", **common, **_string_limits(prop))
    if type_ == "integer":
        return FieldSpec(kind="integer", **common, **_number_limits(prop))
    if type_ == "number":
        return FieldSpec(kind="number", **common, **_number_limits(prop))
    if type_ == "boolean":
        return FieldSpec(kind="boolean", **common)
    if type_ == "array":
        items = _resolve(prop.get("items") or {}, definitions)
        limits: dict[str, Any] = {"min_items": prop.get("minItems"), "max_items": prop.get("maxItems")}
        if isinstance(items.get("enum"), list):
            item = FieldSpec(name=name, title=common["title"], kind="enum", choices=tuple(items["enum"]))
            return FieldSpec(kind="enum_list", item=item, **common, **limits)
        if items.get("type") == "string":
            item = FieldSpec(
                name=name,
                title=common["title"],
                kind="string",
                required=True,
                description=str(items.get("description") or ""),
                **_string_limits(items),
            )
            return FieldSpec(kind="string_list", item=item, **common, **limits)
    return FieldSpec(kind="json", **common)


def _string_limits(prop: Mapping[str, Any]) -> dict[str, Any]:
    return {"pattern": prop.get("pattern"), "min_length": prop.get("minLength"), "max_length": prop.get("maxLength")}


def _number_limits(prop: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "minimum": prop.get("minimum"),
        "maximum": prop.get("maximum"),
        "exclusive_minimum": prop.get("exclusiveMinimum"),
        "exclusive_maximum": prop.get("exclusiveMaximum"),
    }


# --- validation ----------------------------------------------------------------------------------


@lru_cache(maxsize=512)
def _compiled(pattern: str) -> re.Pattern[str] | None:
    try:
        return re.compile(pattern)
    except re.error:
        return None  # a pattern Python cannot read: the server still checks it


class Invalid(ValueError):
    """A value that does not fit its field; the message is for the user."""


def check_value(spec: FieldSpec, raw: Any) -> Any:
    """The JSON value of a field from its raw input (text, bool, list); raise `Invalid` if it does not fit.

    An empty optional field gives None (left out of the job's arguments: the server's default
    applies); an empty required one is `Invalid("required")`.
    """
    if spec.kind == "boolean":
        return bool(raw)
    if spec.kind == "const":
        return spec.choices[0]
    if spec.kind == "enum_list":
        chosen = list(raw or [])
        _check_items(spec, chosen)
        return chosen or None
    if spec.kind == "enum":
        if raw is None or raw == "":
            return _empty(spec)
        if raw not in spec.choices:
            raise Invalid("pick one of " + ", ".join(map(str, spec.choices)))
        return raw
    text = "" if raw is None else str(raw)
    if text.strip() == "" and not (spec.kind == "string" and text and spec.secret):
        return _empty(spec)
    if spec.kind in ("integer", "number"):
        return _check_number(spec, text.strip())
    if spec.kind == "string_list":
        items = [item.strip() for item in text.split(",") if item.strip()]
        assert spec.item is not None
        for position, item in enumerate(items, 1):
            try:
                _check_string(spec.item, item)
            except Invalid as exc:
                raise Invalid(f"item {position} ({item}): {exc}") from None
        _check_items(spec, items)
        return items or None
    if spec.kind == "json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise Invalid(f"not valid JSON ({exc.msg}, column {exc.colno})") from None
    return _check_string(spec, text)


def _empty(spec: FieldSpec) -> None:
    if spec.required:
        raise Invalid("required")
    return None


def _check_string(spec: FieldSpec, text: str) -> str:
    if spec.min_length is not None and len(text) < spec.min_length:
        raise Invalid(f"at least {spec.min_length} character{'s' if spec.min_length != 1 else ''}")
    if spec.max_length is not None and len(text) > spec.max_length:
        raise Invalid(f"at most {spec.max_length} characters")
    if spec.pattern:
        compiled = _compiled(spec.pattern)
        if compiled is not None and compiled.search(text) is None:
            # The description (the expected form in words) is on the hint line, just above.
            raise Invalid("not in the expected form" if spec.description else f"must match {spec.pattern}")
    return text


def _check_number(spec: FieldSpec, text: str) -> int | float:
    value: int | float
    try:
        value = int(text) if spec.kind == "integer" else float(text)
    except ValueError:
        raise Invalid("a whole number" if spec.kind == "integer" else "a number") from None
    if spec.minimum is not None and value < spec.minimum:
        raise Invalid(f"at least {_num(spec.minimum)}")
    if spec.maximum is not None and value > spec.maximum:
        raise Invalid(f"at most {_num(spec.maximum)}")
    if spec.exclusive_minimum is not None and value <= spec.exclusive_minimum:
        raise Invalid(f"more than {_num(spec.exclusive_minimum)}")
    if spec.exclusive_maximum is not None and value >= spec.exclusive_maximum:
        raise Invalid(f"less than {_num(spec.exclusive_maximum)}")
    return value


def _check_items(spec: FieldSpec, items: Sequence[Any]) -> None:
    if not items and spec.required:
        raise Invalid("required")
    if items and spec.min_items is not None and len(items) < spec.min_items:
        raise Invalid(f"at least {spec.min_items} item{'s' if spec.min_items != 1 else ''}")
    if spec.max_items is not None and len(items) > spec.max_items:
        raise Invalid(f"at most {spec.max_items} items")


def field_of_error(loc: Sequence[Any], names: Iterable[str]) -> str | None:
    """The field a server-side error is about: `["body", "args", "domain", ...]` → `domain`."""
    known = set(names)
    parts = [str(part) for part in loc]
    if "args" in parts:
        parts = parts[parts.index("args") + 1 :]
    for part in parts:
        if part in known:
            return part
    return None


# --- the widget ----------------------------------------------------------------------------------


def _widget_id(name: str) -> str:
    return "arg-" + re.sub(r"[^A-Za-z0-9_-]", "_", name)


class PickableInput(Input):
    """A text input whose value may also be picked from what exists on the server (↓ or F2)."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("down,f2", "pick", "Pick", show=False)]

    def __init__(self, *args: Any, field_name: str, source: Source, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.field_name = field_name
        self.source = source

    def action_pick(self) -> None:
        form = next((a for a in self.ancestors if isinstance(a, JobForm)), None)
        if form is not None:
            form.post_message(JobForm.PickRequested(form, self.field_name, self.source))


@dataclass
class _Row:
    spec: FieldSpec
    control: Widget
    error: Static
    touched: bool = False
    server_error: str | None = None
    problems: list[str] = field(default_factory=list)


class JobForm(VerticalScroll):
    """The fields of one job kind. `values()` gives the arguments, or raises if any is invalid."""

    DEFAULT_CSS = load_tcss(__file__)

    class Submitted(Message):
        """Enter in a text field or on a closed dropdown: the user wants to run the job."""

        def __init__(self, form: JobForm) -> None:
            super().__init__()
            self.form = form

    class Edited(Message):
        """A field changed (its error line is up to date): the form's status may change too."""

        def __init__(self, form: JobForm) -> None:
            super().__init__()
            self.form = form

    class PickRequested(Message):
        """The user asks to pick the value of `name` from what exists (`source`)."""

        def __init__(self, form: JobForm, name: str, source: Source) -> None:
            super().__init__()
            self.form = form
            self.name = name
            self.source = source

    NO_ARGUMENTS = "This job takes no arguments."

    def __init__(
        self,
        schema: Mapping[str, Any],
        secret_fields: Iterable[str] = (),
        *,
        sources: Mapping[str, Source] | None = None,
        id: str | None = None,
    ) -> None:
        super().__init__(id=id)
        self.specs = parse_schema(schema, secret_fields)
        # Only text fields can take a picked value (and still be typed in).
        self.sources = {
            spec.name: source
            for spec in self.specs
            if spec.kind == "string" and not spec.secret and (source := (sources or {}).get(spec.name)) is not None
        }
        self._rows: dict[str, _Row] = {}

    # --- building -------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Static("", classes="job-form--general", markup=False)
        if not self.specs:
            yield Static(self.NO_ARGUMENTS, classes="job-form--empty")
        for spec in self.specs:
            control = self._control(spec)
            error = Static("", classes="job-field--error", markup=False)
            self._rows[spec.name] = _Row(spec, control, error)
            with Vertical(classes="job-field"):
                yield Label(self._label(spec), classes="job-field--label")
                yield control
                hint = spec.hint()
                if spec.name in self.sources:
                    pick = f"↓: pick one of the {self.sources[spec.name].noun}"
                    hint = f"{pick} · {hint}" if hint else pick  # first: a long description must not hide it
                if hint:
                    yield Static(printable(hint), classes="job-field--hint", markup=False)
                yield error

    @staticmethod
    def _label(spec: FieldSpec) -> Text:
        label = Text(printable(spec.title), style="bold")
        if spec.required:
            label.append(" *", style="bold red")
        if spec.secret:
            label.append("  (secret)", style="dim")
        return label

    def _control(self, spec: FieldSpec) -> Widget:
        widget_id = _widget_id(spec.name)
        if spec.kind == "boolean":
            return Checkbox(spec.title, value=bool(spec.default is True), id=widget_id, compact=True)
        if spec.kind == "enum":
            options = [(str(choice), choice) for choice in spec.choices]
            start = spec.default if spec.default in spec.choices else Select.NULL
            blank = not spec.required or start is Select.NULL
            return FormSelect(options, value=start, allow_blank=blank, prompt="—", id=widget_id, compact=True)
        if spec.kind == "enum_list":
            assert spec.item is not None
            chosen = set(spec.default) if isinstance(spec.default, list) else set()
            return SelectionList[Any](
                *((str(c), c, c in chosen) for c in spec.item.choices), id=widget_id, compact=True
            )
        if spec.kind == "const":
            return Static(Text(_show(spec.choices[0]), style="dim"), id=widget_id)
        value = ""
        if spec.has_default and not spec.secret:
            value = (
                _show(spec.default)
                if spec.kind == "string_list"
                else (json.dumps(spec.default) if spec.kind == "json" else str(spec.default))
            )
        placeholder = {"string_list": "a, b, c", "json": "JSON"}.get(spec.kind, "")
        if not value and spec.kind in ("string", "integer", "number"):
            placeholder = "(required)" if spec.required else "(optional)"
        input_type = {"integer": "integer", "number": "number"}.get(spec.kind, "text")
        settings: dict[str, Any] = {
            "placeholder": placeholder,
            "password": spec.secret,
            "type": input_type,
            "id": widget_id,
            "compact": True,
            "select_on_focus": False,
        }
        source = self.sources.get(spec.name)
        if source is not None:
            return PickableInput(value, field_name=spec.name, source=source, **settings)
        return Input(value, **settings)

    # --- values ---------------------------------------------------------------------------

    def raw_value(self, name: str) -> Any:
        control = self._rows[name].control
        if isinstance(control, Checkbox):
            return control.value
        if isinstance(control, Select):
            return None if control.value is Select.NULL else control.value
        if isinstance(control, SelectionList):
            return list(control.selected)
        if isinstance(control, Input):
            return control.value
        return None

    def set_raw_value(self, name: str, value: Any) -> None:
        """Fill a field as if typed (tests, and arguments of an earlier job)."""
        control = self._rows[name].control
        if isinstance(control, Checkbox):
            control.value = bool(value)
        elif isinstance(control, Select):
            control.value = Select.NULL if value is None else value
        elif isinstance(control, SelectionList):
            control.deselect_all()
            for item in value or []:
                control.select(item)
        elif isinstance(control, Input):
            control.value = ", ".join(value) if isinstance(value, list) else str(value)

    def check(self, name: str) -> Any:
        """Validate one field; its error line shows the problem (once the field was touched)."""
        row = self._rows[name]
        try:
            value = check_value(row.spec, self.raw_value(name))
        except Invalid as exc:
            row.problems = [str(exc)]
            self._show_row(row)
            raise
        row.problems = []
        self._show_row(row)
        return value

    def values(self) -> dict[str, Any]:
        """The arguments of the job; raises `Invalid` (every field's error shown) if any field is wrong."""
        args: dict[str, Any] = {}
        problems = 0
        for name, row in self._rows.items():
            row.touched = True
            row.server_error = None
            try:
                value = self.check(name)
            except Invalid:
                problems += 1
                continue
            if value is not None and row.spec.kind != "const":
                args[name] = value
        self.show_general_error(None)
        if problems:
            raise Invalid(f"{problems} field{'s' if problems != 1 else ''} to fix")
        return args

    @property
    def invalid_fields(self) -> list[str]:
        return [name for name, row in self._rows.items() if row.problems or row.server_error]

    def error_of(self, name: str) -> str:
        """What the error line of `name` says ("" when fine)."""
        row = self._rows[name]
        return row.server_error or (row.problems[0] if row.problems and row.touched else "")

    def focus_first_invalid(self) -> None:
        for name in self.invalid_fields:
            self._rows[name].control.focus()
            return

    def focus_field(self, name: str) -> None:
        self._rows[name].control.focus()

    def focus_first(self) -> None:
        for row in self._rows.values():
            if row.control.focusable:
                row.control.focus()
                return

    def show_server_errors(self, errors: Sequence[Mapping[str, Any]]) -> list[str]:
        """Put the `{loc, msg}` errors of a `validation_error` next to their fields; the rest on top.

        Returns the messages that belong to no field.
        """
        general: list[str] = []
        for error in errors:
            loc = error.get("loc") or []
            message = str(error.get("msg") or "not valid")
            name = field_of_error(loc if isinstance(loc, list) else [loc], self._rows)
            if name is None:
                where = ".".join(str(p) for p in loc if p not in ("body", "args")) if isinstance(loc, list) else ""
                general.append(f"{where}: {message}" if where else message)
                continue
            row = self._rows[name]
            row.server_error = message
            self._show_row(row)
        self.show_general_error("; ".join(general) or None)
        self.focus_first_invalid()
        return general

    def show_general_error(self, message: str | None) -> None:
        line = self.query_one(".job-form--general", Static)
        line.update(printable(message or ""))
        line.set_class(bool(message), "-shown")

    def _show_row(self, row: _Row) -> None:
        message = self.error_of(row.spec.name)
        row.error.update(f"✘ {message}" if message else "")
        row.error.set_class(bool(message), "-shown")
        row.control.set_class(bool(message), "-invalid")

    # --- as you type ----------------------------------------------------------------------

    def _row_of(self, widget: Widget | None) -> _Row | None:
        for row in self._rows.values():
            if row.control is widget:
                return row
        return None

    def _changed(self, widget: Widget | None) -> None:
        row = self._row_of(widget)
        if row is None:
            return
        row.touched = True
        row.server_error = None
        self.show_general_error(None)  # what the server said of the arguments as a whole: checked again on run
        try:
            self.check(row.spec.name)
        except Invalid:
            pass
        self.post_message(self.Edited(self))

    @on(Input.Changed)
    def _input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self._changed(event.input)

    @on(Select.Changed)
    def _select_changed(self, event: Select.Changed) -> None:
        event.stop()
        self._changed(event.select)

    @on(Checkbox.Changed)
    def _checkbox_changed(self, event: Checkbox.Changed) -> None:
        event.stop()
        self._changed(event.checkbox)

    @on(SelectionList.SelectedChanged)
    def _selection_changed(self, event: SelectionList.SelectedChanged[Any]) -> None:
        event.stop()
        self._changed(event.selection_list)

    @on(Input.Submitted)
    @on(FormSelect.Submitted)
    def _input_submitted(self, event: Input.Submitted | FormSelect.Submitted) -> None:
        event.stop()
        self.post_message(self.Submitted(self))
