"""Compress paths into a zip or tar.gz, or extract an archive, with the progress the server
streams (`fs/operations/{op}/stream`) and a Cancel that stops the operation on the server (which
removes the partial result).

Extract asks the server first what the archive holds (`fs/extract/check`, which writes nothing):
an archive with one top-level entry (`wp-content.zip` holding `wp-content/…`) is proposed for the
folder it sits in, not for a folder named after it (`wp-content/wp-content/…`); the paths it would
find taken are listed, and the user chooses Skip or Overwrite before anything is written."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Input, Label, OptionList, ProgressBar, Select, Static
from textual.widgets.input import Selection

from api_client import Event, Scope, Server, archive_paths_problem
from contract.errors import ApiError, InsufficientStorage
from contract.models import ExtractConflicts, FsExtractCheck
from tui.bridge import TaskHandle
from tui.errors import describe_error, format_size
from tui.files.dialogs.base import describe_items, name_problem, plural
from tui.text import PRINTABLE, join_path, load_tcss, printable
from tui.widgets.dialogs import Dialog
from tui.widgets.select import FormSelect

ArchiveKind = Literal["compress", "extract"]
ArchiveFormat = Literal["zip", "tar.gz"]

FORMAT_SUFFIXES: dict[ArchiveFormat, str] = {"zip": ".zip", "tar.gz": ".tar.gz"}
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".zip")  # the names the agent extracts (archive_kind)
EXTRACTABLE = "only .zip, .tar.gz, .tgz and .tar archives can be extracted"
HINT = "Enter: start · Esc: cancel (stops a running operation)"
CONFLICT_HINT = "s: skip existing · o: overwrite · Esc: cancel (nothing is written yet)"


def archive_stem(name: str) -> str:
    """`site.tar.gz` → `site`; a name without an archive suffix is its own stem."""
    lowered = name.lower()
    for suffix in ARCHIVE_SUFFIXES:
        if lowered.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def proposed_destination(directory: str, archive_name: str, roots: Sequence[str]) -> str:
    """Where to extract: the archive's own folder when it holds one top-level entry (it makes its
    own folder), else a folder named after the archive (`site.zip` → `site`)."""
    return directory if len(roots) == 1 else join_path(directory, archive_stem(archive_name))


def default_archive_name(paths: Sequence[str], fmt: ArchiveFormat) -> str:
    """`public_html.zip` for one path, `archive.zip` for several."""
    base = paths[0].rstrip("/").rpartition("/")[2] if len(paths) == 1 else ""
    return printable(base or "archive") + FORMAT_SUFFIXES[fmt]


class ArchiveDialog(Dialog[bool]):
    """First the archive's name and format (or the folder to extract into), then the progress.
    Enter starts; Esc cancels (a running operation is stopped on the server first)."""

    DEFAULT_CSS = load_tcss(__file__)
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel"),
        Binding("s", "choose('skip')", "Skip existing", show=False),
        Binding("o", "choose('overwrite')", "Overwrite", show=False),
    ]

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
        # Extract: what the server said about the archive, and for which destination.
        self.check: FsExtractCheck | None = None
        self.checked_destination: str | None = None
        self.proposing = kind == "extract"  # the destination waits for the archive's roots
        self.checking = False
        self.start_when_proposed = False
        self.conflicts_shown = False

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
        with Vertical(id="archive-box", classes="dialog"):
            yield Static(printable(title), classes="dialog--title", markup=False)
            with Vertical(id="archive-form", classes="dialog--row"):
                if self.kind == "compress":
                    yield Label(printable(f"Archive name (in /{self.directory})"), classes="dialog--label")
                    yield Input(
                        default_archive_name(self.paths, "zip"),
                        id="archive-name",
                        compact=True,
                        select_on_focus=False,
                        highlighter=PRINTABLE,
                    )
                    yield Label("Format", classes="dialog--label")
                    formats: list[tuple[str, ArchiveFormat]] = [("zip", "zip"), ("tar.gz", "tar.gz")]
                    yield FormSelect(formats, value="zip", allow_blank=False, id="archive-format", compact=True)
                else:
                    yield Label("Extract into the folder (made when missing)", classes="dialog--label")
                    yield Input(
                        "",
                        placeholder="reading the archive…",
                        id="archive-destination",
                        compact=True,
                        select_on_focus=False,
                        highlighter=PRINTABLE,
                    )
            with Vertical(id="archive-conflicts"):
                yield Static("", id="archive-conflicts-title", classes="dialog--note", markup=False)
                yield OptionList(id="archive-conflict-list", compact=True)
                yield Static("", id="archive-conflicts-note", classes="dialog--text", markup=False)
            bar = ProgressBar(total=None, show_eta=False, id="archive-bar")
            bar.display = False  # shown once the operation runs
            yield bar
            yield Static("", id="archive-numbers", markup=False)
            yield Static("", id="archive-current", markup=False)
            yield Static("", id="status", markup=False)
            with Horizontal(classes="dialog--buttons"):
                yield Button("Start", id="archive-start", variant="primary", compact=True)
                yield Button("Skip existing", id="archive-skip", variant="primary", compact=True)
                yield Button("Overwrite", id="archive-overwrite", variant="warning", compact=True)
                yield Button("Cancel", id="archive-cancel", compact=True)
            yield Static(HINT, id="archive-hint", classes="dialog--hint", markup=False)

    def on_mount(self) -> None:
        field = self.query_one("#archive-name" if self.kind == "compress" else "#archive-destination", Input)
        field.focus()
        self._show_choice(False)
        if self.too_many:
            self.set_status(self.too_many, error=True)
        if self.kind == "extract":
            self.set_status("Reading the archive…")
            self.checking = True
            self.hold_keys()  # typed meanwhile: over the destination proposed, once it is in
            self.bridge.run(self, self._check, self.directory, on_done=self._proposed, on_error=self._not_proposed)

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

    @on(Input.Changed, "#archive-destination")
    def _destination_changed(self, event: Input.Changed) -> None:
        """Another folder: the conflicts listed were those of the one before."""
        event.stop()
        if self.conflicts_shown and event.value.strip().strip("/") != self.checked_destination:
            self._show_choice(False)
            self.set_status("")

    @on(Input.Submitted)
    @on(FormSelect.Submitted)
    def _submitted(self, event: Input.Submitted | FormSelect.Submitted) -> None:
        event.stop()
        self.action_start()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "archive-start":
            self.action_start()
        elif event.button.id == "archive-skip":
            self.action_choose("skip")
        elif event.button.id == "archive-overwrite":
            self.action_choose("overwrite")
        else:
            self.action_cancel()

    # --- running ------------------------------------------------------------------------------

    def action_start(self) -> None:
        if self.running or self.checking:
            self.start_when_proposed = self.proposing
            return
        if self.too_many:
            self.set_status(self.too_many, error=True)
            return
        if self.kind == "extract":
            self._check_then_extract(self.destination)
            return
        name = self.query_one("#archive-name", Input).value
        problem = name_problem(name)
        if problem:
            self.set_status(problem, error=True)
            return
        self._set_running(True)
        self.set_status("Starting…")
        destination = join_path(self.directory, name)
        self.bridge.run(self, self._start_compress, destination, on_done=self._started, on_error=self._failed)

    async def _start_compress(self, destination: str) -> str:
        files = self.client.files
        return await files.compress(self.server.id, self.scope, self.paths, destination, format=self.archive_format)

    # --- extract: the archive's roots and conflicts first ---------------------------------------

    @property
    def destination(self) -> str:
        return self.query_one("#archive-destination", Input).value.strip().strip("/")

    async def _check(self, destination: str) -> FsExtractCheck:
        return await self.client.files.extract_check(self.server.id, self.scope, self.paths[0], destination)

    def _remember(self, destination: str, check: FsExtractCheck) -> None:
        self.check, self.checked_destination = check, destination

    def _proposed(self, check: FsExtractCheck) -> None:
        """The archive's roots are known: propose its destination (unless the user typed one)."""
        self.checking = self.proposing = False
        destination = proposed_destination(self.directory, self.paths[0].rpartition("/")[2], check.roots)
        if destination == self.directory:
            self._remember(destination, check)
        self._propose("/" + destination)
        what = plural(check.entries, "entry", "entries") + f", {format_size(check.bytes)}"
        layout = f"one top-level folder, {check.roots[0]}" if len(check.roots) == 1 else "several top-level entries"
        self.set_status(printable(f"{what} · {layout}") if check.roots else what)
        if self.start_when_proposed:
            self.start_when_proposed = False
            self.action_start()

    def _not_proposed(self, exc: BaseException) -> None:
        """The archive could not be read (unsafe, broken): say why; the folder named after it is
        proposed, and Start asks again (and says why again)."""
        self.checking = self.proposing = self.start_when_proposed = False
        self._propose("/" + proposed_destination(self.directory, self.paths[0].rpartition("/")[2], []))
        self.show_error(exc, path=self.paths[0])

    def _propose(self, destination: str) -> None:
        """`destination` in the field, selected as mc's rename selects the name: what is typed
        next replaces it (End or an arrow keeps it to edit); the keys typed meanwhile go there."""
        field = self.query_one("#archive-destination", Input)
        if not field.value:
            field.value = destination
            field.selection = Selection(0, len(destination))
        self.release_keys()

    def _check_then_extract(self, destination: str) -> None:
        """Extract, or first list the conflicts. The check made when the dialog opened is used
        once: a later Start (after a failure, say) asks the server again."""
        check, self.check = self.check, None
        if check is not None and self.checked_destination == destination:
            self._decide(destination, check)
            return
        self.checking = True
        self.set_status("Looking for items the archive would replace…")
        self.bridge.run(
            self,
            self._check,
            destination,
            on_done=lambda check: self._checked(destination, check),
            on_error=self._check_failed,
        )

    def _checked(self, destination: str, check: FsExtractCheck) -> None:
        self.checking = False
        self._remember(destination, check)
        if destination == self.destination:  # else the user changed it meanwhile: Start again
            self._decide(destination, check)

    def _check_failed(self, exc: BaseException) -> None:
        self.checking = False
        self.show_error(exc, path=self.paths[0])

    def _decide(self, destination: str, check: FsExtractCheck) -> None:
        """No conflict: extract now. Else list them and wait for Skip or Overwrite."""
        if not check.conflicts_total:
            self._run_extract("refuse")
            return
        self._list_conflicts(destination, check)
        self._show_choice(True)
        skip = self.query_one("#archive-skip", Button)
        skip.focus()
        self.set_status("Nothing is written until you choose.")

    def _list_conflicts(self, destination: str, check: FsExtractCheck) -> None:
        total = check.conflicts_total
        verb = "exists" if total == 1 else "exist"
        where = "/" + destination if destination else "the top folder"
        title = f"{plural(total, 'item')} of the archive already {verb} in {where}:"
        self.query_one("#archive-conflicts-title", Static).update(printable(title))
        listing = self.query_one("#archive-conflict-list", OptionList)
        listing.clear_options()
        prefix = destination + "/" if destination else ""
        listing.add_options(printable(path.removeprefix(prefix)) for path in check.conflicts)
        if total > len(check.conflicts):
            listing.add_option(f"… and {total - len(check.conflicts):,} more")
        listing.highlighted = None
        note = "Skip keeps them and extracts the rest; Overwrite replaces each of them."
        if check.clashes:
            clashes = plural(len(check.clashes), "of them is", "of them are")
            note = f"{clashes} a folder where the archive has a file or the other way round: only Skip can settle that."
        self.query_one("#archive-conflicts-note", Static).update(printable(note))
        self.query_one("#archive-overwrite", Button).disabled = bool(check.clashes)

    def _show_choice(self, shown: bool) -> None:
        """The conflicts and Skip/Overwrite in place of Start, or back."""
        self.conflicts_shown = shown
        self.query_one("#archive-conflicts").set_class(shown, "-shown")
        self.query_one("#archive-start", Button).display = not shown and not self.running
        for button in self.query("#archive-skip, #archive-overwrite").results(Button):
            button.display = shown
        self.query_one("#archive-hint", Static).update(CONFLICT_HINT if shown else HINT)

    def action_choose(self, on_conflict: ExtractConflicts) -> None:
        """Skip or Overwrite, once the conflicts are listed."""
        if not self.conflicts_shown or self.running:
            return
        if on_conflict == "overwrite" and self.query_one("#archive-overwrite", Button).disabled:
            return
        self._run_extract(on_conflict)

    def _run_extract(self, on_conflict: ExtractConflicts) -> None:
        destination = self.destination
        self._show_choice(False)
        self._set_running(True)
        self.set_status("Starting…")
        self.bridge.run(
            self, self._start_extract, destination, on_conflict, on_done=self._started, on_error=self._failed
        )

    async def _start_extract(self, destination: str, on_conflict: ExtractConflicts) -> str:
        files = self.client.files
        return await files.extract(self.server.id, self.scope, self.paths[0], destination, on_conflict=on_conflict)

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
            if data.get("code") == InsufficientStorage.code:  # said as every full disk is said
                message = describe_error(
                    ApiError.from_body(InsufficientStorage.status, {"error": data}), server=self.server.name
                )
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
        if result.get("kept"):
            note = f" ({plural(int(result['kept']), 'existing item')} kept)"
        elif result.get("replaced"):
            note = f" ({plural(int(result['replaced']), 'item')} replaced)"
        verb = "Created" if self.kind == "compress" else "Extracted into"
        if where == "/":
            where = "the top folder"
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
