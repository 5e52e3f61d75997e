"""The jobs of one server: its history, newest first, and `n` to run a new one.

* `n`: pick a kind (fuzzy search), fill its form, confirm a change, watch it (`JobRunScreen`);
* Enter: open a job of the history (a finished one is replayed, a running one followed);
* `r`: reload (the list also reloads by itself while a job in it is still running).
"""

from __future__ import annotations

from functools import partial
from typing import ClassVar
from weakref import WeakKeyDictionary

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.timer import Timer
from textual.widgets import DataTable, Static

from api_client import Client, Server
from contract.models import FINISHED_STATUSES, Job, JobKindInfo, PresenceEvent
from tui.bridge import TaskHandle
from tui.jobs.choices import ChoiceCache
from tui.jobs.dialogs import Access, ConfirmRun, JobFormScreen, KindPicker, availability_problem, takes_arguments
from tui.jobs.errors import describe_job_error
from tui.jobs.log_panel import format_duration
from tui.jobs.run import JobRunScreen, args_summary, job_duration, local_time, status_text
from tui.monitor import LinkState
from tui.screen import FleetScreen
from tui.text import load_tcss, printable
from tui.widgets.filter_line import FilteredList, FilterLine, filter_rows
from tui.widgets.footer import FleetFooter
from tui.widgets.header import SafeHeader
from tui.widgets.list_table import ListTable

HISTORY_LIMIT = 100
# While a job of the list is queued or running, reload the list this often.
HISTORY_POLL_S = 2.0

# The catalog is the same for every server of a control plane: fetched once per client.
_CATALOGS: WeakKeyDictionary[Client, list[JobKindInfo]] = WeakKeyDictionary()

# (key, label, width); the kind column fits the kinds shown, the arguments take what is left.
COLUMNS = [
    ("kind", "Kind", 0),
    ("status", "Status", 13),
    ("exit", "Exit", 4),
    ("created", "Created", 11),
    ("took", "Took", 10),
]
KIND_WIDTH = (8, 26)
ARGS_MIN_WIDTH = 10


class JobTable(ListTable):
    """The history; Enter (named in the footer) opens the highlighted job."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("enter", "select_cursor", "Open")]


class JobsScreen(FilteredList, FleetScreen):
    """A server's job history and the way to start new jobs on it."""

    HELP_TITLE = "Jobs"

    DEFAULT_CSS = load_tcss(__file__)

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Servers"),
        Binding("n", "new_job", "New job"),
        Binding("r", "reload", "Reload"),
        Binding("slash", "filter", "Filter the list by text", key_display="/", show=False),
    ]

    AUTO_FOCUS = "#job-history"

    def __init__(self, server: Server) -> None:
        super().__init__()
        self.server = server
        self.title = server.name
        self.jobs: dict[str, Job] = {}
        self.kinds: dict[str, JobKindInfo] = {}
        self._loaded = False
        self._history_task: TaskHandle | None = None
        self._poll_timer: Timer | None = None
        self._pick_when_loaded = False
        self._args_shown = False
        self.choices = ChoiceCache()  # what the forms' pickers read on this server
        self._connected = True  # the control plane answers (`tui.monitor`)
        self._select_when_listed: str | None = None
        """The job just started here: highlighted once the history lists it."""

    def compose(self) -> ComposeResult:
        yield SafeHeader()
        yield Static("", id="jobs-bar", markup=False)
        yield JobTable(id="job-history", cursor_type="row", zebra_stripes=True)
        yield FilterLine(id="jobs-filter")
        yield Static("Loading the jobs…", id="jobs-status", markup=False)
        yield FleetFooter()

    def on_mount(self) -> None:
        if self.dismissed:
            return
        self._update_bar()
        if self.server.kind == "lite":
            self.notify(f"{self.server.name} is a lite server: it has no agent to run jobs.", severity="warning")
        self._load_kinds()
        self.action_reload()
        self._connected = self.monitor.state.connected
        self.monitor.changed.subscribe(self, self._connection_changed)
        self.monitor.presence.subscribe(self, self._presence_changed)

    def _connection_changed(self, state: LinkState) -> None:
        """Lost: the agent's state is unknown. Back: the jobs again (some ended meanwhile)."""
        if state.connected and not self._connected:
            self.action_reload()
        self._connected = state.connected
        self._update_bar()

    def _presence_changed(self, event: PresenceEvent) -> None:
        """The bar follows the agent; back, the jobs again (those queued for it start now)."""
        if event.server_id != self.server.id:
            return
        self._update_bar()
        if event.online:
            self.action_reload()

    def on_screen_resume(self) -> None:
        if self._loaded:
            self.action_reload()

    # --- data ---------------------------------------------------------------------------------

    def _load_kinds(self) -> None:
        cached = _CATALOGS.get(self.client)
        if cached is not None:
            self._show_kinds(cached)
            return
        self.bridge.run(self, self.client.jobs.kinds, on_done=self._show_kinds, on_error=self._kinds_failed)

    def _show_kinds(self, kinds: list[JobKindInfo]) -> None:
        _CATALOGS[self.client] = kinds
        self.kinds = {kind.kind: kind for kind in kinds}
        if self._pick_when_loaded:
            self._pick_when_loaded = False
            self.action_new_job()
            self.release_keys()  # what was typed after `n`: the picker's search

    def _kinds_failed(self, exc: BaseException) -> None:
        self._pick_when_loaded = False
        self.release_keys()
        self.notify(
            f"Could not load the job catalog: {describe_job_error(exc, server=self.server.name)}",
            severity="error",
            timeout=8,
        )

    def action_reload(self) -> None:
        if self._history_task is not None:
            self._history_task.cancel()
        self._history_task = self.bridge.run(
            self,
            partial(self.client.jobs.list, limit=HISTORY_LIMIT),
            self.server.id,
            on_done=self._show_history,
            on_error=self._history_failed,
        )
        # What the agent says runs there may have changed (software installed or removed): the
        # picker marks the kinds by it. A failure here is the history's to report.
        self.bridge.run(self, self.client.servers.get, self.server.id, on_done=self._show_server, on_error=_ignored)

    def _show_server(self, server: Server) -> None:
        self.server = server

    def _show_history(self, jobs: list[Job]) -> None:
        self._loaded = True
        highlighted = self.highlighted_job
        self.jobs = {job.id: job for job in jobs}
        self._draw_table()
        table = self.query_one(JobTable)
        started = self.jobs.get(self._select_when_listed or "")
        if started is not None:  # a history asked for before the job existed does not list it: the next one will
            self._select_when_listed = None
        keep = started or highlighted
        if keep is not None and keep.id in table.rows:  # a `/` filter may hide it
            table.move_cursor(row=table.get_row_index(keep.id), scroll=True)
        self._update_status()
        self._schedule_poll()

    def _history_failed(self, exc: BaseException) -> None:
        self.query_one("#jobs-status", Static).update("Could not load the jobs · r: try again")
        self.notify(describe_job_error(exc, server=self.server.name), severity="error", timeout=8)

    def _schedule_poll(self) -> None:
        if self._poll_timer is not None:
            self._poll_timer.stop()
            self._poll_timer = None
        if any(job.status not in FINISHED_STATUSES for job in self.jobs.values()):
            self._poll_timer = self.set_timer(HISTORY_POLL_S, self._poll)

    def _poll(self) -> None:
        self._poll_timer = None
        if self.is_current and self._connected:  # lost: the list is reloaded once it is back
            self.action_reload()

    @property
    def highlighted_job(self) -> Job | None:
        table = self.query_one(JobTable)
        if not table.row_count:
            return None
        row_key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key
        return self.jobs.get(str(row_key.value))

    # --- drawing ------------------------------------------------------------------------------

    def _draw_table(self) -> None:
        table = self.query_one(JobTable)
        table.clear(columns=True)
        longest = max((len(job.kind) for job in self.jobs.values()), default=0)
        kind_width = max(KIND_WIDTH[0], min(longest, KIND_WIDTH[1]))
        used = 0
        for key, label, width in COLUMNS:
            width = width or kind_width
            table.add_column(label, key=key, width=width)
            used += width + 2  # DataTable pads each cell by one on both sides
        # The arguments when there is room for them (always in the job's own screen).
        room = self.size.width - used - 2
        self._args_shown = room >= ARGS_MIN_WIDTH
        if self._args_shown:
            table.add_column("Arguments", key="args", width=room)
        rows = {job.id: self._cells(job) for job in self.jobs.values()}
        for job_id, cells in filter_rows(rows, self.filter_pattern).items():
            table.add_row(*cells, key=job_id)

    def on_filter_line_pattern_changed(self, event: FilterLine.PatternChanged) -> None:
        event.stop()
        highlighted = self.highlighted_job
        self._draw_table()
        table = self.query_one(JobTable)
        if highlighted is not None and highlighted.id in table.rows:
            table.move_cursor(row=table.get_row_index(highlighted.id))
        self._update_status()

    def on_filter_line_closed(self, event: FilterLine.Closed) -> None:
        event.stop()
        self.query_one(JobTable).focus()

    def _cells(self, job: Job) -> list[Text]:
        kind = Text(job.kind, style="bold")
        status = status_text(job.status)
        if job.cached:
            status.append(" cached", style="yellow")
        exit_code = Text(
            "—" if job.exit_code is None else str(job.exit_code),
            justify="right",
            style="dim" if job.exit_code is None else ("" if job.exit_code == 0 else "red"),
        )
        duration = job_duration(job)
        took = Text(format_duration(duration) if duration is not None else "—", justify="right")
        cells = [kind, status, exit_code, Text(local_time(job.created_at, short=True)), took]
        if self._args_shown:
            cells.append(Text(args_summary(job.args), style="dim", no_wrap=True, overflow="ellipsis"))
        return cells

    def on_resize(self, _event: events.Resize) -> None:
        if self.jobs:
            self._draw_table()

    def _update_bar(self) -> None:
        online = self.monitor.online(self.server.id)
        if self.server.kind == "lite":
            state = "lite server: no agent"
        elif not self.monitor.state.connected:
            state = "connection lost: agent unknown"
        else:
            online = self.server.agent.online if online is None else online
            state = "agent online" if online else "agent offline (reads answer from the cache)"
        self.query_one("#jobs-bar", Static).update(printable(f"Jobs of {self.server.name} · {state}"))

    def _update_status(self) -> None:
        count = len(self.jobs)
        if not count:
            text = f"No jobs yet on {self.server.name} · n: run one"
        else:
            running = sum(1 for job in self.jobs.values() if job.status not in FINISHED_STATUSES)
            text = f"{count} job{'s' if count != 1 else ''}" + (f" · {running} running" if running else "")
            if self.filter_pattern:
                text = f"{self.query_one(JobTable).row_count} of {text} match the filter"
            text += " · Enter: open · n: new job"
        self.query_one("#jobs-status", Static).update(text)

    # --- opening and starting jobs ------------------------------------------------------------

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        job = self.jobs.get(str(event.row_key.value))
        if job is not None:
            self.open_job(job)

    def open_job(self, job: Job) -> None:
        self.app.push_screen(JobRunScreen(self.server, job, self.kinds.get(job.kind)))

    @property
    def access(self) -> Access:
        me = self.fleet.me
        if me is None:
            return Access()
        return Access(plan=me.org.plan, capabilities=frozenset(me.capabilities))

    def action_new_job(self) -> None:
        if not self.kinds:
            self._pick_when_loaded = True
            self.hold_keys()
            self.notify("Loading the job catalog…", timeout=3)
            self._load_kinds()
            return
        self.app.push_screen(KindPicker(list(self.kinds.values()), self.server, self.access), self._kind_picked)

    def _kind_picked(self, kind: JobKindInfo | None) -> None:
        if kind is None:
            return
        problem = availability_problem(kind.kind, self.server)
        if problem is None:
            self._start(kind)
            return

        def anyway(run: bool | None) -> None:
            if run:
                self._start(kind, asked=True)

        # It would end with 69 or 127: asked first, and that answer is the confirmation.
        self.app.push_screen(ConfirmRun(kind, self.server, {}, problem=problem), anyway)

    def _start(self, kind: JobKindInfo, *, asked: bool = False) -> None:
        """Its form, or (no arguments) the job: a change confirmed first unless already `asked`."""
        if takes_arguments(kind):
            self.app.push_screen(JobFormScreen(self.server, kind, self.access, self.choices), self._form_done)
        elif kind.read or asked:
            self._create(kind)
        else:

            def confirmed(run: bool | None) -> None:
                if run:
                    self._create(kind)

            self.app.push_screen(ConfirmRun(kind, self.server, {}), confirmed)

    def _create(self, kind: JobKindInfo) -> None:
        """A kind without arguments: no form, straight to the job."""
        self.bridge.run(
            self,
            self.client.jobs.create,
            self.server.id,
            kind.kind,
            {},
            on_done=self._form_done,
            on_error=lambda exc: self.notify(
                describe_job_error(exc, server=self.server.name, kind=kind.kind), severity="error", timeout=8
            ),
        )

    def _form_done(self, job: Job | None) -> None:
        if job is not None:
            kind = self.kinds.get(job.kind)
            if kind is None or not kind.read:
                self.choices.clear()  # the change may add or remove what the pickers listed
            self.jobs[job.id] = job
            self._select_when_listed = job.id
            self.open_job(job)

    def action_back(self) -> None:
        self.dismiss()


def _ignored(exc: BaseException) -> None:
    """A failure that another request of the same moment reports already."""
