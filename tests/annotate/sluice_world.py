"""A small real world for the annotate, dedup, shard and export tests: synthetic drops landed and gated by
the real ingest and quality_pre steps into a real (migrated) catalog and a local store."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from pipeline.config import VendorConfig
from pipeline.enums import FileState
from pipeline.settings import Settings, load_settings
from pipeline.steps.base import StepContext, WorkItem
from pipeline.steps.ingest import IngestStep
from pipeline.steps.quality_pre import QualityPreStep
from pipeline.steps.runner import build_context, run_step

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class World:
    settings: Settings
    ctx: StepContext

    def close(self) -> None:
        self.ctx.engine.dispose()


def make_world(home: Path, database_url: str) -> World:
    settings = load_settings(home=home, database_url=database_url, project_dir=home)
    return World(settings, build_context(settings, code_version="test"))


def vendor_from_example(example: str, drop: Path, **overrides: Any) -> VendorConfig:
    """An example vendor file (``dags/vendors/<example>.yaml``) pointed at ``drop``, sections overridden."""
    data = yaml.safe_load((REPO_ROOT / "dags" / "vendors" / f"{example}.yaml").read_text())
    data["source"] = {**data["source"], "url": str(drop), "settle_s": 0}
    data["source"].pop("ready_marker", None)
    data.update(overrides)
    return VendorConfig.model_validate(data)


def land(world: World, vendor: VendorConfig, drop: Path, pattern: str) -> dict[str, int]:
    """Ingest and gate every file of ``drop`` matching ``pattern``; returns path -> episode id (accepted)."""
    from sqlalchemy import select

    from pipeline.catalog import make_session_factory, session_scope
    from pipeline.catalog.models import Episode, SourceFile

    files = sorted(p for p in drop.rglob(pattern) if p.is_file())
    items = [
        WorkItem(
            key=str(p.relative_to(drop)), source_path=str(p.relative_to(drop)), size_bytes=p.stat().st_size
        )
        for p in files
    ]
    run_step(IngestStep(vendor, world.ctx), items)
    run_step(QualityPreStep(vendor, world.ctx), items)
    with session_scope(make_session_factory(world.ctx.engine)) as session:
        rows = session.execute(
            select(SourceFile.path, Episode.id, Episode.state).join(
                Episode, Episode.source_file_id == SourceFile.id
            )
        ).all()
    accepted = (FileState.ACCEPTED.value, FileState.ACCEPTED_WITH_FLAGS.value)
    return {r.path: r.id for r in rows if r.state in accepted and r.path in {i.key for i in items}}


def batch_items(drop: Path, pattern: str) -> list[WorkItem]:
    files = sorted(p for p in drop.rglob(pattern) if p.is_file())
    return [
        WorkItem(
            key=str(p.relative_to(drop)), source_path=str(p.relative_to(drop)), size_bytes=p.stat().st_size
        )
        for p in files
    ]
