"""An agent that pulses fast (issue 25, point 11): its pulses reach the server list's sparklines
in tenths of a second, not every 5 s."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.stacks import AgentProcess, Stack


def pulsing_agent(stack: Stack, folder: Path, api_token: str, name: str, every_s: float = 0.1) -> AgentProcess:
    """A new server `name` of the org of `api_token`, and its agent pulsing every `every_s`
    (`stop` it at the end of the test)."""
    with stack.http(api_token) as http:
        created = http.post("/v1/servers", json={"name": name, "kind": "full"})
    assert created.status_code == 201, created.text
    home, state = folder / "home", folder / "state"
    home.mkdir(parents=True)
    state.mkdir()
    server_id, token = created.json()["server"]["id"], created.json()["agent_token"]
    return AgentProcess(stack, server_id, token, home, state, "--pulse-interval", str(every_s), api_token=api_token)
