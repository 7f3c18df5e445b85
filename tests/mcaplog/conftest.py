"""Fixtures for the MCAP reader tests (the writers and the record walker live in ``mcaplog_helpers``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from mcaplog_helpers import RobotLogSpec, write_robot_log, write_small


@pytest.fixture
def small_mcap(tmp_path: Path) -> Callable[..., Path]:
    """Factory: ``small_mcap(name, **write_small options)`` writes a small log under tmp_path."""

    def make(name: str = "small.mcap", **options: object) -> Path:
        return write_small(tmp_path / name, **options)  # type: ignore[arg-type]

    return make


@pytest.fixture
def robot_log(tmp_path: Path) -> Callable[..., tuple[Path, dict[str, int]]]:
    """Factory: ``robot_log(name, **RobotLogSpec fields)`` -> (path, message counts per topic)."""

    def make(name: str = "episode.mcap", **options: object) -> tuple[Path, dict[str, int]]:
        path = tmp_path / name
        return path, write_robot_log(path, RobotLogSpec(**options))  # type: ignore[arg-type]

    return make
