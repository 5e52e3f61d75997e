"""`--module-order` (tests/conftest.py): the suite's modules run by path unless asked otherwise, in
reverse, or in a random order a seed repeats, each module's tests in their own order; so a module
that passes only after another one is found by running the suite in another order."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODULES = [
    "tests/api_client/test_sse_parser.py",
    "tests/agent/load_balancers/test_haproxy_parsers.py",
    "tests/test_layers.py",
]


def _collected(*options: str) -> list[str]:
    """The test ids pytest collects from MODULES with `options`, in the order it would run them."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only", *options, *MODULES]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return [line for line in done.stdout.splitlines() if "::" in line]


def _modules(ids: list[str]) -> list[str]:
    """The modules of `ids` as they come, a module once per run of its tests in a row."""
    return [module for module, _ in itertools.groupby(test_id.split("::")[0] for test_id in ids)]


def test_modules_run_by_path_by_default_in_reverse_or_in_a_seeded_random_order() -> None:
    by_path = _collected()
    assert _modules(by_path) == MODULES
    assert _modules(_collected("--module-order", "reverse")) == MODULES[::-1]
    seeded = _collected("--module-order", "3")
    assert _modules(seeded) == [MODULES[1], MODULES[2], MODULES[0]]  # random.Random(3)'s shuffle: the seed's order
    for order in (_collected("--module-order", "reverse"), seeded):
        # the same tests, a module's together (its module fixtures set up once) and in its own order
        assert sorted(_modules(order)) == sorted(MODULES)
        assert sorted(order) == sorted(by_path)
        for module in MODULES:
            assert [t for t in order if t.startswith(module)] == [t for t in by_path if t.startswith(module)]


def test_an_order_that_is_neither_is_refused_with_its_name() -> None:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only", "--module-order"]
    done = subprocess.run([*command, "sideways", *MODULES], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "not 'sideways'" in done.stderr, done.stdout + done.stderr
