"""The Textual `Theme` objects of fleetdeck and the rule that picks one at start-up."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from textual.app import App
from textual.theme import Theme

DARK = Theme(
    name="fleetdeck-dark",
    primary="#4C9AFF",
    secondary="#8B93D9",
    accent="#F2A65A",
    warning="#E5C07B",
    error="#E06C75",
    success="#8CC47A",
    foreground="#D7DAE0",
    background="#14171D",
    surface="#1B1F27",
    panel="#262C36",
    dark=True,
    variables={
        "footer-key-foreground": "#F2A65A",
        "block-cursor-text-style": "bold",
    },
)

LIGHT = Theme(
    name="fleetdeck-light",
    primary="#1F6FEB",
    secondary="#6F42C1",
    accent="#B35900",
    warning="#9A6700",
    error="#CF222E",
    success="#1A7F37",
    foreground="#1F2328",
    background="#F6F8FA",
    surface="#FFFFFF",
    panel="#E4E9EF",
    dark=False,
    variables={
        "footer-key-foreground": "#1F6FEB",
        "block-cursor-text-style": "bold",
    },
)

# Only ANSI colours: the terminal's own palette decides what they look like, so this theme reads
# well on dark and light terminals alike, and needs no truecolor support.
ANSI = Theme(
    name="fleetdeck-ansi",
    ansi=True,
    primary="ansi_blue",
    secondary="ansi_cyan",
    accent="ansi_yellow",
    warning="ansi_yellow",
    error="ansi_red",
    success="ansi_green",
    foreground="ansi_default",
    background="ansi_default",
    surface="ansi_default",
    panel="ansi_default",
    boost="ansi_default",
    dark=True,
    variables={
        "ansi-background": "ansi_black",
        "ansi-foreground": "ansi_white",
        "border": "ansi_blue",
        "border-blurred": "ansi_bright_black",
        "block-cursor-foreground": "ansi_black",
        "block-cursor-background": "ansi_cyan",
        "block-cursor-text-style": "bold",
        "block-cursor-blurred-foreground": "ansi_default",
        "block-cursor-blurred-background": "ansi_bright_black",
        "block-hover-background": "ansi_default",
        "footer-key-foreground": "ansi_yellow",
        "footer-description-foreground": "ansi_default",
        "input-cursor-background": "ansi_white",
        "input-cursor-foreground": "ansi_black",
        "input-cursor-text-style": "none",
        "input-selection-background": "ansi_blue",
        "input-selection-foreground": "ansi_bright_white",
        "screen-selection-background": "ansi_blue",
        "screen-selection-foreground": "ansi_bright_white",
        "scrollbar": "ansi_bright_black",
        "scrollbar-hover": "ansi_blue",
        "scrollbar-active": "ansi_cyan",
        "scrollbar-background": "ansi_default",
        "scrollbar-background-hover": "ansi_default",
        "scrollbar-background-active": "ansi_default",
        "scrollbar-corner-color": "ansi_default",
    },
)

# No colour at all (`NO_COLOR`, https://no-color.org): the terminal's own foreground on its own
# background, and every state said by a glyph or by reverse video, bold and underline. The app
# strips what colour code still draws (`tui.app.FleetdeckApp.get_line_filters`); the CSS that
# shows focus without colour is `tui/monochrome.tcss`.
MONO = Theme(
    name="fleetdeck-mono",
    ansi=True,
    primary="ansi_default",
    secondary="ansi_default",
    accent="ansi_default",
    warning="ansi_default",
    error="ansi_default",
    success="ansi_default",
    foreground="ansi_default",
    background="ansi_default",
    surface="ansi_default",
    panel="ansi_default",
    boost="ansi_default",
    dark=True,
    variables={
        "ansi-background": "ansi_default",
        "ansi-foreground": "ansi_default",
        "block-cursor-text-style": "reverse bold",
        "block-cursor-blurred-text-style": "underline",
        "input-cursor-text-style": "reverse",
        "input-selection-background": "ansi_default",
        "button-focus-text-style": "reverse bold",
        "footer-key-foreground": "ansi_default",
        "link-style": "underline",
    },
)

THEMES: dict[str, Theme] = {theme.name: theme for theme in (DARK, LIGHT, ANSI, MONO)}

# `--theme light` is as good as `--theme fleetdeck-light`.
_SHORT_NAMES = {"dark": DARK.name, "light": LIGHT.name, "ansi": ANSI.name, "mono": MONO.name}


def register_themes(app: App[Any]) -> None:
    """Make the fleetdeck themes available on `app` (they then appear in the theme picker)."""
    for theme in THEMES.values():
        app.register_theme(theme)


def default_theme_name(wanted: str | None = None, environ: Mapping[str, str] | None = None) -> str:
    """The theme the user `wanted` (full or short name), else dark on truecolor terminals, else ANSI.

    An unknown `wanted` name is passed through untouched, so a built-in Textual theme (e.g.
    `nord`) also works; the app falls back to the automatic choice if it does not exist.
    """
    wanted = (wanted or "").strip()
    if wanted:
        return _SHORT_NAMES.get(wanted.lower(), wanted)
    return automatic_theme_name(environ)


def automatic_theme_name(environ: Mapping[str, str] | None = None) -> str:
    """Monochrome when `NO_COLOR` is set (and not empty, as no-color.org says), else dark on
    terminals that announce truecolor in `COLORTERM`, else the ANSI theme."""
    env = os.environ if environ is None else environ
    if env.get("NO_COLOR"):
        return MONO.name
    colorterm = env.get("COLORTERM", "").strip().lower()
    return DARK.name if colorterm in ("truecolor", "24bit") else ANSI.name
