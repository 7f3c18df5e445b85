"""The system of record: the Postgres catalog every step writes its rows into.

* :mod:`~pipeline.catalog.models` – the schema as SQLAlchemy models (and the enum CHECKs it mirrors).
* :mod:`~pipeline.catalog.migrate` – Alembic migrations under ``sql/migrations``: ``upgrade``, ``downgrade``,
  ``current``.
* :mod:`~pipeline.catalog.roles` – the ingest writer and curation reader roles and their grants.
* :mod:`~pipeline.catalog.repo` – engines, sessions and the idempotent upsert API the steps call.
"""

from pipeline.catalog.engine import make_engine, make_session_factory, session_scope

__all__ = ["make_engine", "make_session_factory", "session_scope"]
