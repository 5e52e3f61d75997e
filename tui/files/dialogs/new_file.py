"""A new file from a template: a name, a template (its content, and the extension of a name typed
without one), created with `create_only` so an existing file is never replaced."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Input, Label, Select, Static

from api_client import Scope, Server
from api_client import errors as api_errors
from contract.models import FsWriteResult
from tui.files.dialogs.base import name_problem
from tui.screen import SUBMITTING
from tui.text import join_path, printable
from tui.widgets.dialogs import Dialog
from tui.widgets.select import FormSelect

UNTITLED = "untitled"
EXECUTABLE = 0o755


@dataclass(frozen=True)
class Template:
    label: str
    extension: str
    content: str
    executable: bool = False


TEMPLATES: dict[str, Template] = {
    "text": Template("Text", ".txt", ""),
    "php": Template("PHP", ".php", "<?php\n\n"),
    "html": Template(
        "HTML",
        ".html",
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n    <meta charset="utf-8">\n'
        '    <meta name="viewport" content="width=device-width, initial-scale=1">\n    <title></title>\n'
        "</head>\n<body>\n\n</body>\n</html>\n",
    ),
    "css": Template("CSS", ".css", "body {\n    margin: 0;\n}\n"),
    "js": Template("JavaScript", ".js", "'use strict';\n\n"),
    "json": Template("JSON", ".json", "{}\n"),
    "markdown": Template("Markdown", ".md", "# Title\n\n"),
    "shell": Template("Shell script", ".sh", "#!/bin/sh\nset -eu\n\n", executable=True),
    "empty": Template("Empty", "", ""),
}


def file_name(typed: str, template: Template) -> str:
    """The name the file gets: `typed` as it is when it has an extension (`notes.md`, `hello.sh`,
    `.htaccess`), else with the template's (`notes` → `notes.txt`); `untitled…` when empty."""
    name = typed.strip()
    if "." in name.lstrip("."):
        return name
    return (name or UNTITLED) + template.extension


class NewFileDialog(Dialog[str | None]):
    """Enter (in the name or on the template) creates the file, never over an existing one, and
    returns its path (the caller opens it in the editor); Esc cancels."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel"),
        Binding("ctrl+t", "pick_template", "Template"),
    ]

    def __init__(self, server: Server, scope: Scope, directory: str) -> None:
        super().__init__()
        self.server = server
        self.scope = scope
        self.directory = directory.strip("/")
        self.creating = False

    def compose(self) -> ComposeResult:
        with Vertical(id="new-file-box", classes="dialog"):
            yield Static(printable(f"New file in /{self.directory}"), classes="dialog--title", markup=False)
            yield Label("Name", classes="dialog--label")
            yield Input(placeholder=file_name("", TEMPLATES["text"]), id="new-file-name", compact=True)
            yield Label("Template", classes="dialog--label")
            options = [(template.label, key) for key, template in TEMPLATES.items()]
            yield FormSelect(options, value="text", allow_blank=False, id="new-file-template", compact=True)
            yield Static("", id="status", markup=False)
            with Horizontal(classes="dialog--buttons"):
                yield Button("Create", id="new-file-create", variant="primary", compact=True)
                yield Button("Cancel", id="new-file-cancel", compact=True)
            yield Static("Enter: create and edit · Tab/ctrl+t: template · Esc: cancel", classes="dialog--hint")

    def on_mount(self) -> None:
        self.query_one("#new-file-name", Input).focus()
        self._show_name()

    @property
    def template(self) -> Template:
        value = self.query_one("#new-file-template", Select).value
        return TEMPLATES.get(str(value), TEMPLATES["empty"])

    def action_pick_template(self) -> None:
        picker = self.query_one("#new-file-template", Select)
        picker.focus()
        picker.expanded = True

    @property
    def name_to_create(self) -> str:
        return file_name(self.query_one("#new-file-name", Input).value, self.template)

    @on(Select.Changed, "#new-file-template")
    @on(Input.Changed, "#new-file-name")
    def _show_name(self, event: Select.Changed | Input.Changed | None = None) -> None:
        """The status line says the name the file will get, so an added extension is no surprise."""
        if event is not None:
            event.stop()
        self.query_one("#new-file-name", Input).placeholder = file_name("", self.template)
        if not self.creating:
            self.set_status(f"Creates {self.name_to_create}")

    @on(Input.Submitted, "#new-file-name")
    @on(FormSelect.Submitted, "#new-file-template")
    def _submitted(self, event: Input.Submitted | FormSelect.Submitted) -> None:
        event.stop()
        self.action_create()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "new-file-create":
            self.action_create()
        else:
            self.action_cancel()

    def action_create(self) -> None:
        if self.creating:
            return
        name = self.name_to_create
        problem = name_problem(name)
        if problem:
            self.set_status(problem, error=True)
            return
        template = self.template
        path = join_path(self.directory, name)
        self.creating = True
        self.hold_keys(SUBMITTING)  # typed meanwhile: for the editor the new file opens in
        self.set_status(f"Creating /{path}…")
        self.bridge.run(self, self._create, path, template, on_done=self._created, on_error=self._failed)

    async def _create(self, path: str, template: Template) -> str:
        answer: FsWriteResult = await self.client.files.write(
            self.server.id, self.scope, path, template.content, create_only=True
        )
        if template.executable:
            await self.client.files.chmod(self.server.id, self.scope, [answer.entry.path], EXECUTABLE)
        return answer.entry.path

    def _created(self, path: str) -> None:
        self.creating = False
        self.notify(printable(f"Created /{path}."))
        self.finish(path)

    def _failed(self, exc: BaseException) -> None:
        self.creating = False
        self.release_keys(SUBMITTING)
        if isinstance(exc, api_errors.Conflict):
            self.set_status(f"{self.name_to_create!r} already exists here: choose another name.", error=True)
            self.query_one("#new-file-name", Input).focus()
            return
        self.show_error(exc)
