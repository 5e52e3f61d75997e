"""A server of the test's own whose agent it may kill and restart (issue 25, point 5: the views
that said "agent offline" refresh by themselves once it is back): one site, `a.example`, whose
folder is `home / "site-a"`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.stacks import AgentProcess, Stack


@dataclass
class OwnAgent:
    agent: AgentProcess
    server_id: str
    name: str  # the server's
    site: Path  # the folder of its site `a.example`


@contextmanager
def own_agent(stack: Stack, folder: Path, name: str) -> Iterator[OwnAgent]:
    """A new server `name` of the stack's org and its agent, online; stopped and deleted at the end."""
    with stack.http() as http:
        created = http.post("/v1/servers", json={"name": name, "kind": "full"})
    assert created.status_code == 201, created.text
    server_id, token = created.json()["server"]["id"], created.json()["agent_token"]
    home, state = folder / "home", folder / "state"
    (home / "site-a").mkdir(parents=True)
    state.mkdir()
    (state / "sites.json").write_text('{"sites": [{"domain": "a.example", "slug": "site-a"}]}')
    agent = AgentProcess(stack, server_id, token, home, state)
    try:
        yield OwnAgent(agent, server_id, name, home / "site-a")
    finally:
        agent.stop()
        with stack.http() as http:
            http.delete(f"/v1/servers/{server_id}")
