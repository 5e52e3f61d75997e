"""``php.*``: PHP versions, their FPM services, ini directives, extension modules and the FPM
pools of the sites (see docs/jobs.md, "php")."""

from __future__ import annotations

from agent.jobs.php import ini, modules, pools, versions

KINDS = [*versions.KINDS, *ini.KINDS, *modules.KINDS, *pools.KINDS]
