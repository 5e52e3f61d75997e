"""The layering rule, read from the imports: towers import only what sits below them, and only the
composition root (`fleetdeck/`) imports more than one tower."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("fleetdeck", "tui", "api_client", "contract", "themes", "control_plane", "agent")

# What each package may import of the project's packages (itself always). Everything both sides of
# a wire need is `contract`'s: the agent and the control plane never import the client, nor each other.
ALLOWED: dict[str, tuple[str, ...]] = {
    "contract": (),
    "api_client": ("contract",),
    "themes": (),
    "tui": ("api_client", "contract", "themes"),
    "agent": ("contract",),
    "control_plane": ("contract",),
    "fleetdeck": ("tui", "api_client", "contract", "themes", "control_plane", "agent"),
}


def _project_imports(path: Path) -> set[str]:
    modules: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules.add(node.module)
    return {m for m in modules if m.split(".")[0] in PACKAGES}


def _allowed(package: str, module: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in (package, *ALLOWED[package]))


@pytest.mark.parametrize("package", PACKAGES)
def test_a_package_imports_only_what_sits_below_it(package: str) -> None:
    wrong = {
        f"{path.relative_to(ROOT)}: {module}"
        for path in sorted((ROOT / package).rglob("*.py"))
        for module in _project_imports(path)
        if not _allowed(package, module)
    }
    assert not wrong, "imports against the layering:\n" + "\n".join(sorted(wrong))


def test_no_relative_imports_anywhere() -> None:
    """Every import names its module in full, so moving a module is a search for its name."""
    relative = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom) and node.level > 0
    ]
    assert not relative, relative


def _test_module_imports(path: Path) -> set[str]:
    """The test modules (`tests.test_*`) that `path` imports, in either form of import."""
    modules: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "tests":
            modules.update(f"tests.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules.add(node.module)
    return {m for m in modules if m.startswith("tests.test_")}


def test_no_test_module_imports_another() -> None:
    """Shared test helpers live in `tests/helpers/`: a test module importing another would run the
    other's module-level code, and moving or deleting a test would break unrelated ones."""
    wrong = {
        f"{path.relative_to(ROOT)}: {module}"
        for path in sorted((ROOT / "tests").rglob("*.py"))
        for module in _test_module_imports(path)
    }
    assert not wrong, "import these helpers from tests/helpers/ instead:\n" + "\n".join(sorted(wrong))
