"""fleetdeck's colour themes: Textual themes for the UI and matching pygments styles for the viewer.

Three themes, registered on the app by `register_themes`:

* `fleetdeck-dark` and `fleetdeck-light`: truecolor palettes.
* `fleetdeck-ansi`: only the terminal's 16 ANSI colours (and its default foreground/background),
  for SSH sessions and terminals without truecolor. It follows the user's terminal palette.

`default_theme_name(wanted)` picks one: the one wanted (`--theme` or `FLEETDECK_THEME`, read by the
composition root) wins, otherwise the ANSI theme unless `COLORTERM` announces truecolor.
"""

from __future__ import annotations

from themes.palettes import ANSI, DARK, LIGHT, THEMES, default_theme_name, register_themes
from themes.pygments_styles import (
    FleetdeckAnsiStyle,
    FleetdeckDarkStyle,
    FleetdeckLightStyle,
    pygments_style_for,
    rich_style_map,
)

__all__ = [
    "ANSI",
    "DARK",
    "LIGHT",
    "THEMES",
    "FleetdeckAnsiStyle",
    "FleetdeckDarkStyle",
    "FleetdeckLightStyle",
    "default_theme_name",
    "pygments_style_for",
    "register_themes",
    "rich_style_map",
]
