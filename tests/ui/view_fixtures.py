"""Fixtures shared by ``tests/ui`` and ``tests/report``.

The world is written once per test module into its own migrated database (the view only reads it), and
read through the curation reader with read-only transactions. A test that changes rows asks for
:func:`fresh_world` instead.
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from world import World, build_world

from pipeline.catalog import migrate
from pipeline.catalog.engine import make_engine
from pipeline.catalog.roles import RoleUrls, ensure_roles
from pipeline.catalog.views import read_only_engine
from pipeline.pgserver import LocalPostgres
from pipeline.ui.pages import ViewSources

_databases = itertools.count()


@dataclass(frozen=True)
class WorldDb:
    url: str  # the owner's URL
    roles: RoleUrls
    world: World


def _build(url: str, store: Path) -> WorldDb:
    roles = ensure_roles(url, secrets.token_urlsafe(16), secrets.token_urlsafe(16))
    engine = make_engine(url, pool_size=1)
    try:
        return WorldDb(url, roles, build_world(engine, store))
    finally:
        engine.dispose()


@pytest.fixture(scope="module")
def world_db(pg_server: LocalPostgres, tmp_path_factory: pytest.TempPathFactory) -> WorldDb:
    url = pg_server.create_database(f"ui_world_{next(_databases)}")
    migrate.upgrade(url)
    return _build(url, tmp_path_factory.mktemp("store"))


@pytest.fixture(scope="module")
def world(world_db: WorldDb) -> World:
    return world_db.world


@pytest.fixture(scope="module")
def role_urls(world_db: WorldDb) -> RoleUrls:
    return world_db.roles


@pytest.fixture(scope="module")
def sources(world_db: WorldDb) -> Iterator[ViewSources]:
    """What the view reads through: the curation reader role, read-only transactions, no warehouse."""
    engine = read_only_engine(world_db.roles.reader_url)
    try:
        yield ViewSources(engine=engine)
    finally:
        engine.dispose()


@pytest.fixture
def fresh_world(migrated_database_url: str, tmp_path: Path) -> WorldDb:
    """A world of the test's own, for tests that change rows."""
    return _build(migrated_database_url, tmp_path / "store")
