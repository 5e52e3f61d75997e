"""What a call through the hub can raise besides the caller's own cancellation."""

from __future__ import annotations

from typing import Any


class AgentOfflineError(Exception):
    """No link for that server, or the link dropped before the answer came."""


class AgentTimeoutError(Exception):
    """No answer within the call's timeout (the agent's handler was cancelled)."""


class AgentCallError(Exception):
    """The agent answered an error: ``code`` is a contract code or a link code (`internal`, ...)."""

    def __init__(self, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details: dict[str, Any] = details or {}

    def __str__(self) -> str:
        return f"{self.message} ({self.code})"
