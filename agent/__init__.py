"""fleetdeck's agent: a pure-trio process on each server, linked to the control plane."""

__version__ = "0.1.0"
