"""fleetdeck's typed `/v1` client: `Client`, the wire models, and one exception per error code."""

from api_client import errors, models
from api_client.client import Client
from api_client.errors import ApiError, FleetdeckError, TransportError
from api_client.models import Entry, FileContent, Listing, Me, Scope, Server
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
