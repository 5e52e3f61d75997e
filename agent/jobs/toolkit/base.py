"""What every job handler shares: its context, its `Output`, its argv parser and the dispatcher.

A handler (`Kind`) implements one kind of the job catalog (`contract.job_kinds`): the argv the
control plane built with ``JobKind.build`` is validated back into the SAME model by
``JobKind.parse``, and the async run function ``run(args, ctx, out) -> exit code`` receives that
model. `run_kind` is the one way a job runs, whether the job manager started it for the control
plane or ``fleetdeck agent run`` did on a terminal:

- a kind with no handler: exit 127 and one stderr line asking for an agent update;
- argv the model refuses: exit 2, the usage and one line per refused field on stderr;
- ``--help``: the kind's help (generated from its model) on stdout, exit 0;
- a declared need this host lacks (`agent.jobs.toolkit.needs`): exit 69 and one line naming its
  Debian package;
- a handler that raises: exit 1 and one stderr line (the traceback goes to the log only).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import ValidationError

from agent.files.entries import rfc3339 as rfc3339  # the one formatter, here for the job kinds
from agent.files.jail import storage_refusal
from agent.jobs.toolkit.host import DEFAULT_LAYOUT, HostLayout, LayoutFile
from agent.jobs.toolkit.needs import Need, check_needs
from agent.jobs.toolkit.output import STDERR, JobError, Output
from agent.sites import SiteRegistry
from contract.job_kinds import JobKind, lookup
from contract.link.protocol import RpcError, single_error

log = logging.getLogger("fleetdeck.agent.jobs")


@dataclass(frozen=True)
class JobContext:
    """Where a job works: the agent's home and state folder, its site registry, its version."""

    home: str
    state_dir: str
    sites: SiteRegistry
    version: str
    secrets: Mapping[str, str] = field(default_factory=dict)
    as_json: bool = False  # the job's argv asked for JSON (--json): results print as JSON, not for a person
    lb: Any = None  # the agent's `agent.load_balancers.node.LbNode` (None: `lb.*` jobs make one with defaults)
    layout: LayoutFile | None = None  # where the services live (None: the Debian defaults)

    @property
    def is_root(self) -> bool:
        return os.geteuid() == 0

    @property
    def host(self) -> HostLayout:
        """Where this server's services keep their configuration, now (see `agent.jobs.toolkit.host`)."""
        return self.layout.current() if self.layout is not None else DEFAULT_LAYOUT

    def site_home(self, slug: str) -> str:
        return os.path.join(self.home, slug)

    def with_secrets(self, secrets: Mapping[str, str]) -> JobContext:
        return replace(self, secrets=dict(secrets), as_json=False)


# --- kinds ---------------------------------------------------------------------------------

RunFunction = Callable[[Any, JobContext, Output], Awaitable[int]]
"""``run(args, ctx, out) -> exit code``; `args` is the validated model of the kind's catalog entry."""

HELP_FLAGS = ("-h", "--help")


@dataclass(frozen=True)
class Kind:
    """A handler: the catalog entry it implements (its argv is the entry's, validated by the
    entry's model), its run function and what it needs on the host (its domain's and its own)."""

    spec: JobKind
    run: RunFunction
    needs: tuple[Need, ...] = ()

    @property
    def name(self) -> str:
        return self.spec.kind

    @property
    def family(self) -> str:
        return self.spec.domain

    @property
    def action(self) -> str:
        return self.spec.action


def handler(kind: str, run: RunFunction, needs: Iterable[Need] = ()) -> Kind:
    """The handler of the catalog kind `kind`: what a domain module lists in its ``KINDS``.

    Why: the kind's arguments are the catalog's model (`JobKind.parse` validates the argv into it),
    so the handler never parses an argv of its own.

    Args:
        kind: ``<domain>.<action>``, a kind of the catalog.
        run: ``run(args, ctx, out) -> exit code``.
        needs: what this kind needs on the host besides its domain's ``NEEDS``
            (`agent.jobs.toolkit.needs`): announced to the control plane, checked before a run.

    Raises:
        ValueError: the catalog has no such kind (at import: the agent does not start).
    """
    spec = lookup(kind)
    if spec is None:
        raise ValueError(f"{kind} is not a job kind of the catalog")
    return Kind(spec, run, tuple(needs))


def argv_error_lines(kind: Kind, error: ValidationError) -> list[str]:
    """The usage line, then one line per refused field or flag, as argparse would print them."""
    prog = f"{kind.family} {kind.action}"
    lines = [kind.spec.usage()]
    for item in error.errors(include_url=False):
        where = ".".join(str(part) for part in item["loc"])
        lines.append(f"{prog}: error: {where}: {item['msg']}" if where else f"{prog}: error: {item['msg']}")
    return lines


def kind_table(kinds: Iterable[Kind]) -> dict[str, Kind]:
    """The handler table of `kinds`, by kind name.

    Raises:
        ValueError: two handlers for one kind.
    """
    table: dict[str, Kind] = {}
    for kind in kinds:
        if kind.name in table:
            raise ValueError(f"job kind {kind.name} is defined twice")
        table[kind.name] = kind
    return table


def no_handler_line(kind: str, version: str) -> str:
    # No promise of an update: most catalog kinds have no handler in any agent version yet.
    return f"this agent (fleetdeck-agent {version}) has no handler for {kind}"


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
    if any(token in HELP_FLAGS for token in argv[2:]):
        out.stdout(kind.spec.help())
        return 0
    try:
        args = kind.spec.parse(argv, ctx.secrets)
    except ValidationError as exc:
        out.lines(STDERR, argv_error_lines(kind, exc))
        return 2
    ctx = replace(ctx, as_json=kind.spec.wants_json(argv))
    try:
        check_needs(kind.name, kind.needs, ctx.host)
    except JobError as missing:
        out.stderr(str(missing))
        return missing.exit_code
    if kind.spec.result is not None:
        out = DeclaredOutput(out, kind.spec)
    try:
        return await kind.run(args, ctx, out)
    except Exception as exc:
        error = single_error(exc)
        if isinstance(error, JobError):
            out.stderr(one_line(str(error)))
            return error.exit_code
        where = error.filename if isinstance(error, OSError) and isinstance(error.filename, str) else ""
        if isinstance(error, OSError) and (full := storage_refusal(error, where)):
            error = full  # a full disk is a fact about the server, not a bug: one line, no traceback
            log.warning("job %s: %s%s", kind.name, full.message, f" at {where}" if where else "")
        if isinstance(error, RpcError):
            where = error.details.get("path", "") if error.code == "insufficient_storage" else ""
            out.stderr(f"error: {one_line(error.message)}" + (f" at {where}" if where else ""))
            return 1
        log.log(traceback_level, "job %s %s failed", kind.name, argv[2:], exc_info=error)
        out.stderr(f"error: {kind.name} failed: {type(error).__name__}: {one_line(str(error))}")
        return 1


class DeclaredOutput(Output):
    """A handler's output whose result goes through its kind's result model (`JobKind.result`):
    what it prints with --json is exactly what `GET /v1/job-kinds` publishes, and a result that
    drifts from its model fails the job (exit 1, the traceback in the log) instead of reaching
    a client that trusts the schema."""

    def __init__(self, out: Output, spec: JobKind) -> None:
        self._out = out
        self._spec = spec
        self.pretty = out.pretty

    def lines(self, stream: str, texts: list[str]) -> None:
        self._out.lines(stream, texts)

    def json(self, obj: Any) -> None:
        self._out.json(self._spec.dump_result(obj))

    def result(self, obj: Any, *, as_json: bool) -> None:
        self._out.result(self._spec.dump_result(obj), as_json=as_json)

    async def drain(self) -> None:
        await self._out.drain()


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
