"""The `fleetdeck` command line: dispatch, theme choice, saved sessions, the embedded launcher."""

from __future__ import annotations

import os
import stat
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from api_client import errors as api_errors
from fleetdeck import cli
from fleetdeck.cli import local_connection
from fleetdeck.launcher import LocalStack, StackStartError
from themes import ANSI, DARK, FleetdeckAnsiStyle, default_theme_name, rich_style_map
from tui import connection
from tui.connection import ConnectError, SessionStore, connect_remote
from tui.errors import describe_error


def fake_module(monkeypatch: pytest.MonkeyPatch, name: str, calls: list[Any]) -> None:
    module = types.ModuleType(name)

    def main(argv: list[str], *defaults: object, **options: object) -> int:
        calls.append((name, argv))
        return 7

    module.main = main  # type: ignore[attr-defined]
    module.Defaults = dict  # type: ignore[attr-defined]  # what `fleetdeck agent` fills in
    monkeypatch.setitem(sys.modules, name, module)


def test_subcommands_are_dispatched_by_module_name(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []
    fake_module(monkeypatch, "control_plane.cli", calls)
    fake_module(monkeypatch, "agent.cli", calls)
    assert cli.main(["serve", "--listen", "127.0.0.1:1"]) == 7
    assert cli.main(["admin", "create-org", "acme"]) == 7
    assert cli.main(["agent", "--url", "http://cp"]) == 7
    assert calls == [
        ("control_plane.cli", ["serve", "--listen", "127.0.0.1:1"]),
        ("control_plane.cli", ["admin", "create-org", "acme"]),
        ("agent.cli", ["--url", "http://cp"]),
    ]


def test_the_tui_module_does_not_import_the_control_plane() -> None:
    towers = "('control_plane', 'agent')"
    code = f"import sys, fleetdeck.cli, tui.app; sys.exit(any(m.startswith({towers}) for m in sys.modules))"
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root)}
    import subprocess

    assert subprocess.run([sys.executable, "-c", code], env=env, timeout=60).returncode == 0


def test_theme_is_the_wanted_one_else_follows_the_terminal() -> None:
    assert default_theme_name(None, {"COLORTERM": "truecolor"}) == DARK.name
    assert default_theme_name(None, {"COLORTERM": "24bit"}) == DARK.name
    assert default_theme_name(None, {}) == ANSI.name
    assert default_theme_name("light", {"COLORTERM": "truecolor"}) == "fleetdeck-light"
    assert default_theme_name("fleetdeck-ansi", {}) == ANSI.name


def test_the_ansi_theme_and_its_pygments_style_use_only_ansi_colours() -> None:
    colours = [ANSI.primary, ANSI.secondary, ANSI.accent, ANSI.warning, ANSI.error, ANSI.success, ANSI.foreground,
               ANSI.background, ANSI.surface, ANSI.panel, ANSI.boost, *ANSI.variables.values()]  # fmt: skip
    assert all(str(colour).startswith("ansi_") or colour in ("none", "bold", "reverse") for colour in colours)
    for style in rich_style_map(FleetdeckAnsiStyle).values():
        assert style.color is None or (style.color.number is not None and style.color.number < 16)


def test_errors_read_like_sentences() -> None:
    offline = api_errors.AgentOffline("agent offline")
    assert describe_error(offline, server="web-1") == "The agent of web-1 is offline."
    too_large = api_errors.TooLarge("too big", details={"limit": 10 * 1024 * 1024, "size": 12 * 1024 * 1024})
    assert describe_error(too_large, path="dump.sql") == (
        "dump.sql is too large to view (12 MiB, the limit is 10 MiB): download it instead."
    )
    assert describe_error(ExceptionGroup("x", [offline]), server="db") == "The agent of db is offline."


def test_session_tokens_are_saved_only_readable_by_the_user(tmp_path: Path) -> None:
    store = SessionStore(tmp_path / "sessions")
    path = store.save("http://cp.example:8080/", "secret-token", "me@example.com")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert store.load("http://cp.example:8080") == {
        "base_url": "http://cp.example:8080",
        "token": "secret-token",
        "email": "me@example.com",
    }
    assert store.path_for("http://a.example") != store.path_for("http://b.example")


def test_an_expired_saved_session_leads_to_a_new_login(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = SessionStore(tmp_path)
    store.save("http://cp", "old-token", "me@example.com")

    def check_token(base_url: str, token: str) -> str:
        if token == "old-token":
            raise api_errors.Unauthenticated("expired")
        return "me@example.com"

    def log_in(base_url: str, email: str, password: str) -> str:
        if password != "right":
            raise api_errors.Unauthenticated("wrong")
        return "new-token"

    monkeypatch.setattr(connection, "check_token", check_token)
    monkeypatch.setattr(connection, "log_in", log_in)
    passwords = iter(["wrong", "right"])
    said: list[str] = []
    result = connect_remote("http://cp", store=store, ask_password=lambda _: next(passwords), say=said.append)
    assert result.token == "new-token" and result.label == "me@example.com"
    assert store.load("http://cp") == {"base_url": "http://cp", "token": "new-token", "email": "me@example.com"}
    assert said == [
        "Your saved session for http://cp has expired: please log in again.",
        "Wrong email or password, try again.",
    ]


def test_a_refused_environment_token_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def check_token(base_url: str, token: str) -> str:
        raise api_errors.Unauthenticated("no")

    monkeypatch.setattr(connection, "check_token", check_token)
    with pytest.raises(ConnectError, match="FLEETDECK_TOKEN"):
        connect_remote("http://cp", token="bad", store=SessionStore(tmp_path))


def test_the_embedded_stack_waits_for_the_base_url_then_reads_the_credentials(tmp_path: Path) -> None:
    script = (
        "import json, sys, time, pathlib;"
        "d = pathlib.Path(sys.argv[1]);"
        "(d / 'demo-credentials.json').write_text(json.dumps({'base_url': 'http://127.0.0.1:4321', 'email': 'e',"
        " 'password': 'p', 'token': 'tok', 'server_id': 's', 'db_url': 'sqlite://'}));"
        "print('starting'); print('fleetdeck is running at http://127.0.0.1:4321', flush=True); time.sleep(60)"
    )

    class FakeStack(LocalStack):
        @property
        def command(self) -> list[str]:
            return [sys.executable, "-c", script, str(self.data_dir)]

    stack = FakeStack(tmp_path, startup_timeout=30)
    with stack:
        assert stack.credentials is not None
        assert local_connection(stack.credentials).base_url == "http://127.0.0.1:4321"
        assert local_connection(stack.credentials).token == "tok"
        assert stack.process is not None and stack.process.poll() is None
    assert stack.process.returncode is not None  # terminated on exit


def test_the_embedded_stack_gives_up_after_its_timeout(tmp_path: Path) -> None:
    class SilentStack(LocalStack):
        @property
        def command(self) -> list[str]:
            return [sys.executable, "-c", "import sys, time; print('loading', file=sys.stderr); time.sleep(60)"]

    stack = SilentStack(tmp_path, startup_timeout=1)
    with pytest.raises(StackStartError, match=r"(?s)did not report its address.*loading"):
        stack.start()
    assert stack.process is not None and stack.process.poll() is not None
