"""Every `FLEETDECK_*` environment variable, read and checked in one place.

The towers never read the environment for their settings: the composition root loads
`Settings` here once and passes the values down (`control_plane.settings.Settings`, the agent's
options, the TUI's theme and token). The README's configuration section documents each
variable; `tests/fleetdeck/test_settings.py` fails when one is missing there.

A frozen dataclass with one parser per field, not a pydantic model: this module is on the path
to the TUI's first frame, and importing pydantic there would cost more than the frame itself
(`benchmarks/startup.py`); the TUI loads pydantic afterwards, off its main thread.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from ipaddress import IPv4Network, IPv6Network, ip_network
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from control_plane.settings import ServerName
    from control_plane.settings import Settings as ControlPlaneSettings

LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
LOG_LEVELS: tuple[LogLevel, ...] = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
PREFIX = "FLEETDECK_"


class SettingsError(Exception):
    """A variable has a value that cannot be used; the message names it, in one line."""


def _text(value: str) -> str:
    return value


def _log_level(value: str) -> LogLevel:
    level = value.upper()
    if level not in LOG_LEVELS:
        raise ValueError(f"not a log level (one of {', '.join(LOG_LEVELS)})")
    return level


def _amount(unit: str, *, minimum: float, inclusive: bool) -> Callable[[str], float]:
    def parse(value: str) -> float:
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"not a number of {unit}") from None
        if not math.isfinite(number) or number < minimum or (number == minimum and not inclusive):
            raise ValueError(f"must be a finite number {'>=' if inclusive else '>'} {minimum:g}")
        return number

    return parse


def _megabytes(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise ValueError("not a number of MiB") from None
    if not math.isfinite(number) or number <= 0:
        raise ValueError("must be a finite number > 0")
    return number


def _server(value: str) -> ServerName:
    from control_plane.settings import SERVERS

    for server in SERVERS:
        if value.lower() == server:
            return server
    raise ValueError(f"not a server (one of {', '.join(SERVERS)})")


def _networks(value: str) -> tuple[IPv4Network | IPv6Network, ...]:
    networks = []
    for part in value.split(","):
        try:
            networks.append(ip_network(part.strip(), strict=False))
        except ValueError:
            raise ValueError(f"{part.strip()!r} is not an IP address or network (comma-separated)") from None
    return tuple(networks)


def _port(value: str) -> int:
    if not value.isdigit() or not 1 <= int(value) <= 65535:
        raise ValueError("not a TCP port (1 to 65535)")
    return int(value)


@dataclass(frozen=True)
class Settings:
    """The environment's settings; a variable that is unset or empty keeps its default."""

    url: str | None = None
    token: str | None = field(default=None, repr=False)
    db: str | None = None
    local_db: str | None = None
    agent_token: str | None = field(default=None, repr=False)
    theme: str | None = None
    log: LogLevel | None = None
    heartbeat_s: float = 30.0  # control_plane.settings.Settings.heartbeat_s says why
    job_grace_s: float = 30.0
    transfer_timeout_s: float = 6 * 3600.0
    job_output_cap_mb: float = 16.0
    agent_ssh_port: int = 22
    local_idle_minutes: float = 10.0
    server: ServerName | None = None
    bus_url: str | None = None
    trusted_proxies: tuple[IPv4Network | IPv6Network, ...] = ()

    def log_level(self, default: LogLevel) -> LogLevel:
        """`FLEETDECK_LOG`, else the command's own default."""
        return self.log or default

    def for_control_plane(self, db_url: str, *, default_server: ServerName) -> ControlPlaneSettings:
        """The control plane's settings: its database, its server (`FLEETDECK_SERVER`, else the
        command's own default), and the timings set here."""
        from control_plane.settings import Settings as ControlPlaneSettings

        return ControlPlaneSettings(
            db_url=db_url,
            server=self.server or default_server,
            heartbeat_s=self.heartbeat_s,
            job_grace_s=self.job_grace_s,
            transfer_timeout_s=self.transfer_timeout_s,
            job_output_cap_bytes=max(1, int(self.job_output_cap_mb * 1024 * 1024)),
            bus_url=self.bus_url,
            trusted_proxies=self.trusted_proxies,
        )


# Each field of `Settings`: its variable, and the parser that checks a value of it.
VARIABLES: dict[str, tuple[str, Callable[[str], Any]]] = {
    "url": ("FLEETDECK_URL", _text),
    "token": ("FLEETDECK_TOKEN", _text),
    "db": ("FLEETDECK_DB", _text),
    "local_db": ("FLEETDECK_LOCAL_DB", _text),
    "agent_token": ("FLEETDECK_AGENT_TOKEN", _text),
    "theme": ("FLEETDECK_THEME", _text),
    "log": ("FLEETDECK_LOG", _log_level),
    "heartbeat_s": ("FLEETDECK_HEARTBEAT_S", _amount("seconds", minimum=0, inclusive=False)),
    "job_grace_s": ("FLEETDECK_JOB_GRACE_S", _amount("seconds", minimum=0, inclusive=True)),
    "transfer_timeout_s": ("FLEETDECK_TRANSFER_TIMEOUT_S", _amount("seconds", minimum=0, inclusive=False)),
    "job_output_cap_mb": ("FLEETDECK_JOB_OUTPUT_CAP_MB", _megabytes),
    "agent_ssh_port": ("FLEETDECK_AGENT_SSH_PORT", _port),
    "bus_url": ("FLEETDECK_BUS_URL", _text),
    "local_idle_minutes": ("FLEETDECK_LOCAL_IDLE_MINUTES", _amount("minutes", minimum=0, inclusive=True)),
    "server": ("FLEETDECK_SERVER", _server),
    "trusted_proxies": ("FLEETDECK_TRUSTED_PROXIES", _networks),
}


def variable_names() -> list[str]:
    """Every variable `Settings` reads, as spelled in the environment."""
    return [VARIABLES[f.name][0] for f in fields(Settings)]


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """The settings from `environ` (the process environment by default); `SettingsError` if one is bad."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    problems: list[str] = []
    for setting in fields(Settings):
        name, parse = VARIABLES[setting.name]
        raw = env.get(name, "").strip()
        if not raw:
            continue
        try:
            values[setting.name] = parse(raw)
        except ValueError as exc:
            problems.append(f"{name}={raw!r}: {exc}")
    if problems:
        raise SettingsError("; ".join(problems))
    return Settings(**values)
