"""The TUI knows whether it reaches its control plane: the header says which one and in what state,
every screen says when it is lost (presence unknown, a running job's log, the file panels), and
it reconnects by itself. A test here kills its own stack (never the session's) and restarts it on
the same port; an agent of its own going offline shows in the files panel."""

from __future__ import annotations

import asyncio
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable, Static

from api_client import Client
from contract.models import Job, Server
from tests.conftest import AgentProcess, Stack, start_local
from tests.helpers import soon, wait_for, wait_until
from tests.helpers.postgres_server import PostgresDatabases, start_postgres
from tests.helpers.tui import highlight_server, real_app, run
from tui.app import FleetdeckApp
from tui.connection import Connection
from tui.files.commander import CommanderScreen
from tui.files.dialogs import DeleteDialog
from tui.files.panel import FilePanel
from tui.jobs.run import JobRunScreen
from tui.monitor import LinkState, control_plane_name
from tui.servers.screen import ServerListScreen
from tui.widgets.header import ConnectionBadge

LOG_LINES = 200_000  # enough that the replay is still streaming when the control plane dies


def badge(app: FleetdeckApp) -> str:
    return str(app.screen.query_one(ConnectionBadge).render())


def agent_cell(screen: ServerListScreen, name: str) -> str:
    server = next(s for s in screen.servers.values() if s.name == name)
    return str(screen.query_one("#servers", DataTable).get_cell(server.id, "agent"))


def status_line(screen: ServerListScreen) -> str:
    return str(screen.query_one("#servers-status", Static).render())


@pytest.fixture
def own_stack(tmp_path: Path) -> Iterator[list[Stack]]:
    """A stack of this test's own, which it may kill and restart: the last one started is stopped."""
    stacks = [start_local(tmp_path / "local")]
    yield stacks
    stacks[-1].stop()


def test_a_lost_control_plane_is_said_everywhere_and_the_tui_comes_back_by_itself(own_stack: list[Stack]) -> None:
    stack = own_stack[0]
    port = int(stack.base_url.rsplit(":", 1)[1])
    log = [f"line {i}" for i in range(LOG_LINES)]
    (stack.data_dir / "site-logs" / "example-com").mkdir(parents=True, exist_ok=True)
    (stack.data_dir / "site-logs" / "example-com" / "access.log").write_text("".join(f"{x}\n" for x in log))
    with stack.http() as http:
        server = Server.model_validate(http.get(f"/v1/servers/{stack.server_id}").json())
        args = {"domain": "example.com", "lines": LOG_LINES}
        job = Job.model_validate(
            http.post(f"/v1/servers/{server.id}/jobs", json={"kind": "logs.tail", "args": args}).json()
        )
        wait_until(lambda: http.get(f"/v1/jobs/{job.id}").json()["status"] == "succeeded", 60)
        job = Job.model_validate(http.get(f"/v1/jobs/{job.id}").json())
    client = Client(stack.base_url, token=stack.token)
    app = FleetdeckApp(Connection(stack.base_url, stack.token, "local demo", local=True), client=client)

    async def scenario(pilot: Pilot[None]) -> None:
        await highlight_server(pilot, "local")
        servers = app.screen
        assert isinstance(servers, ServerListScreen)
        await wait_for(pilot, lambda: badge(app) == "local ● connected")
        assert agent_cell(servers, "local") == "online"
        # A job's output, still streaming when the control plane dies.
        app.push_screen(JobRunScreen(server, job))
        await soon(lambda: isinstance(app.screen, JobRunScreen) and app.screen._stream_tasks)
        run_screen = app.screen
        assert isinstance(run_screen, JobRunScreen)
        panel = run_screen.log_view.panel
        await soon(lambda: panel.appended > 0)

        stack.process.send_signal(signal.SIGKILL)
        await asyncio.to_thread(stack.process.wait)
        # Within the probe's interval and timeout (under 5 s): waited on, not timed.
        await wait_for(pilot, lambda: "lost" in badge(app))
        assert badge(app).startswith("local ○ lost")
        await wait_for(pilot, lambda: agent_cell(servers, "local") == "unknown")
        assert "connection lost" in status_line(servers)
        assert run_screen.connection_lost and panel.banner is not None
        assert panel.banner.text == "⚠ connection lost · the output resumes once it is back"
        assert "connection lost" in str(run_screen.query_one("#job-bar", Static).render())
        panel.flush_now()
        assert 0 < panel.appended < LOG_LINES, "the replay ended before the control plane died"

        # The same port again: the TUI finds it by itself, the list is online again, and the output
        # resumes after the last line shown: every line once, then how the job ended.
        own_stack.append(await asyncio.to_thread(start_local, stack.data_dir, port))
        await wait_for(pilot, lambda: badge(app) == "local ● connected", seconds=40)
        await wait_for(pilot, lambda: panel.banner is not None and panel.banner.note is None, seconds=60)
        panel.flush_now()
        assert panel.banner is not None and panel.banner[:2] == ("succeeded", 0)
        assert panel.appended == LOG_LINES and [line.text for line in panel.lines] == log[-panel.max_lines :]
        await wait_for(pilot, lambda: agent_cell(servers, "local") == "online")
        assert "1/1 agents online" in status_line(servers)

    run(app, scenario)


def test_a_panel_says_when_its_agent_is_offline_and_lists_again_when_it_is_back(stack: Stack, tmp_path: Path) -> None:
    with stack.http() as http:
        created = http.post("/v1/servers", json={"name": f"pan-{tmp_path.name[-6:]}", "kind": "full"}).json()
    server_id, name = created["server"]["id"], created["server"]["name"]
    home, state = tmp_path / "home", tmp_path / "state"
    (home / "site-a" / "www").mkdir(parents=True)
    state.mkdir()
    (state / "sites.json").write_text('{"sites": [{"domain": "a.example", "slug": "site-a"}]}')
    agent = AgentProcess(stack, server_id, created["agent_token"], home, state)
    app = real_app(stack)

    async def scenario(pilot: Pilot[None]) -> None:
        await highlight_server(pilot, name)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, CommanderScreen))
        panel = app.screen.query_one("#left", FilePanel)
        await wait_for(pilot, lambda: panel.pane.index_of("www") is not None)
        title = panel.query_one(".file-panel--title", Static)
        assert not str(title.render()).startswith("○")

        await asyncio.to_thread(agent.kill)
        await wait_for(pilot, lambda: str(title.render()).startswith("○ offline · "))
        assert panel.has_class("-agent-offline")
        assert f"The agent of {name} is offline" in str(panel.pane.message)
        panel.reload()  # r: a clear word, no request to fail
        await pilot.pause()
        assert not any("offline" in n.message for n in app._notifications)

        await asyncio.to_thread(agent.restart)
        await wait_for(pilot, lambda: panel.pane.index_of("www") is not None)
        assert not panel.has_class("-agent-offline")
        assert not str(title.render()).startswith("○")

    try:
        run(app, scenario)
    finally:
        agent.stop()
        with stack.http() as http:
            http.delete(f"/v1/servers/{server_id}")


def test_files_opened_while_the_agent_is_offline_list_once_it_is_back_and_follow_the_server(
    stack: Stack, tmp_path: Path
) -> None:
    """Files opened while the agent is down say so, and both panels list by themselves once it is
    back. A file made on the server shows in a panel when it is focused again (not before); a
    delete made in one panel shows at once in the other, which shows the same folder."""
    with stack.http() as http:
        created = http.post("/v1/servers", json={"name": f"back-{tmp_path.name[-6:]}", "kind": "full"}).json()
    server_id, name = created["server"]["id"], created["server"]["name"]
    home, state = tmp_path / "home", tmp_path / "state"
    (home / "site-a" / "www").mkdir(parents=True)
    state.mkdir()
    (state / "sites.json").write_text('{"sites": [{"domain": "a.example", "slug": "site-a"}]}')
    agent = AgentProcess(stack, server_id, created["agent_token"], home, state)
    agent.kill()
    app = real_app(stack)

    async def scenario(pilot: Pilot[None]) -> None:
        await highlight_server(pilot, name)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, CommanderScreen))
        commander = app.screen
        assert isinstance(commander, CommanderScreen)
        left, right = commander.left, commander.right
        await wait_for(pilot, lambda: f"The agent of {name} is offline" in str(left.pane.message))

        await asyncio.to_thread(agent.restart)  # no key pressed from here to the listing
        await wait_for(pilot, lambda: left.pane.index_of("www") is not None and right.pane.index_of("www") is not None)

        await pilot.press("tab")  # the right panel has the focus while the file is made
        await wait_for(pilot, lambda: commander.active is right)
        (home / "site-a" / "made-outside.txt").write_text("hello\n")
        await pilot.press("tab")
        await wait_for(pilot, lambda: left.pane.index_of("made-outside.txt") is not None)
        assert right.pane.index_of("made-outside.txt") is None  # not focused again yet
        await pilot.press("tab")
        await wait_for(pilot, lambda: right.pane.index_of("made-outside.txt") is not None)

        await pilot.press("tab")
        await wait_for(pilot, lambda: commander.active is left)
        left.pane.move_cursor(left.pane.index_of("made-outside.txt") or 0)
        await pilot.press("f8")
        await wait_for(pilot, lambda: isinstance(app.screen, DeleteDialog))
        await pilot.press("enter")  # to the trash
        await wait_for(pilot, lambda: left.pane.index_of("made-outside.txt") is None)
        await wait_for(pilot, lambda: right.pane.index_of("made-outside.txt") is None)
        assert commander.active is left and not (home / "site-a" / "made-outside.txt").exists()

    try:
        run(app, scenario)
    finally:
        agent.stop()
        with stack.http() as http:
            http.delete(f"/v1/servers/{server_id}")


def test_the_header_calls_the_embedded_control_plane_local_and_any_other_by_its_host() -> None:
    assert control_plane_name("http://127.0.0.1:40123", local=True) == "local"
    assert control_plane_name("https://cp.example.net:8443/", local=False) == "cp.example.net"
    assert LinkState("connected").describe() == "connected"
    assert LinkState("reconnecting").describe() == "lost · reconnecting…"
    assert LinkState("reconnecting", time.monotonic() + 3.2).describe() == "lost · retry in 3 s"
    # It answers, but says it cannot serve (its 503): the header says what is away, not "lost".
    assert LinkState("reconnecting", away="database").describe() == "database away · retrying…"
    assert LinkState("reconnecting", time.monotonic() + 3.2, "bus").describe() == "bus away · retry in 3 s"


def test_a_control_plane_whose_database_is_away_is_said_so_and_the_tui_carries_on(tmp_path: Path) -> None:
    """The control plane answers, but its database (a PostgreSQL server of this test's own) is
    stopped: the header says the database is away and that it retries, not that the control plane
    is lost, nothing crashes, and once the database is back the TUI is connected again by itself,
    with its live presence (a 503 `unavailable` is not a refusal of the stream)."""
    folder = Path(tempfile.mkdtemp(prefix="fleetdeck-tui-pg-"))
    folder.chmod(0o755)  # the postgres user reaches its folder
    server = start_postgres(folder / "server", log_statements=False)
    try:
        stack = start_local(tmp_path / "local", env={"FLEETDECK_LOCAL_DB": PostgresDatabases(server).create("tui")})
        try:
            app = FleetdeckApp(
                Connection(stack.base_url, stack.token, "local demo", local=True),
                client=Client(stack.base_url, token=stack.token),
            )

            async def scenario(pilot: Pilot[None]) -> None:
                await highlight_server(pilot, "local")
                await wait_for(pilot, lambda: badge(app) == "local ● connected")
                await asyncio.to_thread(server.stop)
                await wait_for(pilot, lambda: "database away" in badge(app))
                assert badge(app).startswith("local ○ database away · ")
                await asyncio.to_thread(server.start)
                await wait_for(pilot, lambda: badge(app) == "local ● connected", seconds=40)
                assert app.monitor is not None and app.monitor.live_presence

            run(app, scenario)
        finally:
            stack.stop()
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)
