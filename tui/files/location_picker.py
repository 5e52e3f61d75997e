"""Pick the server and scope a panel shows: every scope of every online server of the account.

A server whose agent is offline is named on the status line; when an agent comes back while the
picker is open (the monitor's presence stream), the list is read again with its scopes in it.
"""

from __future__ import annotations

import trio
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from api_client import Client, Scope, Server
from contract.models import PresenceEvent
from tui.errors import describe_error
from tui.files.panel import scope_key, scope_label
from tui.text import load_tcss, printable
from tui.widgets.dialogs import Dialog

Location = tuple[Server, Scope]


async def browsable_locations(client: Client) -> tuple[list[Location], list[str]]:
    """Every (server, scope) the caller may browse, and a line for each server that could not answer.

    The scopes of the servers are asked for at once: one slow agent does not hold up the others.
    """
    servers = [server for server in await client.servers.list() if server.kind == "full"]
    found: dict[str, list[Scope]] = {}
    problems: list[str] = []

    async def scopes_of(server: Server) -> None:
        if not server.agent.online:
            problems.append(f"{server.name}: agent offline")
            return
        try:
            found[server.id] = await client.files.scopes(server.id)
        except Exception as exc:  # one server's failure must not hide the others
            problems.append(f"{server.name}: {describe_error(exc)}")

    async with trio.open_nursery() as nursery:
        for server in servers:
            nursery.start_soon(scopes_of, server)
    locations = [(server, scope) for server in servers for scope in found.get(server.id, [])]
    return locations, sorted(problems)


class LocationPicker(Dialog[Location | None]):
    """A list of `server · scope` lines; Enter picks, Esc keeps the panel where it is."""

    DEFAULT_CSS = load_tcss(__file__)

    def __init__(self, current: tuple[str, str] | None) -> None:
        super().__init__()
        self.current = current
        self.locations: list[Location] = []

    def compose(self) -> ComposeResult:
        with Vertical(id="location-box", classes="dialog"):
            yield Static("Show in this panel", classes="dialog--title")
            yield OptionList(id="locations")
            yield Static("", id="status", classes="dialog--hint", markup=False)
            yield Static("Enter: show · Esc: cancel", classes="dialog--hint")

    def on_mount(self) -> None:
        self.query_one(OptionList).focus()
        self.monitor.presence.subscribe(self, self._presence_changed)
        self._load()

    def _load(self) -> None:
        self.query_one(OptionList).loading = True
        self.bridge.run(self, browsable_locations, self.client, on_done=self._show, on_error=self._failed)

    def _presence_changed(self, event: PresenceEvent) -> None:
        """An agent back that the list lacks: the list again (the highlighted line stays)."""
        if event.online and all(server.id != event.server_id for server, _scope in self.locations):
            highlighted = self.query_one(OptionList).highlighted
            if highlighted is not None and highlighted < len(self.locations):
                server, scope = self.locations[highlighted]
                self.current = (server.id, scope_key(scope))
            self._load()

    def _show(self, answer: tuple[list[Location], list[str]]) -> None:
        self.locations, problems = answer
        options = self.query_one(OptionList)
        options.loading = False
        options.clear_options()
        options.add_options(
            Option(printable(f"{server.name} · {scope_label(scope)}"), id=str(index))
            for index, (server, scope) in enumerate(self.locations)
        )
        if not self.locations:
            options.add_option(Option("No scope you may browse on an online server.", disabled=True))
        for index, (server, scope) in enumerate(self.locations):
            if (server.id, scope_key(scope)) == self.current:
                options.highlighted = index
        self.set_status("\n".join(problems))

    def _failed(self, exc: BaseException) -> None:
        self.query_one(OptionList).loading = False
        self.show_error(exc)

    @on(OptionList.OptionSelected)
    def _picked(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        if event.option.id is not None:
            self.finish(self.locations[int(event.option.id)])
