"""``site.*``: a site's life (list, inspect, create, clone, delete: `lifecycle`) and its web
settings and logs (`settings`)."""

from __future__ import annotations

from agent.jobs.site import lifecycle, settings

KINDS = [*lifecycle.KINDS, *settings.KINDS]
