"""Orchestration fixtures: clients on a migrated catalog and a small local drop (vendor: orchestrate_helpers)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.settings import Settings, load_settings
from pipeline.steps.base import StepContext


@pytest.fixture
def drop(tmp_path: Path) -> Path:
    """Five files of distinct bytes (ingest lands bytes; it does not read them)."""
    folder = tmp_path / "drop"
    folder.mkdir()
    for index, size in enumerate((3000, 1000, 2000, 5000, 4000)):
        (folder / f"part_{index}.mcap").write_bytes(bytes([index + 1]) * size)
    (folder / "notes.txt").write_text("not an input")
    return folder


@pytest.fixture
def settings(tmp_path: Path, migrated_database_url: str) -> Settings:
    return load_settings(
        home=tmp_path / "home",
        database_url=migrated_database_url,
        store_url=str(tmp_path / "store"),
        vendors_dir=tmp_path,
        project_dir=tmp_path,
    )


@pytest.fixture
def ctx(settings: Settings) -> Iterator[StepContext]:
    from pipeline.steps.runner import build_context

    context = build_context(settings)
    yield context
    context.engine.dispose()
