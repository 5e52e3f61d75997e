"""Storage: the schema, its migrations, and the queries of each area."""

from .db import Database

__all__ = ["Database"]
