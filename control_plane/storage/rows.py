"""Stored rows read as wire models (`Model.model_validate(row)`): what a column keeps in another
form than the model's field is said once, on the field, by the annotations here."""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import BeforeValidator


def _decoded(value: Any) -> Any:
    return orjson.loads(value) if isinstance(value, str | bytes) else value


StoredJson = BeforeValidator(_decoded)
"""A column that keeps its value as JSON text (a job's arguments, a health check, stats)."""
