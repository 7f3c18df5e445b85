"""Dataset fixtures: a synthetic catalog (shared with the warehouse tests), a warehouse, a local store."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "warehouse"))

# The catalog fixtures live beside the SyntheticCatalog they build, shared with tests/warehouse.
from synthetic_catalog import catalog, catalog_engine

from pipeline.datasets import DatasetSpec, DatasetVersion, build
from pipeline.store import Store
from pipeline.warehouse import sync

__all__ = ["build_now", "catalog", "catalog_engine", "store", "warehouse_path"]


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "store")


@pytest.fixture
def warehouse_path(tmp_path: Path) -> Path:
    return tmp_path / "warehouse.duckdb"


@pytest.fixture
def build_now(
    catalog_engine: Engine, warehouse_path: Path, store: Store
) -> Callable[[DatasetSpec], DatasetVersion]:
    """Sync the warehouse with the catalog, then build ``spec``: what ``sluice dataset build`` does."""

    def run(spec: DatasetSpec) -> DatasetVersion:
        sync(catalog_engine, warehouse_path)
        return build(spec, engine=catalog_engine, warehouse_path=warehouse_path, store=store)

    return run
