"""The code checks are part of the suite: `ruff check`, `ruff format --check` and `mypy` (strict for
`api_client` and `contract`)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT


def _run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff() -> None:
    done = _run("ruff", "check", ".")
    assert done.returncode == 0, done.stdout + done.stderr


def test_ruff_format() -> None:
    done = _run("ruff", "format", "--check", ".")
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy() -> None:
    done = _run("mypy")  # files and the strict api_client and contract override come from pyproject.toml
    assert done.returncode == 0, done.stdout + done.stderr
