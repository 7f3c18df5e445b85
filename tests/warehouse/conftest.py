"""Warehouse fixtures: a migrated catalog filled through its own upsert API, and a warehouse file path."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine
from synthetic_catalog import SyntheticCatalog

from pipeline.catalog.engine import make_engine


@pytest.fixture
def catalog_engine(migrated_database_url: str) -> Iterator[Engine]:
    engine = make_engine(migrated_database_url, pool_size=2)
    yield engine
    engine.dispose()


@pytest.fixture
def catalog(catalog_engine: Engine) -> SyntheticCatalog:
    return SyntheticCatalog(catalog_engine)


@pytest.fixture
def warehouse_path(tmp_path: Path) -> Path:
    return tmp_path / "warehouse" / "warehouse.duckdb"
