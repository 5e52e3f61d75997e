"""The params of the agent link's frames as models: the agent's hello and the calls it serves.

`contract.link.protocol` specifies the frames; this module says what their fields may hold, once,
for both ends: the control plane validates a hello with `Hello`, the agent the params of each
``job.*`` and ``fs.*`` call with the model of its method (`params_of`). The wire is JSON, so the
models are strict: a number is never taken for a string nor a boolean for a number, and the only
conversions are the few the protocol names (null for an absent flag or limit, an octal string for
a mode). Unknown fields are ignored, so either end may add one without breaking an older peer.

Only small params are modelled (microseconds to validate); bulk data (a listing's entries, a
job's lines) travels as plain JSON, as `contract.models` says of its bulk shapes.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal, TypeVar, get_args
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from contract.job_kinds.base import KIND_RE
from contract.link.protocol import MAX_JOB_KINDS, RpcError
from contract.models import MAX_ARCHIVE_PATHS, MAX_INTEGER, MAX_PATHS, WINDOW_LIMIT, ScopeName, server_address

M = TypeVar("M", bound=BaseModel)

MAX_JOB_ID: Final = 128
MAX_CURSOR: Final = 1024  # base64 of a file name (at most 255 bytes)
DEFAULT_LIST_LIMIT: Final = 5000
MAX_LIST_LIMIT: Final = 50_000
DEFAULT_SEARCH_LIMIT: Final = 500
MAX_SEARCH_LIMIT: Final = 10_000
MAX_FIND_QUERY: Final = 256  # as fs/search's query
MAX_MODE: Final = 0o7777
ArchiveFormat = Literal["zip", "tar.gz"]
OnConflict = Literal["refuse", "skip", "overwrite"]  # a name an extraction finds taken
ARCHIVE_FORMATS: Final[tuple[ArchiveFormat, ...]] = get_args(ArchiveFormat)
ON_CONFLICT: Final[tuple[OnConflict, ...]] = get_args(OnConflict)
MAX_HELLO_FIELD: Final = 1024
MAX_HANDLERS: Final = 1000
# What users see of an agent: its version is a short token, its ingress URL printable ASCII.
VERSION_RE: Final = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+_~-]{0,63}")
PLAIN_URL_RE: Final = re.compile(r"[!-~]+")
_OCTAL_RE: Final = re.compile(r"^0?o?[0-7]{1,4}$")
TRANSFER_ID_RE: Final = re.compile(r"[0-9a-f]{32}")
SSH_ED25519_RE: Final = re.compile(r"(ssh-ed25519) ([A-Za-z0-9+/]+={0,2})(?: .*)?")


class LinkParams(BaseModel):
    """Base of the link's params: strict (JSON types as they are), unknown fields ignored."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


def params_of(model: type[M], params: Mapping[str, Any]) -> M:
    """`params` as `model`, for a handler of the agent.

    Raises:
        RpcError: ``validation_error``, its message naming the first refused field and why
            (``limit: Input should be less than or equal to 50000``), its details listing each
            refused field as the `/v1` API's 422 does (``{"errors": [{"loc", "msg"}]}``), never
            the value: it may be anything.
    """
    try:
        return model.model_validate(params)
    except ValidationError as exc:
        raise RpcError("validation_error", *refusal(exc)) from None


def refusal(exc: ValidationError) -> tuple[str, dict[str, Any]]:
    """The message and details of a refused frame: where (a dotted name such as ``paths.3``)
    and why, without the value."""
    refused = exc.errors(include_url=False)
    where = ".".join(str(part) for part in refused[0]["loc"])
    message = f"{where}: {refused[0]['msg']}" if where else refused[0]["msg"]
    return message, {"errors": [{"loc": list(e["loc"]), "msg": e["msg"]} for e in refused]}


def _none_is(default: object) -> BeforeValidator:
    """A field whose null means its default, as an absent field does."""
    return BeforeValidator(lambda value: default if value is None else value)


def _octal(value: Any) -> Any:
    """A mode given as an octal string (``"755"``, ``"0o644"``) as its number."""
    if isinstance(value, str) and _OCTAL_RE.match(value):
        return int(value.replace("o", ""), 8)
    if isinstance(value, str):
        raise PydanticCustomError("octal", "an octal string must be 1 to 4 octal digits, as 755 or 0o644")
    return value


def _printable(value: str) -> str:
    if not value.isprintable():
        raise PydanticCustomError("printable", "must be printable text")
    return value


def _fullmatch(pattern: re.Pattern[str], what: str) -> AfterValidator:
    def check(value: str) -> str:
        if not pattern.fullmatch(value):
            raise PydanticCustomError("pattern", "must be {what}", {"what": what})
        return value

    return AfterValidator(check)


def _web_url(value: str) -> str:
    """An http(s) URL with a host: clients are sent to it and it is shown to users, so nothing
    else (``javascript:``, escape codes) gets through."""
    try:
        parts = urlsplit(value)
        host = parts.hostname
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        raise PydanticCustomError("url", "must be a URL") from None
    if parts.scheme not in ("http", "https") or not host:
        raise PydanticCustomError("url", "must be an http or https URL with a host")
    return value


def _address(value: str) -> str:
    """An IP address or a host name, never an option of ssh's (see `contract.models.server_address`)."""
    try:
        return server_address(value)
    except ValueError:
        raise PydanticCustomError("address", "must be an IP address or a host name") from None


def _ip(value: str) -> str:
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise PydanticCustomError("ip", "must be an IP address") from None


def _word(value: str) -> str:
    """A user name for ssh's ``-l``: one printable word that is not an option."""
    if not value or value.startswith("-") or not value.isprintable() or " " in value:
        raise PydanticCustomError("word", "must be a user name")
    return value


def _one_line(value: str) -> str:
    if "\n" in value:
        raise PydanticCustomError("line", "must be one line")
    return value


Flag = Annotated[bool, _none_is(False)]
JobId = Annotated[str, Field(min_length=1, max_length=MAX_JOB_ID)]
HelloText = Annotated[str, Field(max_length=MAX_HELLO_FIELD), AfterValidator(_printable)]
KindName = Annotated[str, Field(max_length=MAX_HELLO_FIELD), _fullmatch(KIND_RE, "a kind such as site.list")]
# What a kind needs that this server lacks: a Debian package's name (or the software's), one short line.
NeedText = Annotated[HelloText, Field(min_length=1, max_length=200)]
NeedsMap = Annotated[dict[KindName, NeedText], Field(max_length=MAX_JOB_KINDS)]


# --- the hello (agent → control plane) ------------------------------------------------------


class Hello(LinkParams):
    """The agent's first message (see `contract.link.protocol`, Handshake). ``direct_ingress_url``,
    ``job_kinds`` and ``kernel_protections`` are null (or absent) from an agent older than them."""

    version: Annotated[HelloText, _fullmatch(VERSION_RE, "a short token such as 1.4.2")]
    boot_id: HelloText
    hostname: HelloText
    handlers: list[Annotated[str, Field(max_length=MAX_HELLO_FIELD)]] = Field(max_length=MAX_HANDLERS)
    direct_ingress_url: (
        Annotated[
            str,
            Field(max_length=MAX_HELLO_FIELD),
            _fullmatch(PLAIN_URL_RE, "printable ASCII without spaces"),
            AfterValidator(_web_url),
        ]
        | None
    ) = None
    job_kinds: (
        list[Annotated[str, Field(max_length=MAX_HELLO_FIELD), _fullmatch(KIND_RE, "a kind such as site.list")]] | None
    ) = Field(default=None, max_length=MAX_JOB_KINDS)
    kernel_protections: dict[str, bool | None] | None = None  # `protocol.KERNEL_PROTECTIONS` are read
    needs: NeedsMap | None = None


class Needs(LinkParams):
    """The ``needs`` frame (agent → control plane): the kinds that cannot run here, as they are now."""

    needs: NeedsMap


Percent = Annotated[float, Field(ge=0, le=100, allow_inf_nan=False)]


class Pulse(LinkParams):
    """The ``pulse`` frame (agent → control plane): the server's CPU, memory and disk in use, in
    percent (null: not known), at the agent's unix time ``at``."""

    at: float = Field(gt=0, allow_inf_nan=False)
    cpu: Percent | None
    memory: Percent | None
    disk: Percent | None


# --- job.* ------------------------------------------------------------------------------------


class JobRun(LinkParams):
    job_id: JobId
    kind: str = Field(min_length=1)
    argv: list[str]
    secrets: Annotated[dict[str, str], _none_is({})] = Field(default_factory=dict)
    runs: Flag = False  # lines as runs (`agent.jobs.manager.Job.runs_after`)


class JobAttach(LinkParams):
    job_id: JobId
    after: int = Field(default=0, ge=0)
    acked: int = Field(default=0, ge=0)  # the last line the control plane stored: at most `after`
    runs: Flag = False

    @model_validator(mode="after")
    def _acked_at_most_after(self) -> JobAttach:
        if self.acked > self.after:
            raise PydanticCustomError("acked", "acked must be at most after")
        return self


class JobCancel(LinkParams):
    job_id: JobId


class JobJournal(LinkParams):
    job_ids: list[JobId] | None = None  # None: all


# --- fs.* -------------------------------------------------------------------------------------


class FsParams(LinkParams):
    """A call on a scope: ``domain`` names the site of a site or logs scope."""

    scope: ScopeName
    domain: str | None = Field(default=None, max_length=253)


class FsPath(FsParams):
    """fs.stat, fs.dirsize, fs.download, fs.extract.check's archive."""

    path: str = ""


class FsList(FsPath):
    cursor: str | None = Field(default=None, max_length=MAX_CURSOR)
    limit: Annotated[int, _none_is(DEFAULT_LIST_LIMIT), Field(ge=1, le=MAX_LIST_LIMIT)] = DEFAULT_LIST_LIMIT
    encoded: Flag = False  # streamed: the bytes of the page's JSON document


class FsPaths(FsParams):
    """A call on up to `MAX_PATHS` paths (clients send more in batches)."""

    paths: list[str] = Field(min_length=1, max_length=MAX_PATHS)


class FsRead(FsPath):
    """The whole text file, or with ``offset`` or ``length`` a window of bytes of any file."""

    offset: int | None = Field(default=None, ge=0, le=MAX_INTEGER)
    length: int | None = Field(default=None, ge=0, le=WINDOW_LIMIT)


class FsWrite(FsPath):
    content: str
    if_match: str | None = None
    create_only: Flag = False


class FsMkdir(FsPath):
    parents: Flag = False


class FsTarget(LinkParams):
    """The destination scope of a cross-scope move or copy, on this same server."""

    scope: ScopeName | None = None
    domain: str | None = Field(default=None, max_length=253)
    server_id: str | None = None

    @model_validator(mode="after")
    def _this_server(self) -> FsTarget:
        if self.server_id is not None:
            raise PydanticCustomError("server", "a transfer to another server is not done by fs.move or fs.copy")
        return self


class FsTransfer(FsPaths):
    """fs.move and fs.copy."""

    destination: str
    overwrite: Flag = False
    to: FsTarget | None = None

    def target(self) -> dict[str, Any] | None:
        """The scope of `to` (None: this call's own): its scope, else a site's when it names a
        domain, else this call's; its domain, else this call's when both are a site scope."""
        if self.to is None:
            return None
        scope = self.to.scope or ("site" if self.to.domain else self.scope)
        own = self.domain if scope == "site" else None
        return {"scope": scope, "domain": self.to.domain if "domain" in self.to.model_fields_set else own}


class FsDelete(FsPaths):
    permanent: Flag = False


class FsTrashRestore(FsParams):
    ids: list[str] = Field(min_length=1, max_length=MAX_PATHS)
    overwrite: Flag = False


class FsChmod(FsPaths):
    mode: Annotated[int, BeforeValidator(_octal), Field(ge=0, le=MAX_MODE)]
    recursive: Flag = False
    only: Literal["files", "dirs"] | None = None


class FsSearch(FsPath):
    query: str = Field(min_length=1)
    content: Flag = False
    limit: Annotated[int, _none_is(DEFAULT_SEARCH_LIMIT), Field(ge=1, le=MAX_SEARCH_LIMIT)] = DEFAULT_SEARCH_LIMIT


class FsFind(FsPath):
    """fs.find, in one file: the first match of ``query`` at or after ``offset`` (``backward``: the
    last one starting before it), case-insensitive unless ``case_sensitive``; or, with ``line``
    instead of ``query``, where that line starts."""

    query: str | None = Field(default=None, min_length=1, max_length=MAX_FIND_QUERY)
    line: int | None = Field(default=None, ge=1, le=MAX_INTEGER)
    offset: Annotated[int, _none_is(0), Field(ge=0, le=MAX_INTEGER)] = 0
    backward: Flag = False
    case_sensitive: Flag = False

    @model_validator(mode="after")
    def _query_or_line(self) -> FsFind:
        if (self.query is None) == (self.line is None):
            raise PydanticCustomError("query_or_line", "give either query or line")
        return self


class FsCompress(FsParams):
    paths: list[str] = Field(min_length=1, max_length=MAX_ARCHIVE_PATHS)  # one archive is one operation
    format: ArchiveFormat
    destination: str


class FsExtract(FsPath):
    """fs.extract and fs.extract.check (which ignores ``on_conflict``)."""

    destination: str
    on_conflict: Annotated[OnConflict, _none_is("refuse")] = "refuse"


class FsUpload(FsPath):
    """fs.upload and fs.upload.check (which has no ``size``)."""

    overwrite: Flag = False
    size: int | None = Field(default=None, ge=0, le=MAX_INTEGER)


# --- fs.xfer.*: a copy to another server (`agent.files.remote_copy`) --------------------------

TransferId = Annotated[str, _fullmatch(TRANSFER_ID_RE, "32 hex digits")]


class FsXfer(LinkParams):
    """fs.xfer.close."""

    transfer_id: TransferId


class FsXferPrepare(FsPaths):
    """fs.xfer.prepare, on the source: a key for the transfer of `paths`."""

    transfer_id: TransferId


class FsXferPush(FsXferPrepare):
    """fs.xfer.push, on the source: send `paths` over ssh to `user`@`host`:`port`."""

    host: Annotated[str, AfterValidator(_address)]
    user: Annotated[str, AfterValidator(_word)]
    port: int = Field(ge=1, le=65535)
    host_keys: Annotated[list[Annotated[str, AfterValidator(_one_line)]], _none_is([])] = Field(default_factory=list)
    remove_sources: Flag = False  # a move: the sources go once they arrived


class FsXferAccept(FsParams):
    """fs.xfer.accept, on the destination: let the source's key in, for `names` into `destination`."""

    transfer_id: TransferId
    destination: str
    overwrite: Flag = False
    names: list[str] = Field(min_length=1)  # plain names: checked by the jail's `split_path`
    public_key: Annotated[str, _fullmatch(SSH_ED25519_RE, "an ssh-ed25519 public key")]
    source_ip: Annotated[str, AfterValidator(_ip)]
