"""fleetdeck's typed `/v1` client: `Client`, the wire models, and one exception per error code.

`Client`, `Event` and `EventStream` are loaded on first use (module `__getattr__`): they bring
httpx in, which the agent importing `api_client.job_kinds` (the job kinds both sides obey) does
not need.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from api_client import errors, models
from api_client.errors import ApiError, FleetdeckError, TransportError
from api_client.models import Entry, FileContent, Listing, Me, Scope, Server

if TYPE_CHECKING:
    from api_client.client import Client
    from api_client.sse import Event, EventStream

__version__ = "0.1.0"

__all__ = [
    "ApiError",
    "Client",
    "Entry",
    "Event",
    "EventStream",
    "FileContent",
    "FleetdeckError",
    "Listing",
    "Me",
    "Scope",
    "Server",
    "TransportError",
    "__version__",
    "errors",
    "models",
]

_LAZY = {"Client": "api_client.client", "Event": "api_client.sse", "EventStream": "api_client.sse"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'api_client' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
