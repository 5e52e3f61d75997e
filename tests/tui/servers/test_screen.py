"""The server list's sparklines (issue 25, point 11), on the real stack with a real agent pulsing
fast: each pulse that arrives redraws its row's CPU, memory and disk columns, as many of them as
the width holds (CPU alone at 80 columns), and an agent that goes offline leaves none."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from textual.pilot import Pilot
from textual.widgets import DataTable

from tests.conftest import AgentProcess, Stack
from tests.helpers import wait_for
from tests.helpers.pulses import pulsing_agent
from tests.helpers.tui import real_app, run
from tui.servers.screen import ServerListScreen
from tui.widgets.sparkline import BLOCKS


def bars(cell: str) -> int:
    """How many pulses a sparkline cell draws."""
    return sum(1 for c in cell if c in BLOCKS)


def test_the_sparklines_follow_the_pulses_as_they_arrive(stack: Stack, tmp_path: Path) -> None:
    app = real_app(stack)
    agents: list[AgentProcess] = []

    async def scenario(pilot: Pilot[Any]) -> None:
        await wait_for(pilot, lambda: isinstance(app.screen, ServerListScreen) and app.screen.servers)
        screen = app.screen
        assert isinstance(screen, ServerListScreen)
        table = screen.query_one(DataTable)
        # Started with the list open: its pulses arrive one by one, none held before.
        name = f"pulsing-with-a-name-longer-than-its-column-{tmp_path.name[-8:]}"  # it gives way
        agents.append(await asyncio.to_thread(pulsing_agent, stack, tmp_path, stack.token, name, 0.5))
        server_id = agents[0].server_id

        def cell(key: str) -> str:
            return table.get_cell(server_id, key).plain if server_id in table.rows else ""

        assert [str(key.value) for key in table.columns][-3:] == ["cpu", "memory", "disk"]
        await wait_for(pilot, lambda: bars(cell("memory")) >= 1)
        for key in ("memory", "disk", "cpu"):
            seen = bars(cell(key))
            await wait_for(pilot, lambda: bars(cell(key)) > seen)  # noqa: B023 - a pulse more, drawn as it came
        newest = screen.monitor.pulses_of(server_id)[-1].memory
        assert newest is not None and cell("memory").endswith(f"{newest:.0f}%")

        await pilot.resize_terminal(80, 24)  # CPU first, then memory, as the other columns leave room
        await wait_for(pilot, lambda: "disk" not in [str(key.value) for key in table.columns])
        assert [str(key.value) for key in table.columns][-2:] in (["cpu", "memory"], ["seen", "cpu"])
        assert table.virtual_size.width <= table.size.width  # no column cut off: nothing to scroll to
        assert bars(cell("cpu")) >= 2

        await pilot.resize_terminal(200, 50)
        await wait_for(pilot, lambda: "disk" in [str(key.value) for key in table.columns])
        await asyncio.to_thread(agents[0].kill)
        await wait_for(pilot, lambda: cell("cpu") == cell("memory") == cell("disk") == "—")

    try:
        run(app, scenario, size=(200, 50))
    finally:
        for agent in agents:
            agent.stop()
