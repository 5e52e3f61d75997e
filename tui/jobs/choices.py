"""What a job form's field names on the server, and where the form finds the ones that exist.

A field that names a thing of the server (a site's domain, a cron entry's id, a database, a
daemon…) offers a picker of those the server has. `SOURCES` is the one declaration of which field
takes its choices from where: the result of a read kind of that server (`site.list`, run as a
job: an offline agent answers with its last result, `cached`). The user can still type any
value: the picker only helps. (Load balancers have a screen of their own: their kinds are not
plain jobs, and the job picker does not offer them.)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from api_client import Client
from contract.models import JobKindInfo


@dataclass(frozen=True)
class Source:
    """Where the things a field names are listed, and how to read that list."""

    noun: str  # what they are, plural ("sites"), for the hint and the picker's title
    read_kind: str  # the read kind listing them on the server
    items: str | None  # the key of the list in the kind's result (None: the result is the list)
    key: str  # the field of each listed item that is the value
    details: tuple[str, ...] = ()  # fields shown beside it

    @property
    def where(self) -> str:
        return self.read_kind


PHP_VERSIONS = Source("PHP versions", "php.versions", "versions", "version")

# (kind domain, field) → source; "*" is any domain. Kept small: the fields users name most.
SOURCES: Mapping[tuple[str, str], Source] = {
    ("*", "domain"): Source("sites", "site.list", "sites", "domain", ("home",)),
    ("cron", "id"): Source("cron entries", "cron.list", "entries", "id", ("domain", "schedule", "command")),
    ("db", "name"): Source("databases", "db.list", None, "name", ("charset",)),
    ("pg", "name"): Source("databases", "pg.list", "databases", "name"),
    ("daemon", "name"): Source("daemons", "daemon.list", "daemons", "name", ("domain", "command")),
    ("service", "name"): Source("services", "service.list", "services", "name", ("description",)),
    ("user", "username"): Source("users", "user.list", "users", "username", ("home",)),
    ("php", "version"): PHP_VERSIONS,
    ("site", "php"): PHP_VERSIONS,
}

# Kinds that make the thing their field names: a new name, nothing to pick.
CREATING_ACTIONS = frozenset({"create", "add", "install"})


def source_of(kind: JobKindInfo, name: str) -> Source | None:
    """The source of the choices of `kind`'s field `name`, if it names something that exists."""
    source = SOURCES.get((kind.domain, name)) or SOURCES.get(("*", name))
    if source is None or source.read_kind == kind.kind:
        return None
    made_here = source.read_kind.split(".", 1)[0] == kind.domain
    if made_here and kind.action in CREATING_ACTIONS:
        return None
    return source


def sources_of(kind: JobKindInfo, names: list[str]) -> dict[str, Source]:
    return {name: source for name in names if (source := source_of(kind, name)) is not None}


@dataclass(frozen=True)
class Choice:
    value: str
    detail: str = ""


def choices_in(source: Source, result: Any) -> list[Choice]:
    """The choices in a read kind's `result` (items without the key are skipped)."""
    items = result.get(source.items) if isinstance(result, Mapping) and source.items else result
    if not isinstance(items, list):
        return []
    choices = []
    for item in items:
        if not isinstance(item, Mapping) or item.get(source.key) in (None, ""):
            continue
        details = [str(item[name]) for name in source.details if item.get(name) not in (None, "")]
        choices.append(Choice(str(item[source.key]), " · ".join(details)))
    return choices


class ChoicesUnavailable(Exception):
    """The list could not be read; the message says why, in words."""


async def fetch_choices(client: Client, server_id: str, source: Source) -> list[Choice]:
    """What exists now: the source's read kind run on the server (until it ends)."""
    job = await client.jobs.create(server_id, source.read_kind, {})
    if job.status in ("queued", "running"):
        async for _event in client.jobs.stream(job.id):
            pass  # the stream ends with the job's `exit`
        job = await client.jobs.get(job.id)
    if job.status != "succeeded" or job.result is None:
        raise ChoicesUnavailable(f"{source.read_kind} ended {job.status} (exit {job.exit_code})")
    return choices_in(source, job.result)


@dataclass
class ChoiceCache:
    """The choices read for one server, per source: kept while its jobs screen is open, dropped
    once a job that changes the server is started (it may add or remove what was listed)."""

    by_source: dict[Source, list[Choice]] = field(default_factory=dict)

    def clear(self) -> None:
        self.by_source.clear()
