"""docs/security.md names the test behind each line it states: every test it names exists, so a
test renamed or removed shows there. (The hostile harness checks its own table in it.)"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "security.md"
# `tests/test_x.py::test_name` (a parameter id after it is not checked), and any `::test_more`
# that follows it in the same list, names a test of that module.
REFERENCE = re.compile(r"tests/(?P<module>[\w/]+\.py)(?P<names>(?:::\w+(?:\[[^\]]*\])?(?:,\s*)?)*)")
NAME = re.compile(r"::(\w+)")
# A test named alone (`test_name`), or the tests of one prefix (`test_restore_script_*`).
BARE = re.compile(r"\b(test_\w+)(\*?)(?![\w.])")


def _tests_of(module: Path) -> set[str]:
    tree = ast.parse(module.read_text(encoding="utf-8"))
    return {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}


def test_every_test_the_security_page_names_exists() -> None:
    text = DOC.read_text(encoding="utf-8")
    every = set().union(*(_tests_of(module) for module in (ROOT / "tests").rglob("test_*.py")))
    missing = []
    for match in REFERENCE.finditer(text):
        module = ROOT / "tests" / match["module"]
        if not module.exists():
            missing.append(f"tests/{match['module']}")
            continue
        defined = _tests_of(module)
        missing += [f"tests/{match['module']}::{name}" for name in NAME.findall(match["names"]) if name not in defined]
    bare = {match[1] + match[2] for match in BARE.finditer(text)}
    assert len(bare) > 100  # the page names its tests
    for name in sorted(bare):
        found = any(test.startswith(name[:-1]) for test in every) if name.endswith("*") else name in every
        if not found:
            missing.append(name)
    assert not missing, missing
