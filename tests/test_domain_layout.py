"""One domain, one name: the catalog's module of a domain is named as the domain, and the catalog is
assembled by scanning `contract.job_kinds` (pure, fast)."""

from __future__ import annotations

import importlib

import pytest

from contract.job_kinds import CATALOG, DOMAINS, SHARED_MODULES, _assemble, domain_modules
from contract.job_kinds.base import Args, kind


def test_each_catalog_module_holds_the_kinds_of_its_domain_and_only_them() -> None:
    for name in domain_modules():
        kinds = importlib.import_module(f"contract.job_kinds.{name}").KINDS
        assert kinds, f"contract/job_kinds/{name}.py declares no kind"
        assert {entry.domain for entry in kinds} == {name}, f"contract/job_kinds/{name}.py"
    assert {entry.domain for entry in CATALOG.values()} == set(domain_modules())


def test_every_domain_policy_has_its_module_and_no_shared_module_is_a_domain() -> None:
    assert set(DOMAINS) == set(domain_modules())
    assert not SHARED_MODULES & set(DOMAINS)


def test_a_kind_declared_in_another_domains_module_is_refused() -> None:
    stray = kind("php.stray-test", Args, "test only", example={})
    with pytest.raises(ValueError, match=r"php\.stray-test is declared in module site"):
        _assemble({"site": [stray]})
    with pytest.raises(ValueError, match="declared twice"):
        _assemble({"php": [stray, stray]})
