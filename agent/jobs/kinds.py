"""Every job kind this agent can run, by ``<family>.<action>``."""

from __future__ import annotations

from agent.jobs import (
    cron,
    daemon,
    db,
    deploy,
    dns,
    logs,
    metrics,
    pg,
    php,
    security,
    service,
    site,
    site_settings,
    ssl,
    storage,
    system,
    updates,
    users,
)
from agent.jobs.base import Kind, kind_table
from agent.load_balancers import jobs as load_balancers


def all_kinds() -> dict[str, Kind]:
    families = (
        site,
        site_settings,
        php,
        ssl,
        db,
        pg,
        cron,
        daemon,
        service,
        security,
        dns,
        updates,
        storage,
        system,
        logs,
        metrics,
        deploy,
        users,
        load_balancers,
    )
    return kind_table(kind for family in families for kind in family.KINDS)
