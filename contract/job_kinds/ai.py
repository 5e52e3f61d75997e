"""Job kinds of `ai`."""

from __future__ import annotations

from typing import Literal

from contract.job_kinds.argtypes import ModelName
from contract.job_kinds.base import INFRA, Args, JobKind, NoArgs, kind


class AiEnable(Args):
    runtime: Literal["ollama", "vllm"] = "ollama"


class AiModel(Args):
    model: ModelName


# Who runs this domain's mutations, and from which plan (`base.DomainPolicy`).
POLICY = INFRA

KINDS: list[JobKind] = [
    kind("ai.status", NoArgs, "Show the local model runtime and what it serves", read=True, example={}),
    kind("ai.gpu-info", NoArgs, "Show the GPUs, their memory and utilisation", read=True, example={}),
    kind("ai.model-list", NoArgs, "List the local models", read=True, example={}),
    kind("ai.enable", AiEnable, "Install and start a local model runtime", example={"runtime": "ollama"}),
    kind("ai.disable", NoArgs, "Stop the local model runtime", example={}),
    kind("ai.model-pull", AiModel, "Download a model into the local runtime", positional=("model",),
         example={"model": "llama3.1:8b"}),
    kind("ai.model-remove", AiModel, "Delete a local model", positional=("model",), example={"model": "llama3.1:8b"}),
]  # fmt: skip
