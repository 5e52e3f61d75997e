"""One exception class per error code of the `/v1` contract.

`ApiError.from_response` turns any error body into the matching class, so callers can write
`except AgentOffline:` rather than comparing strings.
"""

from __future__ import annotations

from typing import Any, ClassVar


class FleetdeckError(Exception):
    """Base of everything this package raises."""


class TransportError(FleetdeckError):
    """The control plane could not be reached, or answered something that is not the API."""


class ApiError(FleetdeckError):
    """An error answer of the API: `{"error": {"code", "message", "details"}}`."""

    code: ClassVar[str] = "error"
    status: ClassVar[int] = 500

    def __init__(self, message: str, *, status: int | None = None, details: dict[str, Any] | None = None):
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = details or {}
        if status is not None:
            self.status_code = status
        else:
            self.status_code = self.status
        # The code as the server sent it: differs from `code` only for codes this client predates.
        self.error_code: str = self.code

    def __str__(self) -> str:
        return f"{self.message} ({self.code})"

    @classmethod
    def for_code(cls, code: str) -> type[ApiError]:
        return _BY_CODE.get(code, ApiError)

    @classmethod
    def from_body(cls, status: int, body: Any) -> ApiError:
        error = body.get("error") if isinstance(body, dict) else None
        if not isinstance(error, dict) or not isinstance(error.get("code"), str):
            return ApiError(f"unexpected answer with status {status}", status=status)
        klass = cls.for_code(error["code"])
        details = error.get("details")
        exc = klass(
            str(error.get("message") or error["code"]),
            status=status,
            details=details if isinstance(details, dict) else {},
        )
        exc.error_code = error["code"]
        return exc


class BadRequest(ApiError):
    code = "bad_request"
    status = 400


class Unauthenticated(ApiError):
    code = "unauthenticated"
    status = 401


class Forbidden(ApiError):
    code = "forbidden"
    status = 403


class TierRequired(ApiError):
    code = "tier_required"
    status = 403


class NotFound(ApiError):
    code = "not_found"
    status = 404


class Conflict(ApiError):
    code = "conflict"
    status = 409


class AgentOffline(ApiError):
    code = "agent_offline"
    status = 409


class NotRunning(ApiError):
    """Cancel of a job that has already ended (its status is the real one)."""

    code = "not_running"
    status = 409


class Timeout(ApiError):
    """A request's head or body stalled past the documented time (the control plane's front door)."""

    code = "timeout"
    status = 408


class TooLarge(ApiError):
    """Over a size limit; for a request body over its route's cap, `details: {limit, size}`."""

    code = "too_large"
    status = 413


class BinaryFile(ApiError):
    code = "binary_file"
    status = 415


class ValidationFailed(ApiError):
    code = "validation_error"
    status = 422


class UnknownKind(ApiError):
    code = "unknown_kind"
    status = 422


class KindNotAllowed(ApiError):
    code = "kind_not_allowed"
    status = 422


class ImmutableField(ApiError):
    code = "immutable_field"
    status = 422


class LiteServer(ApiError):
    code = "lite_server"
    status = 422


class PathOutsideScope(ApiError):
    code = "path_outside_scope"
    status = 422


class IdempotencyMismatch(ApiError):
    code = "idempotency_mismatch"
    status = 422


class RateLimited(ApiError):
    """Too many attempts (login); `details.retry_after_s` (and the `Retry-After` header) say when
    to try again."""

    code = "rate_limited"
    status = 429


class InternalError(ApiError):
    code = "internal"
    status = 500


class AgentError(ApiError):
    """The server's agent failed in a way it could not name; the message is safe to show.
    `details.agent_code` is the agent's own code, when it gave one."""

    code = "agent_error"
    status = 502


class Unavailable(ApiError):
    """The control plane cannot serve for now (its database or its bus is away): nothing was
    done; `details.retry_after_s` (and the `Retry-After` header) say when to try again, and
    `details.part` names what is away ("database" or "bus")."""

    code = "unavailable"
    status = 503


class AgentTimeout(ApiError):
    code = "agent_timeout"
    status = 504


class InsufficientStorage(ApiError):
    """The server's disk (or the user's quota) is full at `details.path`; nothing partial is left."""

    code = "insufficient_storage"
    status = 507


_BY_CODE: dict[str, type[ApiError]] = {
    klass.code: klass
    for klass in (
        BadRequest,
        Unauthenticated,
        Forbidden,
        TierRequired,
        NotFound,
        Conflict,
        AgentOffline,
        NotRunning,
        Timeout,
        TooLarge,
        BinaryFile,
        ValidationFailed,
        UnknownKind,
        KindNotAllowed,
        ImmutableField,
        LiteServer,
        PathOutsideScope,
        IdempotencyMismatch,
        RateLimited,
        InternalError,
        AgentError,
        Unavailable,
        AgentTimeout,
        InsufficientStorage,
    )
}
