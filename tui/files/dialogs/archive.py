"""Compress paths into a zip or tar.gz, or extract an archive, with the progress the server
streams (`fs/operations/{op}/stream`) and a Cancel that stops the operation on the server (which
removes the partial result)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Input, Label, ProgressBar, Select, Static

from api_client import Scope, Server
from api_client.client import archive_paths_problem
from api_client.sse import Event
from tui.bridge import TaskHandle
from tui.errors import format_size
from tui.files.dialogs.base import FileDialog, describe_items, name_problem, plural
from tui.text import join_path, printable

ArchiveKind = Literal["compress", "extract"]
ArchiveFormat = Literal["zip", "tar.gz"]

FORMAT_SUFFIXES: dict[ArchiveFormat, str] = {"zip": ".zip", "tar.gz": ".tar.gz"}
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".zip")


def archive_stem(name: str) -> str:
    """`site.tar.gz` → `site`; a name without an archive suffix is its own stem."""
    lowered = name.lower()
    for suffix in ARCHIVE_SUFFIXES:
        if lowered.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def default_archive_name(paths: Sequence[str], fmt: ArchiveFormat) -> str:
    """`public_html.zip` for one path, `archive.zip` for several."""
    base = paths[0].rstrip("/").rpartition("/")[2] if len(paths) == 1 else ""
    return (base or "archive") + FORMAT_SUFFIXES[fmt]


class ArchiveDialog(FileDialog[bool]):
    """First the archive's name and format (or the folder to extract into), then the progress.
    Enter starts; Esc cancels (a running operation is stopped on the server first)."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, server: Server, scope: Scope, kind: ArchiveKind, paths: Sequence[str], directory: str) -> None:
        super().__init__()
        self.server = server
        self.scope = scope
        self.kind = kind
        self.paths = [path.strip("/") for path in paths]
        self.directory = directory.strip("/")
        self.running = False
        self.cancelling = False
        self.operation_id: str | None = None
        self.last_progress: dict[str, Any] = {}
        self.result: dict[str, Any] | None = None
        self._stream: TaskHandle | None = None

    @classmethod
    def compress(cls, server: Server, scope: Scope, paths: Sequence[str], directory: str) -> ArchiveDialog:
        return cls(server, scope, "compress", paths, directory)

    @classmethod
    def extract(cls, server: Server, scope: Scope, path: str, directory: str) -> ArchiveDialog:
        return cls(server, scope, "extract", [path], directory)

    def cancel_result(self) -> bool:
        return False

    # --- the screen ---------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        what = describe_items(self.paths)
        title = f"Compress {what}" if self.kind == "compress" else f"Extract {what}"
        with Vertical(id="archive-box", classes="file-dialog"):
            yield Static(printable(title), classes="file-dialog--title", markup=False)
            with Vertical(id="archive-form", classes="file-dialog--row"):
                if self.kind == "compress":
                    yield Label(printable(f"Archive name (in /{self.directory})"), classes="file-dialog--label")
                    yield Input(
                        default_archive_name(self.paths, "zip"), id="archive-name", compact=True, select_on_focus=False
                    )
                    yield Label("Format", classes="file-dialog--label")
                    formats: list[tuple[str, ArchiveFormat]] = [("zip", "zip"), ("tar.gz", "tar.gz")]
                    yield Select(formats, value="zip", allow_blank=False, id="archive-format", compact=True)
                else:
                    yield Label("Extract into the folder (made when missing)", classes="file-dialog--label")
                    stem = archive_stem(self.paths[0].rpartition("/")[2])
                    yield Input(
                        join_path(self.directory, stem), id="archive-destination", compact=True, select_on_focus=False
                    )
            bar = ProgressBar(total=None, show_eta=False, id="archive-bar")
            bar.display = False  # shown once the operation runs
            yield bar
            yield Static("", id="archive-numbers", markup=False)
            yield Static("", id="archive-current", markup=False)
            yield Static("", id="status", markup=False)
            with Horizontal(classes="file-dialog--buttons"):
                yield Button("Start", id="archive-start", variant="primary", compact=True)
                yield Button("Cancel", id="archive-cancel", compact=True)
            yield Static("Enter: start · Esc: cancel (stops a running operation)", classes="file-dialog--hint")

    def on_mount(self) -> None:
        field = self.query_one("#archive-name" if self.kind == "compress" else "#archive-destination", Input)
        field.focus()
        if self.too_many:
            self.set_status(self.too_many, error=True)

    @property
    def too_many(self) -> str | None:
        """Why these paths cannot go into one archive (more than one request takes), or None."""
        return archive_paths_problem(len(self.paths)) if self.kind == "compress" else None

    @property
    def archive_format(self) -> ArchiveFormat:
        value = self.query_one("#archive-format", Select).value
        return "tar.gz" if value == "tar.gz" else "zip"

    @on(Select.Changed, "#archive-format")
    def _format_changed(self, event: Select.Changed) -> None:
        event.stop()
        name = self.query_one("#archive-name", Input)
        name.value = archive_stem(name.value or "archive") + FORMAT_SUFFIXES[self.archive_format]

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_start()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "archive-start":
            self.action_start()
        else:
            self.action_cancel()

    # --- running ------------------------------------------------------------------------------

    def action_start(self) -> None:
        if self.running:
            return
        if self.too_many:
            self.set_status(self.too_many, error=True)
            return
        if self.kind == "compress":
            name = self.query_one("#archive-name", Input).value
            problem = name_problem(name)
            if problem:
                self.set_status(problem, error=True)
                return
            destination = join_path(self.directory, name)
            starter = self._start_compress
        else:
            destination = self.query_one("#archive-destination", Input).value.strip().strip("/")
            starter = self._start_extract
        self._set_running(True)
        self.set_status("Starting…")
        self.bridge.run(self, starter, destination, on_done=self._started, on_error=self._failed)

    async def _start_compress(self, destination: str) -> str:
        files = self.client.files
        return await files.compress(self.server.id, self.scope, self.paths, destination, format=self.archive_format)

    async def _start_extract(self, destination: str) -> str:
        return await self.client.files.extract(self.server.id, self.scope, self.paths[0], destination)

    def _set_running(self, running: bool) -> None:
        self.running = running
        self.query_one("#archive-form").disabled = running
        self.query_one("#archive-start", Button).display = not running
        self.query_one("#archive-bar", ProgressBar).display = running or bool(self.last_progress)
        if running:
            self.query_one("#archive-cancel", Button).focus()

    def _started(self, operation_id: str) -> None:
        self.operation_id = operation_id
        if self.cancelling:
            self._cancel_operation()
        self.set_status("Compressing…" if self.kind == "compress" else "Extracting…")
        self._stream = self.bridge.stream(
            self,
            self.client.files.operation,
            self.server.id,
            operation_id,
            on_item=self._event,
            on_error=self._failed,
        )

    def _event(self, event: Event) -> None:
        data = event.data if isinstance(event.data, dict) else {}
        if event.event == "progress":
            self._progress(data)
        elif event.event == "done":
            self.result = data.get("result") or {}
            self._finished()
        elif event.event == "error":
            if data.get("code") == "cancelled":
                self.running = False
                self.notify("Cancelled: the partial result was removed.")
                self.finish(False)
                return
            self._set_running(False)
            self.cancelling = False
            message = str(data.get("message") or data.get("code") or "the operation failed")
            self.set_status(message, error=True)
            self.notify(printable(message), severity="error", timeout=8)

    def _progress(self, data: dict[str, Any]) -> None:
        self.last_progress = data
        total_bytes = int(data.get("total_bytes") or 0)
        total_files = int(data.get("total_files") or 0)
        done_bytes = int(data.get("done_bytes") or 0)
        done_files = int(data.get("done_files") or 0)
        bar = self.query_one("#archive-bar", ProgressBar)
        if total_bytes:
            bar.update(total=total_bytes, progress=done_bytes)
        elif total_files:
            bar.update(total=total_files, progress=done_files)
        files = f"{done_files:,} of {plural(total_files, 'file')}" if total_files else plural(done_files, "file")
        size = format_size(done_bytes) + (f" of {format_size(total_bytes)}" if total_bytes else "")
        self.query_one("#archive-numbers", Static).update(f"{files} · {size}")
        current = data.get("current")
        if isinstance(current, str) and current:
            self.query_one("#archive-current", Static).update(printable(current))

    def _finished(self) -> None:
        self.running = False
        result = self.result or {}
        entry = result.get("entry") if isinstance(result.get("entry"), dict) else None
        where = f"/{entry['path']}" if entry and isinstance(entry.get("path"), str) else "it"
        skipped = result.get("skipped") or []
        note = f" ({plural(len(skipped), 'item')} skipped)" if isinstance(skipped, list) and skipped else ""
        verb = "Created" if self.kind == "compress" else "Extracted into"
        self.notify(printable(f"{verb} {where}{note}."))
        self.finish(True)

    def _failed(self, exc: BaseException) -> None:
        self._set_running(False)
        self.cancelling = False
        self.show_error(exc)

    def action_cancel(self) -> None:
        if not self.running:
            self.finish(False)
            return
        if self.cancelling:  # a second Esc: stop waiting for the server's word
            self.finish(False)
            return
        self.cancelling = True
        self.set_status("Cancelling…")
        if self.operation_id is not None:
            self._cancel_operation()

    def _cancel_operation(self) -> None:
        assert self.operation_id is not None
        self.bridge.run(
            self,
            self.client.files.cancel_operation,
            self.server.id,
            self.operation_id,
            on_error=lambda exc: None,  # already over: its stream says how it ended
        )
