"""Warehouse fixtures: a migrated catalog filled through its own upsert API, and a warehouse file path."""

from __future__ import annotations

from pathlib import Path

import pytest

# The catalog fixtures live beside the SyntheticCatalog they build, shared with tests/datasets.
from synthetic_catalog import catalog, catalog_engine

__all__ = ["catalog", "catalog_engine", "warehouse_path"]


@pytest.fixture
def warehouse_path(tmp_path: Path) -> Path:
    return tmp_path / "warehouse" / "warehouse.duckdb"
