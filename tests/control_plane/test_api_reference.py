"""`docs/api.md` keeps up with the code: every route the app serves has its heading there (and
no heading names a route the app does not serve), every error code the code can answer is in
its error table with the right status, and every JSON answer has a model in the OpenAPI document.

Routes are written as headings: ``### `GET /v1/servers/{server_id}` `` (WebSocket routes add
``(WebSocket)`` after the backticks). Error codes are rows of the table under ``## Errors``:
``| 404 | `not_found` | ... |`` (status ``—`` for a code that never is an HTTP status).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.routing import APIWebSocketRoute
from starlette.routing import BaseRoute, WebSocketRoute

from api_client import errors
from contract.link import protocol
from control_plane.app import build_fleet, create_app
from control_plane.settings import Settings
from tests.conftest import ROOT

REFERENCE = ROOT / "docs" / "api.md"
CONTROL_PLANE = ROOT / "control_plane"
HTTP_METHODS = frozenset({"get", "put", "post", "delete", "patch", "head", "options"})
HEADING = re.compile(r"^#{2,4} `([A-Z]+) (/\S*)`")
ERROR_ROW = re.compile(r"^\| *([0-9]{3}|—) *\| *`([a-z_]+)` *\|")


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FastAPI]:
    data = tmp_path_factory.mktemp("api-reference")
    fleet = build_fleet(Settings(db_url=f"sqlite:///{data / 'fleet.db'}"))
    yield create_app(fleet)
    fleet.db.dispose()


@pytest.fixture(scope="module")
def openapi(app: FastAPI) -> dict[str, Any]:
    return app.openapi()


def reference() -> str:
    return REFERENCE.read_text(encoding="utf-8")


def documented_routes(text: str) -> set[tuple[str, str]]:
    return {(m.group(1), m.group(2)) for line in text.splitlines() if (m := HEADING.match(line))}


def served_routes(app: FastAPI, openapi: dict[str, Any]) -> set[tuple[str, str]]:
    """Every method and path of the OpenAPI document, and the WebSocket routes it leaves out."""
    routes = {
        (method.upper(), path)
        for path, operations in openapi["paths"].items()
        for method in operations
        if method in HTTP_METHODS
    }
    routes |= {("GET", path) for path in websocket_paths(app.routes)}
    return routes


def websocket_paths(routes: Iterable[BaseRoute]) -> Iterator[str]:
    for route in routes:
        if isinstance(route, APIWebSocketRoute | WebSocketRoute):
            yield route.path
        # Recent FastAPI keeps an included router as one route holding the router itself.
        inner = getattr(getattr(route, "original_router", None), "routes", None) or getattr(route, "routes", None)
        if inner:
            yield from websocket_paths(inner)


def test_every_route_is_in_the_reference(app: FastAPI, openapi: dict[str, Any]) -> None:
    served = served_routes(app, openapi)
    documented = documented_routes(reference())
    assert len(served) > 30  # the whole app, not a part of it
    assert sorted(served - documented) == [], "routes missing from docs/api.md"
    assert sorted(documented - served) == [], "docs/api.md documents routes the app does not serve"


def test_every_json_answer_has_a_model(openapi: dict[str, Any]) -> None:
    """A success answer in JSON names its schema: no route passes an untyped dict through."""
    untyped = []
    for path, operations in openapi["paths"].items():
        for method, operation in operations.items():
            for status, answer in operation["responses"].items():
                json_body = answer.get("content", {}).get("application/json")
                if status.startswith("2") and json_body is not None and not json_body.get("schema"):
                    untyped.append(f"{method.upper()} {path} {status}")
    assert untyped == []


def error_table(text: str) -> dict[str, set[str]]:
    """The codes of the table under `## Errors`, with the statuses each is listed under."""
    section = text.split("\n## Errors\n", 1)[1].split("\n## ", 1)[0]
    table: dict[str, set[str]] = {}
    for line in section.splitlines():
        if m := ERROR_ROW.match(line):
            table.setdefault(m.group(2), set()).add(m.group(1))
    return table


def exception_classes() -> list[type[errors.ApiError]]:
    """The contract's codes: one `contract.errors` class each (the base class has none)."""
    return [
        value
        for value in vars(errors).values()
        if isinstance(value, type) and issubclass(value, errors.ApiError) and value is not errors.ApiError
    ]


def _strings(node: ast.expr) -> Iterator[str]:
    """The string constants an expression can evaluate to (`a or "x"`, `"x" if c else "y"`)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node.value
    elif isinstance(node, ast.BoolOp):
        for value in node.values:
            yield from _strings(value)
    elif isinstance(node, ast.IfExp):
        yield from _strings(node.body)
        yield from _strings(node.orelse)


def _named(target: ast.expr, names: frozenset[str]) -> bool:
    return (isinstance(target, ast.Name) and target.id in names) or (
        isinstance(target, ast.Attribute) and target.attr in names
    )


CODE_NAMES = frozenset({"code", "error_code"})


def literal_codes(path: Path) -> set[str]:
    """Error codes written as literals in one module: `error_response(status, "code", ..)`,
    `error_code="code"` arguments, `code = "code"` / `x.error_code = "code"` assignments, and
    `{"code": "code"}` in dicts (stream error events)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Call):
            callee = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            if callee == "error_response" and len(node.args) > 1:
                found.update(_strings(node.args[1]))
            for keyword in node.keywords:
                if keyword.arg in CODE_NAMES:
                    found.update(_strings(keyword.value))
        elif isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(_named(target, CODE_NAMES) for target in targets):
                found.update(_strings(node.value))
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value in CODE_NAMES:
                    found.update(_strings(value))
    return found


def codes_in_the_code() -> dict[str, str]:
    """Every code the control plane can answer, with where it comes from."""
    where = {cls.code: f"contract.errors.{cls.__name__}" for cls in exception_classes()}
    for path in sorted(CONTROL_PLANE.rglob("*.py")):
        for code in literal_codes(path):
            where.setdefault(code, str(path.relative_to(ROOT)))
    # A file operation's `error` event passes on the agent's code: the link's own codes too.
    for code in (protocol.INTERNAL, protocol.TIMEOUT, protocol.CANCELLED, protocol.UNKNOWN_METHOD):
        where.setdefault(code, "contract/link/protocol.py")
    return where


def test_the_scan_finds_literal_codes() -> None:
    """The scan sees the codes the control plane writes by hand, not only the classes."""
    scanned: set[str] = set()
    for path in CONTROL_PLANE.rglob("*.py"):
        scanned |= literal_codes(path)
    assert {"bad_request", "validation_error", "internal", "unauthenticated", "cancelled"} <= scanned


def test_every_error_code_is_in_the_reference() -> None:
    table = error_table(reference())
    missing = {code: origin for code, origin in codes_in_the_code().items() if code not in table}
    assert missing == {}, "error codes missing from the table of docs/api.md"
    assert sorted(set(table) - set(codes_in_the_code())) == [], "docs/api.md lists codes the code never answers"
    for cls in exception_classes():
        assert errors.ApiError.for_code(cls.code) is cls, f"{cls.__name__} is not registered in _BY_CODE"
        assert str(cls.status) in table[cls.code], f"{cls.code}: docs/api.md lists {table[cls.code]}, not {cls.status}"
