"""One audit entry in full: who, when, on what, the outcome and its error code, the details."""

from __future__ import annotations

import json
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from contract.models import AuditEntry
from tui.jobs.run import local_time
from tui.text import load_tcss, printable


def actor_name(entry: AuditEntry) -> str:
    """The actor's email, else their user id; `system` for what no user did (the agents, timers)."""
    return entry.actor.email or entry.actor.user_id or "system"


def outcome_text(entry: AuditEntry) -> Text:
    if entry.outcome == "ok":
        return Text("✓ ok", style="green")
    return Text(f"✗ {entry.error_code or 'error'}", style="bold red", no_wrap=True, overflow="ellipsis")


class AuditEntryScreen(ModalScreen[None]):
    """The entry's fields, then its details as indented JSON (secrets already shown as `***`)."""

    DEFAULT_CSS = load_tcss(__file__)

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q,enter", "dismiss", "Close")]

    def __init__(self, entry: AuditEntry, server_name: str) -> None:
        super().__init__()
        self.entry = entry
        self.server_name = server_name

    def compose(self) -> ComposeResult:
        entry = self.entry
        fields = Text()
        for label, value in [
            ("At", f"{local_time(entry.at)} ({entry.at.isoformat()})"),
            ("Actor", actor_name(entry)),
            ("Server", self.server_name),
            ("Action", entry.action),
            ("Target", entry.target or "—"),
        ]:
            fields.append(f"{label:<8}", style="bold").append(printable(value) + "\n")
        fields.append(f"{'Outcome':<8}", style="bold").append_text(outcome_text(entry))
        if entry.error_code:
            fields.append(f"\n{'Error':<8}", style="bold").append(entry.error_code)
        details = json.dumps(entry.details, indent=2, ensure_ascii=False, sort_keys=True)
        with VerticalScroll(id="audit-entry-box"):
            yield Static(fields, id="audit-entry-fields")
            yield Static(Text(printable_block(details)), id="audit-entry-details")
            yield Static("Esc closes", id="audit-entry-hint")

    def on_mount(self) -> None:
        self.query_one("#audit-entry-box").border_title = f"Audit entry {self.entry.id}"


def printable_block(text: str) -> str:
    """Several lines, each made safe to draw."""
    return "\n".join(printable(line) for line in text.splitlines())
