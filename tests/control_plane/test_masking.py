"""Secrets are masked in job output in every form they leak in."""

from __future__ import annotations

import base64
import json
from urllib.parse import quote, quote_plus

import pytest
from hypothesis import given
from hypothesis import strategies as st

from control_plane.masking import MASK, Masker, mask_command_line, mask_command_output, mask_fields

SECRET = 'hunter2+Pa/ss=w"rd'


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


@given(
    st.lists(st.text(alphabet='ab\n=+/%"xy', max_size=12), max_size=8),
    st.lists(st.text(alphabet='ab\n=+/%"xy', min_size=4, max_size=8), min_size=1, max_size=2),
)
def test_many_texts_are_masked_as_one_by_one(texts: list[str], secrets: list[str]) -> None:
    masker = Masker(secrets)
    # Secrets with newlines, texts with newlines, secrets spanning two texts: all as one by one.
    texts = [*texts, *(s[: len(s) // 2] for s in secrets), *(s[len(s) // 2 :] for s in secrets), *secrets]
    assert masker.many(texts) == [masker(text) for text in texts]


def test_many_masks_a_block_of_lines_and_leaves_a_clean_one_alone() -> None:
    masker = Masker([SECRET])
    texts = [f"line {i}" for i in range(1000)]
    assert masker.many(texts) is texts
    texts[500] = f"password {SECRET} and {quote(SECRET, safe='')}"
    masked = masker.many(texts)
    assert masked[500] == "password *** and ***" and masked[:500] == texts[:500] and len(masked) == 1000


def test_audit_details_lose_secret_keyed_fields_and_every_form_of_a_named_secret() -> None:
    secret = "fd_live_9f8e7d6c5b4a"
    basic = base64.b64encode(f"ci:{secret}".encode()).decode()
    details = {
        "name": "deploy key",
        "Password": "hunter22",
        "nested": {"api_key": 42, "note": f"sent Basic {basic}"},
        "urls": [f"https://ci:{secret}@r.example.com/", "https://r.example.com/"],
        "count": 3,
        "flag": None,
    }
    masked = mask_fields(details, Masker([secret]))
    note = masked["nested"].pop("note")
    assert masked == {
        "name": "deploy key",
        "Password": MASK,
        "nested": {"api_key": MASK},
        "urls": [f"https://ci:{MASK}@r.example.com/", "https://r.example.com/"],
        "count": 3,
        "flag": None,
    }
    assert MASK in note and note != f"sent Basic {basic}" and len(note) < len(basic)
    assert mask_fields(details, Masker([]))["urls"] == details["urls"]  # no secrets: keyed fields only


# --- command lines (`system.processes`, as a caller without sysadmin sees it) -----------------


@pytest.mark.parametrize(
    ("command", "shown"),
    [
        ("app --password=hunter2 --port 80", "app --password=*** --port 80"),
        ("app --db-token hunter2 -v", "app --db-token *** -v"),
        ("env PGPASSWORD=hunter2 MYSQL_PWD=hunter2 psql", "env PGPASSWORD=*** MYSQL_PWD=*** psql"),
        ("mysql -uroot -phunter2 shop", "mysql -uroot -p*** shop"),
        ("/usr/bin/mariadb-dump -phunter2", "/usr/bin/mariadb-dump -p***"),
        ("mysql -p shop", "mysql -p shop"),  # -p alone asks for the password: shop is the database
        ("sshpass -p hunter2 ssh web1", "sshpass -p *** ssh web1"),
        ("git clone https://bob:hunter2@example.com/x.git", "git clone https://bob:***@example.com/x.git"),
        ("curl -u bob:hunter2 https://x", "curl -u bob:*** https://x"),
        ("curl --user=bob:hunter2 https://x", "curl --user=bob:*** https://x"),
        ("curl -H Authorization: Bearer hunter2 https://x", "curl -H Authorization: Bearer *** https://x"),
        ("worker ghp_abcdefghijklmnopqrstuvwxyz0123456789", "worker ***"),
        ("agent --url http://cp --token fdg_abcdefghijklmnopqrstuvwx", "agent --url http://cp --token ***"),
        ("agent fdg_abcdefghijklmnopqrstuvwx", "agent ***"),
        # Nothing secret-looking: as it was (a -p of another program is no password).
        ("find / -print -name x", "find / -print -name x"),
        ("sudo -u www-data php artisan", "sudo -u www-data php artisan"),
        ("nginx: master process /usr/sbin/nginx -g daemon on;", "nginx: master process /usr/sbin/nginx -g daemon on;"),
    ],
)
def test_secret_looking_arguments_of_a_command_line_are_masked(command: str, shown: str) -> None:
    assert mask_command_line(command) == shown


def test_output_lines_of_a_read_are_masked_inside_their_json() -> None:
    result = {"sort": "cpu", "processes": [{"pid": 7, "command": 'app --password=hun"ter2 --x'}]}
    line = json.dumps(result, separators=(",", ":"))
    [masked] = mask_command_output([line])
    assert json.loads(masked) == {"sort": "cpu", "processes": [{"pid": 7, "command": "app --password=*** --x"}]}
    assert mask_command_output(["app --token hunter2"]) == ["app --token ***"]
