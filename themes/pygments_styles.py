"""Pygments styles matching the fleetdeck themes, and their conversion to Rich styles.

The viewer lexes with pygments and paints with Rich styles; `rich_style_map` does the conversion
once per (style, theme) so painting a line is a dict lookup per token. The ANSI style names only
`ansi*` colours, which become Rich's named ANSI colours: the terminal's palette renders them.
"""

from __future__ import annotations

from functools import lru_cache

from pygments.style import Style
from pygments.token import (
    Comment,
    Error,
    Generic,
    Keyword,
    Literal,
    Name,
    Number,
    Operator,
    Punctuation,
    String,
    Text,
    Token,
    _TokenType,
)
from rich.style import Style as RichStyle

from themes.palettes import ANSI, DARK, LIGHT


class FleetdeckDarkStyle(Style):  # type: ignore[misc]  # pygments has no type hints
    """Truecolor style for `fleetdeck-dark`."""

    name = "fleetdeck-dark"
    background_color = "#14171D"
    highlight_color = "#262C36"
    styles = {
        Text: "#D7DAE0",
        Error: "#E06C75",
        Comment: "italic #7F8796",
        Comment.Preproc: "noitalic #C98BDB",
        Keyword: "#C98BDB",
        Keyword.Constant: "#E5A66B",
        Keyword.Type: "#E5C07B",
        Operator: "#7FC8D8",
        Operator.Word: "#C98BDB",
        Punctuation: "#A8AFBD",
        Name.Builtin: "#7FC8D8",
        Name.Function: "#6CB0FF",
        Name.Class: "bold #E5C07B",
        Name.Decorator: "#E5A66B",
        Name.Exception: "#E5C07B",
        Name.Namespace: "#E5C07B",
        Name.Tag: "#E06C75",
        Name.Attribute: "#E5A66B",
        Name.Variable: "#E88C94",
        Name.Constant: "#E5A66B",
        Name.Label: "#6CB0FF",
        Literal: "#8CC47A",
        String: "#8CC47A",
        String.Escape: "#7FC8D8",
        String.Interpol: "#E88C94",
        String.Regex: "#7FC8D8",
        Number: "#E5A66B",
        Generic.Heading: "bold #6CB0FF",
        Generic.Subheading: "bold #7FC8D8",
        Generic.Emph: "italic",
        Generic.Strong: "bold",
        Generic.Inserted: "#8CC47A",
        Generic.Deleted: "#E06C75",
        Generic.Error: "#E06C75",
    }


class FleetdeckLightStyle(Style):  # type: ignore[misc]
    """Truecolor style for `fleetdeck-light`."""

    name = "fleetdeck-light"
    background_color = "#F6F8FA"
    highlight_color = "#E4E9EF"
    styles = {
        Text: "#1F2328",
        Error: "#CF222E",
        Comment: "italic #6E7781",
        Comment.Preproc: "noitalic #8250DF",
        Keyword: "#8250DF",
        Keyword.Constant: "#0550AE",
        Keyword.Type: "#953800",
        Operator: "#0550AE",
        Operator.Word: "#8250DF",
        Punctuation: "#57606A",
        Name.Builtin: "#0550AE",
        Name.Function: "#1F6FEB",
        Name.Class: "bold #953800",
        Name.Decorator: "#953800",
        Name.Exception: "#953800",
        Name.Namespace: "#953800",
        Name.Tag: "#116329",
        Name.Attribute: "#0550AE",
        Name.Variable: "#CF222E",
        Name.Constant: "#0550AE",
        Name.Label: "#1F6FEB",
        Literal: "#0A3069",
        String: "#0A3069",
        String.Escape: "#0550AE",
        String.Interpol: "#CF222E",
        String.Regex: "#116329",
        Number: "#0550AE",
        Generic.Heading: "bold #1F6FEB",
        Generic.Subheading: "bold #0550AE",
        Generic.Emph: "italic",
        Generic.Strong: "bold",
        Generic.Inserted: "#1A7F37",
        Generic.Deleted: "#CF222E",
        Generic.Error: "#CF222E",
    }


class FleetdeckAnsiStyle(Style):  # type: ignore[misc]
    """Only the 16 ANSI colours, for `fleetdeck-ansi`: the terminal's palette decides."""

    name = "fleetdeck-ansi"
    styles = {
        Error: "ansired",
        Comment: "italic ansibrightblack",
        Comment.Preproc: "noitalic ansimagenta",
        Keyword: "ansimagenta",
        Keyword.Constant: "ansiyellow",
        Keyword.Type: "ansiyellow",
        Operator: "ansicyan",
        Operator.Word: "ansimagenta",
        Name.Builtin: "ansicyan",
        Name.Function: "ansiblue",
        Name.Class: "bold ansiyellow",
        Name.Decorator: "ansiyellow",
        Name.Exception: "ansiyellow",
        Name.Namespace: "ansiyellow",
        Name.Tag: "ansired",
        Name.Attribute: "ansiyellow",
        Name.Variable: "ansired",
        Name.Constant: "ansiyellow",
        Name.Label: "ansiblue",
        Literal: "ansigreen",
        String: "ansigreen",
        String.Escape: "ansicyan",
        String.Interpol: "ansired",
        String.Regex: "ansicyan",
        Number: "ansiyellow",
        Generic.Heading: "bold ansiblue",
        Generic.Subheading: "bold ansicyan",
        Generic.Emph: "italic",
        Generic.Strong: "bold",
        Generic.Inserted: "ansigreen",
        Generic.Deleted: "ansired",
        Generic.Error: "ansired",
    }


_STYLE_BY_THEME: dict[str, type[Style]] = {
    DARK.name: FleetdeckDarkStyle,
    LIGHT.name: FleetdeckLightStyle,
    ANSI.name: FleetdeckAnsiStyle,
}

# pygments' ANSI colour names → Rich's (pygments' `ansigray` is colour 7, `ansiwhite` is 15).
_ANSI_TO_RICH = {
    "ansiblack": "black",
    "ansired": "red",
    "ansigreen": "green",
    "ansiyellow": "yellow",
    "ansiblue": "blue",
    "ansimagenta": "magenta",
    "ansicyan": "cyan",
    "ansigray": "white",
    "ansibrightblack": "bright_black",
    "ansibrightred": "bright_red",
    "ansibrightgreen": "bright_green",
    "ansibrightyellow": "bright_yellow",
    "ansibrightblue": "bright_blue",
    "ansibrightmagenta": "bright_magenta",
    "ansibrightcyan": "bright_cyan",
    "ansiwhite": "bright_white",
}


def pygments_style_for(theme_name: str, *, dark: bool = True, ansi: bool = False) -> type[Style]:
    """The pygments style of a theme; for other (e.g. built-in Textual) themes, the closest one."""
    if theme_name in _STYLE_BY_THEME:
        return _STYLE_BY_THEME[theme_name]
    if ansi:
        return FleetdeckAnsiStyle
    return FleetdeckDarkStyle if dark else FleetdeckLightStyle


@lru_cache(maxsize=16)
def rich_style_map(style: type[Style]) -> dict[_TokenType, RichStyle]:
    """Every token type the style knows → its Rich style (foreground, bold, italic, underline).

    Backgrounds are left out on purpose: the viewer's own background (from the theme) shows
    through, so the code looks right whatever theme variant is on screen.
    """
    return {token_type: _to_rich(style.style_for_token(token_type)) for token_type, _ in style}


def rich_style_for_token(style_map: dict[_TokenType, RichStyle], token_type: _TokenType) -> RichStyle:
    """The style of `token_type`, inherited from its closest styled parent (like pygments does)."""
    current: _TokenType | None = token_type
    while current is not None:
        found = style_map.get(current)
        if found is not None:
            return found
        current = current.parent
    return style_map.get(Token, RichStyle.null())


def _to_rich(spec: dict[str, object]) -> RichStyle:
    ansi_colour = spec.get("ansicolor")
    colour = spec.get("color")
    if isinstance(ansi_colour, str):
        rich_colour: str | None = _ANSI_TO_RICH.get(ansi_colour)
    elif isinstance(colour, str) and colour:
        rich_colour = f"#{colour}"
    else:
        rich_colour = None
    return RichStyle(
        color=rich_colour,
        bold=bool(spec.get("bold")) or None,
        italic=bool(spec.get("italic")) or None,
        underline=bool(spec.get("underline")) or None,
    )
