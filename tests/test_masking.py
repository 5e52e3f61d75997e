"""Secrets are masked in job output in every form they leak in."""

from __future__ import annotations

import base64
import json
from urllib.parse import quote, quote_plus

import pytest
from hypothesis import given
from hypothesis import strategies as st

from control_plane.jobs.masking import MASK, Masker

SECRET = "hunter2+Pa/ss=w\"rd"


@pytest.mark.parametrize(
    "line",
    [
        SECRET,
        f"login with password {SECRET} failed",
        f"https://ci:{quote(SECRET, safe='')}@registry.example.com/v2/",
        f"form: password={quote_plus(SECRET)}&next=/",
        json.dumps({"auth": {"password": SECRET}}),
        *(f"Authorization: Basic {base64.b64encode((p + 'ci:' + SECRET).encode()).decode()}" for p in ("", "a", "ab")),
        *(base64.urlsafe_b64encode((p + SECRET + "!").encode()).decode() for p in ("", "x", "xy")),
    ],
)
def test_every_form_is_masked(line: str) -> None:
    masked = Masker([SECRET])(line)
    assert MASK in masked
    assert SECRET not in masked
    for form in (quote(SECRET, safe=""), quote_plus(SECRET), json.dumps(SECRET)[1:-1]):
        assert form not in masked


def test_no_secret_no_change() -> None:
    masker = Masker([])
    assert not masker and masker("nothing to see") == "nothing to see"
    assert Masker(["abc"])("abc") == "abc"  # too short to mask without hiding everything


@given(st.text(min_size=8, max_size=40).filter(lambda s: s.strip() == s and len(s.strip()) >= 8), st.text(max_size=30))
def test_raw_secret_never_survives(secret: str, around: str) -> None:
    masked = Masker([secret])(around + secret + around)
    assert secret not in masked
