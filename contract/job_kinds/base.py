"""The machinery of the job catalog: `JobKind`, `BuiltJob`, the argv builder and the domain policy.

The per-area modules (`web.py`, `system.py`, ...) only declare argument models and call `kind(...)`; the
rules live here, once:

- group and plan come from the domain (its module's `POLICY`, a `DomainPolicy`), a read kind is
  always `observe`;
- the argv is `[domain, action, *positionals, *flags]`, read kinds end with `--json` (unless they
  print raw lines), mutations end with `--json` when they create or delete something (the agent
  reports the object) or when the entry says so;
- every flag is `--json` or `--<field name with '-' for '_'>`, so a kind's flags are known from
  its model (`JobKind.flags`);
- a bool is a flag present when true (bool fields default to false); None and "" are omitted;
- a structured field (a list, a mapping, a nested model, or a list of models) travels as
  structure: its flag is `--<field>-json` and its value one argv item holding the field's JSON
  (`--aliases-json '["www.example.com"]'`, `--health-check-json '{"path":"/","interval_s":10}'`);
  an empty list or mapping is omitted. Any text a field's shape takes survives the trip (`,`, `=`,
  non-ASCII letters), and every string inside obeys the central rule as a flag's value does;
- a `SecretStr` field is never put in the argv: it travels in `BuiltJob.secrets` (only a
  top-level field may be secret, so a structure never holds one);
- `JobKind.build` checks the whole finished argv against the central rule of `argtypes`.
"""

from __future__ import annotations

import functools
import importlib
import re
import sys
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, SecretStr, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import InitErrorDetails, PydanticCustomError

from contract.job_kinds.argtypes import (
    Id,
    RelativePath,
    SiteDomain,
    Slug,
    SystemUser,
    dump_structure,
    load_structure,
    structure_problem,
    value_problem,
)
from contract.models import Plan

Group = Literal["observe", "content", "infra", "sysadmin"]
# content and infra are side by side (operators have both); sysadmin is above them.
GROUP_RANK: Mapping[Group, int] = types.MappingProxyType({"observe": 0, "content": 1, "infra": 1, "sysadmin": 2})


class Args(BaseModel):
    """Base of every job argument model: unknown fields are refused."""

    model_config = ConfigDict(extra="forbid")


class NoArgs(Args):
    """No arguments."""


class Result(BaseModel):
    """Base of every job result model (what Ansible calls `RETURN`): what a kind prints with
    ``--json``. Unknown fields are refused, so a handler cannot drift from its declared result."""

    model_config = ConfigDict(extra="forbid")


# --- argument models several domains share ------------------------------------------------------


class DomainArgs(Args):
    domain: SiteDomain


class OptionalDomain(Args):
    domain: SiteDomain | None = None


class NameArgs(Args):
    name: Slug


class IdArgs(Args):
    id: Id


class UserArgs(Args):
    username: SystemUser


FilePath = RelativePath  # a path relative to its scope (the site, or the home)


# --- result models several domains share --------------------------------------------------------


class DiskSpace(Result):
    """The space of one file system (statvfs), as ``storage.*`` and ``metrics.get`` report it."""

    path: str = Field(description="where it is mounted (or the path asked about)")
    total: int = Field(description="its size, bytes")
    used: int = Field(description="used, bytes")
    free: int = Field(description="free, bytes (root's reserve included)")
    available: int = Field(description="free for an unprivileged user, bytes")
    used_percent: float = Field(description="used, percent of what a user may fill (as df shows it)")


@dataclass(frozen=True)
class DomainPolicy:
    """Who runs a domain's mutations and from which plan: each catalog module's ``POLICY``."""

    group: Group  # the group of the domain's mutation kinds
    min_plan: Plan
    # The routes that make this domain's jobs, when they are not plain jobs: their kinds carry
    # what those routes check (other orgs' servers, resolved addresses, revisions...), so the
    # jobs route refuses them (`422 kind_not_allowed`) and a client does not offer them.
    route: str | None = None


CONTENT = DomainPolicy("content", "free")
SYSADMIN = DomainPolicy("sysadmin", "free")
INFRA = DomainPolicy("infra", "free")
INFRA_PRO = DomainPolicy("infra", "pro")


# A mutation whose action ends with one of these verbs reports the object it made or removed.
JSON_MUTATION_VERBS = frozenset({"create", "add", "delete", "remove", "drop", "install", "uninstall", "issue"})

KIND_RE = re.compile(r"^[a-z]+\.[a-z][a-z0-9]*(?:-[a-z0-9]+)*$")
FLAG_RE = re.compile(r"^--[a-z][a-z0-9]*(?:-[a-z0-9]+)*$")
JSON_FLAG = "--json"
STRUCTURE_FLAG_SUFFIX = "-json"  # `--<field>-json`: the flag of a structured field


@dataclass(frozen=True)
class ScopedPath:
    """A field of a kind's arguments that names a path on the server, and what it is relative to:
    the site named by the field `site` (a domain), or, when that field is None (or `site` is
    None), the home (the server-root scope, /home). The control plane checks the caller's scope
    before dispatch, as the file routes do (the home: owners and super-admins only); the agent
    resolves the path beneath that scope through its jail."""

    field: str
    site: str | None = None  # the field holding the site's domain

    def scope(self, args: BaseModel | Mapping[str, Any]) -> tuple[Literal["site", "root"], str | None]:
        """("site", domain) or ("root", None) for these (validated) arguments."""
        domain = None
        if self.site is not None:
            domain = args.get(self.site) if isinstance(args, Mapping) else getattr(args, self.site)
        return ("site", str(domain)) if domain else ("root", None)


@dataclass(frozen=True)
class BuiltJob:
    """A validated job, ready to dispatch: `argv` and `secrets` go to the agent's `job.run`."""

    args: dict[str, Any]  # validated, JSON-able, secrets INCLUDED (the caller masks them)
    argv: list[str]  # never contains a secret value
    secrets: dict[str, str]  # secret field name -> value (only non-empty ones)


Item = Literal["word", "flag", "structure"]


class Argv:
    """An argv under construction; it knows which elements are flags, plain values or structures."""

    def __init__(self, domain: str, action: str) -> None:
        self.items: list[tuple[str, Item]] = [(domain, "word"), (action, "word")]

    def value(self, value: str) -> None:
        self.items.append((value, "word"))

    def flag(self, flag: str, value: str | None = None) -> None:
        self.items.append((flag, "flag"))
        if value is not None:
            self.items.append((value, "word"))

    def structure(self, flag: str, text: str) -> None:
        """A structured field's flag and its JSON (`dump_structure`)."""
        self.items.append((flag, "flag"))
        self.items.append((text, "structure"))


Builder = Callable[[Any], Argv]


@dataclass(frozen=True, eq=False)  # identity equality: kinds are singletons
class JobKind:
    """One whitelisted job kind. Build entries with `kind(...)`, which derives group, plan, secret
    fields, flags and `json` from the rules of this module and refuses a malformed entry."""

    kind: str
    domain: str
    action: str
    summary: str
    args: type[BaseModel]
    read: bool
    group: Group  # "observe" for every read kind
    min_plan: Plan
    secret_fields: tuple[str, ...]
    positional: tuple[str, ...] = ()
    json: bool = False  # the argv ends with --json
    example: Mapping[str, Any] = field(default_factory=dict)  # valid args: the tests build every example
    flags: frozenset[str] = frozenset()  # every flag this kind's argv may carry
    builder: Builder | None = None  # None: the generic builder (positionals, then flags)
    paths: tuple[ScopedPath, ...] = ()  # the fields that name a path on the server, and their scope
    route: str | None = None  # not a plain job: only these routes make it (`DomainPolicy.route`)
    # What the kind prints with --json: a `Result` model or a type over them (`list[SiteRow]`).
    # None: no result declared (a kind without --json prints lines for a person).
    result: Any = None
    # Destructive (what it removes cannot be had back): the positional field whose value a client
    # asks to be typed again before it runs, as GitHub asks for a repository's name.
    confirm: str | None = None

    def result_schema(self) -> dict[str, Any] | None:
        """The JSON Schema of the result, as `GET /v1/job-kinds` publishes it (None: none declared)."""
        return None if self.result is None else _result_adapter(self.result).json_schema()

    def dump_result(self, obj: Any) -> Any:
        """`obj` validated by the result model and dumped as JSON-able data.

        Raises:
            RuntimeError: no result model is declared for this kind.
            pydantic.ValidationError: `obj` is not what the kind declares (a handler's bug).
        """
        if self.result is None:
            raise RuntimeError(f"{self.kind} declares no result model")
        adapter = _result_adapter(self.result)
        # by alias: a result field named as a BaseModel attribute (`schema`) is declared `schema_`
        return adapter.dump_python(adapter.validate_python(obj), mode="json", by_alias=True)

    def build(self, raw_args: dict[str, Any]) -> BuiltJob:
        """Validate `raw_args` (raises pydantic.ValidationError), build the argv, split the secrets out."""
        model = self.args.model_validate(raw_args)
        argv = self.builder(model) if self.builder is not None else self._generic(model)
        secrets: dict[str, str] = {}
        for name in self.secret_fields:
            secret = getattr(model, name)
            if isinstance(secret, SecretStr) and secret.get_secret_value():
                secrets[name] = secret.get_secret_value()
        out = self._checked(argv, secrets)
        args = model.model_dump(mode="json")
        for name in self.secret_fields:
            args[name] = secrets.get(name)
        return BuiltJob(args=args, argv=out, secrets=secrets)

    def parse(self, argv: Sequence[str], secrets: Mapping[str, str] | None = None) -> BaseModel:
        """The inverse of `build`: validate an argv (and the secrets given beside it) into this
        kind's model. Raises pydantic.ValidationError, each error located at a field or a flag.

        Flags may come in any order and positionals between them; `--json` is accepted (and
        ignored: the caller reads it with `wants_json`) when the kind's argv may carry it;
        `--flag=value` is accepted for `--flag value`."""
        if self.builder is not None:
            raise RuntimeError(f"{self.kind}: an argv from a custom builder cannot be parsed")
        if list(argv[:2]) != [self.domain, self.action]:
            raise _argv_error([_error(("argv",), " ".join(argv[:2]), f"must start with {self.domain} {self.action}")])
        slots = self.slots()
        raw: dict[str, Any] = {}
        errors: list[InitErrorDetails] = []
        unsafe: list[InitErrorDetails] = []
        positionals: list[str] = []
        tokens = list(argv[2:])
        index = 0
        while index < len(tokens):
            token = tokens[index]
            index += 1
            if not token.startswith("-"):
                positionals.append(token)
                continue
            flag, has_inline, inline = token.partition("=")
            if flag == JSON_FLAG and self.json and not has_inline:
                continue
            slot = slots.get(flag)
            if slot is None:
                errors.append(_error((flag,), token, "unknown flag"))
                continue
            if slot.shape == "bool":
                if has_inline:
                    errors.append(_error((flag,), token, "this flag takes no value"))
                else:
                    raw[slot.field] = True
                continue
            if has_inline:
                value = inline
            elif index < len(tokens) and not tokens[index].startswith("-"):
                value = tokens[index]
                index += 1
            else:
                errors.append(_error((flag,), flag, "expected a value after the flag"))
                continue
            if slot.field in raw:
                errors.append(_error((flag,), value, "given more than once"))
                continue
            try:
                raw[slot.field], problem = slot.take(value)
            except ValueError as exc:
                errors.append(_error((flag,), value, f"argument {exc}"))
                continue
            if problem is not None:
                unsafe.append(_error((flag,), value, f"argument {problem}"))
        if len(positionals) > len(self.positional):
            extra = positionals[len(self.positional) :]
            errors.append(_error(("argv",), " ".join(extra), f"unexpected argument(s): {' '.join(extra)}"))
        for name, value in zip(self.positional, positionals, strict=False):
            problem = value_problem(value)
            if problem is not None:
                unsafe.append(_error((name,), value, f"argument {problem}"))
            raw[name] = _coerce(self.args.model_fields[name].annotation, value)
        for name, value in (secrets or {}).items():
            if name in self.secret_fields:
                raw[name] = value
            else:
                errors.append(_error(("secrets", name), "***", "not a secret field of this kind"))
        if errors:
            raise _argv_error(errors, self.kind)
        model = self.args.model_validate(raw)  # its errors name the field
        if unsafe:  # the central rule, as `build` applies it, over what the model let through
            raise _argv_error(unsafe, self.kind)
        return model

    def wants_json(self, argv: Sequence[str]) -> bool:
        """Whether `argv` asks for JSON output (a terminal may leave `--json` out)."""
        return self.json and JSON_FLAG in argv[2:]

    def slots(self) -> Mapping[str, Slot]:
        """Every flag of this kind (not `--json`) and the field it fills."""
        return _slots(self.args, self.positional + self.secret_fields)

    def usage(self) -> str:
        """One line in the style of argparse: `usage: site create DOMAIN [--profile PROFILE] [--json]`."""
        parts = [self.domain, self.action, *(name.upper() for name in self.positional)]
        for flag, slot in self.slots().items():
            text = flag if slot.shape == "bool" else f"{flag} {slot.metavar}"
            parts.append(text if slot.required else f"[{text}]")
        if self.json:
            parts.append(f"[{JSON_FLAG}]")
        return "usage: " + " ".join(parts)

    def help(self) -> str:
        """A `--help` text generated from the model's fields, their descriptions and bounds."""
        lines = [self.usage(), "", self.summary]
        schema = self.args.model_json_schema()
        rows = [(name.upper(), _field_help(schema, (name,))) for name in self.positional]
        rows += [
            (flag if slot.shape == "bool" else f"{flag} {slot.metavar}", _field_help(schema, (slot.field,)))
            for flag, slot in self.slots().items()
        ]
        if self.json:
            rows.append((JSON_FLAG, "print the result as JSON"))
        rows += [(f"(secret) {name}", "given beside the command line, never on it") for name in self.secret_fields]
        if rows:
            width = min(max(len(left) for left, _ in rows), 28)
            lines += ["", "arguments:"]
            lines += [f"  {left:<{width}}  {right}".rstrip() for left, right in rows]
        return "\n".join(lines)

    def _generic(self, model: BaseModel) -> Argv:
        argv = Argv(self.domain, self.action)
        for name in self.positional:
            argv.value(_scalar(getattr(model, name)))
        slots = self.slots()
        structures = model.model_dump(mode="json", include={s.field for s in slots.values() if s.shape == "structure"})
        for flag, slot in slots.items():
            if slot.shape != "structure":
                _add_flag(argv, flag, getattr(model, slot.field))
            elif structures[slot.field] not in (None, [], {}):
                argv.structure(flag, dump_structure(structures[slot.field]))
        if self.json:
            argv.flag(JSON_FLAG)
        return argv

    def _checked(self, argv: Argv, secrets: dict[str, str]) -> list[str]:
        """The central rule, over the whole finished argv."""
        errors: list[InitErrorDetails] = []
        out: list[str] = []
        if [item for item, _ in argv.items[:2]] != [self.domain, self.action]:
            raise RuntimeError(f"{self.kind}: an argv must start with [domain, action]")
        for index, (item, shape) in enumerate(argv.items):
            if type(item) is not str:  # a SecretStr, an int...: a bug in a builder, never user input
                raise RuntimeError(f"{self.kind}: argv element {index} is a {type(item).__name__}, not a str")
            if shape == "flag":
                if item not in self.flags:
                    raise RuntimeError(f"{self.kind}: {item!r} is not one of this kind's flags")
            else:
                problem = value_problem(item) if shape == "word" else _structure_text_problem(item)
                if problem is not None:
                    errors.append(_error(("argv", index), item, f"argument {problem}"))
                elif any(secret == item or (len(secret) >= 8 and secret in item) for secret in secrets.values()):
                    errors.append(_error(("argv", index), "***", "a secret value may not appear in another argument"))
            out.append(item)
        if errors:
            raise ValidationError.from_exception_data(self.kind, errors)
        return out


@functools.cache
def _result_adapter(result: Any) -> TypeAdapter[Any]:
    return TypeAdapter(result)


def domain_policy(domain: str) -> DomainPolicy:
    """The ``POLICY`` of the catalog module named `domain`.

    Why here: `kind` reads it while that module is being imported (it declares ``POLICY`` before
    its ``KINDS``), so adding a domain is adding its module, with no table to keep beside it.

    Raises:
        ValueError: no catalog module of that name, or one without a ``POLICY``.
    """
    name = f"{__package__}.{domain}"
    try:
        module = sys.modules.get(name) or importlib.import_module(name)
    except ModuleNotFoundError as exc:
        raise ValueError(f"no catalog module for the domain {domain!r}") from exc
    policy = getattr(module, "POLICY", None)
    if not isinstance(policy, DomainPolicy):
        raise ValueError(f"contract/job_kinds/{domain}.py declares no POLICY before its kinds")
    return policy


def _error(loc: tuple[str | int, ...], value: str, message: str) -> InitErrorDetails:
    return InitErrorDetails(type=PydanticCustomError("unsafe_argument", message), loc=loc, input=value)


def _scalar(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise RuntimeError(f"{type(value).__name__} cannot be an argv value")
    return str(value)


def _add_flag(argv: Argv, flag: str, value: Any) -> None:
    if value is None or value == "" or value is False:
        return
    if value is True:
        argv.flag(flag)
    else:
        argv.flag(flag, _scalar(value))


def _structure_text_problem(text: str) -> str | None:
    """The central rule over a structured argv value that a builder wrote."""
    try:
        return structure_problem(load_structure(text))
    except ValueError as exc:
        return str(exc)


# --- introspection of the argument models ---------------------------------------------------------


def _unwrap(annotation: Any) -> list[Any]:
    """The non-None alternatives of an annotation, with Annotated stripped."""
    origin = get_origin(annotation)
    if origin is typing.Annotated:
        return _unwrap(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        return [alt for arg in get_args(annotation) if arg is not type(None) for alt in _unwrap(arg)]
    return [annotation]


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _is_structure(annotation: Any) -> bool:
    """Whether a field of this type travels as structure (JSON): a list, a mapping or a model."""
    return any(_is_model(alt) or get_origin(alt) in (list, dict) for alt in _unwrap(annotation))


Shape = Literal["scalar", "bool", "structure"]


@dataclass(frozen=True)
class Slot:
    """What one flag fills: the top-level field `field`, and how its value is written: a scalar,
    a bool flag (present when true), or a structure (`--<field>-json` and the field's JSON)."""

    field: str
    annotation: Any
    shape: Shape
    required: bool

    @property
    def metavar(self) -> str:
        return "JSON" if self.shape == "structure" else self.field.upper()

    def take(self, value: str) -> tuple[Any, str | None]:
        """The text `value` of this flag as the field expects it, and why it breaks the central
        rule (None when it does not).

        Raises:
            ValueError: a structure's value is not one (`load_structure`).
        """
        if self.shape == "structure":
            structure = load_structure(value)
            return structure, structure_problem(structure)
        return _coerce(self.annotation, value), value_problem(value)


def _slots(model: type[BaseModel], skip: tuple[str, ...]) -> dict[str, Slot]:
    slots: dict[str, Slot] = {}
    for name, info in model.model_fields.items():
        if name in skip:
            continue
        flag = "--" + name.replace("_", "-")
        if _is_structure(info.annotation):
            slots[flag + STRUCTURE_FLAG_SUFFIX] = Slot(name, info.annotation, "structure", info.is_required())
        elif bool in _unwrap(info.annotation):
            slots[flag] = Slot(name, info.annotation, "bool", False)
        else:
            slots[flag] = Slot(name, info.annotation, "scalar", info.is_required())
    if len(slots) + len(skip) != len(model.model_fields):
        raise TypeError(f"{model.__name__}: two fields have the same flag ({', '.join(sorted(slots))})")
    return slots


_INT_TEXT = re.compile(r"^[0-9]{1,19}$")


def _coerce(annotation: Any, text: str) -> Any:
    """The text of an argv value as the field's type takes it: an int for an int field (strict
    fields refuse "5"); anything else stays text, and the model says what is wrong with it."""
    takes_text = takes_int = False
    for alt in _unwrap(annotation):
        values = get_args(alt) if get_origin(alt) is Literal else (alt,)
        for value in values:
            takes_text |= value is str or isinstance(value, str) or value is SecretStr
            takes_int |= value is int or (isinstance(value, int) and not isinstance(value, bool))
    if takes_int and not takes_text and _INT_TEXT.match(text):
        return int(text)
    return text


def _field_help(schema: dict[str, Any], path: tuple[str, ...]) -> str:
    """A field's description, choices, bounds and default, from the model's JSON schema."""
    defs = schema.get("$defs", {})
    prop: dict[str, Any] = {}
    node = schema
    for name in path:
        prop = _resolve(node.get("properties", {}).get(name, {}), defs)
        node = _resolve(prop, defs)
        for alt in prop.get("anyOf", ()):
            node = _resolve(alt, defs) if "$ref" in alt else node
    parts: list[str] = []
    variants = [prop, *(_resolve(alt, defs) for alt in prop.get("anyOf", ()))]
    for variant in variants:
        if variant.get("description") and variant["description"] not in parts:
            parts.append(variant["description"])
        if "enum" in variant:
            parts.append("one of: " + ", ".join(str(v) for v in variant["enum"]))
        if "const" in variant:
            parts.append(f"only: {variant['const']}")
        bounds = [f"{word} {variant[key]}" for key, word in (("minimum", "min"), ("maximum", "max")) if key in variant]
        if bounds:
            parts.append(", ".join(bounds))
    if prop.get("default") not in (None, "", [], False) and not isinstance(prop.get("default"), dict):
        parts.append(f"default: {prop['default']}")
    return "; ".join(parts)


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if isinstance(ref, str):
        resolved: dict[str, Any] = defs.get(ref.rsplit("/", 1)[-1], {})
        return resolved
    return node


def _argv_error(errors: list[InitErrorDetails], title: str = "argv") -> ValidationError:
    return ValidationError.from_exception_data(title, errors)


def _secret_fields(model: type[BaseModel]) -> tuple[str, ...]:
    return tuple(
        name for name, info in model.model_fields.items() if any(alt is SecretStr for alt in _unwrap(info.annotation))
    )


def _empty_by_default(info: FieldInfo) -> bool:
    return info.is_required() or not info.get_default(call_default_factory=True)


def _check_model(kind: str, model: type[BaseModel], top: bool) -> None:
    """Catalog rules the type system cannot state; a broken entry fails at import."""
    if model.model_config.get("extra") != "forbid":
        raise TypeError(f"{kind}: {model.__name__} must refuse unknown fields (extra='forbid')")
    for name, info in model.model_fields.items():
        alternatives = _unwrap(info.annotation)
        for alt in alternatives:
            if alt is bool and info.default is not False:
                raise TypeError(f"{kind}: bool field {name} must default to False (a flag present when true)")
            if alt is SecretStr and not top:
                raise TypeError(f"{kind}: secret field {name} must be a top-level field")
            if _is_model(alt):
                _check_model(kind, alt, False)
            if top and get_origin(alt) in (list, dict) and not _empty_by_default(info):
                raise TypeError(f"{kind}: {name} must default to empty (an empty one is left out of the argv)")
            if get_origin(alt) is list:
                for item in _unwrap(get_args(alt)[0]):
                    if _is_model(item):
                        _check_model(kind, item, False)


def kind(
    name: str,
    args: type[BaseModel],
    summary: str,
    *,
    example: Mapping[str, Any],
    read: bool = False,
    positional: tuple[str, ...] = (),
    json: bool | None = None,
    min_plan: Plan | None = None,
    group: Group | None = None,
    builder: Builder | None = None,
    paths: tuple[ScopedPath, ...] = (),
    result: Any = None,
    confirm: str | None = None,
) -> JobKind:
    """One catalog entry. Group and plan come from the domain; `json` defaults to the convention above.
    `group` raises a mutation above its domain's group (`php.ini-global-set` is `sysadmin`), never
    lowers it. `confirm` marks a destructive mutation: the positional field to type again."""
    if not KIND_RE.match(name):
        raise ValueError(f"bad kind name {name!r}")
    domain, action = name.split(".", 1)
    policy = domain_policy(domain)
    _check_model(name, args, True)
    secret_fields = _secret_fields(args)
    for field_name in positional:
        info = args.model_fields[field_name]
        if not info.is_required() or field_name in secret_fields or _is_structure(info.annotation):
            raise TypeError(f"{name}: positional field {field_name} must be required, not secret and not structured")
    for scoped in paths:
        for path_field in (scoped.field, scoped.site):
            if path_field is not None and path_field not in args.model_fields:
                raise TypeError(f"{name}: scoped path field {path_field} is not a field of {args.__name__}")
    if confirm is not None and (read or confirm not in positional):
        raise TypeError(f"{name}: confirm must name a positional field of a mutation, not {confirm!r}")
    if group is not None and (read or GROUP_RANK[group] <= GROUP_RANK[policy.group]):
        raise ValueError(f"{name}: group {group} does not raise its domain's group {policy.group}")
    if json is None:
        json = read or action.rsplit("-", 1)[-1] in JSON_MUTATION_VERBS
    if result is not None and not json:
        raise TypeError(f"{name}: a result model needs --json (a kind without it prints lines for a person)")
    flags = set(_slots(args, positional + secret_fields))
    if json:
        flags.add(JSON_FLAG)
    for flag in flags:
        if not FLAG_RE.match(flag):
            raise ValueError(f"{name}: bad flag {flag!r}")
    return JobKind(
        kind=name,
        domain=domain,
        action=action,
        summary=summary,
        args=args,
        read=read,
        group="observe" if read else group or policy.group,
        min_plan=min_plan or policy.min_plan,
        secret_fields=secret_fields,
        positional=positional,
        json=json,
        example=types.MappingProxyType(dict(example)),
        flags=frozenset(flags),
        builder=builder,
        paths=paths,
        route=policy.route,
        result=result,
        confirm=confirm,
    )
