"""Alembic environment: always run programmatically by `control_plane.storage.migrate`.

`target_metadata` is the schema of `schema.py`, so alembic's comparison (autogenerate, and
`tests/control_plane/storage/test_migrations.py`) can tell when the migrations and the tables there disagree.
"""

from alembic import context

from control_plane.storage.schema import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
