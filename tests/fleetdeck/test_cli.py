"""The `fleetdeck` command line: dispatch, theme choice, saved sessions, the embedded launcher."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from api_client import Server
from api_client import errors as api_errors
from control_plane.auth import store as accounts
from control_plane.storage import Database
from fleetdeck import cli
from fleetdeck.cli import local_connection
from fleetdeck.launcher import LocalStack, StackStartError
from tests.conftest import ROOT, Stack, python_env
from themes import ANSI, DARK, MONO, default_theme_name
from themes.pygments_styles import FleetdeckAnsiStyle, rich_style_map
from tui.connection import ConnectError, Connection, SessionStore, connect_remote
from tui.errors import describe_error
from tui.servers.screen import links_unprotected, unprotected_note


@pytest.mark.parametrize(
    ("argv", "usage"),
    [
        (["serve", "--help"], "usage: fleetdeck serve [-h] [--db DB]"),
        (["admin", "--help"], "usage: fleetdeck admin [-h]"),
        (["agent", "--help"], "usage: fleetdeck agent [-h] --url URL"),
        (["local", "--help"], "usage: fleetdeck local [-h] [--data-dir DATA_DIR]"),
    ],
)
def test_subcommands_reach_their_tower(argv: list[str], usage: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Each subcommand is parsed by its own tower's command line (its usage line says whose)."""
    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith(usage)


def test_the_tui_module_does_not_import_the_control_plane() -> None:
    towers = "('control_plane', 'agent')"
    code = f"import sys, fleetdeck.cli, tui.app; sys.exit(any(m.startswith({towers}) for m in sys.modules))"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    assert subprocess.run([sys.executable, "-c", code], env=env, timeout=60).returncode == 0


def test_theme_is_the_wanted_one_else_follows_the_terminal() -> None:
    assert default_theme_name(None, {"COLORTERM": "truecolor"}) == DARK.name
    assert default_theme_name(None, {"COLORTERM": "24bit"}) == DARK.name
    assert default_theme_name(None, {}) == ANSI.name
    assert default_theme_name("light", {"COLORTERM": "truecolor"}) == "fleetdeck-light"
    assert default_theme_name("fleetdeck-ansi", {}) == ANSI.name
    # NO_COLOR (no-color.org): monochrome when set and not empty; a theme asked for by name wins.
    assert default_theme_name(None, {"NO_COLOR": "1", "COLORTERM": "truecolor"}) == MONO.name
    assert default_theme_name(None, {"NO_COLOR": ""}) == ANSI.name
    assert default_theme_name("dark", {"NO_COLOR": "1"}) == DARK.name


def test_the_ansi_theme_and_its_pygments_style_use_only_ansi_colours() -> None:
    colours = [
        ANSI.primary,
        ANSI.secondary,
        ANSI.accent,
        ANSI.warning,
        ANSI.error,
        ANSI.success,
        ANSI.foreground,
        ANSI.background,
        ANSI.surface,
        ANSI.panel,
        ANSI.boost,
        *ANSI.variables.values(),
    ]
    assert all(str(colour).startswith("ansi_") or colour in ("none", "bold", "reverse") for colour in colours)
    for style in rich_style_map(FleetdeckAnsiStyle).values():
        assert style.color is None or (style.color.number is not None and style.color.number < 16)


def test_errors_read_like_sentences() -> None:
    offline = api_errors.AgentOffline("agent offline")
    assert describe_error(offline, server="web-1") == "The agent of web-1 is offline."
    too_large = api_errors.TooLarge("too big", details={"limit": 10 * 1024 * 1024, "size": 12 * 1024 * 1024})
    assert describe_error(too_large, path="dump.sql") == (
        "dump.sql is too large to edit (12 MiB, the limit is 10 MiB): F3 views it."
    )
    assert describe_error(ExceptionGroup("x", [offline]), server="db") == "The agent of db is offline."
    away = api_errors.Unavailable("the control plane's database is away", details={"part": "database"})
    assert describe_error(away) == (
        "The control plane's database is away, retrying: nothing was done; try again in a few seconds."
    )
    full = api_errors.ApiError.from_body(
        507,
        {"error": {"code": "insufficient_storage", "message": "the disk is full", "details": {"path": "logs/a.log"}}},
    )
    assert describe_error(full, server="web-1") == "The disk of web-1 is full at /logs/a.log: nothing was written."
    quota = api_errors.InsufficientStorage("the disk quota is exceeded", details={"path": "x\x1b[2J"})
    assert describe_error(quota, server="db") == "The disk quota of db is full at /x?[2J: nothing was written."


def test_the_server_list_warns_of_unprotected_hard_links() -> None:
    """What the agent's hello said of its kernel, as the server list shows it."""

    def server(name: str, online: bool, hardlinks: bool | None) -> Server:
        agent = {"online": online, "kernel_protections": {"protected_hardlinks": hardlinks, "protected_symlinks": True}}
        return Server.model_validate(
            {"id": name, "name": name, "kind": "full", "agent": agent, "created_at": "2026-01-02T03:04:05Z"}
        )

    servers = [
        server("web-1", True, False),
        server("web-2", True, True),
        server("db", False, False),
        server("old", True, None),
    ]
    assert [links_unprotected(s) for s in servers] == [True, False, False, False]
    assert unprotected_note(servers) == "⚠ hard links unprotected on web-1"
    assert unprotected_note(servers[1:]) == ""


class Prompts:
    """The answers a user types at the login prompts, and what the login said to them."""

    def __init__(self, email: str, *passwords: str) -> None:
        self.email = email
        self.passwords = list(passwords)
        self.said: list[str] = []

    def ask_email(self, prompt: str) -> str:
        return self.email

    def ask_password(self, prompt: str) -> str:
        assert self.passwords, f"asked for a password once too often: {prompt}"
        return self.passwords.pop(0)

    def connect(self, stack: Stack, store: SessionStore) -> Connection:
        return connect_remote(
            stack.base_url,
            store=store,
            ask_email=self.ask_email,
            ask_password=self.ask_password,
            say=self.said.append,
        )


def test_a_login_saves_a_session_only_the_user_can_read_and_the_next_start_reuses_it(
    stack: Stack, tmp_path: Path
) -> None:
    store = SessionStore(tmp_path / "sessions")
    prompts = Prompts(stack.email, "wrong password", stack.password)
    first = prompts.connect(stack, store)
    assert first.label == stack.email and first.token != stack.token  # a session of its own
    assert prompts.said == ["Wrong email or password, try again."] and prompts.passwords == []
    path = store.path_for(stack.base_url)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert store.load(stack.base_url + "/") == {"base_url": stack.base_url, "token": first.token, "email": stack.email}
    with stack.http(first.token) as http:
        assert http.get("/v1/me").json()["user"]["email"] == stack.email

    again = Prompts(stack.email).connect(stack, store)  # no password left to give: the saved session serves
    assert again == first


def test_an_expired_saved_session_is_noticed_and_a_new_login_asked_for(stack: Stack, tmp_path: Path) -> None:
    store = SessionStore(tmp_path / "sessions")
    store.save(stack.base_url, expired_session(stack), stack.email)
    prompts = Prompts("not asked: the saved session names the user", stack.password)
    connection = prompts.connect(stack, store)
    assert prompts.said == [f"Your saved session for {stack.base_url} has expired: please log in again."]
    assert connection.label == stack.email
    assert store.load(stack.base_url) == {"base_url": stack.base_url, "token": connection.token, "email": stack.email}


def expired_session(stack: Stack) -> str:
    """A session token of the stack's demo user that expired a minute ago, written to its database."""
    db = Database(stack.db_url, threads=1)
    try:

        def create(conn: Any) -> str:
            user = accounts.user_by_email(conn, stack.email)
            assert user is not None
            membership = accounts.first_membership(conn, user["id"])
            assert membership is not None
            token, _ = accounts.create_session(conn, user["id"], membership["org_id"], timedelta(minutes=-1))
            return token

        return db.run_sync(create)
    finally:
        db.dispose()


def test_a_refused_environment_token_is_an_error(stack: Stack, tmp_path: Path) -> None:
    with pytest.raises(ConnectError, match="FLEETDECK_TOKEN"):
        connect_remote(stack.base_url, token="fd_not_a_token", store=SessionStore(tmp_path))
    works = connect_remote(stack.base_url, token=stack.token, store=SessionStore(tmp_path))
    assert works.label == stack.email and not any(tmp_path.iterdir())  # an environment token is not saved


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


# --- logging in from the command line, and out ----------------------------------------------------


def run_cli(home: Path, *args: str, answers: str = "") -> subprocess.CompletedProcess[str]:
    """`fleetdeck ARGS` in a child with its own config dirs under `home`, no terminal (so getpass reads
    `answers` from stdin) and no token or URL from this environment."""
    dirs = {f"XDG_{name}_HOME": str(home / name.lower()) for name in ("CONFIG", "DATA", "STATE", "CACHE")}
    env = {k: v for k, v in python_env(**dirs).items() if k not in ("FLEETDECK_TOKEN", "FLEETDECK_URL")}
    command = [sys.executable, "-m", "fleetdeck", *args]
    return subprocess.run(
        command, input=answers, env=env, capture_output=True, text=True, timeout=60, start_new_session=True
    )


def cli_sessions(home: Path) -> SessionStore:
    """The session store `run_cli`'s child uses (the config dir of `home`)."""
    return SessionStore(home / "config" / "fleetdeck" / "sessions")


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def test_an_unreachable_url_is_said_before_any_credentials_are_asked_for(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    done = run_cli(tmp_path, "--url", url, answers="someone@example.com\nsecret\n")
    assert done.returncode == 1
    assert done.stderr.startswith(f"fleetdeck: Cannot connect to {url} (")
    assert "check the URL" in done.stderr
    assert "Email" not in done.stdout and "Password" not in done.stdout + done.stderr


def test_an_empty_password_is_asked_again_then_ends_with_a_sentence(stack: Stack, tmp_path: Path) -> None:
    done = run_cli(tmp_path, "--url", stack.base_url, "--email", stack.email, answers="\n\n\n")
    assert done.returncode == 1
    said = done.stdout + done.stderr
    assert said.count("A password is needed: type it, or press Ctrl+C to give up.") == 2
    assert done.stderr.rstrip().endswith("fleetdeck: A password is needed: nothing was typed, so not logged in.")
    assert "validation" not in said.lower() and "pydantic" not in said.lower()
    assert cli_sessions(tmp_path).load(stack.base_url) is None

    prompts = Prompts(stack.email, "", stack.password)  # one empty answer, then the password
    connection = prompts.connect(stack, SessionStore(tmp_path / "in-process"))
    assert connection.label == stack.email
    assert prompts.said == ["A password is needed: type it, or press Ctrl+C to give up."]


def test_email_naming_another_user_logs_in_as_them_despite_a_saved_session(stack: Stack, tmp_path: Path) -> None:
    other, password = f"second-{uuid.uuid4().hex[:8]}@example.com", "another password 12"
    stack.admin("create-user", other, "--org", "demo", "--role", "member", "--password", password)
    store = SessionStore(tmp_path / "sessions")
    Prompts(stack.email, stack.password).connect(stack, store)  # the owner's session is saved

    prompts = Prompts("not asked: --email names the user", password)
    connection = connect_remote(
        stack.base_url, store=store, email=other, ask_email=prompts.ask_email, ask_password=prompts.ask_password
    )
    assert connection.label == other and prompts.passwords == []
    assert store.load(stack.base_url) == {"base_url": stack.base_url, "token": connection.token, "email": other}
    with stack.http(connection.token) as http:
        assert http.get("/v1/me").json()["user"]["email"] == other

    same = connect_remote(stack.base_url, store=store, email=other.upper(), ask_password=Prompts(other).ask_password)
    assert same == connection  # the saved session is that user's: no password asked


def test_logout_forgets_the_saved_session_of_a_url_or_all_of_them(stack: Stack, tmp_path: Path) -> None:
    sessions = cli_sessions(tmp_path)
    sessions.save(stack.base_url, "fd_saved_token", stack.email)
    sessions.save("http://elsewhere.example:8443", "fd_other_token", "someone@example.com")

    done = run_cli(tmp_path, "logout", "--url", stack.base_url + "/")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"Forgot the session saved for {stack.base_url}.", cli.NOT_REVOKED]
    assert sessions.load(stack.base_url) is None
    assert sessions.saved_urls() == ["http://elsewhere.example:8443"]

    again = run_cli(tmp_path, "logout", "--url", stack.base_url)
    assert again.returncode == 0 and again.stdout == f"No session is saved for {stack.base_url}.\n"

    everything = run_cli(tmp_path, "logout", "--all")
    assert everything.stdout.splitlines() == [
        "Forgot the session saved for http://elsewhere.example:8443.",
        cli.NOT_REVOKED,
    ]
    assert sessions.saved_urls() == []

    unnamed = run_cli(tmp_path, "logout")
    assert unnamed.returncode == 2 and "--url URL (or FLEETDECK_URL), or --all" in unnamed.stderr
