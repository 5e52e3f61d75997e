"""Errors of the job routes in words a user can act on (notifications, never tracebacks)."""

from __future__ import annotations

from api_client import errors as api_errors
from tui.errors import describe_error, unwrap


def describe_job_error(exc: BaseException, *, server: str, kind: str | None = None) -> str:
    """One sentence for an error of creating, listing or following a job."""
    exc = unwrap(exc)
    what = kind or "this job"
    match exc:
        case api_errors.TierRequired():
            required = exc.details.get("required_plan")
            current = exc.details.get("current_plan")
            if not required:
                return exc.message
            on = f" (this organisation is on {current})" if current else ""
            return f"{what} needs plan {required}{on}."
        case api_errors.Forbidden():
            return f"Your role may not run {what}: {exc.message}"
        case api_errors.UnknownKind():
            return f"{what} is not a job kind this control plane knows."
        case api_errors.KindNotAllowed():
            return f"{what} cannot be started here: {exc.message}"
        case api_errors.AgentOffline():
            return f"The agent of {server} is offline: {what} cannot run now ({exc.message})."
        case api_errors.LiteServer():
            return f"{server} is a lite server: it has no agent to run jobs."
        case api_errors.ValidationFailed():
            return f"Some arguments of {what} are not valid: {exc.message}"
        case api_errors.NotFound():
            return f"Not found on {server}: {exc.message}"
    return describe_error(exc, server=server)


def validation_errors(exc: BaseException) -> list[dict[str, object]]:
    """The `{loc, msg}` items of a `validation_error` (empty for any other error)."""
    exc = unwrap(exc)
    if not isinstance(exc, api_errors.ValidationFailed):
        return []
    errors = exc.details.get("errors")
    return [e for e in errors if isinstance(e, dict)] if isinstance(errors, list) else []
