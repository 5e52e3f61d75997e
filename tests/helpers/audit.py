"""An org of its own for the audit log's tests, so the log holds only what the test did."""

from __future__ import annotations

from api_client import Client
from tests.helpers.stacks import Stack
from tui.app import FleetdeckApp
from tui.connection import Connection


def new_org(stack: Stack, *, tokens: int = 0) -> str:
    """An org with an owner who created the lite servers `web-a`, `web-b` and `tokens` API
    tokens; the owner's session token."""
    token = stack.new_owner("audit")
    with stack.http(token) as http:
        for server in ("web-a", "web-b"):
            assert http.post("/v1/servers", json={"name": server, "kind": "lite"}).status_code == 201
        for n in range(tokens):
            assert http.post("/v1/tokens", json={"name": f"token-{n}"}).status_code == 201
    return token


def app_for(stack: Stack, token: str) -> FleetdeckApp:
    client = Client(stack.base_url, token=token)
    return FleetdeckApp(Connection(stack.base_url, token, "test stack"), theme="fleetdeck-dark", client=client)
