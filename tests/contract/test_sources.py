"""The catalog's pickers: a field that names a thing of the server says where those are listed
(`x-source`, `contract.job_kinds.argtypes.listed_by`), and that place exists."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from contract.job_kinds import CATALOG, JobKind


def declared_sources(kind: JobKind) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(field, x-source) of every argument of `kind` that declares one, optional ones included."""
    for name, prop in (kind.args.model_json_schema().get("properties") or {}).items():
        for candidate in (prop, *prop.get("anyOf", ())):
            if "x-source" in candidate:
                yield name, candidate["x-source"]


def resolved(schema: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    ref = schema.get("$ref")
    return root["$defs"][ref.rsplit("/", 1)[-1]] if isinstance(ref, str) else schema


def listed_item(result_schema: dict[str, Any], items: str | None) -> Mapping[str, Any]:
    """The schema of one listed item: of the result's array (`items` None), or of its `items` key."""
    listing = result_schema if items is None else resolved(result_schema, result_schema)["properties"][items]
    assert listing.get("type") == "array", listing
    return resolved(listing["items"], result_schema)


def test_every_source_is_a_read_kind_of_the_catalog_whose_result_lists_that_key() -> None:
    declared = [(kind, field, source) for kind in CATALOG.values() for field, source in declared_sources(kind)]
    assert len({source["kind"] for _, _, source in declared}) >= 8  # sites, users, PHP, cron, db, pg...
    for kind, field, source in declared:
        where = f"{kind.kind}.{field}"
        assert set(source) == {"kind", "items", "key", "details", "noun"}, where
        read = CATALOG.get(source["kind"])
        assert read is not None and read.read and read.route is None, f"{where}: {source['kind']} is no plain read"
        schema = read.result_schema()
        if schema is not None:  # a declared result holds the list and its key (and the details shown)
            item = listed_item(schema, source["items"])
            assert {source["key"], *source["details"]} <= set(item["properties"]), where
