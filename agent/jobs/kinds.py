"""Every job kind this agent can run, by ``<domain>.<action>``: the handler table, found by name.

Each domain of the catalog that this agent handles is one module (or package) of `agent.jobs`
named as the domain (`agent.jobs.site` for ``site.*``, `agent.jobs.lb` for ``lb.*``), exporting
its handlers as ``KINDS``; the table is every such module's, found by scanning the package. A
domain module may declare what all its kinds need on the host as ``NEEDS`` (a sequence of
`agent.jobs.toolkit.needs.Need`): each of its kinds needs those, then its own. The other names of
the package are not domains: `NOT_DOMAINS`.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import replace

import agent.jobs
from agent.jobs.toolkit.base import Kind, kind_table

# The job machinery (`manager`, `local`, this module) and the handlers' `toolkit`.
NOT_DOMAINS = frozenset({"availability", "kinds", "local", "manager", "toolkit"})


def domain_modules() -> list[str]:
    """The names of the domain modules of `agent.jobs` (each named as its domain), sorted."""
    return sorted(info.name for info in pkgutil.iter_modules(agent.jobs.__path__) if info.name not in NOT_DOMAINS)


def domain_kinds(name: str) -> list[Kind]:
    """The handlers of the domain module `name`, each needing its domain's ``NEEDS`` first."""
    module = importlib.import_module(f"agent.jobs.{name}")
    shared = tuple(getattr(module, "NEEDS", ()))
    return [replace(kind, needs=shared + kind.needs) if shared else kind for kind in module.KINDS]


def all_kinds() -> dict[str, Kind]:
    return kind_table(kind for name in domain_modules() for kind in domain_kinds(name))
