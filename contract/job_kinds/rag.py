"""Job kinds of `rag` (pro)."""

from __future__ import annotations

from pydantic import Field, model_validator

from contract.job_kinds.argtypes import Bool, Id, Int, ModelName, RelativePath, SiteDomain, Slug
from contract.job_kinds.base import INFRA_PRO, Args, JobKind, NameArgs, NoArgs, ScopedPath, kind


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
    domain: SiteDomain
    path: RelativePath = ""  # a file or folder of the site; "" = the whole site
    recursive: Bool = False


class RagDocument(Args):
    name: Slug
    document: Id


_RAG = {"name": "docs"}

# Who runs this domain's mutations, and from which plan (`base.DomainPolicy`).
POLICY = INFRA_PRO

KINDS: list[JobKind] = [
    kind("rag.list", NoArgs, "List the retrieval collections", read=True, example={}),
    kind("rag.status", NameArgs, "Show a collection (documents, chunks, indexing)", read=True, positional=("name",),
         example=_RAG),
    kind("rag.document-list", NameArgs, "List the documents of a collection", read=True, positional=("name",),
         example=_RAG),
    kind("rag.create", RagCreate, "Create a retrieval collection", positional=("name",),
         example={"name": "docs", "embedding_model": "nomic-embed-text", "chunk_size": 800}),
    kind("rag.delete", NameArgs, "Delete a collection", positional=("name",), example=_RAG, confirm="name"),
    kind("rag.ingest", RagIngest, "Index files of a site into a collection", positional=("name",),
         example={"name": "docs", "domain": "example.com", "path": "docs", "recursive": True},
         paths=(ScopedPath("path", site="domain"),)),
    kind("rag.document-remove", RagDocument, "Remove a document from a collection", positional=("name", "document"),
         example={"name": "docs", "document": "d-17"}),
    kind("rag.reindex", NameArgs, "Rebuild a collection's index", positional=("name",), example=_RAG),
]  # fmt: skip
