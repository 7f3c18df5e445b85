"""Fixtures for the ingest tests: one synthetic robot drop per session, databases that outlive one test."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import pytest

from pipeline.pgserver import LocalPostgres
from pipeline.synth import DropManifest, RobotDefect, RobotDropConfig, make_robot_drop
from pipeline.synth.defects import defect_applies

# Tiny frames and short episodes: every test reads each file once or twice; what matters is structure.
# 1.5 s at 30 Hz gives 45 frames per camera, above acme's 30-frame and 1 s minimums.
# (the flavor-specific defects, corrupt pictures and renamed joints, are ingested in tests/families)
ROBOT_DROP = RobotDropConfig(
    episodes=2, seconds=1.5, width=64, height=48, robots=2, episodes_per_session=3,
    defects=tuple(d for d in RobotDefect if defect_applies(d, "default")),
)  # fmt: skip

_db_counter = itertools.count()


@pytest.fixture(scope="session")
def robot_drop(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, DropManifest]:
    """A synthetic robot drop (clean episodes plus one file per defect); copy it before changing it."""
    root = tmp_path_factory.mktemp("robot-drop") / "drop"
    manifest = make_robot_drop(root, ROBOT_DROP)
    for path in root.rglob("*"):
        if path.is_file():
            path.chmod(0o444)  # a template: tests work on copies
    return root, manifest


@pytest.fixture(scope="module")
def module_database(pg_server: LocalPostgres) -> Callable[[str], str]:
    """A factory of migrated databases that live as long as the module (for fixtures that ingest once)."""
    from pipeline.catalog import migrate

    def make(stem: str) -> str:
        url = pg_server.create_database(f"ingest{next(_db_counter)}_{stem}"[:60])
        migrate.upgrade(url)
        return url

    return make
