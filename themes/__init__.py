"""fleetdeck's colour themes: Textual themes for the UI and matching pygments styles for the viewer.

Three themes, registered on the app by `register_themes`:

* `fleetdeck-dark` and `fleetdeck-light`: truecolor palettes.
* `fleetdeck-ansi`: only the terminal's 16 ANSI colours (and its default foreground/background),
  for SSH sessions and terminals without truecolor. It follows the user's terminal palette.
* `fleetdeck-mono`: no colour (`NO_COLOR`): states in glyphs, reverse video, bold and underline.

`default_theme_name(wanted)` picks one: the one wanted (`--theme` or `FLEETDECK_THEME`, read by the
composition root) wins, otherwise the monochrome theme when `NO_COLOR` is set, otherwise the ANSI
theme unless `COLORTERM` announces truecolor.

The pygments styles are imported from `themes.pygments_styles` by the viewer that uses them: the
TUI needs the palettes before its first frame, and pygments not (`benchmarks/startup.py`).
"""

from __future__ import annotations

from themes.palettes import ANSI, DARK, LIGHT, MONO, THEMES, default_theme_name, register_themes

__all__ = ["ANSI", "DARK", "LIGHT", "MONO", "THEMES", "default_theme_name", "register_themes"]
