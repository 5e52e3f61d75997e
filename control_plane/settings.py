"""Control plane settings: given on the command line, with environment overrides for tests."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import timedelta


def _env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    return float(value) if value else default


@dataclass(frozen=True)
class Settings:
    db_url: str
    session_ttl: timedelta = timedelta(days=30)
    heartbeat_s: float = field(default_factory=lambda: _env_float("FLEETDECK_HEARTBEAT_S", 10.0))
    agent_call_timeout_s: float = 30.0
    # A cross-server copy is one agent call that lasts as long as its bytes take.
    transfer_timeout_s: float = field(default_factory=lambda: _env_float("FLEETDECK_TRANSFER_TIMEOUT_S", 6 * 3600.0))
    # How long a running job waits for its agent to come back before it ends `interrupted`.
    job_grace_s: float = field(default_factory=lambda: _env_float("FLEETDECK_JOB_GRACE_S", 30.0))
