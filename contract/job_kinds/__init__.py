"""The whitelist of job kinds: the one place that says what a server may be asked to do.

A job kind is `<domain>.<action>`. Each entry (`JobKind`) holds its argument model (pydantic,
unknown fields refused), how its argv is built, whether it is a read, its capability group, its
minimum plan and its secret fields. `JobKind.build(args)` validates the arguments (raising
`pydantic.ValidationError`), builds the fixed argv `[domain, action, *positionals, *flags]`, checks
every argv value against the central rule of `argtypes` and splits the secrets out: a secret never
enters the argv, it travels beside it in `BuiltJob.secrets`.

Adding a kind is adding one `kind(...)` entry to the `KINDS` of its domain's module, which is
named as the domain (`site.py` holds `site.*`, `lb.py` holds `lb.*`); adding a domain is adding
that module, which declares its `POLICY` (a `base.DomainPolicy`) before its kinds: the catalog
is every module of this package but the shared `argtypes`, `allowlists` and `base`, found by
scanning, not listed by hand. The rules of `base` (groups and plans per domain, flags from field
names, `--json`, the checks) apply to a kind without it having to say so.
`JobKind.parse(argv, secrets)` is the inverse of `build`: the agent validates the argv it is
given into the same model, so both sides of a job obey one definition.

Public API: `JobKind`, `BuiltJob`, `Group`, `CATALOG`, `lookup`, `json_schemas`.
"""

from __future__ import annotations

import copy
import importlib
import pkgutil
import types
from collections.abc import Mapping
from functools import cache
from typing import Any

from contract.job_kinds.base import BuiltJob, DomainPolicy, Group, JobKind

__all__ = [
    "CATALOG",
    "DOMAINS",
    "SHARED_MODULES",
    "BuiltJob",
    "Group",
    "JobKind",
    "domain_modules",
    "json_schemas",
    "lookup",
]

# The modules of this package that are not a domain: the argument types and rules every domain uses.
SHARED_MODULES = frozenset({"argtypes", "allowlists", "base"})


def domain_modules() -> list[str]:
    """The names of this package's domain modules (each named as its domain), sorted."""
    return sorted(info.name for info in pkgutil.iter_modules(__path__) if info.name not in SHARED_MODULES)


def _assemble(domains: Mapping[str, list[JobKind]]) -> Mapping[str, JobKind]:
    catalog: dict[str, JobKind] = {}
    for domain, kinds in domains.items():
        for entry in kinds:
            if entry.domain != domain:
                raise ValueError(f"job kind {entry.kind} is declared in module {domain}, not in {entry.domain}")
            if entry.kind in catalog:
                raise ValueError(f"job kind {entry.kind} is declared twice")
            catalog[entry.kind] = entry
    return types.MappingProxyType(dict(sorted(catalog.items())))


# Built on first use (`__getattr__` below): building 346 argument models takes a quarter of a
# second, and importing the package (for `argtypes`, or the wire models that use it) must not
# cost that to a client that never looks a kind up, such as the TUI's server list.
CATALOG: Mapping[str, JobKind]


@cache
def _catalog() -> Mapping[str, JobKind]:
    return _assemble({name: importlib.import_module(f"{__name__}.{name}").KINDS for name in domain_modules()})


@cache
def _domains() -> Mapping[str, DomainPolicy]:
    return types.MappingProxyType(
        {name: importlib.import_module(f"{__name__}.{name}").POLICY for name in domain_modules()}
    )


# Every domain's policy (its module's `POLICY`), by domain: built on first use, as `CATALOG` is.
DOMAINS: Mapping[str, DomainPolicy]


def __getattr__(name: str) -> Any:
    if name == "CATALOG":
        return _catalog()
    if name == "DOMAINS":
        return _domains()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def lookup(kind: str) -> JobKind | None:
    """The entry of `kind`, exact match only: "Site.List", " site.list" and "site.list " are unknown."""
    if type(kind) is not str:
        return None
    return _catalog().get(kind)


@cache
def _schemas() -> tuple[dict[str, Any], ...]:
    return tuple(
        {
            "kind": entry.kind,
            "domain": entry.domain,
            "action": entry.action,
            "read": entry.read,
            "group": entry.group,
            "min_plan": entry.min_plan,
            "args_schema": entry.args.model_json_schema(),
            "secret_fields": list(entry.secret_fields),
            "summary": entry.summary,
            "route": entry.route,
            "result_schema": entry.result_schema(),
            "confirm": entry.confirm,
        }
        for entry in _catalog().values()
    )


def json_schemas() -> list[dict[str, Any]]:
    """The entries of `GET /v1/job-kinds`, sorted by kind (a fresh copy the caller may change)."""
    return copy.deepcopy(list(_schemas()))
