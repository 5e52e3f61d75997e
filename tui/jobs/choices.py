"""What a job form's field names on the server, and where the form finds the ones that exist.

A field that names a thing of the server (a site's domain, a cron entry's id, a database, a
daemon…) offers a picker of those the server has. The catalog says which: such a field's JSON
schema carries `x-source` (`contract.job_kinds.argtypes.listed_by`), naming the read kind that
lists them (`site.list`, run as a job: an offline agent answers with its last result, `cached`),
where its result holds the list and which item field is the value. A field that makes a new thing
carries none. The user can still type any value: the picker only helps. (Load balancers have a
screen of their own: their kinds are not plain jobs, and the job picker does not offer them.)
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


def source_in(prop: Mapping[str, Any]) -> Source | None:
    """The `x-source` of one property of an `args_schema` (on it, or on the non-null alternative of
    an optional one), or None when it names nothing or the declaration is malformed."""
    alternatives = prop.get("anyOf") or prop.get("oneOf") or []
    for candidate in (prop, *(alt for alt in alternatives if isinstance(alt, Mapping))):
        declared = candidate.get("x-source")
        if isinstance(declared, Mapping):
            return _source(declared)
    return None


def _source(declared: Mapping[str, Any]) -> Source | None:
    kind, key, noun, items = declared.get("kind"), declared.get("key"), declared.get("noun"), declared.get("items")
    details = declared.get("details") or []
    if not (isinstance(kind, str) and isinstance(key, str) and isinstance(noun, str)):
        return None
    if not (items is None or isinstance(items, str)) or not isinstance(details, list):
        return None
    return Source(noun, kind, items, key, tuple(str(name) for name in details))


def source_of(kind: JobKindInfo, name: str) -> Source | None:
    """The source of the choices of `kind`'s field `name`, if it names something that exists."""
    prop = (kind.args_schema.get("properties") or {}).get(name)
    source = source_in(prop) if isinstance(prop, Mapping) else None
    return None if source is None or source.read_kind == kind.kind else source


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
    job = await client.jobs.create(server_id, source.read_kind, {}, lookup=True)  # not the user's job: no history
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
