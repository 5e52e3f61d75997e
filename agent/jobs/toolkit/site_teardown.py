"""What other domains keep of a site, forgotten when ``site.delete`` takes the site down.

A domain that keeps something per site (cron's entries, daemons, certificates) exports
``async forget_site(ctx, site, out)`` from its module, returning how much it removed (or whether
there was anything). ``site.delete`` asks each one through `forget_site_in`, by the domain's
name, at the step of its teardown where it belongs (daemons before the user's processes are
stopped, certificates after the server block is gone): so the site domain names what it asks for
without importing another domain's code. A domain that comes to keep per-site state adds its
``forget_site``, its name to `KEEPS_SITE_STATE` and its step to ``site.delete``.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable

from agent.jobs.toolkit.base import JobContext
from agent.jobs.toolkit.output import Output
from agent.sites import Site

SiteForgetter = Callable[[JobContext, Site, Output], Awaitable[int | bool]]

# The domains that keep something per site (`tests/test_domain_layout.py` checks each exports `forget_site`).
KEEPS_SITE_STATE = ("cron", "daemon", "ssl")


async def forget_site_in(domain: str, ctx: JobContext, site: Site, out: Output) -> int | bool:
    """Ask the domain `domain` to forget what it keeps of `site`, which is being deleted.

    Why: a site's delete must leave nothing of it behind in other domains (a crontab line or a
    daemon would keep running as its user, a certificate would be renewed for a name that is gone),
    and the site domain must not import those domains' code.

    Args:
        domain: one of `KEEPS_SITE_STATE`.
        ctx: the delete's job context.
        site: the site being deleted (still in the registry).
        out: the delete's output (a domain prints a warning there for a step it could not finish).

    Returns:
        What the domain removed: a count (entries, daemons) or whether it had anything.

    Raises:
        ValueError: `domain` keeps no per-site state.
        JobError: the domain could not forget it (the delete stops; run it again).
    """
    if domain not in KEEPS_SITE_STATE:
        raise ValueError(f"{domain} keeps nothing per site")
    forget: SiteForgetter = importlib.import_module(f"agent.jobs.{domain}").forget_site
    return await forget(ctx, site, out)
