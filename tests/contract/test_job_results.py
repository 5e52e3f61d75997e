"""The result models of the job catalog (what Ansible calls `RETURN`): every handled kind that
prints JSON declares one, its schema is what a client can rely on (JSON, every object closed and
every field described), and what a handler really prints on this host validates against it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from agent.jobs.kinds import all_kinds
from agent.jobs.toolkit.base import JobContext, run_kind
from agent.sites import SiteRegistry
from contract.job_kinds import JobKind, lookup
from tests.helpers.load_balancers import Collected

HANDLERS = all_kinds()
HANDLED_JSON = sorted(name for name, handler in HANDLERS.items() if handler.spec.json)
# The domains helper "results2" gives result models in the same round (the coordinator removes
# this set when both branches are merged: then every handled JSON kind must declare one).
DECLARED = sorted(name for name in HANDLED_JSON if HANDLERS[name].spec.result is not None)
# Reads whose example runs on any host, with no service of its own and nothing to set up but a
# site in the registry: their real output is checked against their model.
ANY_HOST = ("site.list", "user.list", "php.versions", "security.status", "service.list")


def spec(name: str) -> JobKind:
    found = lookup(name)
    assert found is not None, name
    return found


def objects(node: Any) -> Iterator[dict[str, Any]]:
    """Every object schema with properties in a JSON Schema (its $defs included)."""
    if isinstance(node, dict):
        if "properties" in node:
            yield node
        for value in node.values():
            yield from objects(value)
    elif isinstance(node, list):
        for item in node:
            yield from objects(item)


@pytest.mark.parametrize("name", HANDLED_JSON)
def test_every_handled_json_kind_declares_its_result(name: str) -> None:
    assert spec(name).result is not None, f"{name} prints JSON but declares no result model (kind(..., result=...))"


@pytest.mark.parametrize("name", DECLARED)
def test_a_result_schema_is_json_with_closed_described_objects(name: str) -> None:
    schema = spec(name).result_schema()
    assert json.loads(json.dumps(schema)) == schema
    found = list(objects(schema))
    assert found, f"{name}: its result has no object model"
    for node in found:
        title = node.get("title", name)
        # A route kind's report is read by the control plane from agents of any version: its models
        # are wire models, which ignore a newer agent's fields (and the agent dumps through them,
        # so a field the model does not know never reaches a client either).
        if spec(name).route is None:
            assert node.get("additionalProperties") is False, f"{name}: {title} accepts unknown fields"
        undescribed = [field for field, prop in node["properties"].items() if not prop.get("description")]
        assert not undescribed, f"{name}: {title} has fields without a description: {undescribed}"


def test_a_result_with_an_unknown_field_is_refused() -> None:
    listed = {"sites": []}
    assert spec("site.list").dump_result(listed) == listed
    with pytest.raises(ValueError, match="extra"):
        spec("site.list").dump_result({**listed, "surprise": 1})


@pytest.fixture
def ctx(tmp_path: Path) -> JobContext:
    """An agent's context over a home with one site in its registry."""
    home, state = tmp_path / "home", tmp_path / "state"
    (home / "site-a").mkdir(parents=True)
    state.mkdir()
    (state / "sites.json").write_text('{"sites": [{"domain": "a.example.com", "slug": "site-a"}]}')
    return JobContext(str(home), str(state), SiteRegistry(str(state)), "test")


@pytest.mark.parametrize("name", ANY_HOST)
def test_what_a_read_prints_here_is_its_declared_result(name: str, ctx: JobContext) -> None:
    kind = spec(name)
    assert kind.result is not None, f"{name} declares no result model"
    out = Collected()
    code = trio.run(run_kind, HANDLERS, name, kind.build(dict(kind.example)).argv, ctx, out)
    assert code == 0, out.err
    printed = json.loads("\n".join(out.out))
    assert kind.dump_result(printed) == printed
    if name == "site.list":
        assert [site["domain"] for site in printed["sites"]] == ["a.example.com"]
