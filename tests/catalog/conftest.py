"""Catalog fixtures: a freshly migrated database, the two roles on it, and sessions."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy.orm import Session

from pipeline.catalog.engine import make_engine, make_session_factory
from pipeline.catalog.roles import RoleUrls, ensure_roles


@pytest.fixture
def role_urls(migrated_database_url: str, role_passwords: tuple[str, str]) -> RoleUrls:
    """The ingest writer and curation reader, granted on the migrated database."""
    return ensure_roles(migrated_database_url, *role_passwords)


@pytest.fixture
def writer_session(role_urls: RoleUrls) -> Iterator[Session]:
    """A session of the ingest writer role, so every API test also proves the role may do it."""
    engine = make_engine(role_urls.writer_url, pool_size=1)
    factory = make_session_factory(engine)
    with factory() as db_session:
        yield db_session
    engine.dispose()
