"""The wire shapes of the `/v1` API: the one definition, shared by client and control plane.

Request bodies and small responses are validated with these models. Bulk payloads (directory
listings) are not: they travel as plain dicts through orjson, and `Entry` exists here to document
the shape (and to give the OpenAPI document a schema), not to be built 100,000 times.
"""

from __future__ import annotations

import base64
from datetime import datetime
from functools import cache
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    with_config,
)
from typing_extensions import TypedDict  # pydantic needs this one's on Python 3.11

Plan = Literal["free", "plus", "pro", "max"]
Role = Literal["owner", "admin", "operator", "member"]
Capability = Literal["observe", "content", "infra", "sysadmin", "file_write", "root_scope"]
ServerKind = Literal["full", "lite"]
ScopeName = Literal["site", "logs", "root"]
EntryType = Literal["file", "dir", "symlink", "other"]

# The largest whole number the API takes anywhere (a signed 64-bit integer: what SQLite and
# PostgreSQL store); larger ones are 422, never an overflow further in.
MAX_INTEGER = 2**63 - 1

PLANS: tuple[Plan, ...] = ("free", "plus", "pro", "max")
ROLES: tuple[Role, ...] = ("owner", "admin", "operator", "member")


class WireModel(BaseModel):
    """Base of every wire model: unknown fields are ignored so an older client keeps working."""

    model_config = ConfigDict(extra="ignore")


class RequestModel(BaseModel):
    """Base of request bodies: unknown fields are a validation error, not silently dropped."""

    model_config = ConfigDict(extra="forbid")


# --- errors ---------------------------------------------------------------------------------


class ErrorInfo(WireModel):
    code: str
    message: str
    details: dict[str, Any] = Field(default_factory=dict)


class ErrorBody(WireModel):
    error: ErrorInfo


# --- health and identity -------------------------------------------------------------------


class Health(WireModel):
    """`GET /v1/health`: `status` "unavailable" (HTTP 503) while the database or the bus is away;
    `bus` is None for a control plane without replicas."""

    status: Literal["ok", "unavailable"]
    version: str
    agents_online: int
    database: Literal["ok", "unavailable"] = "ok"
    bus: Literal["ok", "unavailable"] | None = None


class User(WireModel):
    id: str
    email: str
    name: str
    super_admin: bool


class Org(WireModel):
    id: str
    name: str
    plan: Plan


class LoginRequest(RequestModel):
    email: str = Field(min_length=3, max_length=320)
    password: str = Field(min_length=1, max_length=1024)


class LoginResponse(WireModel):
    token: str
    expires_at: datetime
    user: User


class Me(WireModel):
    user: User
    org: Org
    role: Role
    capabilities: list[Capability]


class TokenCreate(RequestModel):
    name: str = Field(min_length=1, max_length=100)


class ApiToken(WireModel):
    id: str
    name: str
    created_at: datetime


class ApiTokenCreated(ApiToken):
    token: str


class TokenList(WireModel):
    tokens: list[ApiToken]


# --- servers --------------------------------------------------------------------------------


class KernelProtections(WireModel):
    """Whether the server's kernel protects hard and symbolic links (``fs.protected_hardlinks``,
    ``fs.protected_symlinks``); null: the agent could not read it."""

    protected_hardlinks: bool | None = None
    protected_symlinks: bool | None = None


class AgentInfo(WireModel):
    online: bool
    version: str | None = None
    connected_at: datetime | None = None
    last_seen_at: datetime | None = None
    direct_ingress_url: str | None = None
    # The job kinds the agent has a handler for, as its last hello said (None: it never said);
    # a job of another kind is accepted and ends with exit code 127.
    job_kinds: list[str] | None = None
    # As the agent's hello said, while it is linked to the replica answering (else None).
    kernel_protections: KernelProtections | None = None
    # The kinds of job_kinds that cannot run on this server now, each with the Debian package it
    # needs (the others run here): as the agent last said, while it is linked to the replica
    # answering (else None). A job of such a kind is accepted and ends with exit code 69.
    needs: dict[str, str] | None = None


class Server(WireModel):
    id: str
    name: str
    kind: ServerKind
    address: str | None = None
    agent: AgentInfo
    created_at: datetime


class ServerList(WireModel):
    servers: list[Server]


@cache
def _host_adapter() -> TypeAdapter[str]:
    # Imported here, not at the top: the job kinds' package imports this module.
    from contract.job_kinds.argtypes import Host

    return TypeAdapter(Host)


def server_address(value: str) -> str:
    """`value` as a server's address: an IP address literal (normalised) or a lowercase RFC 1123
    host name, the rule of a load balancer's backend address (`job_kinds.argtypes.Host`); so
    never an option (`-oProxyCommand=...`) where it reaches a command line. ValueError otherwise."""
    try:
        return _host_adapter().validate_python(value)
    except ValidationError:
        raise ValueError("an IP address or a lowercase RFC 1123 host name (e.g. 10.0.0.11, web1.example.com)") from None


ServerAddress = Annotated[
    str,
    StringConstraints(max_length=253),
    AfterValidator(server_address),
    Field(description="an IP address or a lowercase RFC 1123 host name"),
]


class ServerCreate(RequestModel):
    name: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    kind: ServerKind = "full"
    address: ServerAddress | None = None


class ServerCreated(WireModel):
    server: Server
    agent_token: str


class PresenceEvent(WireModel):
    """One event of `GET /v1/servers/events`: a server's agent came online or went offline."""

    server_id: str
    online: bool
    version: str | None = None
    job_kinds: list[str] | None = None  # as in `AgentInfo`, also when the agent goes offline
    at: datetime


Percent = Annotated[float, Field(ge=0, le=100)]


class PulseSample(WireModel):
    """One pulse of a server's agent: CPU use since the pulse before, memory and the home's disk
    in use, in percent (null: not known), at the agent's time."""

    at: datetime
    cpu: Percent | None = None
    memory: Percent | None = None
    disk: Percent | None = None


class PulseEvent(WireModel):
    """One event of `GET /v1/servers/events`: a server's latest pulses, oldest first (when the
    stream opens, every pulse the control plane holds of each online server; then each new one)."""

    server_id: str
    samples: list[PulseSample]


# --- file workspace -------------------------------------------------------------------------


# What an agent may say of a file (`Entry`, `TrashItem`, ...): the control plane refuses any other
# value before a client sees it (502 agent_error). A name is carried as the file system has it:
# control characters are legal in a Linux file name (clients draw them escaped); NUL and "/" are not.
FileName = Annotated[str, Field(max_length=255, pattern=r"^[^/\x00]*$")]
ScopePath = Annotated[str, Field(max_length=32768, pattern=r"^[^\x00]*$")]  # relative to the scope root
FileSize = Annotated[int, Field(ge=0, le=MAX_INTEGER)]
Count = Annotated[int, Field(ge=0, le=MAX_INTEGER)]
FileMode = Annotated[int, Field(ge=0, le=0o177777)]  # `st_mode`: the file type's bits and the permission bits
Permissions = Annotated[str, Field(pattern=r"^[r-][w-][xsS-][r-][w-][xsS-][r-][w-][xtT-]$")]
# A user or group name, or its number when it has none: printable.
AccountName = Annotated[str, Field(min_length=1, max_length=256, pattern=r"^[^\x00-\x1f\x7f-\x9f]+$")]
# What a user reads of a site (its domain, its slug): printable.
Label = Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[^\x00-\x1f\x7f-\x9f]+$")]


class Entry(WireModel):
    name: FileName
    path: ScopePath
    type: EntryType
    size: FileSize
    mode: FileMode
    permissions: Permissions
    owner: AccountName
    group: AccountName
    mtime: datetime
    link_target: ScopePath | None = None


@with_config(ConfigDict(strict=True))
class EntryFields(TypedDict):
    """`Entry` as the plain dict a listing carries (see the module note), to validate a listing's
    50,000 entries without building a model each: the same fields, the same rules, and strict
    (the control plane passes a listing's bytes on as the agent encoded them)."""

    name: FileName
    path: ScopePath
    type: EntryType
    size: FileSize
    mode: FileMode
    permissions: Permissions
    owner: AccountName
    group: AccountName
    mtime: datetime
    link_target: ScopePath | None


@with_config(ConfigDict(strict=True))
class ListingPage(TypedDict):
    """`Listing` with its entries checked (`EntryFields`): what the control plane validates the
    agent's encoded page against, as it comes."""

    path: ScopePath
    entries: list[EntryFields]
    next_cursor: Annotated[str, Field(max_length=1024, pattern=r"^[A-Za-z0-9_-]*$")] | None
    total: Count


LOGS_READ_ONLY = "the site's logs are read-only: copy a log into the site to keep or change it"


class Scope(WireModel):
    """Where a file path starts: a site's folder (`site`), that site's web server and PHP logs
    (`logs`, read-only: root's folder outside the site), or the server's `/home` (`root`)."""

    scope: ScopeName
    domain: Label | None = None
    slug: Label | None = None

    @property
    def read_only(self) -> bool:
        """Whether every write here is refused (`403 forbidden`): a site's logs."""
        return self.scope == "logs"

    def logs(self) -> Scope:
        """The logs scope of this site scope (the same site's web server and PHP logs)."""
        return Scope(scope="logs", domain=self.domain, slug=self.slug)


class ScopeList(WireModel):
    scopes: list[Scope]


class Listing(WireModel):
    """`fs/list`. `entries` are plain dicts with the fields of `Entry` (see the module note)."""

    path: str
    entries: list[dict[str, Any]]
    next_cursor: str | None = None
    total: int


class FileContent(WireModel):
    path: ScopePath
    content: str
    encoding: Literal["utf-8"] = "utf-8"
    size: FileSize
    mtime: datetime
    etag: str


WINDOW_LIMIT = 1024 * 1024  # bytes in one ranged `fs/read` (the viewer's window)


class FileWindow(WireModel):
    """A ranged `fs/read`: `length` bytes of any file from `offset` (empty past the end); `eof`
    says nothing follows; `size` is the file's size when it was read (a log grows)."""

    path: ScopePath
    offset: FileSize
    length: FileSize
    size: FileSize
    mtime: datetime
    data_base64: str
    eof: bool

    @property
    def data(self) -> bytes:
        return base64.b64decode(self.data_base64)


# --- jobs -----------------------------------------------------------------------------------

JobStatus = Literal["queued", "running", "succeeded", "failed", "cancelled", "interrupted"]
JobGroup = Literal["observe", "content", "infra", "sysadmin"]
FINISHED_STATUSES: frozenset[str] = frozenset({"succeeded", "failed", "cancelled", "interrupted"})


class JobKindInfo(WireModel):
    kind: str
    domain: str
    action: str
    read: bool
    group: JobGroup
    min_plan: Plan
    args_schema: dict[str, Any]
    secret_fields: list[str]
    summary: str = ""
    route: str | None = None  # made only through this route (load balancers, backups): not a plain job
    result_schema: dict[str, Any] | None = None  # what the kind prints with --json (None: not declared)
    confirm: str | None = None  # destructive: the argument a client has typed again before it runs


class JobKindList(WireModel):
    kinds: list[JobKindInfo]


class JobCreate(RequestModel):
    kind: str = Field(max_length=100)
    args: dict[str, Any] = Field(default_factory=dict)
    lookup: bool = Field(
        False,
        description="a read run by a client for itself (a form's choices), not by its user: kept out of the"
        " server's job history unless asked for (`?lookups=true`), audited as any job; a read kind only",
    )


class Job(WireModel):
    id: str
    server_id: str
    kind: str
    args: dict[str, Any]
    status: JobStatus
    exit_code: int | None = None
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    result: Any = None
    cached: bool = False
    cached_at: datetime | None = None
    created_by: str | None = None
    lookup: bool = False


class JobList(WireModel):
    jobs: list[Job]


class JobLine(WireModel):
    """One `event: line` of a job stream (bulk: the client keeps these as dicts)."""

    seq: int
    stream: Literal["stdout", "stderr"]
    text: str
    at: datetime


class JobExit(WireModel):
    exit_code: int | None
    status: JobStatus


# --- audit ----------------------------------------------------------------------------------


class AuditActor(WireModel):
    user_id: str | None = None
    email: str | None = None


class AuditEntry(WireModel):
    id: str
    at: datetime
    actor: AuditActor
    server_id: str | None = None
    action: str
    target: str | None = None
    details: dict[str, Any]
    outcome: Literal["ok", "error"]
    error_code: str | None = None


class AuditList(WireModel):
    entries: list[AuditEntry]


# --- file workspace: writes ------------------------------------------------------------------

# The largest JSON request body a route takes (413 `too_large` past it, before it is parsed);
# the routes that take more say so in the OpenAPI document (`x-body-limit`).
JSON_BODY_LIMIT = 1024 * 1024
RELAY_UPLOAD_LIMIT = 64 * 1024 * 1024  # bytes through the control plane in one request body
DIRECT_UPLOAD_LIMIT = 2 * 1024**3  # bytes in one PUT on an agent's ingress (fs/upload/direct)
READ_LIMIT = 10 * 1024 * 1024  # the editor's read and write limit
MAX_PATHS = 10_000  # paths in one move, copy, delete or chmod request (clients send more in batches)
MAX_ARCHIVE_PATHS = 100_000  # paths in one archive: one compress is one operation, it cannot be batched
# `fs/write`: the largest JSON a text of READ_LIMIT bytes can take (each byte a control character,
# escaped as \u00XX), and room for the other fields.
FS_WRITE_BODY_LIMIT = 6 * READ_LIMIT + JSON_BODY_LIMIT
# Requests that carry lists of paths (up to MAX_PATHS, MAX_ARCHIVE_PATHS for an archive).
PATH_LIST_BODY_LIMIT = 16 * 1024 * 1024


class FsRequest(RequestModel):
    scope: ScopeName
    domain: str | None = Field(default=None, max_length=253)


class FsWrite(FsRequest):
    path: str = Field(max_length=4096)
    content: str = Field(max_length=READ_LIMIT)
    if_match: str | None = Field(default=None, max_length=128)
    create_only: bool = False


class FsWriteResult(WireModel):
    entry: Entry
    etag: str


class FsMkdir(FsRequest):
    path: str = Field(max_length=4096)
    parents: bool = False


class FsEntryResult(WireModel):
    entry: Entry


class FsDestination(RequestModel):
    """Where a move or copy goes when it leaves the source scope (cross-site or cross-server)."""

    server_id: str | None = Field(default=None, max_length=100)
    scope: ScopeName | None = None
    domain: str | None = Field(default=None, max_length=253)


class FsMoveCopy(FsRequest):
    paths: list[str] = Field(min_length=1, max_length=MAX_PATHS)
    destination: str = Field(max_length=4096)
    overwrite: bool = False
    to: FsDestination | None = None


class FsDelete(FsRequest):
    paths: list[str] = Field(min_length=1, max_length=MAX_PATHS)
    permanent: bool = False


class FsChmod(FsRequest):
    paths: list[str] = Field(min_length=1, max_length=MAX_PATHS)
    mode: int | str
    recursive: bool = False
    only: Literal["files", "dirs"] | None = None


class FsArchive(FsRequest):
    paths: list[str] = Field(min_length=1, max_length=MAX_ARCHIVE_PATHS)
    format: Literal["zip", "tar.gz"]
    destination: str = Field(max_length=4096)


ExtractConflicts = Literal["refuse", "skip", "overwrite"]


class FsExtract(FsRequest):
    path: str = Field(max_length=4096)
    destination: str = Field(max_length=4096)
    on_conflict: ExtractConflicts = "refuse"


class FsTrashRestore(FsRequest):
    ids: list[str] = Field(min_length=1, max_length=10000)
    overwrite: bool = False


class FsUploadDirect(FsRequest):
    path: str = Field(max_length=4096)
    size: int = Field(ge=0)
    overwrite: bool = False


TRASH_FOLDER = ".Trash"
"""The scope's trash: the folder of that name at the scope's root, where the agent keeps deleted
items (see `TrashItem`); file panels leave it out of their listings, the trash dialog shows it."""


class TrashItem(WireModel):
    id: str
    name: FileName
    original_path: ScopePath
    deleted_at: datetime
    size: FileSize
    type: EntryType


class FsMoveResult(WireModel):
    """`fs/move`: the paths where the moved items are now. Across servers also what was left out
    (`skipped`: special files, links leading out of the scope) and what is in place at the
    destination but could not be removed at the source (`left_at_source`)."""

    moved: list[str]
    skipped: list[str] = Field(default_factory=list)
    left_at_source: list[str] = Field(default_factory=list)


class FsCopyResult(WireModel):
    """`fs/copy`: the paths of the copies, and what was left out (`skipped`: FIFOs, sockets,
    devices; across servers also links leading out of the scope)."""

    copied: list[str]
    skipped: list[str] = Field(default_factory=list)


class FsTrashed(WireModel):
    """`fs/delete` to the trash: one item per deleted path (an item inside another goes with it)."""

    trashed: list[TrashItem]


class FsDeleted(WireModel):
    """`fs/delete` with `permanent`: the paths that are gone for good."""

    deleted: list[str]


FsDeleteResult: TypeAlias = FsTrashed | FsDeleted


class FsChmodResult(WireModel):
    changed: Count


class FsDirSize(WireModel):
    """`fs/dirsize`: a folder's total, walked on the server (a file counts itself)."""

    path: str
    bytes: Count
    files: Count
    dirs: Count


class FsExtractCheck(WireModel):
    """`fs/extract/check`: what extracting an archive into a folder would meet, nothing written.
    One name in `roots` is a single-root archive; `conflicts` (the first 500 of
    `conflicts_total`) exist already, `clashes` are those where a folder meets a file."""

    entries: Count
    bytes: Count
    roots: list[str]
    conflicts: list[str]
    conflicts_total: Count
    clashes: list[str]


class FsSearchMatch(WireModel):
    """One match of `fs/search`: the entry; a content search adds the line number and its text."""

    entry: Entry
    line: Count | None = None
    text: str | None = None


class FsSearchResult(WireModel):
    matches: list[FsSearchMatch]
    truncated: bool


class FsFound(WireModel):
    """`fs/find`: where the match (or the line asked for) starts in the file, and the number of its
    line (1: the first, as content search counts); both null when there is none. `size`: the
    file's size when it was searched (a log grows)."""

    offset: FileSize | None
    line: Count | None
    size: FileSize


class FsTrashList(WireModel):
    """`fs/trash`: the scope's trash, and how many items older than 30 days opening it purged."""

    items: list[TrashItem]
    purged: Count


class FsRestoreResult(WireModel):
    restored: list[str]


class FsEmptyTrashResult(WireModel):
    removed: Count


class OperationStarted(WireModel):
    operation_id: str


class DirectUpload(WireModel):
    url: str | None = None
    expires_at: datetime | None = None


class DirectDownload(DirectUpload):
    """A signed one-time `GET` URL on the server's ingress (``url: null``: it has none)."""
