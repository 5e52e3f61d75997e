"""A handler's output and its clean failure: `Output` (where its lines go), `JobError` (the one
stderr line and its exit code) and the exit codes every handler shares. A leaf of the toolkit:
`proc` and `host` build on it, and `base` (the context and the dispatcher) on them."""

from __future__ import annotations

from typing import Any

import orjson

STDOUT = "stdout"
STDERR = "stderr"

# Exit codes every handler shares (documented in docs/jobs.md). 1 is any other failure, 2 refused
# arguments, 127 "this agent has no handler for the kind" (and nothing else).
EXIT_MISSING = 69  # the software the kind drives is not installed (the stderr line names the Debian package)
EXIT_REFUSED = 78  # the tool's own validation refused the change (nginx -t, visudo -c, ...): nothing changed


class JobError(Exception):
    """A handler's clean failure: its message becomes the one stderr line, with `exit_code`."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class Output:
    """Where a handler writes its lines. Writing never waits; `drain` is the one await point a
    handler producing many lines calls between blocks (the job manager may hold it there while a
    live reader lags far behind)."""

    pretty = False

    def lines(self, stream: str, texts: list[str]) -> None:
        raise NotImplementedError

    def stdout(self, text: str) -> None:
        self.lines(STDOUT, text.split("\n"))

    def stderr(self, text: str) -> None:
        self.lines(STDERR, text.split("\n"))

    def json(self, obj: Any) -> None:
        """A read's result on stdout: compact (one line) for the control plane, pretty on a terminal."""
        option = orjson.OPT_INDENT_2 if self.pretty else 0
        self.stdout(orjson.dumps(obj, option=option | orjson.OPT_NON_STR_KEYS).decode())

    def result(self, obj: Any, *, as_json: bool) -> None:
        """`obj` as JSON, or (without ``--json``) as plain text for a person."""
        if as_json:
            self.json(obj)
        else:
            self.lines(STDOUT, human(obj))

    async def drain(self) -> None:
        return None


def human(obj: Any, indent: str = "") -> list[str]:
    """A plain-text rendering of a JSON result: ``key: value`` lines and tables of records."""
    if isinstance(obj, dict):
        lines: list[str] = []
        for key, value in obj.items():
            if isinstance(value, dict | list) and value:
                lines.append(f"{indent}{key}:")
                lines.extend(human(value, indent + "  "))
            else:
                lines.append(f"{indent}{key}: {_scalar(value)}")
        return lines
    if isinstance(obj, list):
        if obj and all(isinstance(item, dict) for item in obj):
            columns = [key for key in obj[0] if not isinstance(obj[0][key], dict | list)]
            rows = [[_scalar(item.get(key)) for key in columns] for item in obj]
            widths = [max(len(str(c)), *(len(r[i]) for r in rows)) for i, c in enumerate(columns)]
            table = [[c.upper() for c in columns], *rows]
            return [
                indent + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in table
            ]
        return [f"{indent}- {_scalar(item)}" for item in obj] or [f"{indent}(none)"]
    return [indent + _scalar(obj)]


def _scalar(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict | list):
        return orjson.dumps(value).decode()
    return str(value)
