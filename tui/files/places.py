"""Where the file panels were, for the rest of the session: leaving Files and coming back finds
both panels as they were (server, scope, folder, highlighted row, sort, filter).

Two memories: the panels of the Files screen of each server (the screen opened from that server),
and the last folder seen in each scope of each server, which a panel returns to when it opens
that scope again (from the location picker, or a Files screen opened for the first time). They
live as long as the app: a new session starts at the scope roots.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from weakref import WeakKeyDictionary

from textual.app import App

from api_client import Scope, Server
from tui.files.directory_pane import SortKey
from tui.files.panel import scope_key


@dataclass(frozen=True)
class PanelPlace:
    """One panel: what it shows and how."""

    server: Server
    scope: Scope
    path: str
    highlighted: str | None
    sort: tuple[SortKey, bool]
    filter: str


@dataclass
class ScreenPlaces:
    """Both panels of one server's Files screen, and which of them had the focus."""

    left: PanelPlace | None = None
    right: PanelPlace | None = None
    active: str = "left"


@dataclass
class FilePlaces:
    screens: dict[str, ScreenPlaces] = field(default_factory=dict)
    folders: dict[tuple[str, str], tuple[str, str | None]] = field(default_factory=dict)

    def screen(self, server_id: str) -> ScreenPlaces:
        return self.screens.setdefault(server_id, ScreenPlaces())

    def remember(self, place: PanelPlace) -> None:
        self.folders[(place.server.id, scope_key(place.scope))] = (place.path, place.highlighted)

    def folder(self, server: Server, scope: Scope) -> tuple[str, str | None]:
        """The folder last shown in `scope` of `server` and its highlighted name (the root at first)."""
        return self.folders.get((server.id, scope_key(scope)), ("", None))


_PLACES: WeakKeyDictionary[App[Any], FilePlaces] = WeakKeyDictionary()


def places_of(app: App[Any]) -> FilePlaces:
    """The memory of `app`'s session (one per app, so each test's app starts afresh)."""
    places = _PLACES.get(app)
    if places is None:
        places = _PLACES[app] = FilePlaces()
    return places
