"""Job kinds of `mcp`: Model Context Protocol servers run on the host (pro)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from contract.job_kinds.argtypes import EnvName, Int, Port, RegistryPackage, Secret, Slug, Version
from contract.job_kinds.base import INFRA_PRO, Args, JobKind, NameArgs, NoArgs, kind


class McpInstall(Args):
    name: Slug
    runtime: Literal["node", "python"]
    package: RegistryPackage
    version: Version | None = None
    port: Port | None = None  # None: stdio only, reached through the agent


class McpLogs(Args):
    name: Slug
    lines: Int = Field(default=200, ge=1, le=100_000)


class McpEnvSet(Args):
    name: Slug
    key: EnvName
    value: Secret


_MCP = {"name": "github"}

# Who runs this domain's mutations, and from which plan (`base.DomainPolicy`).
POLICY = INFRA_PRO

KINDS: list[JobKind] = [
    kind("mcp.list", NoArgs, "List the MCP servers", read=True, example={}),
    kind("mcp.status", NameArgs, "Show an MCP server", read=True, positional=("name",), example=_MCP),
    kind("mcp.logs", McpLogs, "Show the last lines an MCP server printed", read=True, positional=("name",),
         json=False, example={"name": "github", "lines": 100}),
    kind("mcp.install", McpInstall, "Install an MCP server from npm or PyPI", positional=("name",),
         example={"name": "github", "runtime": "node", "package": "@modelcontextprotocol/server-github",
                  "version": "0.6.2", "port": 8931}),
    kind("mcp.remove", NameArgs, "Remove an MCP server", positional=("name",), example=_MCP),
    kind("mcp.start", NameArgs, "Start an MCP server", positional=("name",), example=_MCP),
    kind("mcp.stop", NameArgs, "Stop an MCP server", positional=("name",), example=_MCP),
    kind("mcp.restart", NameArgs, "Restart an MCP server", positional=("name",), example=_MCP),
    kind("mcp.env-set", McpEnvSet, "Set a (secret) environment variable of an MCP server", positional=("name", "key"),
         example={"name": "github", "key": "GITHUB_TOKEN", "value": "ghp_exampletoken123"}),
]  # fmt: skip
