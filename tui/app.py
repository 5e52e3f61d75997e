"""The fleetdeck Textual app: screens on top, the API client in trio underneath (`tui.bridge`).

The screens, the API client and trio are imported only once they are needed (the first frame,
the starting screen, must not wait for them; see `benchmarks/startup.py`); while the local stack
starts, the waiting thread imports them.
"""

from __future__ import annotations

import gc
import logging
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar

from textual import events
from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.filter import LineFilter, Monochrome, NoColor
from textual.notifications import SeverityLevel
from textual.screen import ModalScreen, Screen
from textual.theme import Theme

from themes.palettes import MONO, THEMES, automatic_theme_name, default_theme_name, register_themes
from tui.connection import ConnectError, Connection, PendingConnection
from tui.keys import KeyQueue, KeyRouted
from tui.starting import StartingScreen
from tui.text import load_tcss, printable

if TYPE_CHECKING:
    from api_client import Client, Me, Server
    from tui.bridge import TrioBridge
    from tui.command_line import Command
    from tui.monitor import ConnectionMonitor

log = logging.getLogger(__name__)


_NO_COLOR = NoColor()  # every cell in the terminal's own foreground and background


def freeze_startup_objects() -> None:
    """Leave what startup made (modules, Textual, pygments: ~70k objects) out of cyclic GC passes.

    A full collection over them takes 50 to 100 ms on a small machine, and typing churns enough
    objects to trigger one every twenty keys or so: a visible hitch in the editor (measured in
    `benchmarks/files.py`). Those objects live as long as the app; what they hold is still freed
    by reference counting, and `gc.unfreeze()` (when the app unmounts) hands them back.
    """
    gc.collect()
    gc.freeze()


class FleetdeckApp(App[None]):
    """Servers → files → viewer, over one `/v1` connection."""

    TITLE = "fleetdeck"
    CSS = load_tcss(__file__, "monochrome")  # the app's own (unscoped): its rules name the theme's class on the app
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("f1", "help", "Help", key_display="F1"),
        Binding("question_mark", "help", "Help", key_display="?", show=False),
        # F10 quits as in Midnight Commander; ctrl+q too, from anywhere (an editor included).
        Binding("f10", "quit", "Quit", key_display="F10"),
        Binding("ctrl+q", "quit", "Quit", priority=True, show=False),
        # Not a priority binding: a `:` typed into a field or the editor stays text.
        Binding("colon", "command_mode", "Command", key_display=":", show=False),
    ]

    def __init__(
        self, connection: Connection | PendingConnection, *, theme: str | None = None, client: Client | None = None
    ) -> None:
        """`connection` may still be pending (a local stack starting): the app then shows a
        starting screen at once and the server list once it works. `client` replaces the one
        built from the connection (tests give one with a fake transport)."""
        super().__init__()
        self.pending = connection if isinstance(connection, PendingConnection) else None
        self.connection = connection if isinstance(connection, Connection) else None
        self._client = client
        self._bridge: TrioBridge | None = None
        self.me: Me | None = None
        self.monitor: ConnectionMonitor | None = None  # once connected: is the control plane there
        if self.pending is not None:
            self.sub_title = "starting…"
        self.keys = KeyQueue(self, self._route_key)
        register_themes(self)
        # Set before the first frame: a theme set once mounted restyles every widget again.
        self._unknown_theme = self._set_theme(default_theme_name(theme))

    def get_key_display(self, binding: Binding) -> str:
        """Function keys as the keyboard and Midnight Commander write them (`F3`, not `f3`), so a
        footer reads the same whichever screen declared its keys."""
        shown = super().get_key_display(binding)
        return re.sub(r"(?<![a-z])f(\d{1,2})$", r"F\1", shown)  # shift+f6 too

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = True,
    ) -> None:
        """Every notification as plain text, its control characters as `?`: messages carry names,
        paths and errors from servers, where a file name may hold escape sequences (or brackets
        that would read as markup). Screens' and widgets' `notify` come here too."""
        del markup  # never: no message of this app is markup
        super().notify(printable(message), title=printable(title), severity=severity, timeout=timeout, markup=False)

    def get_line_filters(self) -> Sequence[LineFilter]:
        """No colour reaches the terminal under the monochrome theme, and colour under any other.

        Textual picks its `NO_COLOR` filter before our theme is set, from its own default theme: it
        then greys every colour by its RGB value, and an ANSI colour has none, so the ANSI theme
        came out black on black. The monochrome theme (the automatic choice under `NO_COLOR`)
        leaves the terminal's own colours on every cell instead; a theme the user chose by name
        keeps its colours, as no-color.org asks of an explicit choice.
        """
        filters = [f for f in super().get_line_filters() if not isinstance(f, Monochrome | NoColor)]
        if self.theme == MONO.name:
            filters.append(_NO_COLOR)
        return filters

    # --- keys -----------------------------------------------------------------------------

    async def on_event(self, event: events.Event) -> None:
        """The terminal's keys wait in `self.keys` for the previous key to be handled and the
        screen to be ready (`tui.keys`); every other event as Textual handles it."""
        if isinstance(event, events.Key) and not event.is_forwarded:
            await self.keys.arrived(event)
            return
        await super().on_event(event)

    async def _route_key(self, key: events.Key) -> None:
        await super().on_event(key)

    def on_key_routed(self, message: KeyRouted) -> None:
        self.keys.routed(message)

    @property
    def client(self) -> Client:
        """The API client; screens that use it are pushed only once connected."""
        if self._client is None:
            raise RuntimeError("not connected yet")
        return self._client

    @property
    def bridge(self) -> TrioBridge:
        """The trio side, made on first use (importing trio is not free)."""
        if self._bridge is None:
            from tui.bridge import TrioBridge

            self._bridge = TrioBridge()
        return self._bridge

    # --- lifecycle ------------------------------------------------------------------------

    def on_mount(self) -> None:
        if self._unknown_theme is not None:
            self.notify(f"Unknown theme {self._unknown_theme!r}: using {self.theme}.", severity="warning")
        if self.connection is not None:
            self._connected(self.connection)
        elif self.pending is not None:
            self.call_after_refresh(self._start_connecting, self.pending)

    def get_default_screen(self) -> Screen[Any]:
        """While the connection is pending, the starting screen is the first screen, and it stays
        at the bottom of the stack under the server list, as Textual's blank default screen does
        otherwise. Pushed over that blank screen, it made the first frame compose, style and lay
        out two screens, and that frame came only after the footer (`benchmarks/startup.py`)."""
        if self.pending is not None:
            return StartingScreen(self.pending.description)
        return super().get_default_screen()

    def _start_connecting(self, pending: PendingConnection) -> None:
        """Once the starting screen is drawn: what starts now no longer delays the first frame."""
        threading.Thread(target=self._wait_for_connection, args=(pending,), daemon=True).start()

    def _wait_for_connection(self, pending: PendingConnection) -> None:
        """In a thread: the first frame is drawn while the connection comes up. The server list
        is imported meanwhile in another thread (a stack starting is mostly waiting)."""
        importing = threading.Thread(target=_import_the_server_list, name="fleetdeck-imports", daemon=True)
        importing.start()
        try:
            connection = pending.wait()
        except ConnectError as exc:
            self._from_thread(self._start_failed, str(exc))
            return
        importing.join()
        self._from_thread(self._connected, connection)

    def _from_thread(self, callback: Callable[..., object], *args: object) -> None:
        try:
            self.call_from_thread(callback, *args)
        except RuntimeError:
            pass  # the user quit before the stack answered

    def _connected(self, connection: Connection) -> None:
        from api_client import Client
        from tui.servers.screen import ServerListScreen

        self.connection = connection
        if self._client is None:
            self._client = Client(connection.base_url, token=connection.token)
        self.sub_title = connection.label
        self.bridge.start()
        self.bridge.add_shutdown_hook(self.client.aclose)
        self.bridge.run(self, self.client.auth.me, on_done=self._show_identity)
        self._watch_connection(connection)
        if (starting := self._starting_screen()) is not None:
            while self.screen is not starting:
                self.pop_screen()  # the help the user opened while waiting
            starting.connected()
        self.push_screen(ServerListScreen())
        self.call_after_refresh(self._finish_starting)

    def _watch_connection(self, connection: Connection) -> None:
        from tui.monitor import ConnectionMonitor, control_plane_name

        name = control_plane_name(connection.base_url, local=connection.local)
        self.monitor = ConnectionMonitor(self, self.client, self.bridge, name)
        self.monitor.start()

    def _finish_starting(self) -> None:
        """Once the server list is drawn: import the other screens in a thread, then freeze what
        startup made (on the app's thread: never after `on_unmount` has unfrozen it)."""

        def finish() -> None:
            _import_the_other_screens()
            self._from_thread(freeze_startup_objects)

        threading.Thread(target=finish, name="fleetdeck-imports", daemon=True).start()

    def _start_failed(self, message: str) -> None:
        self.sub_title = "could not start"
        starting = self._starting_screen()
        if starting is not None:
            starting.failed(message)

    def _starting_screen(self) -> StartingScreen | None:
        return next((s for s in self.screen_stack if isinstance(s, StartingScreen)), None)

    async def on_unmount(self) -> None:
        if self._bridge is not None:
            await self._bridge.stop()
        gc.unfreeze()  # the app's own objects may be collected again once it is gone

    def refresh_css(self, animate: bool = True) -> None:
        """Textual's refresh, except before the first screen: then nothing is styled yet and the
        theme's variables are all a refresh has to change. The theme set in `__init__` queues one,
        which parsed the app's CSS once more before the first frame (`benchmarks/startup.py`)."""
        if not self.screen_stack:
            self.stylesheet.set_variables(self.get_css_variables())
            return
        super().refresh_css(animate)

    def _apply_theme(self, name: str) -> None:
        if (unknown := self._set_theme(name)) is not None:
            self.notify(f"Unknown theme {unknown!r}: using {self.theme}.", severity="warning")

    def _set_theme(self, name: str) -> str | None:
        """Use theme `name`, else the automatic choice; the unknown name, if it was one."""
        if name in self.available_themes:
            self.theme = name
            return None
        self.theme = automatic_theme_name()
        return name

    def _show_identity(self, me: Me) -> None:
        self.me = me
        self.sub_title = f"{me.user.email} · {me.org.name}"

    # --- navigation -----------------------------------------------------------------------

    def action_help(self) -> None:
        from tui.help import HelpScreen

        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(self.screen))

    async def action_quit(self) -> None:
        """Quit (ctrl+q, q, the palette's Quit), asking first when an editor has unsaved changes."""
        self.unless_unsaved(self.screen_stack, "quit", self.exit)

    def unless_unsaved(self, closing: Iterable[Screen[Any]], going: str, then: Callable[[], object]) -> None:
        """`then()` at once when none of the `closing` screens has unsaved changes; otherwise
        once the user agreed to discard them (Esc keeps everything)."""
        if self._client is None:  # not connected yet: no screen can hold changes
            then()
            return
        from tui.screen import FleetScreen

        unsaved = [what for s in closing if isinstance(s, FleetScreen) and (what := s.unsaved_changes())]
        if not unsaved:
            then()
            return
        from tui.files.save_conflict import DiscardChangesDialog

        def answered(discard: bool | None) -> None:
            if discard:
                then()

        if not isinstance(self.screen, DiscardChangesDialog):  # already asking
            self.push_screen(DiscardChangesDialog(unsaved, going), answered)

    def action_go_servers(self) -> None:
        """Back to the server list, closing whatever is above it."""
        self.back_to_servers()

    def back_to_servers(self, then: Callable[[], object] | None = None) -> None:
        """Close the screens above the server list, then `then()`; unsaved edits are asked about first."""
        from tui.servers.screen import ServerListScreen

        stack = self.screen_stack
        for depth, screen in enumerate(stack):
            if isinstance(screen, ServerListScreen):
                self.unless_unsaved(stack[depth + 1 :], "leave", partial(self._pop_to, screen, then))
                return

    def _pop_to(self, screen: Screen[Any], then: Callable[[], object] | None) -> None:
        while self.screen is not screen and screen in self.screen_stack:
            self.pop_screen()
        if then is not None:
            then()

    def action_go_files(self) -> None:
        """The files of the server picked on the server list (or of the only server)."""
        from tui.files.commander import CommanderScreen

        if isinstance(self.screen, CommanderScreen):
            return
        server = self._picked_server()
        if server is not None:
            self.open_files(server)

    def open_files(self, server: Server) -> None:
        from tui.files.commander import CommanderScreen

        self.back_to_servers(partial(self.push_screen, CommanderScreen(server)))

    def action_go_jobs(self) -> None:
        """The jobs of the server picked on the server list (or of the only server)."""
        from tui.jobs.screen import JobsScreen

        if isinstance(self.screen, JobsScreen):
            return
        server = self._picked_server()
        if server is not None:
            self.open_jobs(server)

    def _picked_server(self) -> Server | None:
        """The server highlighted on the server list; None (and a word to the user) if there is none."""
        from tui.servers.screen import ServerListScreen

        server_list = next((s for s in self.screen_stack if isinstance(s, ServerListScreen)), None)
        server = server_list.highlighted_server if server_list is not None else None
        if server is None:
            self.notify("No server to open: pick one in the server list.", severity="warning")
        return server

    def open_jobs(self, server: Server) -> None:
        from tui.jobs.screen import JobsScreen

        self.back_to_servers(partial(self.push_screen, JobsScreen(server)))

    def action_go_load_balancers(self) -> None:
        """The org's load balancers and their pools."""
        from tui.load_balancers.screen import LoadBalancersScreen

        if not isinstance(self.screen, LoadBalancersScreen):
            self.back_to_servers(partial(self.push_screen, LoadBalancersScreen()))

    def action_go_audit(self) -> None:
        """The org's audit log (owners and admins; a member is told why not)."""
        from tui.audit.screen import AuditScreen

        if not isinstance(self.screen, AuditScreen):
            self.back_to_servers(partial(self.push_screen, AuditScreen()))

    def action_command_mode(self) -> None:
        """`:` then a resource, as in k9s (see `tui.command_line`)."""
        from tui.command_line import CommandLine
        from tui.help import HelpScreen
        from tui.servers.screen import ServerListScreen

        if self._client is None or isinstance(self.screen, CommandLine):
            return
        if isinstance(self.screen, ModalScreen) and not isinstance(self.screen, HelpScreen):
            return  # a dialog waits for its answer first

        server_list = next((s for s in self.screen_stack if isinstance(s, ServerListScreen)), None)
        names = [server.name for server in server_list.servers.values()] if server_list is not None else []
        self.push_screen(CommandLine(names), self._run_command)

    def _run_command(self, command: Command | None) -> None:
        if command is None:
            return
        name = command.resource.name
        if name == "servers":
            self.action_go_servers()
        elif name == "lb":
            self.action_go_load_balancers()
        elif name == "audit":
            self.action_go_audit()
        elif (server := self._server_for_command(command)) is not None and not self._showing(name, server):
            (self.open_files if name == "files" else self.open_jobs)(server)

    def _showing(self, name: str, server: Server) -> bool:
        """Whether the current screen already is `:files` or `:jobs` of `server` (then it stays as it is)."""
        from tui.files.commander import CommanderScreen
        from tui.jobs.screen import JobsScreen

        screen = self.screen
        if name == "files" and isinstance(screen, CommanderScreen):
            return screen.server.id == server.id
        return name == "jobs" and isinstance(screen, JobsScreen) and screen.server.id == server.id

    def _server_for_command(self, command: Command) -> Server | None:
        """The server `:files`/`:jobs` act on: the one named, else the one in view, else the one
        highlighted on the server list."""
        from api_client import Server
        from tui.files.commander import CommanderScreen
        from tui.servers.screen import ServerListScreen

        server_list = next((s for s in self.screen_stack if isinstance(s, ServerListScreen)), None)
        if command.server_name is not None:
            servers = server_list.servers.values() if server_list is not None else []
            named = [s for s in servers if s.name.casefold() == command.server_name.casefold()]
            if not named:
                self.notify(f"No server called {command.server_name!r}.", severity="warning")
                return None
            return named[0]
        for screen in reversed(self.screen_stack):
            if isinstance(screen, CommanderScreen):
                return screen.active.server
            if isinstance(server := getattr(screen, "server", None), Server):
                return server
        return self._picked_server()

    def action_switch_theme(self, name: str) -> None:
        self._apply_theme(name)

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        from tui.files.commander import CommanderScreen
        from tui.jobs.screen import JobsScreen
        from tui.load_balancers.screen import LoadBalancersScreen

        for command in super().get_system_commands(screen):
            if command.title != "Theme":  # replaced by the fleetdeck themes below
                yield command
        for name, theme in THEMES.items():
            if name != self.theme:
                yield SystemCommand(
                    f"Switch theme: {name}", f"Use the {_theme_kind(theme)} theme", partial(self._apply_theme, name)
                )
        yield SystemCommand("Switch theme…", "Pick any installed theme", self.action_change_theme)
        yield SystemCommand("Go to servers", "The server list", self.action_go_servers)
        if not isinstance(screen, CommanderScreen):
            yield SystemCommand("Go to files", "The files of the highlighted server", self.action_go_files)
        if not isinstance(screen, JobsScreen):
            yield SystemCommand("Go to jobs", "Run and follow jobs on the highlighted server", self.action_go_jobs)
        if not isinstance(screen, LoadBalancersScreen):
            yield SystemCommand(
                "Go to load balancers", "The org's load balancers and their pools", self.action_go_load_balancers
            )
        yield SystemCommand(
            "Go to the audit log", "Who did what in the org, live (owners, admins)", self.action_go_audit
        )
        yield SystemCommand("Command mode", ":files, :jobs, :lb, :audit, :servers", self.action_command_mode)
        yield SystemCommand("Help", "The key bindings of this screen", self.action_help)


def _theme_kind(theme: Theme) -> str:
    """What a fleetdeck theme is, in the words of the command palette."""
    if theme is MONO:
        return "no colour"
    return "16 ANSI colours" if theme.ansi else ("dark" if theme.dark else "light")


def _import_the_server_list() -> None:
    """Load what the server list needs, off the main thread."""
    import api_client  # noqa: F401
    import tui.bridge
    import tui.monitor
    import tui.servers.screen  # noqa: F401


def _import_the_other_screens() -> None:
    """Load the screens after the server list, off the main thread, while the list is shown."""
    import tui.files.commander
    import tui.jobs.screen
    import tui.load_balancers.screen  # noqa: F401
