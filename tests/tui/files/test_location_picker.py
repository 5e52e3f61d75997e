"""The location picker (`s` in a panel): a server whose agent is offline is named on its status
line, and its scopes join the list by themselves once the agent is back."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from textual.pilot import Pilot
from textual.widgets import OptionList, Static

from tests.conftest import Stack
from tests.helpers import wait_for
from tests.helpers.own_agent import own_agent
from tests.helpers.tui import open_commander, real_app, run
from tui.files.location_picker import LocationPicker


def test_a_server_whose_agent_comes_back_joins_the_open_picker(stack: Stack, tmp_path: Path) -> None:
    with own_agent(stack, tmp_path, f"pick-{tmp_path.name[-6:]}") as own:
        own.agent.kill()
        app = real_app(stack)

        async def scenario(pilot: Pilot[Any]) -> None:
            await open_commander(pilot)
            await pilot.press("s")
            await wait_for(pilot, lambda: isinstance(app.screen, LocationPicker) and app.screen.locations)
            picker = app.screen
            assert isinstance(picker, LocationPicker)
            options = picker.query_one(OptionList)

            def labels() -> list[str]:
                return [str(options.get_option_at_index(i).prompt) for i in range(options.option_count)]

            await wait_for(pilot, lambda: f"{own.name}: agent offline" in str(picker.query_one("#status").render()))
            assert f"{own.name} · a.example" not in labels()
            highlighted = labels()[options.highlighted or 0]

            await asyncio.to_thread(own.agent.restart)  # no key pressed from here
            await wait_for(pilot, lambda: f"{own.name} · a.example" in labels())
            assert f"{own.name}: agent offline" not in str(picker.query_one("#status", Static).render())
            assert options.highlighted is not None and labels()[options.highlighted] == highlighted

        run(app, scenario)
