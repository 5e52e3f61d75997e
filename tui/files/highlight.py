"""Lazy syntax highlighting with pygments: only the lines that are looked at are ever lexed.

Lexing a whole 10 MiB file takes seconds; a screenful takes a millisecond. `LazyHighlighter`
lexes the file in blocks of `BLOCK_LINES` lines, each the first time one of its lines is drawn,
and caches the tokens per line. Token *types* are cached, not styles, so switching theme repaints
without lexing again.

A block is lexed with `LEAD_IN_LINES` lines of the previous block in front, whose tokens are
thrown away: that lets the lexer settle into the right state for most constructs (a comment or
string that opened just above). A construct longer than the lead-in that crosses a block boundary
may be coloured wrongly at the start of the next block: the price of not lexing from line 1.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import PurePosixPath

from pygments.lexer import Lexer
from pygments.lexers import get_lexer_by_name, get_lexer_for_filename
from pygments.lexers.configs import NginxConfLexer
from pygments.lexers.php import PhpLexer
from pygments.token import Token, _TokenType
from pygments.util import ClassNotFound
from rich.segment import Segment
from textual.widget import Widget

from themes.pygments_styles import pygments_style_for, rich_style_for_token, rich_style_map
from tui.text import printable_line

BLOCK_LINES = 128
LEAD_IN_LINES = 32
# How far back to look for `<?php` / `?>` when a PHP block starts mid-file.
PHP_TAG_SCAN_LINES = 4000

LineTokens = list[tuple[_TokenType, str]]

# Options every lexer gets: keep the text as it is, so line numbers match the file.
LEXER_OPTIONS = {"stripnl": False, "stripall": False, "ensurenl": True}

# Names pygments does not map (or maps poorly) to a lexer → a pygments lexer alias.
_SPECIAL_NAMES = {
    ".env": "bash",
    ".htaccess": "apacheconf",
    ".bashrc": "bash",
    ".profile": "bash",
    "wp-config.php": "php",
    "crontab": "bash",
}
_SPECIAL_SUFFIXES = {
    ".env": "bash",
    ".log": "text",
    ".tcss": "css",
    ".vue": "html",
    ".blade.php": "html+php",
}
_NGINX_DIRS = {"nginx", "sites-available", "sites-enabled", "conf.d"}


def lexer_for_path(path: str, first_line: str = "") -> Lexer:
    """The pygments lexer for a file, from its name (and a `#!` line), plain text if unknown."""
    name = PurePosixPath(path).name
    lowered = name.lower()
    alias = _SPECIAL_NAMES.get(lowered)
    if alias is None:
        alias = next((a for suffix, a in _SPECIAL_SUFFIXES.items() if lowered.endswith(suffix)), None)
    if alias is None and lowered.startswith(".env"):
        alias = "bash"  # .env.local, .env.production …
    if alias is None and lowered.endswith(".conf") and _NGINX_DIRS & set(PurePosixPath(path).parts):
        return NginxConfLexer(**LEXER_OPTIONS)
    if alias is not None:
        return get_lexer_by_name(alias, **LEXER_OPTIONS)
    try:
        return get_lexer_for_filename(name, **LEXER_OPTIONS)
    except ClassNotFound:
        pass
    if first_line.startswith("#!"):
        interpreter = first_line.split("/")[-1].split()
        command = interpreter[-1] if interpreter and interpreter[0] == "env" else interpreter[0] if interpreter else ""
        for candidate in (command, command.rstrip("0123456789.")):
            try:
                return get_lexer_by_name(candidate, **LEXER_OPTIONS)
            except ClassNotFound:
                continue
    return get_lexer_by_name("text", **LEXER_OPTIONS)


def split_lines(content: str) -> list[str]:
    """The lines of a file as the lexer sees them: `\\n` separated, a trailing `\\r` removed."""
    lines = content.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line does not start another
    if "\r" in content:
        lines = [line[:-1] if line.endswith("\r") else line for line in lines]
    return lines


class LazyHighlighter:
    """Tokens of the lines of one file, lexed a block at a time, on demand."""

    def __init__(self, lines: list[str], lexer: Lexer) -> None:
        self.lines = lines
        self.lexer = lexer
        self._cache: dict[int, LineTokens] = {}
        self._lexed_blocks: set[int] = set()
        self.lexed_line_count = 0
        """How many lines were handed to the lexer so far (lead-ins included): for tests."""

    @property
    def language(self) -> str:
        return str(self.lexer.name)

    def tokens(self, index: int) -> LineTokens:
        """The (token type, text) pairs of line `index`, lexing its block if needed."""
        cached = self._cache.get(index)
        if cached is not None:
            return cached
        block = index // BLOCK_LINES
        if block not in self._lexed_blocks:
            self._lex_block(block)
        return self._cache.get(index, [(Token.Text, printable_line(self.lines[index]))])

    def _lex_block(self, block: int) -> None:
        self._lexed_blocks.add(block)
        start = block * BLOCK_LINES
        end = min(start + BLOCK_LINES, len(self.lines))
        lead = max(0, start - LEAD_IN_LINES)
        text = "\n".join(printable_line(line) for line in self.lines[lead:end]) + "\n"
        self.lexed_line_count += end - lead
        lines = _tokens_by_line(self._lexer_for_block(lead).get_tokens(text))
        for offset, line_tokens in enumerate(lines):
            index = lead + offset
            if index >= end:
                break
            if index >= start:
                self._cache[index] = line_tokens

    def _lexer_for_block(self, first_line: int) -> Lexer:
        """The lexer for text starting at `first_line`: PHP needs to know if it starts in code."""
        if first_line == 0 or not isinstance(self.lexer, PhpLexer):
            return self.lexer
        return PhpLexer(startinline=self._inside_php(first_line), **LEXER_OPTIONS)

    def _inside_php(self, first_line: int) -> bool:
        """Whether line `first_line` starts inside `<?php … ?>`: the nearest tag above decides."""
        for index in range(first_line - 1, max(-1, first_line - 1 - PHP_TAG_SCAN_LINES), -1):
            line = self.lines[index]
            opened, closed = max(line.rfind("<?php"), line.rfind("<?=")), line.rfind("?>")
            if opened >= 0 or closed >= 0:
                return opened > closed
        return True  # a long stretch without tags: most PHP files are code after one `<?php`


def _tokens_by_line(tokens: Iterator[tuple[_TokenType, str]]) -> list[LineTokens]:
    """Regroup a token stream into lines (a token spanning lines is cut at each newline)."""
    lines: list[LineTokens] = [[]]
    for token_type, value in tokens:
        if "\n" not in value:
            if value:
                lines[-1].append((token_type, value))
            continue
        pieces = value.split("\n")
        for piece_index, piece in enumerate(pieces):
            if piece_index:
                lines.append([])
            if piece:
                lines[-1].append((token_type, piece))
    return lines


def themed_segments(widget: Widget, tokens: LineTokens) -> list[Segment]:
    """A line's tokens as segments, coloured by the pygments style of the app's current theme."""
    theme = widget.app.current_theme
    style: type = pygments_style_for(theme.name, dark=theme.dark, ansi=theme.ansi)
    styles = rich_style_map(style)
    base = widget.rich_style
    return [Segment(text, base + rich_style_for_token(styles, token_type)) for token_type, text in tokens]
