"""What every job handler shares: its context, its `Output`, its argv parser and the dispatcher.

A kind ``<family>.<action>`` is a `Kind`: an argparse definition of the argv the control plane
builds (``[<family>, <action>, *positionals, *flags]``, see the seam table) and an async run
function ``run(args, ctx, out) -> exit code``. `run_kind` is the one way a job runs, whether the
job manager started it for the control plane or ``fleetdeck agent run`` did on a terminal:

- a kind with no handler: exit 127 and one stderr line asking for an agent update;
- argv the parser refuses: exit 2 with the usage on stderr;
- a handler that raises: exit 1 and one stderr line (the traceback goes to the log only).
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

import orjson

from agent.files.entries import rfc3339 as rfc3339  # the one formatter, here for the job kinds
from agent.link.protocol import RpcError, single_error
from agent.sites import DOMAIN_RE, SiteRegistry

log = logging.getLogger("fleetdeck.agent.jobs")

STDOUT = "stdout"
STDERR = "stderr"


class JobError(Exception):
    """A handler's clean failure: its message becomes the one stderr line, with `exit_code`."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class JobContext:
    """Where a job works: the agent's home and state folder, its site registry, its version."""

    home: str
    state_dir: str
    sites: SiteRegistry
    version: str
    secrets: Mapping[str, str] = field(default_factory=dict)

    @property
    def is_root(self) -> bool:
        return os.geteuid() == 0

    def site_home(self, slug: str) -> str:
        return os.path.join(self.home, slug)

    def with_secrets(self, secrets: Mapping[str, str]) -> JobContext:
        return JobContext(self.home, self.state_dir, self.sites, self.version, dict(secrets))


# --- output ------------------------------------------------------------------------------


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


# --- argv ----------------------------------------------------------------------------------


class ArgvError(Exception):
    """The parser's verdict: `text` goes to stderr (or stdout for --help) with `exit_code`."""

    def __init__(self, exit_code: int, text: str) -> None:
        super().__init__(text)
        self.exit_code = exit_code
        self.text = text


class JobArgumentParser(argparse.ArgumentParser):
    """An argparse parser that never prints or exits: it raises `ArgvError` instead."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("exit_on_error", False)
        super().__init__(*args, **kwargs)
        self._printed: list[str] = []

    def _print_message(self, message: str, file: Any = None) -> None:
        if message:
            self._printed.append(message)

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        text = "".join(self._printed) + (message or "")
        self._printed.clear()
        raise ArgvError(status, text.rstrip("\n"))

    def error(self, message: str) -> NoReturn:
        raise ArgvError(2, f"{self.format_usage().rstrip()}\n{self.prog}: error: {message}")


def domain_arg(value: str) -> str:
    """A DomainName: an RFC 1123 host name, lowercase, with at least one dot."""
    if value != value.lower() or "." not in value or not DOMAIN_RE.match(value):
        raise argparse.ArgumentTypeError(f"not a lowercase domain name with a dot: {value!r}")
    return value


ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")


def id_arg(value: str) -> str:
    if not ID_RE.match(value):
        raise argparse.ArgumentTypeError(f"not an id: {value!r}")
    return value


def int_range(low: int, high: int) -> Callable[[str], int]:
    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {value!r}") from None
        if not low <= number <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}: {number}")
        return number

    parse.__name__ = "integer"
    return parse


# --- kinds ---------------------------------------------------------------------------------

RunFunction = Callable[[argparse.Namespace, JobContext, Output], Awaitable[int]]


@dataclass(frozen=True)
class Kind:
    """One job kind: its argv definition (``configure`` adds the arguments) and its run function."""

    family: str
    action: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: RunFunction
    help: str = ""

    @property
    def name(self) -> str:
        return f"{self.family}.{self.action}"

    def parser(self, prog_prefix: str = "") -> JobArgumentParser:
        parser = JobArgumentParser(prog=f"{prog_prefix}{self.family} {self.action}", description=self.help or None)
        self.configure(parser)
        return parser


def kind_table(kinds: Iterable[Kind]) -> dict[str, Kind]:
    table: dict[str, Kind] = {}
    for kind in kinds:
        if kind.name in table:
            raise ValueError(f"job kind {kind.name} is defined twice")
        table[kind.name] = kind
    return table


def no_handler_line(kind: str, version: str) -> str:
    return f"this agent (version {version}) has no handler for {kind} and should be updated"


async def run_kind(
    kinds: Mapping[str, Kind],
    kind_name: str,
    argv: list[str],
    ctx: JobContext,
    out: Output,
    *,
    traceback_level: int = logging.ERROR,
) -> int:
    """Run one job to its exit code (see the module docstring). Cancellation propagates."""
    kind = kinds.get(kind_name)
    if kind is None:
        out.stderr(no_handler_line(kind_name, ctx.version))
        return 127
    if argv[:2] != [kind.family, kind.action]:
        out.stderr(f"the argv of a {kind.name} job must start with {kind.family!r} {kind.action!r}")
        return 2
    try:
        args = kind.parser().parse_args(argv[2:])
    except ArgvError as exc:
        if exc.text:
            (out.stdout if exc.exit_code == 0 else out.stderr)(exc.text)
        return exc.exit_code
    except argparse.ArgumentError as exc:  # exit_on_error=False reports some errors this way
        out.stderr(f"{kind.parser().format_usage().rstrip()}\n{kind.family} {kind.action}: error: {exc}")
        return 2
    try:
        return await kind.run(args, ctx, out)
    except Exception as exc:
        error = single_error(exc)
        if isinstance(error, JobError):
            out.stderr(one_line(str(error)))
            return error.exit_code
        if isinstance(error, RpcError):
            out.stderr(f"error: {one_line(error.message)}")
            return 1
        log.log(traceback_level, "job %s %s failed", kind.name, argv[2:], exc_info=error)
        out.stderr(f"error: {kind.name} failed: {type(error).__name__}: {one_line(str(error))}")
        return 1


def one_line(text: str) -> str:
    return " ".join(text.split()) if "\n" in text or "\r" in text else text


# --- small shared helpers ------------------------------------------------------------------

_at_cache: list[Any] = [-1, ""]


def now_at() -> str:
    """The current time as RFC 3339 UTC with milliseconds (formatted at most once a millisecond)."""
    ms = time.time_ns() // 1_000_000
    if ms != _at_cache[0]:
        seconds, millis = divmod(ms, 1000)
        _at_cache[0] = ms
        _at_cache[1] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"
    text: str = _at_cache[1]
    return text
