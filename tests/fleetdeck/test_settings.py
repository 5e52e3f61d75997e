"""Configuration has one home: `fleetdeck/settings.py` reads every `FLEETDECK_*` variable (each one
documented in the README), `fleetdeck/paths.py` names every default path, and the towers get
their values as arguments."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fleetdeck.settings import SettingsError, load_settings, variable_names
from tests.conftest import ROOT, python_env

SOURCE_PACKAGES = ("agent", "api_client", "contract", "control_plane", "fleetdeck", "themes", "tui")
VARIABLE = re.compile(r"\bFLEETDECK_[A-Z0-9_]*[A-Z0-9]\b")
SETTINGS_MODULE = ROOT / "fleetdeck" / "settings.py"
PATHS_MODULE = ROOT / "fleetdeck" / "paths.py"


def source_files() -> list[Path]:
    return sorted(path for package in SOURCE_PACKAGES for path in (ROOT / package).rglob("*.py"))


def test_the_scan_sees_the_settings_module() -> None:
    assert SETTINGS_MODULE in source_files() and PATHS_MODULE in source_files()


def test_every_variable_in_the_code_is_documented_in_the_readme() -> None:
    readme = set(VARIABLE.findall((ROOT / "README.md").read_text(encoding="utf-8")))
    in_code = {name for path in source_files() for name in VARIABLE.findall(path.read_text(encoding="utf-8"))}
    assert set(variable_names()) <= in_code
    assert sorted(in_code - readme) == []


def _environment_reads(tree: ast.AST) -> list[str]:
    """`FLEETDECK_*` names read from an environment: `environ.get("X")`, `environ["X"]`, `getenv("X")`,
    and any `FLEETDECK_*` constant in a module that touches `environ` or `getenv` at all."""
    names = [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and VARIABLE.fullmatch(node.value)
    ]
    touches_environment = any(
        (isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv"))
        or (isinstance(node, ast.Name) and node.id in ("environ", "getenv"))
        for node in ast.walk(tree)
    )
    return names if touches_environment else []


def test_only_the_settings_module_reads_fleetdeck_variables() -> None:
    readers = {
        str(path.relative_to(ROOT)): reads
        for path in source_files()
        if (reads := _environment_reads(ast.parse(path.read_text(encoding="utf-8"))))
    }
    assert readers.pop("fleetdeck/settings.py")
    assert readers == {}


def test_the_scan_finds_an_environment_read() -> None:
    tree = ast.parse('import os\nTOKEN = "FLEETDECK_SOMETHING"\nvalue = os.environ.get(TOKEN)\n')
    assert _environment_reads(tree) == ["FLEETDECK_SOMETHING"]


def test_only_the_paths_module_asks_platformdirs() -> None:
    users = [
        str(path.relative_to(ROOT)) for path in source_files() if "platformdirs" in path.read_text(encoding="utf-8")
    ]
    assert users == ["fleetdeck/paths.py"]


def test_values_are_parsed_and_checked() -> None:
    settings = load_settings({"FLEETDECK_HEARTBEAT_S": "1.5", "FLEETDECK_LOG": "debug", "FLEETDECK_THEME": " "})
    assert settings.heartbeat_s == 1.5 and settings.log == "DEBUG" and settings.theme is None
    defaults = load_settings({}).for_control_plane("sqlite://", default_server="uvicorn")
    assert defaults.job_grace_s == 30.0 and defaults.job_output_cap_bytes == 16 * 1024 * 1024
    assert defaults.server == "uvicorn", "unset, the server is the command's own default"
    capped = load_settings({"FLEETDECK_JOB_OUTPUT_CAP_MB": "0.5"})
    assert capped.for_control_plane("sqlite://", default_server="uvicorn").job_output_cap_bytes == 512 * 1024
    chosen = load_settings({"FLEETDECK_SERVER": "Hypercorn"}).for_control_plane("sqlite://", default_server="uvicorn")
    assert chosen.server == "hypercorn"
    for name, value in [
        ("FLEETDECK_HEARTBEAT_S", "soon"),
        ("FLEETDECK_LOG", "loud"),
        ("FLEETDECK_AGENT_SSH_PORT", "0"),
        ("FLEETDECK_JOB_OUTPUT_CAP_MB", "0"),
        ("FLEETDECK_JOB_OUTPUT_CAP_MB", "lots"),
        ("FLEETDECK_SERVER", "gunicorn"),
    ]:
        with pytest.raises(SettingsError, match=f"^{name}={value!r}: ") as caught:
            load_settings({name: value})
        assert "\n" not in str(caught.value)


def test_a_bad_value_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "fleetdeck", "local", "--data-dir", str(tmp_path)]
    done = subprocess.run(
        command, env=python_env(FLEETDECK_JOB_GRACE_S="-1"), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["fleetdeck: FLEETDECK_JOB_GRACE_S='-1': must be a finite number >= 0"]


def test_the_database_variable_reaches_the_admin_command(tmp_path: Path) -> None:
    database = tmp_path / "from-env.db"
    command = [sys.executable, "-m", "fleetdeck", "admin", "create-org", "acme", "--plan", "max", "--json"]
    done = subprocess.run(
        command, env=python_env(FLEETDECK_DB=f"sqlite:///{database}"), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert database.is_file()
