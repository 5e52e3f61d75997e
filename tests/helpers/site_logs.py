"""The sites' logs of a test's own agent: they live in the host layout's ``system.sites_log_dir``
(root's folders, outside the sites), whose default, /var/log/fleetdeck/sites, is the machine's. A
test's agent gets a layout file naming a folder of the test's own."""

from __future__ import annotations

import json
from pathlib import Path


def logs_layout(root: Path) -> tuple[Path, Path]:
    """(a host layout file, the sites' log folder it names), both in `root`."""
    logs = root / "site-logs"
    layout = root / "host-layout.json"
    layout.write_text(json.dumps({"system": {"sites_log_dir": str(logs)}}))
    return layout, logs


def write_site_log(logs: Path, slug: str, name: str, text: str) -> Path:
    """The log `name` of the site `slug` in the sites' log folder `logs`, holding `text`."""
    path = logs / slug / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path
