"""Job kinds of AI: ai (local model runtime), litellm (gateway), rag (pro), mcp (pro)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from contract.job_kinds.argtypes import (
    Bool,
    DomainName,
    EnvName,
    HttpsUrl,
    Id,
    Int,
    ModelName,
    Port,
    RegistryPackage,
    RelativePath,
    Secret,
    Slug,
    Version,
)
from contract.job_kinds.base import Args, JobKind, NoArgs, ScopedPath, kind


class NameArgs(Args):
    name: Slug


# --- ai --------------------------------------------------------------------------------------------


class AiEnable(Args):
    runtime: Literal["ollama", "vllm"] = "ollama"


class AiModel(Args):
    model: ModelName


AI = [
    kind("ai.status", NoArgs, "Show the local model runtime and what it serves", read=True, example={}),
    kind("ai.gpu-info", NoArgs, "Show the GPUs, their memory and utilisation", read=True, example={}),
    kind("ai.model-list", NoArgs, "List the local models", read=True, example={}),
    kind("ai.enable", AiEnable, "Install and start a local model runtime", example={"runtime": "ollama"}),
    kind("ai.disable", NoArgs, "Stop the local model runtime", example={}),
    kind("ai.model-pull", AiModel, "Download a model into the local runtime", positional=("model",),
         example={"model": "llama3.1:8b"}),
    kind("ai.model-remove", AiModel, "Delete a local model", positional=("model",), example={"model": "llama3.1:8b"}),
]  # fmt: skip

# --- litellm: the OpenAI-compatible gateway; its gateway keys need plan plus ------------------------


class LitellmModelAdd(Args):
    name: ModelName  # the name clients ask for
    provider: Literal["openai", "anthropic", "azure", "mistral", "groq", "bedrock", "vertex_ai", "openrouter", "ollama"]
    model: ModelName  # the provider's model id
    api_base: HttpsUrl | None = None
    api_key: Secret | None = None


class LitellmModel(Args):
    name: ModelName


class KeyCreate(Args):
    alias: Slug
    models: list[ModelName] = Field(default_factory=list, max_length=100)  # empty: every model
    max_budget_usd: Int | None = Field(default=None, ge=1, le=1_000_000)
    budget_duration: Literal["1d", "7d", "30d"] | None = None
    rpm_limit: Int | None = Field(default=None, ge=1, le=1_000_000)
    tpm_limit: Int | None = Field(default=None, ge=1, le=100_000_000)
    expires_days: Int | None = Field(default=None, ge=1, le=3650)


class KeyId(Args):
    key_id: Id


LITELLM = [
    kind("litellm.status", NoArgs, "Show the gateway's health and spend", read=True, example={}),
    kind("litellm.model-list", NoArgs, "List the models the gateway routes", read=True, example={}),
    kind("litellm.model-add", LitellmModelAdd, "Route a model name to a provider", positional=("name",),
         example={"name": "gpt-4o", "provider": "openai", "model": "gpt-4o-2024-08-06",
                  "api_key": "sk-proj-exampleexample"}),
    kind("litellm.model-remove", LitellmModel, "Stop routing a model name", positional=("name",),
         example={"name": "gpt-4o"}),
    kind("litellm.restart", NoArgs, "Restart the gateway", example={}),
    kind("litellm.key-list", NoArgs, "List the gateway keys (never their values)", read=True, min_plan="plus",
         example={}),
    kind("litellm.key-info", KeyId, "Show a gateway key's limits and spend", read=True, positional=("key_id",),
         min_plan="plus", example={"key_id": "k-1"}),
    kind("litellm.key-create", KeyCreate, "Create a gateway key (printed once)", positional=("alias",),
         min_plan="plus",
         example={"alias": "team-web", "models": ["gpt-4o", "claude-3-5-sonnet"], "max_budget_usd": 50,
                  "budget_duration": "30d", "rpm_limit": 60}),
    kind("litellm.key-revoke", KeyId, "Revoke a gateway key", positional=("key_id",), min_plan="plus",
         example={"key_id": "k-1"}),
]  # fmt: skip

# --- rag (pro) -------------------------------------------------------------------------------------


class RagCreate(Args):
    name: Slug
    embedding_model: ModelName
    chunk_size: Int = Field(default=1000, ge=128, le=8192)
    chunk_overlap: Int = Field(default=100, ge=0, le=2048)

    @model_validator(mode="after")
    def _overlap(self) -> RagCreate:
        if self.chunk_overlap >= self.chunk_size:
            raise ValueError("chunk_overlap must be smaller than chunk_size")
        return self


class RagIngest(Args):
    name: Slug
    domain: DomainName
    path: RelativePath = ""  # a file or folder of the site; "" = the whole site
    recursive: Bool = False


class RagDocument(Args):
    name: Slug
    document: Id


_RAG = {"name": "docs"}

RAG = [
    kind("rag.list", NoArgs, "List the retrieval collections", read=True, example={}),
    kind("rag.status", NameArgs, "Show a collection (documents, chunks, indexing)", read=True, positional=("name",),
         example=_RAG),
    kind("rag.document-list", NameArgs, "List the documents of a collection", read=True, positional=("name",),
         example=_RAG),
    kind("rag.create", RagCreate, "Create a retrieval collection", positional=("name",),
         example={"name": "docs", "embedding_model": "nomic-embed-text", "chunk_size": 800}),
    kind("rag.delete", NameArgs, "Delete a collection", positional=("name",), example=_RAG),
    kind("rag.ingest", RagIngest, "Index files of a site into a collection", positional=("name",),
         example={"name": "docs", "domain": "example.com", "path": "docs", "recursive": True},
         paths=(ScopedPath("path", site="domain"),)),
    kind("rag.document-remove", RagDocument, "Remove a document from a collection", positional=("name", "document"),
         example={"name": "docs", "document": "d-17"}),
    kind("rag.reindex", NameArgs, "Rebuild a collection's index", positional=("name",), example=_RAG),
]  # fmt: skip

# --- mcp: Model Context Protocol servers run on the host (pro) -------------------------------------


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

MCP = [
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

KINDS: list[JobKind] = [*AI, *LITELLM, *RAG, *MCP]
