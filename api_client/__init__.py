"""fleetdeck's typed `/v1` client: `Client`, the wire models, and one exception per error code."""

from . import errors, models
from .client import Client
from .errors import ApiError, FleetdeckError, TransportError
from .models import Entry, FileContent, Listing, Me, Scope, Server
from .sse import Event, EventStream

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
