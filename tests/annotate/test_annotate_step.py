"""The annotate step against the real catalog: failures are isolated, versions add rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sluice_world import World, batch_items, land, vendor_from_example
from sqlalchemy import func, select

from pipeline.annotate import Annotator, AnnotatorInput, register_annotator, unregister_annotator
from pipeline.annotate.source import EpisodeSource
from pipeline.catalog import make_session_factory, session_scope
from pipeline.catalog.models import Annotation, Artifact, ArtifactInput, StepRun
from pipeline.catalog.outputs import artifact_inputs
from pipeline.enums import ArtifactKind, ReasonCode, StepStatus
from pipeline.steps.annotate import AnnotateStep
from pipeline.steps.runner import run_step
from pipeline.synth import RobotDropConfig, make_robot_drop

pytestmark = pytest.mark.integration


class Exploding(Annotator):
    """An annotator with a bug: it reads the frames, then fails."""

    name = "exploding"
    inputs = frozenset({AnnotatorInput.VIDEO})

    def annotate(self, source: EpisodeSource) -> dict[str, Any]:
        source.frames()
        raise RuntimeError("model server said no")


@pytest.fixture
def exploding() -> Any:
    register_annotator("exploding", Exploding)
    yield
    unregister_annotator("exploding")


def _annotators(motion_version: str) -> dict[str, Any]:
    names = ["image_stats", "gripper_events", "task_text", "message_fingerprint", "video_phash", "exploding"]
    return {
        "annotators": {
            "motion_energy": {"version": motion_version},
            **{n: {"version": "1"} for n in names},
        }
    }


def test_failing_annotator_is_a_warning_and_versions_add_rows(
    world: World, tmp_path: Path, exploding: Any
) -> None:
    drop = tmp_path / "drop"
    make_robot_drop(drop, RobotDropConfig(episodes=2, seconds=2, width=64, height=48))
    vendor = vendor_from_example("acme_robotics", drop, annotate=_annotators("1"))
    episodes = land(world, vendor, drop, "*.mcap")
    assert len(episodes) == 2
    items = batch_items(drop, "*.mcap")

    summary = run_step(AnnotateStep(vendor, world.ctx), items)
    assert (summary.succeeded, summary.failed, summary.rejected) == (2, 0, 0)

    factory = make_session_factory(world.ctx.engine)
    with session_scope(factory) as session:
        runs = session.execute(select(StepRun).where(StepRun.step == "annotate")).scalars().all()
        assert {r.episode_id for r in runs} == set(episodes.values())
        for r in runs:
            assert r.status == StepStatus.SUCCEEDED.value
            assert r.reason == ReasonCode.ANNOTATOR_FAILED.value
            assert "exploding" in (r.detail or "") and "model server said no" in (r.detail or "")
        rows = session.execute(select(Annotation)).scalars().all()
        by = {(a.episode_id, a.annotator, a.key): a for a in rows}
        for episode_id in episodes.values():
            # every other annotator's results are stored
            assert by[(episode_id, "motion_energy", "motion_energy.mean")].value > 0
            assert 0 <= by[(episode_id, "image_stats", "quality_visual")].value <= 1
            assert by[(episode_id, "task_text", "task_text.task")].value
            assert len(by[(episode_id, "message_fingerprint", "message_fingerprint.combined")].value) == 64
            assert (
                len(by[(episode_id, "video_phash", "video_phash.hashes")].value) == 2
            )  # 60 frames, every 30th
            assert by[(episode_id, "gripper_events", "gripper_events.idle_fraction")].value is not None
            failed = by[(episode_id, "annotate", "annotate.failed")].value
            assert [f["annotator"] for f in failed] == ["exploding"]
            assert not any(k[1] == "exploding" for k in by)
        # each result is an artifact that names the raw input it was computed from
        artifact_ids = {a.artifact_id for a in rows if a.annotator == "motion_energy"}
        assert len(artifact_ids) == 2
        for artifact_id in artifact_ids:
            artifact = session.get(Artifact, artifact_id)
            assert artifact is not None and artifact.kind == ArtifactKind.ANNOTATION.value
            assert artifact.uri.endswith("motion_energy-v1.json")
            _, blobs = artifact_inputs(session, artifact_id)
            assert len(blobs) == 1
        v1_rows = session.execute(
            select(func.count()).select_from(Annotation).where(Annotation.annotator_version == "1")
        ).scalar_one()

    # a re-run under the same config is skipped (resume)
    again = run_step(AnnotateStep(vendor, world.ctx), items)
    assert (again.skipped, again.succeeded) == (2, 0)

    # a new motion_energy version: a new config hash, new rows beside the old ones
    vendor2 = vendor_from_example("acme_robotics", drop, annotate=_annotators("2"))
    summary2 = run_step(AnnotateStep(vendor2, world.ctx), items)
    assert summary2.succeeded == 2
    with session_scope(factory) as session:
        versions = session.execute(
            select(Annotation.annotator_version, func.count())
            .where(Annotation.annotator == "motion_energy")
            .group_by(Annotation.annotator_version)
        ).all()
        assert dict(versions) == {"1": 8, "2": 8}  # 4 keys x 2 episodes per version
        still_v1 = session.execute(
            select(func.count()).select_from(Annotation).where(Annotation.annotator_version == "1")
        ).scalar_one()
        assert still_v1 == v1_rows
        assert session.execute(select(func.count()).select_from(ArtifactInput)).scalar_one() > 0
