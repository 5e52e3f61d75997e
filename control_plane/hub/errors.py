"""What a call through the hub can raise besides the caller's own cancellation."""

from __future__ import annotations

import re
from typing import Any, Final

from contract.link import protocol

# The codes an agent's answer may pass on: the contract's codes its file handlers and jobs can
# name, and the link's `unknown_method` (an older agent; file operations' events say so). Any
# other code (the link's `internal`, a code of a newer agent, or one that would say something
# about the caller, such as `unauthenticated`) reaches users as `agent_error`.
AGENT_CODES: Final = frozenset(
    {"not_found", "conflict", "forbidden", "too_large", "binary_file", "validation_error", "path_outside_scope"}
    | {"insufficient_storage", protocol.UNKNOWN_METHOD}
)
AGENT_ERROR: Final = "agent_error"
MAX_MESSAGE: Final = 300
_CODE_RE = re.compile(r"[a-z][a-z0-9_]{0,63}")
_TRACEBACK = "Traceback (most recent call last)"
# Terminal escape sequences: CSI (colours, cursor, clear screen), OSC (window title, links), others.
_ESCAPE_RE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x9b[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b.?")


class AgentOfflineError(Exception):
    """No link for that server, or the link dropped before the answer came."""


class AgentTimeoutError(Exception):
    """No answer within the call's timeout (the agent's handler was cancelled)."""


class AgentCallError(Exception):
    """The agent answered an error: ``code`` is a contract code or a link code (`internal`, ...).

    What the agent says is not trusted: `message` is made safe to show (`safe_message`), and
    `public_code` is the code users get (`AGENT_CODES`, else `agent_error`).
    """

    def __init__(self, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        self.code = code if _CODE_RE.fullmatch(code) else AGENT_ERROR
        self.message = safe_message(message)
        super().__init__(self.message)
        self.details: dict[str, Any] = details or {}

    @property
    def public_code(self) -> str:
        return self.code if self.code in AGENT_CODES else AGENT_ERROR

    def __str__(self) -> str:
        return f"{self.message} ({self.code})"


def safe_message(text: str) -> str:
    """An agent's error text as users may see it: its first line, printable characters only
    (no terminal escape codes), at most `MAX_MESSAGE` characters, and never a traceback."""
    line = next((part.strip() for part in str(text).splitlines() if part.strip()), "")
    line = "".join(char for char in _ESCAPE_RE.sub("", line) if char.isprintable())
    if not line or line.startswith(_TRACEBACK):
        return "the agent failed without saying why"
    return line if len(line) <= MAX_MESSAGE else line[: MAX_MESSAGE - 1] + "…"
