"""`:` as in k9s: type a resource (`files`, `jobs`, `lb`, `audit`, `servers`), Enter goes there.

The candidates that match what is typed are listed above the line; Tab completes to the first
(again: the next). `:files web1` and `:jobs web1` name a server (Tab completes its name too);
without one they act on the server in view, else the one highlighted on the server list. Esc
cancels. The app binds `:` without priority, so a `:` typed into a field or the editor stays text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from tui.text import load_tcss, printable


@dataclass(frozen=True)
class Resource:
    name: str
    description: str
    aliases: tuple[str, ...] = ()
    takes_server: bool = False


RESOURCES = [
    Resource("servers", "the server list", ("server", "srv")),
    Resource("files", "the files of a server", ("file", "fs"), takes_server=True),
    Resource("jobs", "the jobs of a server", ("job",), takes_server=True),
    Resource("lb", "the load balancers", ("load-balancers", "loadbalancers")),
    Resource("audit", "the org's audit log (owners, admins)", ()),
]


@dataclass(frozen=True)
class Command:
    """What the user asked for: a resource, and for `files`/`jobs` maybe a server name."""

    resource: Resource
    server_name: str | None = None


def resources_begun_by(word: str) -> list[Resource]:
    """The resources whose name or an alias begins with `word` (any case)."""
    word = word.casefold()
    return [r for r in RESOURCES if any(name.startswith(word) for name in (r.name, *r.aliases))]


def find_resource(word: str) -> Resource | None:
    """The resource called `word`, by name or alias, or the only one it begins."""
    word = word.casefold()
    exact = [r for r in RESOURCES if word == r.name or word in r.aliases]
    if exact:
        return exact[0]
    begun = resources_begun_by(word)
    return begun[0] if len(begun) == 1 else None


class CommandLine(ModalScreen[Command | None]):
    """The `:` line at the bottom of the screen, with its candidates above it."""

    DEFAULT_CSS = load_tcss(__file__)

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel"),
        Binding("tab", "complete", "Complete", priority=True),
    ]

    def __init__(self, server_names: Sequence[str] = ()) -> None:
        super().__init__()
        self.server_names = sorted(server_names, key=str.casefold)
        self._completions: list[str] = []
        self._completion_index = 0
        self._completing = False

    def compose(self) -> ComposeResult:
        with Vertical(id="command-box"):
            yield Static("", id="command-candidates")
            with Horizontal(id="command-line"):
                yield Static(":", id="command-prompt")
                yield Input(placeholder="a resource · Tab completes · Esc cancels", id="command-input", compact=True)

    def on_mount(self) -> None:
        self.query_one("#command-input", Input).focus()
        self._show_candidates("")

    # --- candidates ---------------------------------------------------------------------------

    def candidates(self, text: str) -> list[str]:
        """The whole lines that `text` may become: resource names, then `files NAME` and `jobs NAME`."""
        word, space, rest = text.lstrip().partition(" ")
        if not space:
            folded = word.casefold()
            return [
                r.name for r in RESOURCES if r.name.startswith(folded) or any(a.startswith(folded) for a in r.aliases)
            ]
        resource = find_resource(word)
        if resource is None or not resource.takes_server:
            return []
        prefix = rest.strip().casefold()
        return [f"{resource.name} {name}" for name in self.server_names if name.casefold().startswith(prefix)]

    def _show_candidates(self, text: str) -> None:
        found = self.candidates(text)
        line = Text()
        for name in found:
            resource = find_resource(name.partition(" ")[0])
            line.append(printable(name), style="bold")
            if resource is not None and " " not in name and len(found) == 1:
                line.append(f" {resource.description}", style="dim")
            line.append("   ")
        if not found:
            line.append("no such resource: files · jobs · lb · audit · servers", style="red")
        self.query_one("#command-candidates", Static).update(line)

    @on(Input.Changed, "#command-input")
    def _typed(self, event: Input.Changed) -> None:
        event.stop()
        if not self._completing:
            self._completions = []
        self._show_candidates(event.value)

    def action_complete(self) -> None:
        """Tab: the first candidate; Tab again: the next one."""
        field = self.query_one("#command-input", Input)
        if not self._completions:
            self._completions = self.candidates(field.value)
            self._completion_index = 0
        if not self._completions:
            return
        choice = self._completions[self._completion_index % len(self._completions)]
        self._completion_index += 1
        self._completing = True
        try:
            field.value = choice
        finally:
            self._completing = False
        field.cursor_position = len(choice)

    # --- going --------------------------------------------------------------------------------

    @on(Input.Submitted, "#command-input")
    def _go(self, event: Input.Submitted) -> None:
        event.stop()
        word, _, rest = event.value.strip().removeprefix(":").partition(" ")
        resource = find_resource(word) if word else None
        if resource is None:
            self.query_one("#command-candidates", Static).update(
                Text(f"No resource {printable(word)!r}: files · jobs · lb · audit · servers", style="red")
            )
            return
        self.dismiss(Command(resource, rest.strip() or None if resource.takes_server else None))

    def action_cancel(self) -> None:
        self.dismiss(None)
