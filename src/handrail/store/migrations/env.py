"""Alembic environment: migrations run on a connection handed in by SqlStore.migrate."""

from alembic import context

from handrail.store._tables import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
