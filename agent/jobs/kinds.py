"""Every job kind this agent can run, by ``<family>.<action>``."""

from __future__ import annotations

from agent.jobs import cron, logs, metrics, pg, service, site, ssl, storage, system, updates
from agent.jobs.base import Kind, kind_table
from agent.load_balancers import jobs as load_balancers


def all_kinds() -> dict[str, Kind]:
    families = (site, cron, service, system, logs, storage, metrics, updates, ssl, pg, load_balancers)
    return kind_table(kind for family in families for kind in family.KINDS)
