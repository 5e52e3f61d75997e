"""Turn exceptions into sentences a user can act on (shown as notifications, never tracebacks)."""

from __future__ import annotations

import logging

from api_client import errors as api_errors
from tui.text import printable

log = logging.getLogger(__name__)

MIB = 1024 * 1024


def describe_error(exc: BaseException, *, server: str | None = None, path: str | None = None) -> str:
    """A one-line, human description of `exc`; `server` and `path` name what was being accessed."""
    exc = unwrap(exc)
    server_name = server or "this server"
    file_name = path or "this file"
    match exc:
        case api_errors.AgentOffline():
            return f"The agent of {server_name} is offline."
        case api_errors.BinaryFile():
            return f"{file_name} is a binary file: it cannot be edited (F3 views it in hex)."
        case api_errors.TooLarge():
            return f"{file_name} is too large to edit{_limit_clause(exc)}: F3 views it."
        case api_errors.Unauthenticated():
            return "Your session has expired: restart fleetdeck to log in again."
        case api_errors.TierRequired():
            required = exc.details.get("required_plan")
            return f"This needs the {required} plan." if required else exc.message
        case api_errors.NotFound():
            return f"Not found: {exc.message}"
        case api_errors.InsufficientStorage():
            where = exc.details.get("path")
            place = f"/{where}" if isinstance(where, str) and where else path
            at = f" at {printable(place)}" if place else ""
            quota = "quota" in exc.message
            return f"The {'disk quota' if quota else 'disk'} of {server_name} is full{at}: nothing was written."
        case api_errors.Unavailable():
            part = exc.details.get("part")
            away = f"The control plane's {part}" if part in ("database", "bus") else "The control plane"
            return f"{away} is away, retrying: nothing was done; try again in a few seconds."
        case api_errors.ApiError():
            return exc.message
        case api_errors.FleetdeckError():
            return str(exc)
        case OSError():
            return f"System error: {exc}"
    log.error("unexpected error", exc_info=exc)
    return f"Unexpected error ({type(exc).__name__}): {exc}"


def _limit_clause(exc: api_errors.ApiError) -> str:
    limit = exc.details.get("limit")
    size = exc.details.get("size")
    parts = []
    if isinstance(size, int):
        parts.append(f"{format_size(size)}")
    if isinstance(limit, int):
        parts.append(f"the limit is {format_size(limit)}")
    return f" ({', '.join(parts)})" if parts else ""


def format_size(size: int) -> str:
    """The one way the TUI writes a size: `512 B`, `1.5 KiB`, `12 MiB` (binary units, one decimal
    below 10). The next unit starts at 1000, so a size never takes more than 7 cells (`999 KiB`,
    then `1.0 MiB`): it fits the panels' size column."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        number = str(size) if unit == "B" else f"{value:.1f}" if value < 9.95 else f"{value:.0f}"
        if float(number) < 1000 or unit == "TiB":
            return f"{number} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def unwrap(exc: BaseException) -> BaseException:
    """An exception group of one (trio nurseries make these) reads as its single member."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc
