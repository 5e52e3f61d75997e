"""One job: its output live (or replayed, once finished), how it ended, and its result: a read's as
a table or a tree, a write's as a summary (its message, then its fields)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

import orjson
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.timer import Timer
from textual.widgets import DataTable, Static, TabbedContent, TabPane, Tree

from api_client import Server
from contract.errors import NotRunning, TransportError
from contract.models import FINISHED_STATUSES, Job, JobKindInfo
from tui.bridge import TaskHandle
from tui.errors import unwrap
from tui.jobs.dialogs import ConfirmCancel
from tui.jobs.errors import describe_job_error
from tui.jobs.log_panel import Banner, LogLine, LogView, format_duration
from tui.jobs.result_view import ResultView
from tui.jobs.stream import JobBatch, iterate, open_batch_channel, pump_job_events
from tui.monitor import LinkState
from tui.screen import FleetScreen
from tui.text import load_tcss, printable
from tui.widgets.footer import FleetFooter
from tui.widgets.header import SafeHeader

STATUS_MARKS = {
    "queued": "…",
    "running": "●",
    "succeeded": "✔",
    "failed": "✘",
    "cancelled": "■",
    "interrupted": "⚠",
}
STATUS_STYLES = {
    "queued": "dim",
    "running": "bold cyan",
    "succeeded": "bold green",
    "failed": "bold red",
    "cancelled": "bold magenta",
    "interrupted": "bold yellow",
}


def job_duration(job: Job, now: datetime | None = None) -> float | None:
    """Seconds from start to finish (to now while it runs); None before it started."""
    if job.started_at is None:
        return None
    if job.status in FINISHED_STATUSES:
        if job.finished_at is None:
            return None
        end = job.finished_at
    else:
        end = job.finished_at or now or datetime.now(UTC)
    seconds: float = (end - job.started_at).total_seconds()
    return seconds


def local_time(moment: datetime | None, *, short: bool = False) -> str:
    """`10:03:12` today; `2026-11-21 10:03` before (`11-21 10:03` when `short`)."""
    if moment is None:
        return "—"
    local = moment.astimezone()
    if local.date() == datetime.now().astimezone().date():
        return local.strftime("%H:%M:%S")
    return local.strftime("%m-%d %H:%M" if short else "%Y-%m-%d %H:%M")


def status_text(status: str) -> Text:
    return Text(f"{STATUS_MARKS.get(status, '?')} {status}", style=STATUS_STYLES.get(status, ""))


def args_summary(args: dict[str, object]) -> str:
    """`domain=example.com lines=200`: the arguments that were given (unset ones left out)."""
    given = {k: v for k, v in args.items() if v is not None and v != "" and v != []}
    return printable(" ".join(f"{k}={','.join(map(str, v)) if isinstance(v, list) else v}" for k, v in given.items()))


def written_result(lines: list[LogLine]) -> dict[str, Any] | None:
    """A write's result in its output: its last stdout line, when that is a JSON object (what a
    mutation prints with --json, for a job whose row carries no result)."""
    last = next((line.text for line in reversed(lines) if not line.stderr), "")
    if not last.lstrip().startswith("{"):
        return None
    try:
        parsed = orjson.loads(last)
    except orjson.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, dict) else None


class JobRunScreen(FleetScreen):
    """The log of one job (k9s keys), its exit banner, and its result (a read's or a write's)."""

    HELP_TITLE = "Job"

    DEFAULT_CSS = load_tcss(__file__)

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Jobs"),
        # The tab titles name these keys: the footer has no room for them at 80 columns.
        Binding("1", "show_tab('result')", "Result", show=False),
        Binding("2", "show_tab('log')", "Log", show=False),
        Binding("r", "reconnect", "Reconnect"),
        # k9s's kill key; shown only while the job runs.
        Binding("ctrl+k", "cancel_job", "Cancel"),
    ]

    AUTO_FOCUS = "#log-panel"

    def __init__(self, server: Server, job: Job, kind: JobKindInfo | None = None) -> None:
        super().__init__()
        self.server = server
        self.job = job
        self.kind = kind
        self.title = server.name
        self.exited = job.status in FINISHED_STATUSES
        self.stream_lost = False
        self.connection_lost = False  # the control plane is lost: the output resumes once it is back
        self._exit_seen = False  # the stream delivered the job's `exit`: its output is complete
        self._last_seq: int | None = None
        self._stream_tasks: list[TaskHandle] = []
        self._clock: Timer | None = None
        self._has_result = False
        self._log_asked = False  # 2 was pressed: a result shown later does not take the focus

    def compose(self) -> ComposeResult:
        yield SafeHeader()
        yield Static("", id="job-bar")
        # No `initial=`: Textual's tab strip, built with one, raises `No Tab with id` when it is
        # mounted as the app exits (the screen pushed by keys typed at once, then a quit); the log
        # is made active in `on_mount` instead.
        with TabbedContent(id="job-tabs"):
            with TabPane("Result (1)", id="result"):
                yield ResultView(id="result-view")
            with TabPane("Log (2)", id="log"):
                yield LogView(save_name=f"{self.job.kind}-{self.job.id}.log", id="log-view")
        yield FleetFooter()  # the log's keys fill the footer at 80 columns

    @property
    def log_view(self) -> LogView:
        return self.query_one(LogView)

    def on_mount(self) -> None:
        if self.dismissed:
            return
        tabs = self.query_one(TabbedContent)
        tabs.active = "log"
        tabs.hide_tab("result")
        tabs.add_class("-single")
        if self.job.result is not None:
            self._show_result()
        if self.job.cached:
            when = local_time(self.job.cached_at)
            self.notify(
                f"The agent of {self.server.name} is offline: this is the result cached at {when}.",
                severity="warning",
                timeout=8,
            )
        if self.exited:
            self.log_view.panel.placeholder = "Replaying the output…"
        self._update_bar()
        self._follow_stream()
        if not self.exited:
            self._clock = self.set_interval(1.0, self._update_bar)
        self.monitor.changed.subscribe(self, self._connection_changed)
        self._connection_changed(self.monitor.state)  # opened while it is lost

    # --- the stream ---------------------------------------------------------------------------

    def _follow_stream(self) -> None:
        for task in self._stream_tasks:
            task.cancel()
        send, receive = open_batch_channel()
        last = str(self._last_seq) if self._last_seq is not None else None
        self.stream_lost = False
        self._exit_seen = False
        pump = self.bridge.run(
            self, pump_job_events, self.client, self.job.id, send, last, on_error=self._stream_failed
        )
        feed = self.bridge.stream(
            self, iterate, receive, on_item=self._on_batch, on_end=self._stream_ended, on_error=self._stream_failed
        )
        self._stream_tasks = [pump, feed]
        self.refresh_bindings()

    def _on_batch(self, batch: JobBatch) -> None:
        if batch.lines:
            self.log_view.panel.append_lines(batch.lines)
        # The stream says it runs (or it prints, so it runs): whatever the row said when opened.
        if (batch.status == "running" or batch.lines) and batch.exit is None:
            self._started()
        if batch.last_seq is not None:
            self._last_seq = batch.last_seq
        if batch.exit is not None:
            self._exited(batch.exit)

    def _started(self) -> None:
        """The job started: say so now, and learn when it started (the row has `started_at`)."""
        if self.job.status != "queued":
            return
        self.job = self.job.model_copy(update={"status": "running"})
        if not self.log_view.panel.lines:
            self.log_view.panel.placeholder = "Running · no output yet…"
            self.log_view.panel.refresh()
        self._update_bar()
        self.bridge.run(self, self.client.jobs.get, self.job.id, on_done=self._job_refreshed, on_error=lambda exc: None)

    def _exited(self, data: dict[str, object]) -> None:
        status = str(data.get("status") or self.job.status)
        exit_code = data.get("exit_code")
        self._exit_seen = True
        was_live = not self.exited
        self.exited = True
        self.refresh_bindings()
        self.job = self.job.model_copy(
            update={"status": status, "exit_code": exit_code if isinstance(exit_code, int) else self.job.exit_code}
        )
        self._show_banner()
        self._show_written_result()
        if was_live or self.job.finished_at is None:
            # The row has its finish time and, for a read, its result by now.
            self.bridge.run(
                self, self.client.jobs.get, self.job.id, on_done=self._job_refreshed, on_error=lambda exc: None
            )

    def _stream_ended(self) -> None:
        if self._exit_seen:
            return
        # The stream closed without its `exit`: the output may be cut short, even of a job that
        # has finished (a replay), so say so and offer `r`, which resumes after the last line.
        self._stream_failed(TransportError("the output stream ended before the job's exit"))

    def _stream_failed(self, exc: BaseException) -> None:
        if self.stream_lost:
            return
        self.stream_lost = True
        self.refresh_bindings()
        message = describe_job_error(exc, server=self.server.name, kind=self.job.kind)
        self.notify(f"The output of {self.job.kind} stopped: {message} (r reconnects)", severity="error", timeout=8)
        self._update_bar()

    def _job_refreshed(self, job: Job) -> None:
        self.job = job
        if job.status in FINISHED_STATUSES:
            self.exited = True
            self.refresh_bindings()
            if self._exit_seen:  # the banner closes complete output only; the bar shows the status
                self._show_banner()
        elif not self._stream_alive():
            self.stream_lost = True
            self.refresh_bindings()
        if job.result is not None and not self._has_result:
            self._show_result()
        self._update_bar()

    def _stream_alive(self) -> bool:
        return any(not task.finished for task in self._stream_tasks)

    def _connection_changed(self, state: LinkState) -> None:
        """Lost: the output stops where it is, and so does the clock; the log says why. Back: the
        stream resumes after the last line shown (Last-Event-ID: none lost, none twice)."""
        if not state.connected and not self.connection_lost:
            self.connection_lost = True
            if self._exit_seen:
                return  # the output is complete: nothing to wait for
            for task in self._stream_tasks:
                task.cancel()
            self._stop_clock()
            self.log_view.panel.set_banner(
                Banner(self.job.status, None, None, note="connection lost · the output resumes once it is back")
            )
            self._update_bar()
        elif state.connected and self.connection_lost:
            self.connection_lost = False
            if self._exit_seen:
                return
            self.log_view.panel.set_banner(None)
            self._follow_stream()
            if not self.exited:
                self._clock = self.set_interval(1.0, self._update_bar)
            self.bridge.run(
                self, self.client.jobs.get, self.job.id, on_done=self._job_refreshed, on_error=lambda exc: None
            )
            self._update_bar()

    def _stop_clock(self) -> None:
        if self._clock is not None:
            self._clock.stop()
            self._clock = None

    def action_reconnect(self) -> None:
        self.notify("Reconnecting to the job's output…", timeout=3)
        self._follow_stream()
        self._update_bar()

    # --- what is shown ------------------------------------------------------------------------

    def _show_banner(self) -> None:
        self._stop_clock()
        self.log_view.panel.set_banner(Banner(self.job.status, self.job.exit_code, job_duration(self.job)))
        self._update_bar()

    def _show_written_result(self) -> None:
        """A succeeded write whose row has no result: the one its output ends with, if any."""
        if self._has_result or self.job.result is not None or self.job.status != "succeeded":
            return
        if self.kind is None or self.kind.read:
            return
        result = written_result(self.log_view.panel.lines)
        if result is not None:
            self._show_result(result)

    def _show_result(self, result: Any = None) -> None:
        self._has_result = True
        self._log_asked = False
        kind = self.kind
        write = kind is not None and not kind.read
        schema = kind.result_schema if kind is not None else None
        self.query_one(ResultView).show(self.job.result if result is None else result, schema, summary=write)
        tabs = self.query_one(TabbedContent)
        tabs.show_tab("result")
        tabs.remove_class("-single")
        tabs.active = "result"
        self.call_after_refresh(self._focus_result)
        self.refresh_bindings()

    def _focus_result(self) -> None:
        if self._log_asked:
            return  # the log was asked for (2) since the result was shown: it keeps the focus
        for widget in self.query_one(ResultView).query("DataTable, Tree"):
            if isinstance(widget, DataTable | Tree):
                widget.focus()
                return

    def action_show_tab(self, tab: str) -> None:
        self._log_asked = tab == "log"
        self.query_one(TabbedContent).active = tab
        if tab == "log":
            self.log_view.focus()
        else:
            self._focus_result()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "show_tab":
            return self._has_result
        if action == "reconnect":
            return self.stream_lost
        if action == "cancel_job":
            return not self.exited
        return True

    def _update_bar(self) -> None:
        job = self.job
        bar = Text.assemble((job.kind, "bold"), "  ", status_text(job.status))
        if job.exit_code is not None:
            bar.append(f" · exit {job.exit_code}")
        duration = job_duration(job)
        if duration is not None:
            bar.append(f" · {format_duration(duration)}")
        bar.append(f" · {local_time(job.created_at)}", style="dim")
        if job.cached:
            bar.append("  ")
            bar.append(f" cached at {local_time(job.cached_at)} ", style="bold reverse yellow")
        if self.connection_lost and not self._exit_seen:
            bar.append("  connection lost", style="bold red")
        elif self.stream_lost:
            bar.append("  output lost: r reconnects", style="bold red")
        if job.args:
            bar.append(f"  {args_summary(job.args)}", style="dim")
        bar.no_wrap = True
        bar.overflow = "ellipsis"
        self.query_one("#job-bar", Static).update(bar)

    # --- cancelling -----------------------------------------------------------------------------

    def action_cancel_job(self) -> None:
        def confirmed(stop: bool | None) -> None:
            if stop and not self.exited:
                self.bridge.run(
                    self, self.client.jobs.cancel, self.job.id, on_done=self._cancel_sent, on_error=self._cancel_failed
                )

        self.app.push_screen(ConfirmCancel(self.job, self.server), confirmed)

    def _cancel_sent(self, job: Job) -> None:
        if job.status not in FINISHED_STATUSES and not self.exited:
            self.notify(f"Stopping {job.kind} on {self.server.name}: TERM, then KILL…", timeout=5)
        # The stream brings the end (`cancelled`, or the job's own when it ended first).

    def _cancel_failed(self, exc: BaseException) -> None:
        if isinstance(unwrap(exc), NotRunning):
            self.notify(f"{self.job.kind} had already ended: nothing to cancel.", timeout=5)
            return
        message = describe_job_error(exc, server=self.server.name, kind=self.job.kind)
        self.notify(f"{self.job.kind} was not cancelled: {message}", severity="error", timeout=8)

    def action_back(self) -> None:
        self.dismiss()
