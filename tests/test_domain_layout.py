"""One domain, one name: the catalog's module of a domain and the agent's module (or package) of its
handlers are named as the domain, and both the catalog and the handler table are assembled by
scanning their package (pure, fast)."""

from __future__ import annotations

import importlib

import pytest

from agent.jobs.kinds import all_kinds
from agent.jobs.kinds import domain_modules as agent_domain_modules
from contract.job_kinds import CATALOG, DOMAINS, SHARED_MODULES, _assemble, domain_modules
from contract.job_kinds.base import GROUP_RANK, Args, DomainPolicy, domain_policy, kind


def test_each_catalog_module_holds_the_kinds_of_its_domain_and_only_them() -> None:
    for name in domain_modules():
        kinds = importlib.import_module(f"contract.job_kinds.{name}").KINDS
        assert kinds, f"contract/job_kinds/{name}.py declares no kind"
        assert {entry.domain for entry in kinds} == {name}, f"contract/job_kinds/{name}.py"
    assert {entry.domain for entry in CATALOG.values()} == set(domain_modules())


def test_every_domain_policy_has_its_module_and_no_shared_module_is_a_domain() -> None:
    assert set(DOMAINS) == set(domain_modules())
    assert not SHARED_MODULES & set(DOMAINS)


def test_a_domains_group_and_plan_are_its_modules_policy_and_nothing_else_holds_them() -> None:
    for name in domain_modules():
        policy = importlib.import_module(f"contract.job_kinds.{name}").POLICY
        assert isinstance(policy, DomainPolicy) and DOMAINS[name] is policy
        for entry in CATALOG.values():
            if entry.domain == name and not entry.read:
                assert GROUP_RANK[entry.group] >= GROUP_RANK[policy.group], entry.kind  # raised, never lowered
                assert entry.route == policy.route, entry.kind
    with pytest.raises(ValueError, match="declares no POLICY"):
        domain_policy("argtypes")
    with pytest.raises(ValueError, match="no catalog module"):
        domain_policy("nosuchdomain")


def test_a_kind_declared_in_another_domains_module_is_refused() -> None:
    stray = kind("php.stray-test", Args, "test only", example={})
    with pytest.raises(ValueError, match=r"php\.stray-test is declared in module site"):
        _assemble({"site": [stray]})
    with pytest.raises(ValueError, match="declared twice"):
        _assemble({"php": [stray, stray]})


# --- the agent: one module (or package) of agent.jobs per domain, named as the domain ---------------


def test_each_handled_kind_is_in_the_agent_module_of_its_domain() -> None:
    for name in agent_domain_modules():
        handlers = importlib.import_module(f"agent.jobs.{name}").KINDS
        assert handlers, f"agent.jobs.{name} handles no kind"
        misplaced = sorted(h.name for h in handlers if h.name.split(".")[0] != name)
        assert not misplaced, f"agent.jobs.{name} handles kinds of another domain: {misplaced}"


def test_a_catalog_domain_with_handlers_has_an_agent_module_of_its_name() -> None:
    handled_domains = {name.split(".")[0] for name in all_kinds()}
    assert handled_domains == set(agent_domain_modules())
    assert set(agent_domain_modules()) <= set(domain_modules()), "an agent module named as no catalog domain"
    assert set(all_kinds()) <= set(CATALOG)
