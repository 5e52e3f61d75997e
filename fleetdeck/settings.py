"""Every `FLEETDECK_*` environment variable, read and checked in one place.

The towers never read the environment for their settings: the composition root loads
`Settings` here once and passes the values down (`control_plane.settings.Settings`, the agent's
options, the TUI's theme and token). The README's configuration section documents each
variable; `tests/test_settings.py` fails when one is missing there.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

if TYPE_CHECKING:
    from control_plane.settings import Settings as ControlPlaneSettings

LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
PREFIX = "FLEETDECK_"


class SettingsError(Exception):
    """A variable has a value that cannot be used; the message names it, in one line."""


class Settings(BaseModel):
    """The environment's settings; a variable that is unset or empty keeps its default."""

    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    url: str | None = Field(None, alias="FLEETDECK_URL", min_length=1)
    token: str | None = Field(None, alias="FLEETDECK_TOKEN", min_length=1, repr=False)
    db: str | None = Field(None, alias="FLEETDECK_DB", min_length=1)
    agent_token: str | None = Field(None, alias="FLEETDECK_AGENT_TOKEN", min_length=1, repr=False)
    theme: str | None = Field(None, alias="FLEETDECK_THEME", min_length=1)
    log: LogLevel | None = Field(None, alias="FLEETDECK_LOG")
    heartbeat_s: float = Field(10.0, alias="FLEETDECK_HEARTBEAT_S", gt=0, allow_inf_nan=False)
    job_grace_s: float = Field(30.0, alias="FLEETDECK_JOB_GRACE_S", ge=0, allow_inf_nan=False)
    transfer_timeout_s: float = Field(6 * 3600.0, alias="FLEETDECK_TRANSFER_TIMEOUT_S", gt=0, allow_inf_nan=False)
    agent_ssh_port: int = Field(22, alias="FLEETDECK_AGENT_SSH_PORT", ge=1, le=65535)

    @field_validator("log", mode="before")
    @classmethod
    def _upper_case_level(cls, value: object) -> object:
        return value.strip().upper() if isinstance(value, str) else value

    def log_level(self, default: LogLevel) -> LogLevel:
        """`FLEETDECK_LOG`, else the command's own default."""
        return self.log or default

    def for_control_plane(self, db_url: str) -> ControlPlaneSettings:
        """The control plane's settings: its database, and the timings set here."""
        from control_plane.settings import Settings as ControlPlaneSettings

        return ControlPlaneSettings(
            db_url=db_url,
            heartbeat_s=self.heartbeat_s,
            job_grace_s=self.job_grace_s,
            transfer_timeout_s=self.transfer_timeout_s,
        )


def variable_names() -> list[str]:
    """Every variable `Settings` reads, as spelled in the environment."""
    return [str(field.alias) for field in Settings.model_fields.values()]


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """The settings from `environ` (the process environment by default); `SettingsError` if one is bad."""
    env = os.environ if environ is None else environ
    values = {name: value.strip() for name, value in env.items() if name.startswith(PREFIX) and value.strip()}
    try:
        return Settings.model_validate(values)
    except ValidationError as exc:
        raise SettingsError(_one_line(exc, values)) from None


def _one_line(exc: ValidationError, values: Mapping[str, str]) -> str:
    problems = []
    for error in exc.errors():
        name = str(error["loc"][0]) if error["loc"] else "?"
        problems.append(f"{name}={values.get(name, '')!r}: {error['msg']}")
    return "; ".join(problems)
