"""Storage: the schema, its migrations, and the queries of each area."""

from control_plane.storage.db import Database

__all__ = ["Database"]
