"""fleetdeck's typed `/v1` client: `Client`, on httpx, over the contract's wire models.

    async with Client("http://127.0.0.1:8080") as client:
        await client.auth.login("owner@example.com", "secret")
        for server in await client.servers.list():
            listing = await client.files.list(server.id, Scope(scope="root"), "")

The wire models, the errors (one exception per error code) and the job kinds are the `contract`
package's, which the control plane and the agent import too; they are re-exported here (`models`,
`errors` and the names a caller uses most), so that a client's user imports from one place. The
modules beneath (`_client`, `_sse`) are private.
"""

from __future__ import annotations

from api_client._client import (
    DIRECT_THRESHOLD,
    MAX_PATHS_PER_REQUEST,
    PATHS_PER_BATCH,
    BatchInterrupted,
    BatchProgress,
    Client,
    KeepGoing,
    TooManyPaths,
    archive_paths_problem,
)
from api_client._sse import Event, EventStream, SSEParser
from contract import errors, models
from contract.errors import ApiError, FleetdeckError, TransportError
from contract.models import Entry, FileContent, Listing, Me, Scope, Server

__version__ = "0.1.0"

__all__ = [
    "DIRECT_THRESHOLD",
    "MAX_PATHS_PER_REQUEST",
    "PATHS_PER_BATCH",
    "ApiError",
    "BatchInterrupted",
    "BatchProgress",
    "Client",
    "Entry",
    "Event",
    "EventStream",
    "FileContent",
    "FleetdeckError",
    "KeepGoing",
    "Listing",
    "Me",
    "SSEParser",
    "Scope",
    "Server",
    "TooManyPaths",
    "TransportError",
    "__version__",
    "archive_paths_problem",
    "errors",
    "models",
]
