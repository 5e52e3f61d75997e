"""The sites of this server: ``<state_dir>/sites.json`` maps each domain to a folder of the home.

The file is ``{"sites": [{"domain": "example.com", "slug": "example-com"}, ..]}``; a site's
files live in ``<home>/<slug>``. An entry may also carry ``user`` (the system user owning the
site), ``profile``, ``php`` and ``created_at``: `add` writes them, and other fields are kept as
they are. It is re-read whenever it changes (mtime, size or inode), so whatever provisions sites
only has to rewrite it (atomically, by rename). Invalid entries are skipped with a warning; an
unreadable file keeps the last good list.

`update` changes the other fields of one entry (the web settings of `agent.jobs.toolkit.site_web`: aliases,
redirects, limits, environment...), `entry` reads them back.

`add`, `update` and `remove` rewrite the file under an exclusive lock (``sites.json.lock``, so an agent and
``fleetdeck agent run`` on the same state folder never lose each other's change), through a
temporary file renamed over it.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import orjson

from agent.state import open_lock_file
from contract.link.protocol import RpcError

log = logging.getLogger("fleetdeck.agent")

SITES_FILE = "sites.json"
SLUG_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
DOMAIN_RE = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*$")


@dataclass(frozen=True)
class Site:
    domain: str
    slug: str
    user: str | None = None
    profile: str | None = None
    php: str | None = None
    created_at: str | None = None

    def to_wire(self) -> dict[str, str]:
        return {"domain": self.domain, "slug": self.slug}


class SiteRegistry:
    """Thread-safe; its methods touch the file system, so call them from a worker thread."""

    def __init__(self, state_dir: str) -> None:
        self.path = os.path.join(state_dir, SITES_FILE)
        self._lock = threading.Lock()
        self._key: tuple[int, int, int] | None = None
        self._sites: dict[str, Site] = {}
        self._entries: dict[str, dict[str, Any]] = {}

    def sites(self) -> list[Site]:
        with self._lock:
            self._refresh()
            return list(self._sites.values())

    def lookup(self, domain: Any) -> Site:
        """The site of `domain`; ``not_found`` for a domain this server does not host."""
        if not isinstance(domain, str) or not domain:
            raise RpcError("validation_error", "a site scope needs a domain")
        with self._lock:
            self._refresh()
            site = self._sites.get(domain.lower())
        if site is None:
            raise RpcError("not_found", f"no site {domain!r} on this server", {"domain": domain})
        return site

    def get(self, domain: str) -> Site | None:
        """The site of `domain`, or None."""
        with self._lock:
            self._refresh()
            return self._sites.get(domain.lower())

    def add(self, entry: dict[str, Any]) -> Site:
        """Append a site entry (``domain`` and ``slug`` required); ``conflict`` when the domain
        or the slug is already taken."""
        site = _site(entry)
        if site is None:
            raise RpcError("validation_error", f"invalid site entry: {entry!r}")
        with self._locked_document() as document:
            for other in document["sites"]:
                if not isinstance(other, dict):
                    continue
                if str(other.get("domain", "")).lower() == site.domain:
                    raise RpcError("conflict", f"site {site.domain} already exists on this server")
                if other.get("slug") == site.slug:
                    raise RpcError("conflict", f"the folder name {site.slug} is already used by {other.get('domain')}")
            document["sites"].append(dict(entry))
        return site

    def entry(self, domain: str) -> dict[str, Any] | None:
        """A copy of the whole entry of `domain` (every field, known or not), or None."""
        with self._lock:
            self._refresh()
            raw = self._entries.get(domain.lower())
        return orjson.loads(orjson.dumps(raw)) if raw is not None else None

    def update(self, domain: str, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        """Apply `change` to the entry of `domain` under the file lock (it edits the dict in place;
        ``domain`` and ``slug`` stay as they are) and return a copy of the new entry; ``not_found``
        when there is none."""
        domain = domain.lower()
        with self._locked_document() as document:
            for entry in document["sites"]:
                if isinstance(entry, dict) and str(entry.get("domain", "")).lower() == domain:
                    fixed = entry["domain"], entry.get("slug")
                    change(entry)
                    entry["domain"], entry["slug"] = fixed
                    updated: dict[str, Any] = orjson.loads(orjson.dumps(entry))
                    break
            else:
                raise RpcError("not_found", f"no site {domain!r} on this server", {"domain": domain})
        return updated

    def remove(self, domain: str) -> Site:
        """Drop the entry of `domain` and return it; ``not_found`` when there is none."""
        domain = domain.lower()
        with self._locked_document() as document:
            kept, removed = [], None
            for entry in document["sites"]:
                if removed is None and isinstance(entry, dict) and str(entry.get("domain", "")).lower() == domain:
                    removed = _site(entry)
                else:
                    kept.append(entry)
            if removed is None:
                raise RpcError("not_found", f"no site {domain!r} on this server", {"domain": domain})
            document["sites"] = kept
        return removed

    @contextmanager
    def _locked_document(self) -> Iterator[dict[str, Any]]:
        """The raw document, under the file lock; written back atomically if the block succeeds."""
        folder = os.path.dirname(self.path) or "."
        os.makedirs(folder, mode=0o700, exist_ok=True)
        with self._lock, open_lock_file(self.path + ".lock") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                with open(self.path, "rb") as f:
                    document = orjson.loads(f.read())
            except FileNotFoundError:
                document = {"sites": []}
            except orjson.JSONDecodeError as exc:
                raise RpcError("conflict", f"{self.path} is not valid JSON ({exc}); fix it first") from None
            if not isinstance(document, dict):
                document = {"sites": []}
            if not isinstance(document.get("sites"), list):
                document["sites"] = []
            yield document
            write_atomically(self.path, orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n")
            self._key = None
            self._refresh()

    def _refresh(self) -> None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self._key, self._sites, self._entries = None, {}, {}
            return
        key = (st.st_mtime_ns, st.st_size, st.st_ino)
        if key == self._key:
            return
        self._key = key
        try:
            with open(self.path, "rb") as f:
                document = orjson.loads(f.read())
        except (OSError, orjson.JSONDecodeError) as exc:
            log.error("cannot read %s (%s); keeping the previous site list", self.path, exc)
            return
        self._sites, self._entries = _parse(document, self.path)


def _parse(document: Any, path: str) -> tuple[dict[str, Site], dict[str, dict[str, Any]]]:
    """The valid sites of a registry document, and their raw entries (both by domain)."""
    entries = document.get("sites") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        log.error("%s has no list of sites", path)
        return {}, {}
    sites: dict[str, Site] = {}
    raw: dict[str, dict[str, Any]] = {}
    for entry in entries:
        domain = entry.get("domain") if isinstance(entry, dict) else None
        slug = entry.get("slug") if isinstance(entry, dict) else None
        if not isinstance(domain, str) or not DOMAIN_RE.match(domain):
            log.warning("%s: skipping a site with an invalid domain: %r", path, entry)
        elif not isinstance(slug, str) or not SLUG_RE.match(slug):
            log.warning("%s: skipping site %s with an invalid slug: %r", path, domain, slug)
        elif domain in sites:
            log.warning("%s: site %s is listed twice; the first entry wins", path, domain)
        else:
            sites[domain] = _site(entry) or Site(domain, slug)
            raw[domain] = entry
    return sites, raw


def _site(entry: dict[str, Any]) -> Site | None:
    domain, slug = entry.get("domain"), entry.get("slug")
    if not isinstance(domain, str) or not DOMAIN_RE.match(domain) or not isinstance(slug, str):
        return None
    if not SLUG_RE.match(slug):
        return None

    def text(key: str) -> str | None:
        value = entry.get(key)
        return value if isinstance(value, str) else None

    return Site(domain, slug, text("user"), text("profile"), text("php"), text("created_at"))


def write_atomically(path: str, data: bytes, mode: int = 0o600, owner: tuple[int, int] | None = None) -> None:
    """Replace `path` with `data`: a temporary file in the same folder, fsynced, renamed over it.
    State files are the agent's own: readable by its account only, unless `mode` says otherwise;
    `owner` (uid, gid) gives the file to another account before it takes the name."""
    folder = os.path.dirname(path) or "."
    fd, temp = tempfile.mkstemp(dir=folder, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if owner is not None:
                os.fchown(f.fileno(), *owner)
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except FileNotFoundError:
            pass
        raise
    dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
