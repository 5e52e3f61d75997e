"""Every error answer in the contract's shape: `{"error": {"code", "message", "details"}}`.

Handlers raise the `contract.errors` class of the code (`NotFound(...)`), so the client and the
server share one list of codes. Framework errors (unknown route, failed validation, malformed
JSON) are translated here too, so no answer ever leaves in another shape.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
import sqlalchemy as sa
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from contract.errors import ApiError, RateLimited, Unavailable
from contract.models import ErrorBody
from control_plane.storage.outage import RETRY_AFTER_S, is_outage

log = logging.getLogger("fleetdeck.control_plane")

# What the OpenAPI document says of every route's errors: the one shape above (and not FastAPI's
# own 422 body, which this app never sends).
OPENAPI_RESPONSES: dict[int | str, dict[str, Any]] = {
    "4XX": {"model": ErrorBody, "description": "The request was refused: `{error: {code, message, details}}`"},
    "5XX": {"model": ErrorBody, "description": "The control plane or the agent failed: the same error shape"},
}


def error_response(status: int, code: str, message: str, details: dict[str, Any] | None = None) -> Response:
    body = {"error": {"code": code, "message": message, "details": details or {}}}
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")


def _loc(loc: Any) -> list[str | int]:
    # FastAPI prefixes "body"/"query"; keep it, it tells the caller where to look.
    return [p if isinstance(p, int) else str(p) for p in loc]


async def _api_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    response = error_response(exc.status_code, exc.error_code, exc.message, exc.details)
    if isinstance(exc, RateLimited):
        response.headers["Retry-After"] = str(exc.details["retry_after_s"])
    elif isinstance(exc, Unavailable):
        response.headers["Retry-After"] = str(exc.details.get("retry_after_s", RETRY_AFTER_S))
    return response


BUS_AWAY = "the server's agent is linked to another replica, and the bus between them is away: try again shortly"


def unavailable(part: str, message: str) -> Unavailable:
    """The 503 of a request made while the database or the bus (`part`) is away."""
    return Unavailable(message, details={"part": part, "retry_after_s": RETRY_AFTER_S})


async def _validation_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        return error_response(400, "bad_request", "the request body is not valid JSON")
    listed = [{"loc": _loc(e.get("loc", ())), "msg": str(e.get("msg", ""))} for e in errors]
    first = listed[0] if listed else {"loc": [], "msg": "invalid"}
    where = ".".join(str(p) for p in first["loc"])
    return error_response(422, "validation_error", f"{where}: {first['msg']}", {"errors": listed})


async def _http_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 404:
        return error_response(404, "not_found", "no such route")
    if exc.status_code == 405:
        return error_response(405, "bad_request", "method not allowed on this route")
    if exc.status_code == 401:
        return error_response(401, "unauthenticated", str(exc.detail))
    return error_response(exc.status_code, "bad_request", str(exc.detail))


class ResponseCut(Exception):
    """A contract error after the answer had started (its agent went away mid-download): the
    status is sent, its Content-Length declared, so the only honest end is a cut connection, and
    ASGI's only way to cut one is to raise out of the app. Expected, not a bug: it is logged once,
    as a warning line (`_unexpected`), and the servers are told not to log it again with a
    traceback (`control_plane.serving`)."""


def cut_by_error(error: BaseException | None) -> bool:
    """Whether `error` (what a server caught from the app) is a `ResponseCut`, alone or grouped."""
    if isinstance(error, BaseExceptionGroup):
        cut, rest = error.split(ResponseCut)
        return cut is not None and rest is None
    return isinstance(error, ResponseCut)


async def _unexpected(request: Request, exc: Exception) -> Response:
    if isinstance(exc, ResponseCut):
        log.warning("%s %s: answer cut short: %s", request.method, request.url.path, exc)
    else:
        log.exception("unhandled error", exc_info=exc)
    return error_response(500, "internal", "internal error; see the control plane's log")


async def _database_error(request: Request, exc: Exception) -> Response:
    """An outage of the database (`control_plane.storage.outage`) is no bug: 503, nothing done.
    Other database errors are bugs."""
    if not is_outage(exc):
        return await _unexpected(request, exc)
    return await _api_error(request, unavailable("database", "the control plane's database is away: try again shortly"))


async def _data_error(request: Request, exc: Exception) -> Response:
    """PostgreSQL's text cannot hold NUL (SQLite's can): a name, email, id or filter with one is
    refused in words wherever a query would carry it, not a 500."""
    assert isinstance(exc, sa.exc.DataError)
    if "NUL" in str(exc.orig):
        return error_response(422, "validation_error", "text may not contain a NUL character (0x00)")
    return await _unexpected(request, exc)


def install(app: FastAPI) -> None:
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(sa.exc.DataError, _data_error)
    app.add_exception_handler(sa.exc.DBAPIError, _database_error)
    app.add_exception_handler(sa.exc.TimeoutError, _database_error)
    app.add_exception_handler(Exception, _unexpected)
