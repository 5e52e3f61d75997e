"""Time as the contract writes it: RFC 3339 UTC with a `Z`."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    return datetime.now(UTC)


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def now_iso() -> str:
    return iso(utcnow())


def parse(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
