"""Job kinds of `litellm`: the OpenAI-compatible gateway; its gateway keys need plan plus."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from contract.job_kinds.argtypes import HttpsUrl, Id, Int, ModelName, Secret, Slug
from contract.job_kinds.base import INFRA, Args, JobKind, NoArgs, kind


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


# Who runs this domain's mutations, and from which plan (`base.DomainPolicy`).
POLICY = INFRA  # the gateway-key kinds raise it to plus, entry by entry

KINDS: list[JobKind] = [
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
