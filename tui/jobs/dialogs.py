"""The dialogs of the jobs screen: pick a kind (fuzzy search), fill its form (picking what a field
names from what exists), confirm a change."""

from __future__ import annotations

import itertools
import re
import uuid
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.fuzzy import FuzzySearch
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import Button, Input, OptionList, Select, Static
from textual.widgets.option_list import Option

from api_client import Server
from contract.models import PLANS, Job, JobKindInfo
from tui.errors import describe_error
from tui.jobs.choices import Choice, ChoiceCache, ChoicesUnavailable, Source, fetch_choices, sources_of
from tui.jobs.errors import describe_job_error, validation_errors
from tui.jobs.form import Invalid, JobForm, parse_schema
from tui.screen import SUBMITTING, FleetModal
from tui.text import load_tcss, printable

# --- what a kind needs ------------------------------------------------------------------------


@dataclass(frozen=True)
class Access:
    """What the caller's org and role allow, to mark kinds they cannot run (the server decides)."""

    plan: str | None = None
    capabilities: frozenset[str] | None = None

    def missing_plan(self, kind: JobKindInfo) -> str | None:
        """The plan `kind` needs when the org's is lower, else None."""
        if self.plan not in PLANS or kind.min_plan not in PLANS:
            return None
        return kind.min_plan if PLANS.index(kind.min_plan) > PLANS.index(self.plan) else None

    def lacks_right(self, kind: JobKindInfo) -> bool:
        return self.capabilities is not None and kind.group not in self.capabilities


BADGE_WIDTH = len("sysadmin") + 1


def kind_badges(kind: JobKindInfo, access: Access) -> Text:
    """`read` or the group of a change, and what is missing to run it."""
    badges = Text()
    if kind.read:
        badges.append("read".ljust(BADGE_WIDTH), style="bold green")
    else:
        badges.append(kind.group.ljust(BADGE_WIDTH), style="bold yellow")
    if (plan := access.missing_plan(kind)) is not None:
        badges.append(f"needs {plan} ", style="bold red")
    elif access.lacks_right(kind):
        badges.append("not your role ", style="bold red")
    return badges


# --- the kind picker --------------------------------------------------------------------------

_SEARCH = FuzzySearch()


@dataclass(frozen=True)
class KindMatch:
    kind: JobKindInfo
    score: float
    offsets: Sequence[int]  # the matched characters of `kind.kind`


def rank_kinds(kinds: Iterable[JobKindInfo], query: str, runnable: Container[str] | None = None) -> list[KindMatch]:
    """Kinds matching `query`, best first.

    A fuzzy match on the kind name comes first (spaces ignored and words taken in any order:
    "log tail" and "tail log" find `logs.tail`); a name that begins with what was typed, or has a
    word that does, ranks higher. Kinds whose name does not match but whose summary does come after
    ("unused packages" finds `storage.cleanup`). Within each of those, the kinds in `runnable` (the
    ones the server's agent has a handler for; None: not known) come before the others; a name
    typed in full comes before everything, so Enter picks what was typed.
    """

    def unavailable(kind: JobKindInfo) -> bool:
        return runnable is not None and kind.kind not in runnable

    query = query.strip()
    if not query:
        return [KindMatch(kind, 0.0, ()) for kind in sorted(kinds, key=lambda k: (unavailable(k), k.kind))]
    words = query.split()
    compacts = ["".join(order) for order in itertools.permutations(words[:3])] if len(words) > 1 else [query]
    ranked: list[tuple[int, KindMatch]] = []
    for kind in kinds:
        best: tuple[float, Sequence[int]] = (0.0, ())
        for compact in compacts:
            score, offsets = _SEARCH.match(compact, kind.kind)
            if score and kind.kind.startswith(compact):
                score *= 2
            elif score and any(word.startswith(compact) for word in re.split(r"[.-]", kind.kind)):
                score *= 1.5
            if score > best[0]:
                best = (score, offsets)
        if best[0] > 0:
            ranked.append((2 if kind.kind == query else 1, KindMatch(kind, best[0], best[1])))
        elif len(query) >= 3 and kind.summary and (score := _SEARCH.match(query, kind.summary)[0]) > 0:
            ranked.append((0, KindMatch(kind, score, ())))
    ranked.sort(
        key=lambda item: (
            -item[0],
            unavailable(item[1].kind),
            -item[1].score,
            len(item[1].kind.kind),
            item[1].kind.kind,
        )
    )
    return [match for _, match in ranked]


NOT_AVAILABLE = "no handler on this agent"


def availability_problem(kind: str, server: Server) -> str | None:
    """Why a job of `kind` would not run on `server` as its agent last said (None: it runs, or
    nobody knows): the software it needs (exit 69), or no handler in this agent (exit 127)."""
    agent = server.agent
    if agent.job_kinds is None:
        return None
    if kind not in agent.job_kinds:
        return f"The agent of {server.name} has no handler for {kind}: the job would end with exit code 127."
    package = (agent.needs or {}).get(kind)
    if package is not None:
        return (
            f"{kind} needs {package}, which {server.name} lacks: the job would end with exit code 69."
            f" Install {package} there first."
        )
    return None


class KindPicker(FleetModal[JobKindInfo | None]):
    """Type to narrow the catalog (fuzzy); ↑↓ move; Enter picks; Esc cancels."""

    DEFAULT_CSS = load_tcss(__file__)

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel"),
        Binding("down", "move(1)", "Down", show=False),
        Binding("up", "move(-1)", "Up", show=False),
        Binding("pagedown", "move(10)", "Page down", show=False),
        Binding("pageup", "move(-10)", "Page up", show=False),
    ]

    def __init__(self, kinds: Sequence[JobKindInfo], server: Server, access: Access) -> None:
        super().__init__()
        # A kind with a route of its own (load balancers, backups) is made on its own screen:
        # the jobs route refuses it, so it is not offered here.
        self.kinds = [kind for kind in kinds if kind.route is None]
        self.server = server
        self.access = access
        self.matches: list[KindMatch] = []
        # What the agent said in its last hello; None: it never linked, so nobody knows.
        job_kinds = server.agent.job_kinds
        self.handled = frozenset(job_kinds) if job_kinds is not None else None
        # Of those, the ones that need software this server lacks, with its package.
        self.needs = dict(server.agent.needs or {})
        self.runnable = self.handled - self.needs.keys() if self.handled is not None else None

    def compose(self) -> ComposeResult:
        with Vertical(id="kind-picker-box", classes="job-dialog"):
            yield Static(printable(f"Run a job on {self.server.name}"), classes="job-dialog--title", markup=False)
            yield Static(self._availability(), id="kind-availability", classes="job-dialog--hint", markup=False)
            yield Input(
                placeholder="Search the job kinds (e.g. sysinfo, log tail, restart)…", id="kind-search", compact=True
            )
            yield OptionList(id="kind-options")
            yield Static("", id="kind-hint", classes="job-dialog--hint", markup=False)

    def on_mount(self) -> None:
        self.query_one("#kind-search", Input).focus()
        self._refilter("")

    @on(Input.Changed, "#kind-search")
    def _search_changed(self, event: Input.Changed) -> None:
        event.stop()
        self._refilter(event.value)

    def _refilter(self, query: str) -> None:
        self.matches = rank_kinds(self.kinds, query, self.runnable)
        options = self.query_one(OptionList)
        width = max((len(m.kind.kind) for m in self.matches), default=10)
        options.clear_options()
        options.add_options(self._option(match, width) for match in self.matches)
        if self.matches:
            options.highlighted = 0
        count = len(self.matches)
        hint = f"{count} of {len(self.kinds)} kinds · ↑↓ move · Enter: pick · Esc: cancel"
        self.query_one("#kind-hint", Static).update(hint if count else "No kind matches: try fewer letters.")

    def _availability(self) -> str:
        if self.runnable is None:
            return "Availability unknown: this server's agent has never linked."
        count = sum(kind.kind in self.runnable for kind in self.kinds)
        lacking = sum(kind.kind in self.needs for kind in self.kinds)
        if not lacking:
            return f"{count} of {len(self.kinds)} kinds run on this agent; the others (dimmed) end with exit 127."
        rest = len(self.kinds) - count - lacking
        return f"{count} of {len(self.kinds)} kinds run here; dimmed: {lacking} lack software, {rest} have no handler."

    def available(self, kind: JobKindInfo) -> bool:
        return self.runnable is None or kind.kind in self.runnable

    def _option(self, match: KindMatch, width: int) -> Option:
        kind = match.kind
        name = Text(kind.kind.ljust(width), style="bold")
        for offset in match.offsets:
            name.stylize("underline reverse", offset, offset + 1)
        prompt = Text.assemble(name, "  ", kind_badges(kind, self.access), "  ")
        if self.available(kind):
            prompt.append(printable(kind.summary), "dim")
        else:
            # Still selectable: picking it asks first (`availability_problem`).
            package = self.needs.get(kind.kind)
            prompt.append(printable(f"needs {package}  ") if package is not None else f"{NOT_AVAILABLE}  ", "italic")
            prompt.append(printable(kind.summary))
            prompt.stylize("dim")
        prompt.no_wrap = True
        prompt.overflow = "ellipsis"
        return Option(prompt, id=kind.kind)

    def action_move(self, delta: int) -> None:
        options = self.query_one(OptionList)
        if not self.matches:
            return
        current = options.highlighted if options.highlighted is not None else 0
        options.highlighted = max(0, min(len(self.matches) - 1, current + delta))

    @on(Input.Submitted, "#kind-search")
    def _search_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        options = self.query_one(OptionList)
        if options.highlighted is not None and self.matches:
            self.dismiss(self.matches[options.highlighted].kind)

    @on(OptionList.OptionSelected, "#kind-options")
    def _option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(self.matches[event.option_index].kind)

    def action_cancel(self) -> None:
        self.dismiss(None)


# --- confirmation -----------------------------------------------------------------------------


def args_lines(args: Mapping[str, Any], secret_fields: Iterable[str] = ()) -> list[str]:
    """`name = value` lines, secrets as `***`."""
    secrets = set(secret_fields)
    lines = []
    for name, value in args.items():
        shown = "***" if name in secrets and value not in (None, "") else value
        if isinstance(shown, list):
            shown = ", ".join(map(str, shown))
        lines.append(printable(f"{name} = {shown}"))
    return lines


class ConfirmRun(ModalScreen[bool]):
    """A job that changes the server runs only once confirmed: y/Enter runs, n/Esc cancels.

    A destructive kind (its catalog entry names a field to `confirm`, as `site.delete` its
    domain) asks for that value to be typed again, as GitHub asks for a repository's name: Run
    stays disabled, and neither y nor Enter runs, until what is typed matches.
    """

    DEFAULT_CSS = load_tcss(__file__)

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Run"),
        Binding("n,escape", "answer(False)", "Cancel"),
    ]

    def __init__(
        self, kind: JobKindInfo, server: Server, args: Mapping[str, Any], *, problem: str | None = None
    ) -> None:
        super().__init__()
        self.kind = kind
        self.server = server
        self.args = dict(args)
        self.problem = problem  # why it would not run there (`availability_problem`): asked "anyway?"
        # The value to type again (None: y or Enter is enough).
        self.retype = str(self.args[kind.confirm]) if kind.confirm and self.args.get(kind.confirm) else None

    def compose(self) -> ComposeResult:
        anyway = " anyway" if self.problem is not None else ""
        with Vertical(id="confirm-box", classes="job-dialog"):
            yield Static(
                printable(f"Run {self.kind.kind} on {self.server.name}{anyway}?"),
                classes="job-dialog--title",
                markup=False,
            )
            if self.problem is not None:
                yield Static(printable(self.problem), id="confirm-problem", markup=False)
            what = f"{self.kind.summary}. " if self.kind.summary else ""
            changes = "It only reads." if self.kind.read else f"This changes the server ({self.kind.group})."
            yield Static(printable(f"{what}{changes}"), markup=False)
            lines = args_lines(self.args, self.kind.secret_fields)
            if lines:
                yield Static("\n".join(lines), id="confirm-args", markup=False)
            if self.retype is not None:
                yield Static(
                    printable(f"This cannot be undone. Type {self.retype} to confirm:"),
                    id="confirm-retype-label",
                    markup=False,
                )
                yield Input(placeholder=printable(self.retype), id="confirm-retype", compact=True)
            with Horizontal(classes="job-dialog--buttons"):
                run = Button(f"Run{anyway} (y)", variant="warning", id="confirm-run", compact=True)
                run.disabled = self.retype is not None
                yield run
                yield Button("Cancel (n)", id="confirm-cancel", compact=True)

    def on_mount(self) -> None:
        self.query_one("#confirm-retype" if self.retype is not None else "#confirm-run").focus()

    @property
    def confirmed(self) -> bool:
        """Whether the value to type again (if any) has been typed."""
        return self.retype is None or self.query_one("#confirm-retype", Input).value == self.retype

    @on(Input.Changed, "#confirm-retype")
    def _retyped(self, event: Input.Changed) -> None:
        event.stop()
        self.query_one("#confirm-run", Button).disabled = not self.confirmed

    @on(Input.Submitted, "#confirm-retype")
    def _retype_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_answer(True)

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.action_answer(event.button.id == "confirm-run")

    def action_answer(self, run: bool) -> None:
        if run and not self.confirmed:
            self.app.bell()
            return
        self.dismiss(run)


class ConfirmCancel(ModalScreen[bool]):
    """A running job is stopped only once confirmed: y/Enter stops it, n/Esc keeps it running."""

    DEFAULT_CSS = load_tcss(__file__)

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Stop it"),
        Binding("n,escape", "answer(False)", "Keep it"),
    ]

    def __init__(self, job: Job, server: Server) -> None:
        super().__init__()
        self.job = job
        self.server = server

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box", classes="job-dialog"):
            yield Static(
                printable(f"Cancel job {self.job.kind} on {self.server.name}?"),
                classes="job-dialog--title",
                markup=False,
            )
            if self.job.status == "queued":
                what = "It has not started: it will never run."
            else:
                what = "It is stopped with TERM, then KILL after a few seconds; what it printed is kept."
            yield Static(what, id="confirm-cancel-what", markup=False)
            with Horizontal(classes="job-dialog--buttons"):
                yield Button("Stop it (y)", variant="error", id="confirm-stop", compact=True)
                yield Button("Keep running (n)", id="confirm-keep", compact=True)

    def on_mount(self) -> None:
        self.query_one("#confirm-stop", Button).focus()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id == "confirm-stop")

    def action_answer(self, stop: bool) -> None:
        self.dismiss(stop)


# --- picking what a field names -----------------------------------------------------------------


class ChoicePicker(FleetModal[str | None]):
    """The things a field names that exist on the server (a site's domain…): type to narrow,
    ↑↓ move, Enter picks, Esc goes back to the field (where any value can still be typed).

    The list comes from `choices` when read before for this server, else is read now (`fetch_choices`).
    """

    DEFAULT_CSS = load_tcss(__file__)

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel"),
        Binding("down", "move(1)", "Down", show=False),
        Binding("up", "move(-1)", "Up", show=False),
    ]

    def __init__(self, server: Server, source: Source, choices: ChoiceCache, typed: str = "") -> None:
        super().__init__()
        self.server = server
        self.source = source
        self.cache = choices
        self.typed = typed
        self.shown: list[Choice] = []

    @property
    def loaded(self) -> bool:
        return self.source in self.cache.by_source

    def compose(self) -> ComposeResult:
        with Vertical(id="choice-picker-box", classes="job-dialog"):
            title = f"Pick one of the {self.source.noun} on {self.server.name}"
            yield Static(printable(title), classes="job-dialog--title", markup=False)
            yield Input(self.typed, placeholder="Type to narrow…", id="choice-search", compact=True)
            yield OptionList(id="choice-options")
            yield Static("", id="choice-hint", classes="job-dialog--hint", markup=False)

    def on_mount(self) -> None:
        self.query_one("#choice-search", Input).focus()
        if self.loaded:
            self._refilter()
            return
        self._hint(f"Reading the {self.source.noun} ({self.source.where})…")
        self.bridge.run(
            self,
            fetch_choices,
            self.client,
            self.server.id,
            self.source,
            on_done=self._fetched,
            on_error=self._failed,
        )

    def _fetched(self, choices: list[Choice]) -> None:
        self.cache.by_source[self.source] = choices
        self._refilter()

    def _failed(self, exc: BaseException) -> None:
        why = str(exc) if isinstance(exc, ChoicesUnavailable) else describe_error(exc, server=self.server.name)
        self._hint(f"Cannot list the {self.source.noun}: {why}. Esc, then type the value.", error=True)

    def _hint(self, text: str, *, error: bool = False) -> None:
        hint = self.query_one("#choice-hint", Static)
        hint.update(printable(text))
        hint.set_class(error, "-error")

    @on(Input.Changed, "#choice-search")
    def _search_changed(self, event: Input.Changed) -> None:
        event.stop()
        if self.loaded:
            self._refilter()

    def _refilter(self) -> None:
        query = self.query_one("#choice-search", Input).value.strip().lower()
        every = self.cache.by_source.get(self.source, [])
        self.shown = [c for c in every if query in c.value.lower() or query in c.detail.lower()]
        options = self.query_one(OptionList)
        options.clear_options()
        width = max((len(c.value) for c in self.shown), default=0)
        for choice in self.shown:
            prompt = Text(printable(choice.value).ljust(width), style="bold")
            if choice.detail:
                prompt.append("  " + printable(choice.detail), style="dim")
            prompt.no_wrap = True
            prompt.overflow = "ellipsis"
            options.add_option(Option(prompt))
        if self.shown:
            options.highlighted = 0
            self._hint(f"{len(self.shown)} of {len(every)} {self.source.noun} · ↑↓ move · Enter: pick · Esc: back")
        elif every:
            self._hint(f"None of the {len(every)} {self.source.noun} matches: Esc, then type the value.")
        else:
            self._hint(f"There are no {self.source.noun} on {self.server.name} ({self.source.where}).")

    def action_move(self, delta: int) -> None:
        options = self.query_one(OptionList)
        if self.shown:
            current = options.highlighted if options.highlighted is not None else 0
            options.highlighted = max(0, min(len(self.shown) - 1, current + delta))

    @on(Input.Submitted, "#choice-search")
    def _search_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        options = self.query_one(OptionList)
        if self.shown and options.highlighted is not None:
            self.dismiss(self.shown[options.highlighted].value)

    @on(OptionList.OptionSelected, "#choice-options")
    def _option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(self.shown[event.option_index].value)

    def action_cancel(self) -> None:
        self.dismiss(None)


# --- the form ---------------------------------------------------------------------------------


def takes_arguments(kind: JobKindInfo) -> bool:
    return bool(parse_schema(kind.args_schema, kind.secret_fields))


class JobFormScreen(FleetModal[Job | None]):
    """The arguments of one kind; Enter in any field (or ctrl+r, or the Run button) starts the job.

    The job is created here, so the server's `validation_error` details land next to their
    fields. A retry with the same arguments reuses the idempotency key: a request that did reach
    the server before the connection dropped does not start a second job.
    """

    HELP_TITLE = "Job form"

    DEFAULT_CSS = load_tcss(__file__)

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel"),
        Binding("ctrl+r", "run", "Run"),
        # Before the focused field: Enter runs from a checkbox, a list or a closed dropdown too.
        Binding("enter", "run_from_field", "Run", show=False, priority=True),
    ]

    HELP_KEYS: ClassVar[list[tuple[str, str]]] = [
        ("Enter", "Run the job, from any field (on a button: press it)"),
        ("↓ / F2", "Pick what a field names (a site, a cron entry, a database…) from those on the server"),
        ("Tab", "Next field"),
    ]

    def __init__(
        self, server: Server, kind: JobKindInfo, access: Access | None = None, choices: ChoiceCache | None = None
    ) -> None:
        super().__init__()
        self.server = server
        self.kind = kind
        self.access = access or Access()
        self.choices = choices if choices is not None else ChoiceCache()
        self.creating = False
        self._idempotency: tuple[dict[str, Any], str] | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="job-form-box", classes="job-dialog"):
            title = Text.assemble(
                (self.kind.kind, "bold"),
                (f" on {printable(self.server.name)}", ""),
                "  ",
                kind_badges(self.kind, self.access),
            )
            yield Static(title, classes="job-dialog--title")
            if self.kind.summary:
                yield Static(printable(self.kind.summary), classes="job-dialog--summary", markup=False)
            names = [spec.name for spec in parse_schema(self.kind.args_schema, self.kind.secret_fields)]
            sources = sources_of(self.kind, names)
            yield JobForm(self.kind.args_schema, self.kind.secret_fields, sources=sources, id="job-form")
            yield Static("", id="job-form-status", classes="job-dialog--hint", markup=False)
            with Horizontal(classes="job-dialog--buttons"):
                yield Button("Run", variant="primary" if self.kind.read else "warning", id="job-form-run", compact=True)
                yield Button("Cancel", id="job-form-cancel", compact=True)

    @property
    def form(self) -> JobForm:
        return self.query_one(JobForm)

    def on_mount(self) -> None:
        self._status_hint()
        self.form.focus_first()

    def _status_hint(self) -> None:
        confirm = "" if self.kind.read else " (asks first)"
        self._status(f"* required · Enter: run{confirm} · Tab: next field · Esc: cancel")

    def _status(self, text: str, *, error: bool = False) -> None:
        line = self.query_one("#job-form-status", Static)
        line.update(text)
        line.set_class(error, "-error")

    @on(Button.Pressed, "#job-form-run")
    def _run_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.action_run()

    @on(Button.Pressed, "#job-form-cancel")
    def _cancel_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.action_cancel()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Enter on a button presses it, and in an open dropdown picks its option."""
        return action != "run_from_field" or self._enter_runs(self.focused)

    @staticmethod
    def _enter_runs(focused: Widget | None) -> bool:
        if focused is None:
            return True
        if isinstance(focused, Button):
            return False
        open_dropdown = any(isinstance(w, Select) and w.expanded for w in (focused, *focused.ancestors))
        return not open_dropdown

    @on(JobForm.Edited)
    def _form_edited(self, event: JobForm.Edited) -> None:
        """A fixed field clears "Not run: … to fix" (or says how many are left)."""
        event.stop()
        line = self.query_one("#job-form-status", Static)
        if not line.has_class("-error") or self.creating:
            return
        left = len(self.form.invalid_fields)
        if left:
            self._status(f"Not run: {left} field{'s' if left != 1 else ''} to fix (marked ✘).", error=True)
        else:
            self._status_hint()

    @on(JobForm.PickRequested)
    def _pick_requested(self, event: JobForm.PickRequested) -> None:
        event.stop()
        name = event.name
        typed = str(self.form.raw_value(name) or "")

        def picked(value: str | None) -> None:
            if value is not None:
                self.form.set_raw_value(name, value)
            self.form.focus_field(name)

        self.app.push_screen(ChoicePicker(self.server, event.source, self.choices, typed), picked)

    def action_cancel(self) -> None:
        self.dismiss(None)

    def action_run_from_field(self) -> None:
        self.action_run()

    def action_run(self) -> None:
        if self.creating:
            return
        try:
            args = self.form.values()
        except Invalid as exc:
            self._status(f"Not run: {exc} (marked ✘).", error=True)
            self.form.focus_first_invalid()
            return
        if self.kind.read:
            self._create(args)
            return

        def confirmed(run: bool | None) -> None:
            if run:
                self._create(args)

        self.app.push_screen(ConfirmRun(self.kind, self.server, args), confirmed)

    def _create(self, args: dict[str, Any]) -> None:
        if self._idempotency is None or self._idempotency[0] != args:
            self._idempotency = (args, uuid.uuid4().hex)
        key = self._idempotency[1]
        self.creating = True
        self.hold_keys(SUBMITTING)  # typed meanwhile: for the job's screen, once it is created
        self.query_one("#job-form-run", Button).disabled = True
        self._status(f"Starting {self.kind.kind}…")
        self.bridge.run(
            self,
            partial(self.client.jobs.create, idempotency_key=key),
            self.server.id,
            self.kind.kind,
            args,
            on_done=self._created,
            on_error=self._failed,
        )

    def _created(self, job: Job) -> None:
        self.creating = False
        self.dismiss_submitted(job)

    def _failed(self, exc: BaseException) -> None:
        self.creating = False
        self.release_keys(SUBMITTING)  # the form stays open: the keys are for it
        self.query_one("#job-form-run", Button).disabled = False
        errors = validation_errors(exc)
        if errors:
            general = self.form.show_server_errors(errors)
            self._status(
                "The server refused " + ("these arguments." if general else "the fields marked ✘."), error=True
            )
            self.notify("Some arguments are not valid: see the form.", severity="warning")
            return
        message = describe_job_error(exc, server=self.server.name, kind=self.kind.kind)
        self._status(message, error=True)
        self.notify(message, severity="error", timeout=8)
