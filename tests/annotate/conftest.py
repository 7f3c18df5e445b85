"""Fixtures of the annotate tests: a real catalog and store with landed synthetic robot episodes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sluice_world import World, make_world


@pytest.fixture
def world(tmp_path: Path, migrated_database_url: str) -> Iterator[World]:
    w = make_world(tmp_path / "home", migrated_database_url)
    try:
        yield w
    finally:
        w.close()
