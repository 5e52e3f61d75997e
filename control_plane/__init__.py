"""fleetdeck's control plane: the `/v1` API, storage, auth, audit and the agent hub."""

__version__ = "0.1.0"
