"""Masking secrets, in every form they are likely to leak in: in job output (`Masker`), in the
audit log's records (`mask_fields`), and in other processes' command lines (`mask_command_line`).

A registry password echoed by a tool may appear raw, inside a longer string, base64-encoded
(e.g. in an HTTP Basic header), URL-encoded (in a URL) or JSON-escaped (in a config dump). Each
secret is expanded into those forms once; lines are then scrubbed with one compiled regex.
"""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import quote, quote_plus

import orjson

MASK = "***"
MIN_SECRET_LENGTH = 4  # shorter values would mask half the output and hide nothing
SECRET_KEY = re.compile(r"pass(word|phrase)?|secret|token|api[_-]?key|private[_-]?key|credential|auth", re.I)


def _base64_forms(secret: bytes) -> set[str]:
    """The base64 text a secret produces wherever it sits inside longer data.

    Base64 maps 3-byte groups, so the encoding of the secret depends on its offset mod 3. For
    each offset, encode with that many filler bytes before it and keep only the characters that
    depend on the secret alone (drop the ones shared with the filler or the unknown bytes after).
    """
    forms: set[str] = set()
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + secret).decode()
        start = (offset * 4 + 2) // 3  # characters touched by the filler bytes
        end = ((offset + len(secret)) // 3) * 4  # only complete groups are certain
        core = encoded[start:end]
        if len(core) >= MIN_SECRET_LENGTH:
            forms.add(core)
            forms.add(core.replace("+", "-").replace("/", "_"))  # the URL-safe alphabet
    return forms


def secret_forms(secret: str) -> set[str]:
    forms = {secret, quote(secret, safe=""), quote_plus(secret), json.dumps(secret)[1:-1]}
    forms |= _base64_forms(secret.encode())
    return {f for f in forms if len(f) >= MIN_SECRET_LENGTH}


class Masker:
    """Replaces every form of the given secrets by `***`. With no secrets it is a no-op."""

    def __init__(self, secrets: Iterable[str]) -> None:
        forms: set[str] = set()
        for secret in secrets:
            if secret and len(secret) >= MIN_SECRET_LENGTH:
                forms |= secret_forms(secret)
        ordered = sorted(forms, key=len, reverse=True)  # longest first: mask whole forms, not pieces
        self._pattern = re.compile("|".join(map(re.escape, ordered))) if ordered else None

    def __bool__(self) -> bool:
        return self._pattern is not None

    def __call__(self, text: str) -> str:
        return self._pattern.sub(MASK, text) if self._pattern is not None else text

    def many(self, texts: list[str]) -> list[str]:
        """`texts`, each masked as `__call__` would, in one regex pass over them joined.

        The pass gives the same matches as one per text unless a match spans the newline that
        joins two texts (a secret with a newline in it): the count of lines then changes, and
        the texts are masked one by one instead. Texts with newlines of their own are too.
        """
        pattern = self._pattern
        if pattern is None:
            return texts
        joined = "\n".join(texts)
        if joined.count("\n") == len(texts) - 1:
            masked = pattern.sub(MASK, joined)
            if masked == joined:
                return texts
            parts = masked.split("\n")
            if len(parts) == len(texts):
                return parts
        return [pattern.sub(MASK, text) for text in texts]


def mask_fields(value: Any, masker: Callable[[str], str]) -> Any:
    """A copy of the JSON-like `value` with the values under secret-looking keys replaced by `***`
    and every string passed through `masker` (a `Masker`: every form of its secrets masked)."""
    if isinstance(value, dict):
        return {k: MASK if SECRET_KEY.search(str(k)) else mask_fields(v, masker) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [mask_fields(v, masker) for v in value]
    if isinstance(value, str):
        return masker(value)
    return value


# --- secrets in command lines ----------------------------------------------------------------
# What `ps` shows of another process is its argv joined by spaces: the words below are those.

# An option or variable whose name looks like a secret's (`--db-password`, `MYSQL_PWD`, `api_key`).
_SECRET_NAME = re.compile(rf"(?:{SECRET_KEY.pattern}|pwd)", re.I)
_OPTION = re.compile(r"^(-{0,2})([A-Za-z_][\w.-]*)=(.*)$", re.S)
# Programs whose `-p` is a password, attached (`mysql -pSECRET`) or, for sshpass, the next word.
_PASSWORD_P_PROGRAMS = frozenset(
    {"mysql", "mariadb", "mysqldump", "mariadb-dump", "mysqladmin", "mariadb-admin", "mysqlimport", "mysqlcheck",
     "mysqlshow", "mariadb-import", "mariadb-check", "mariadb-show", "sshpass"}
)  # fmt: skip
# `scheme://user:password@host`: the password.
_URL_PASSWORD = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]*:)[^\s@/]+(@)")
# Tokens known by their shape: GitHub, GitLab, Slack, AWS access key ids, OpenAI-style keys, JWTs,
# and fleetdeck's own (`fds_`, `fdk_`, `fda_`).
_TOKEN = re.compile(
    r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_\w{20,}|glpat-[\w-]{20,}|xox[abprs]-[\w-]{10,}"
    r"|AKIA[0-9A-Z]{16}|sk-[\w-]{20,}|eyJ[\w-]{10,}\.[\w-]{10,}\.[\w-]*|fd[a-z]_[\w-]{20,})"
)


# What a word says of the next one: it is a secret ("word"), or `name:password` ("colon").
_Next = str | None


def mask_command_line(command: str) -> str:
    """`command` (a process's argv joined by spaces) with its secret-looking arguments as `***`:
    the value of an option or variable named like a secret (`--password=x`, `--token x`,
    `PGPASSWORD=x`), a MySQL client's or sshpass's `-pSECRET`, a URL's password
    (`https://user:***@host`), the password of `-u user:password` (curl), what follows `Bearer`
    or `Basic`, and tokens known by their shape. Masks more rather than less: it is for showing."""
    words = command.split(" ")
    program = os.path.basename(words[0])
    masked: list[str] = []
    secret_next: _Next = None
    for index, word in enumerate(words):
        if secret_next == "word" and word and not word.startswith("-"):
            word, secret_next = MASK, None
        elif secret_next == "colon" and ":" in word:
            word, secret_next = f"{word.split(':', 1)[0]}:{MASK}", None
        else:
            word, secret_next = _masked_word(word, program, index)
        masked.append(_TOKEN.sub(MASK, _URL_PASSWORD.sub(rf"\1{MASK}\2", word)))
    return " ".join(masked)


def _masked_word(word: str, program: str, index: int) -> tuple[str, _Next]:
    """One word of a command line, masked; and what it says of the next word."""
    option = _OPTION.match(word)
    if option and _SECRET_NAME.search(option.group(2)):
        return f"{option.group(1)}{option.group(2)}={MASK}", None
    if option and option.group(2) == "user" and ":" in option.group(3):  # --user=name:password
        return f"{word.split(':', 1)[0]}:{MASK}", None
    if word.startswith("--") and _SECRET_NAME.search(word):
        return word, "word"
    if index and program in _PASSWORD_P_PROGRAMS and word.startswith("-p"):
        return ("-p", "word" if program == "sshpass" else None) if word == "-p" else (f"-p{MASK}", None)
    if word in ("-u", "--user"):
        return word, "colon"
    if word.lower() in ("bearer", "basic"):
        return word, "word"
    return word, None


def mask_command_lines(value: Any) -> Any:
    """`mask_command_line` over every string of a JSON-like value (a `system.processes` result)."""
    return mask_fields(value, mask_command_line)


def mask_command_output(texts: list[str]) -> list[str]:
    """Output lines that show command lines, masked: a line of JSON (a read's result, as the agent
    prints it) through `mask_command_lines`, any other line as one command line."""
    masked = []
    for text in texts:
        try:
            value = orjson.loads(text) if text.lstrip()[:1] in ("{", "[") else None
        except orjson.JSONDecodeError:
            value = None
        if value is None:
            masked.append(mask_command_line(text))
        else:
            masked.append(orjson.dumps(mask_command_lines(value)).decode())
    return masked
