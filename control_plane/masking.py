"""Masking secrets, in every form they are likely to leak in: in job output (`Masker`) and in the
audit log's records (`mask_fields`).

A registry password echoed by a tool may appear raw, inside a longer string, base64-encoded
(e.g. in an HTTP Basic header), URL-encoded (in a URL) or JSON-escaped (in a config dump). Each
secret is expanded into those forms once; lines are then scrubbed with one compiled regex.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, quote_plus

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


def mask_fields(value: Any, masker: Masker) -> Any:
    """A copy of the JSON-like `value` with the values under secret-looking keys and every form of
    `masker`'s secrets inside strings replaced by `***`."""
    if isinstance(value, dict):
        return {k: MASK if SECRET_KEY.search(str(k)) else mask_fields(v, masker) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [mask_fields(v, masker) for v in value]
    if isinstance(value, str):
        return masker(value)
    return value
