"""What the audit log is narrowed to, and `f`: the form that sets all four filters at once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.widgets import Input, Select, Static

from tui.widgets.dialogs import Dialog

Outcome = Literal["ok", "error"]


@dataclass(frozen=True)
class AuditFilters:
    """What the control plane narrows the log to (None: any)."""

    server_id: str | None = None
    action: str | None = None
    actor: str | None = None
    outcome: Outcome | None = None

    def words(self, server_name: str | None) -> str:
        parts = [
            f"server {server_name}" if self.server_id else "",
            f"action {self.action}" if self.action else "",
            f"actor {self.actor}" if self.actor else "",
            f"outcome {self.outcome}" if self.outcome else "",
        ]
        return " · ".join(p for p in parts if p)


class AuditFilterDialog(Dialog[AuditFilters | None]):
    """Server and outcome picked, action and actor typed; an empty field means any. Enter in a
    text field (or ctrl+s anywhere) applies, Esc cancels."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("ctrl+s", "apply", "Apply")]

    def __init__(self, filters: AuditFilters, servers: Sequence[tuple[str, str]]) -> None:
        super().__init__()
        self.filters = filters
        self.servers = servers

    def compose(self) -> ComposeResult:
        f = self.filters
        with Vertical(classes="dialog"):
            yield Static("Audit log filters", classes="dialog--title")
            yield Static("Server", classes="dialog--label")
            yield Select(
                self.servers, prompt="any server", value=f.server_id or Select.NULL, id="audit-server", compact=True
            )
            yield Static("Action (e.g. fs.write, jobs.create)", classes="dialog--label")
            yield Input(f.action or "", placeholder="any action", id="audit-action", compact=True)
            yield Static("Actor (an email or a user id)", classes="dialog--label")
            yield Input(f.actor or "", placeholder="anyone", id="audit-actor", compact=True)
            yield Static("Outcome", classes="dialog--label")
            yield Select(
                [("ok", "ok"), ("error", "error")],
                prompt="any outcome",
                value=f.outcome or Select.NULL,
                id="audit-outcome",
                compact=True,
            )
            yield Static("Enter in a text field or ctrl+s: apply · Esc: cancel", classes="dialog--hint")

    def on_mount(self) -> None:
        self.query_one("#audit-action", Input).focus()

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_apply()

    def action_apply(self) -> None:
        server = self.query_one("#audit-server", Select).value
        outcome = self.query_one("#audit-outcome", Select).value
        self.finish(
            AuditFilters(
                server_id=server if isinstance(server, str) else None,
                action=self.query_one("#audit-action", Input).value.strip() or None,
                actor=self.query_one("#audit-actor", Input).value.strip() or None,
                outcome="ok" if outcome == "ok" else "error" if outcome == "error" else None,
            )
        )
