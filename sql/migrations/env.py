"""Alembic environment for the Sluice catalog.

Run it through :mod:`pipeline.catalog.migrate`, which hands over an open connection, the advisory lock
key that serialises migrators and (for autogenerate) the models' metadata in ``config.attributes``; there
is no ``alembic.ini``. This file imports
nothing from ``pipeline`` so that old revisions keep running whatever the models look like today.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import text

config = context.config


def run_migrations_offline() -> None:
    """Emit SQL instead of running it (``alembic upgrade --sql``)."""
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is None:
        raise RuntimeError("run migrations through pipeline.catalog.migrate, which passes a connection")
    context.configure(
        connection=connection,
        target_metadata=config.attributes.get("target_metadata"),
        compare_type=True,
    )
    with context.begin_transaction():
        # Held until the migration transaction ends: Postgres DDL is transactional, so a second migrator
        # waits here and then finds the schema already at the revision it wanted.
        lock_key = config.attributes["lock_key"]
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": lock_key})
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
