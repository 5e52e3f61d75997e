"""One definition per job kind: `JobKind.parse` is the exact inverse of `JobKind.build`, and the
agent's dispatcher accepts whatever the kind's model accepts.

Values come from each kind's `example` and from strategies derived from the model's field types
(patterns, bounds, enum members, bools, optional fields absent and present, lists, nested models),
with text that once broke the argv spliced into strings: `,` and `=` (lists were comma-joined,
models `key=value` items), quotes and backslashes (a structure travels as JSON), non-ASCII letters.
A structured field travels as one JSON item (`--<field>-json`); a person may write that JSON in
any layout, and the agent then takes exactly what `build` takes.
"""

from __future__ import annotations

import copy
import json
import string
import types
import typing
import zoneinfo
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import pytest
import trio
from annotated_types import Ge, Gt, Le, Lt, MaxLen, MinLen
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, SecretStr, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from agent.jobs.kinds import all_kinds
from agent.jobs.toolkit.base import JobContext, Kind, run_kind
from agent.jobs.toolkit.output import Output
from agent.sites import SiteRegistry
from contract.job_kinds import CATALOG, JobKind
from contract.job_kinds.argtypes import Timezone, dump_structure, shaped
from contract.job_kinds.base import Slot

KINDS = sorted(CATALOG)
HANDLED = sorted(all_kinds())
_SECRET_ALPHABET = string.ascii_letters + string.digits + "!#%+,-./:=@^_~ "
# A name the time zone pattern allows is almost never a zone the check knows: drawn from the
# pattern, nearly every value was filtered out (seconds of retries a test, then the example).
_TIMEZONE_SHAPE = get_args(Timezone)[1]


# Text that the argv once mangled or that JSON must escape, spliced into generated strings.
SPLICED = [",", "=", "a=b,c", ",=", '"', "'", "\\", '\\"', "é", "données", "日本", "ß", "\u00a0", "\u2028", "{}", "[]"]


# --- strategies from the field types ----------------------------------------------------------------


def _spliced(text: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """`text`'s values, one in four with one of SPLICED put in somewhere (most shapes refuse it,
    and a model of refused values is drawn again: more would slow the test, not widen it)."""
    spliced = st.tuples(text, st.sampled_from(SPLICED), st.integers(0, 64)).map(
        lambda t: t[0][: t[2]] + t[1] + t[0][t[2] :]
    )
    return st.one_of(text, text, text, spliced)


def _bounds(metadata: list[Any]) -> tuple[int, int]:
    low, high = 0, 10**6
    for item in metadata:
        if isinstance(item, Ge):
            low = int(item.ge)  # type: ignore[call-overload]
        elif isinstance(item, Gt):
            low = int(item.gt) + 1  # type: ignore[call-overload]
        elif isinstance(item, Le):
            high = int(item.le)  # type: ignore[call-overload]
        elif isinstance(item, Lt):
            high = int(item.lt) - 1  # type: ignore[call-overload]
    return low, high


def _raw(annotation: Any, metadata: list[Any]) -> st.SearchStrategy[Any]:
    """Candidate values of a type (the caller filters them through the real validator)."""
    origin = get_origin(annotation)
    if origin is Annotated:
        inner, *extra = get_args(annotation)
        return _raw(inner, [*extra, *metadata])
    if origin in (Union, types.UnionType):
        return st.one_of([_raw(alt, metadata) for alt in get_args(annotation)])
    if annotation is type(None):
        return st.none()
    if origin is Literal:
        return st.sampled_from(get_args(annotation))
    if annotation is bool:
        return st.booleans()
    if annotation is int:
        low, high = _bounds(metadata)
        return st.one_of(st.sampled_from([low, high]), st.integers(low, high))  # the bounds, and between
    if annotation is SecretStr:
        return st.text(_SECRET_ALPHABET, min_size=8, max_size=40).map(str.strip).filter(lambda s: len(s) >= 8)
    if origin is list:
        low = next((m.min_length for m in metadata if isinstance(m, MinLen)), 0)
        high = min(next((m.max_length for m in metadata if isinstance(m, MaxLen)), 3), 3)
        return st.lists(_raw(get_args(annotation)[0], []), min_size=low, max_size=max(low, high))
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return model_dicts(annotation, {})
    if annotation is str:
        shape = next((m for m in metadata if isinstance(m, shaped)), None)
        if shape == _TIMEZONE_SHAPE:
            return st.sampled_from(sorted(zoneinfo.available_timezones()))
        if shape is not None:
            return _spliced(st.from_regex(shape.pattern, fullmatch=True))
        return _spliced(st.text(string.ascii_lowercase, min_size=1, max_size=20))
    raise TypeError(f"no strategy for {annotation!r}")


def _valid(adapter: TypeAdapter[Any], value: Any) -> bool:
    try:
        adapter.validate_python(value)
    except ValidationError:
        return False
    return True


def field_values(info: FieldInfo, example: Any = ...) -> st.SearchStrategy[Any]:
    metadata = list(info.metadata)
    annotation = Annotated[info.annotation, *metadata] if metadata else info.annotation
    adapter: TypeAdapter[Any] = TypeAdapter(annotation)
    candidates = _raw(info.annotation, metadata).filter(lambda value: _valid(adapter, value))
    return candidates if example is ... else st.one_of(st.just(example), candidates)


def model_dicts(model: type[BaseModel], example: typing.Mapping[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Raw argument dicts: required fields always, optional ones absent or present."""
    required = {n: field_values(i, example.get(n, ...)) for n, i in model.model_fields.items() if i.is_required()}
    optional = {n: field_values(i, example.get(n, ...)) for n, i in model.model_fields.items() if not i.is_required()}
    return st.fixed_dictionaries(required, optional=optional)


def dumped(entry: JobKind, model: BaseModel) -> dict[str, Any]:
    """A model's values, secrets revealed: what must survive the trip through the argv."""
    values = model.model_dump(mode="json")
    for name in entry.secret_fields:
        secret = getattr(model, name)
        values[name] = secret.get_secret_value() if isinstance(secret, SecretStr) else secret
    return values


def round_trip(entry: JobKind, raw: dict[str, Any]) -> None:
    try:
        model = entry.args.model_validate(raw)
        built = entry.build(raw)
    except ValidationError:
        assume(False)  # a cross-field rule or the argv's central rule refused the combination
        raise
    parsed = entry.parse(built.argv, built.secrets)
    assert dumped(entry, parsed) == dumped(entry, model), built.argv
    assert entry.build(dumped(entry, parsed)).argv == built.argv


# --- build, then parse: the same values -----------------------------------------------------------


@pytest.mark.parametrize("name", KINDS)
def test_every_example_round_trips(name: str) -> None:
    entry = CATALOG[name]
    built = entry.build(dict(entry.example))
    assert dumped(entry, entry.parse(built.argv, built.secrets)) == dumped(
        entry, entry.args.model_validate(entry.example)
    )


# Examples per kind: each run draws new ones (not derandomized), so runs add up; 370 kinds at 12
# each cost the suite two minutes of one worker, most of it drawing values that fit a pattern.
EXAMPLES_PER_KIND = 8


@pytest.mark.parametrize("name", KINDS)
@settings(max_examples=EXAMPLES_PER_KIND, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_generated_values_round_trip(name: str, data: st.DataObject) -> None:
    entry = CATALOG[name]
    round_trip(entry, data.draw(model_dicts(entry.args, entry.example)))


def test_parse_refuses_what_build_never_writes() -> None:
    entry = CATALOG["storage.usage"]
    for argv, where in [
        (["storage", "usage", "--depth"], "--depth"),
        (["storage", "usage", "--depth", "2", "--depth", "3"], "--depth"),
        (["storage", "usage", "--nope"], "--nope"),
        (["storage", "usage", "--json=yes"], "--json"),
        (["storage", "usage", "extra"], "argv"),
        (["storage", "usage", "--depth", "two"], "depth"),
        (["storage", "usage", "--path", "a;b"], "path"),
    ]:
        with pytest.raises(ValidationError) as info:
            entry.parse(argv)
        assert where in {str(error["loc"][0]) for error in info.value.errors()}, (argv, info.value)
    with pytest.raises(ValidationError):
        CATALOG["site.create"].parse(["site", "delete", "example.com"])
    assert entry.parse(["storage", "usage", "--depth=3"]).model_dump() == {"domain": None, "path": "", "depth": 3}


# --- the agent accepts what the model accepts -------------------------------------------------------


# --- a structure: one JSON item, the same validation on both sides ---------------------------------

STRUCTURED = [
    (name, flag)
    for name in KINDS
    for flag, slot in CATALOG[name].slots().items()
    if slot.shape == "structure" and CATALOG[name].builder is None
]


def test_every_list_mapping_and_nested_model_travels_as_structure() -> None:
    """Every field that is not one scalar is a structure: none is flattened into scalar flags."""
    assert len(STRUCTURED) >= 9  # lb.apply's two, ssl, deploy, storage, updates, container's two, litellm
    for name in KINDS:
        for flag, slot in CATALOG[name].slots().items():
            schema = CATALOG[name].args.model_json_schema()["properties"][slot.field]
            alternatives = schema.get("anyOf", [schema])
            is_structure = any(alt.get("type") in ("array", "object") or "$ref" in alt for alt in alternatives)
            assert (slot.shape == "structure") == is_structure, (name, flag)
            assert flag.endswith("-json") == is_structure, (name, flag)


def _with_spliced_string(value: Any, data: st.DataObject) -> Any:
    """`value` (a JSON array or object) with one of its strings, if it has any, given a SPLICED text."""
    paths: list[tuple[Any, ...]] = []

    def walk(item: Any, path: tuple[Any, ...]) -> None:
        if isinstance(item, str):
            paths.append(path)
        elif isinstance(item, dict):
            for key, child in item.items():
                walk(child, (*path, key))
        elif isinstance(item, list):
            for index, child in enumerate(item):
                walk(child, (*path, index))

    walk(value, ())
    if not paths:
        return value
    path = data.draw(st.sampled_from(paths))
    spliced = copy.deepcopy(value)
    parent = spliced
    for step in path[:-1]:
        parent = parent[step]
    old = parent[path[-1]]
    cut = data.draw(st.integers(0, len(old)))
    parent[path[-1]] = old[:cut] + data.draw(st.sampled_from(SPLICED)) + old[cut:]
    return spliced


def _argv_with(argv: list[str], flag: str, text: str) -> list[str]:
    """`argv` with `flag`'s value (if it has one) replaced by `text`, at the end."""
    if flag in argv:
        at = argv.index(flag)
        argv = argv[:at] + argv[at + 2 :]
    return [*argv, flag, text]


@pytest.mark.parametrize(("name", "flag"), STRUCTURED)
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_a_structure_is_taken_or_refused_alike_by_build_and_parse(name: str, flag: str, data: st.DataObject) -> None:
    """A structured value (valid, or with `,`, `=`, quotes, backslashes or non-ASCII text spliced
    into one of its strings), written as JSON in either layout: `parse` takes it exactly when
    `build` does, and then into the same model."""
    entry = CATALOG[name]
    slot: Slot = entry.slots()[flag]
    info = entry.args.model_fields[slot.field]
    value = json.loads(json.dumps(data.draw(field_values(info))))
    if data.draw(st.booleans()):
        value = _with_spliced_string(value, data)
    raw = {**entry.example, slot.field: value}
    try:
        model = entry.args.model_validate(raw)
        built: Any = entry.build(raw)
    except ValidationError:
        model = built = None
    base = entry.build(dict(entry.example))
    text = data.draw(st.sampled_from([dump_structure(value), json.dumps(value, indent=1)]))
    try:
        parsed: Any = entry.parse(_argv_with(base.argv, flag, text), base.secrets)
    except ValidationError:
        parsed = None
    assert (built is None) == (parsed is None), (text, built, parsed)
    if model is not None:
        assert dumped(entry, parsed) == dumped(entry, model), text


def test_a_structured_value_with_commas_and_equals_round_trips_and_a_quote_is_refused_alike() -> None:
    entry = CATALOG["deploy.init"]
    built = entry.build({"domain": "example.com", "shared": ["a=b,c", "x,y=z/é"]})
    assert built.argv[-3:] == ["--shared-json", '["a=b,c","x,y=z/é"]', "--json"]
    assert entry.parse(built.argv).model_dump()["shared"] == ["a=b,c", "x,y=z/é"]
    with pytest.raises(ValidationError):
        entry.build({"domain": "example.com", "shared": ['a"b']})
    for text, where in [('["a\\"b"]', "shared.0"), ("[1,", "--shared-json"), ('{"a": 1}', "shared")]:
        with pytest.raises(ValidationError) as info:
            entry.parse(["deploy", "init", "example.com", "--shared-json", text])
        assert where in {".".join(str(part) for part in error["loc"]) for error in info.value.errors()}, text


def test_every_handler_implements_a_catalog_kind() -> None:
    for name, handler in all_kinds().items():
        assert handler.spec is CATALOG[name], name


def dispatch(entry: JobKind, argv: list[str], secrets: dict[str, str]) -> tuple[int, Any, list[str]]:
    """The real dispatcher with a stub run function: its exit code, what the handler got, stderr."""
    received: list[Any] = []

    async def stub(args: Any, ctx: JobContext, out: Output) -> int:
        received.append(args)
        return 0

    class Lines(Output):
        def __init__(self) -> None:
            self.stderr_lines: list[str] = []

        def lines(self, stream: str, texts: list[str]) -> None:
            if stream == "stderr":
                self.stderr_lines += texts

    out = Lines()
    ctx = JobContext("/nonexistent", "/nonexistent", SiteRegistry("/nonexistent"), "test").with_secrets(secrets)
    code = trio.run(run_kind, {entry.kind: Kind(entry, stub)}, entry.kind, argv, ctx, out)
    return code, received[0] if received else None, out.stderr_lines


@pytest.mark.parametrize("name", HANDLED)
@settings(max_examples=EXAMPLES_PER_KIND, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_the_agent_dispatcher_accepts_what_the_model_accepts(name: str, data: st.DataObject) -> None:
    entry = CATALOG[name]
    raw = data.draw(model_dicts(entry.args, entry.example))
    try:
        model = entry.args.model_validate(raw)
        built = entry.build(raw)
    except ValidationError:
        assume(False)
        raise
    code, received, stderr = dispatch(entry, built.argv, built.secrets)
    assert code == 0 and not stderr, (built.argv, stderr)
    assert dumped(entry, received) == dumped(entry, model)


def test_the_agent_dispatcher_refuses_what_the_model_refuses() -> None:
    entry = CATALOG["cron.add"]
    code, received, stderr = dispatch(entry, ["cron", "add", "example.com", "--schedule", "61 * * * *"], {})
    assert (code, received) == (2, None)
    assert stderr[0] == entry.usage() and "cron add: error: schedule: Value error" in stderr[1]
    assert "cron add: error: command: Field required" in stderr[2]
