"""The transcode and quality_post steps against a real catalog and store: only usable episodes, one
artifact per output however often it runs, checks recorded, a broken output quarantined, raw untouched."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path

import fsspec
import pytest
from sqlalchemy import func, select
from transcode_helpers import NORTHWIND, rewrite, vendor_with, write_source

from pipeline.catalog import make_engine, make_session_factory, session_scope
from pipeline.catalog.models import Artifact, ArtifactInput, CheckResult, Episode
from pipeline.catalog.sources import (
    ensure_episode,
    register_blob,
    register_source_file,
    set_episode_state,
    upsert_vendor,
)
from pipeline.config import VendorConfig, config_hash
from pipeline.enums import ArtifactKind, FileState, Gate, ReasonCode, StepStatus
from pipeline.settings import load_settings
from pipeline.steps.base import StepContext, WorkItem
from pipeline.steps.quality_post import QualityPostStep
from pipeline.steps.runner import run_step
from pipeline.steps.transcode import TranscodeStep, output_key
from pipeline.store import Store
from pipeline.synth.video import ClipMedia, ClipSpec, write_clip

pytestmark = pytest.mark.integration


def _context(tmp_path: Path, url: str) -> StepContext:
    settings = load_settings(home=tmp_path / "home", database_url=url)
    return StepContext(
        settings=settings, engine=make_engine(url), store=Store(tmp_path / "store"), code_version="test"
    )


def _register(
    ctx: StepContext, vendor: VendorConfig, files: dict[str, Path], states: dict[str, FileState]
) -> dict[str, int]:
    """Land each file and register it as an episode in the given state; returns episode ids by name."""
    fs = fsspec.filesystem("file")
    ids = {}
    with session_scope(make_session_factory(ctx.engine)) as session:
        vendor_id = upsert_vendor(
            session, name=vendor.name, kind=vendor.kind, config_hash=config_hash(vendor), config={}
        )
        for name, path in files.items():
            landed = ctx.store.land(fs, str(path))
            blob = register_blob(
                session,
                sha256=landed.sha256,
                size_bytes=landed.size_bytes,
                raw_uri=landed.uri,
                verified_at=datetime.now(UTC),
            )
            source_file = register_source_file(session, vendor_id=vendor_id, path=name, blob_id=blob)
            episode = ensure_episode(
                session, vendor_id=vendor_id, source_file_id=source_file.id, blob_id=blob, kind=vendor.kind
            )
            set_episode_state(session, episode.id, states[name])
            ids[name] = episode.id
    return ids


def _raw_sha(ctx: StepContext, episode_id: int) -> tuple[str, str]:
    from pipeline.catalog.models import Blob

    with session_scope(make_session_factory(ctx.engine)) as session:
        recorded = session.execute(
            select(Blob.sha256).join(Episode, Episode.blob_id == Blob.id).where(Episode.id == episode_id)
        ).scalar_one()
    actual = hashlib.sha256(ctx.store.local_raw_path(recorded).read_bytes()).hexdigest()
    return recorded, actual


def test_robot_steps_transcode_gate_and_stay_idempotent(migrated_database_url: str, tmp_path: Path) -> None:
    vendor = vendor_with({"profile": "vla", "gop_frames": 10, "crf": 23})
    ctx = _context(tmp_path, migrated_database_url)
    sources = {f"e{k}.mcap": write_source(tmp_path / f"e{k}.mcap", seconds=1.2, seed=k) for k in range(3)}
    ids = _register(
        ctx,
        vendor,
        sources,
        {
            "e0.mcap": FileState.ACCEPTED,
            "e1.mcap": FileState.ACCEPTED_WITH_FLAGS,
            "e2.mcap": FileState.QUARANTINED,
        },
    )
    items = [WorkItem(key=name, episode_id=ids[name]) for name in sources]
    step = TranscodeStep(vendor, ctx)
    assert [i.key for i in step.items(items)] == [
        "e0.mcap",
        "e1.mcap",
    ]  # quarantined inputs are not transcoded
    summary = run_step(step, items)
    assert (summary.succeeded, summary.skipped) == (2, 0)
    key = output_key(step.config_hash, ids["e0.mcap"])
    output = Path(ctx.store.path(f"{key}/episode.mcap"))
    assert output.exists()
    # resume: a second run skips both; calling process again finds the output and records no new row
    assert run_step(step, items).skipped == 2
    again = step.process(WorkItem(key="e0.mcap", episode_id=ids["e0.mcap"]))
    assert again.status is StepStatus.SUCCEEDED
    with session_scope(make_session_factory(ctx.engine)) as session:
        artifacts = (
            session.execute(select(Artifact).where(Artifact.episode_id == ids["e0.mcap"])).scalars().all()
        )
        assert len(artifacts) == 1
        artifact = artifacts[0]
        assert (
            artifact.kind == ArtifactKind.TRANSCODED_EPISODE.value
            and artifact.config_hash == step.config_hash
        )
        assert artifact.sha256 == hashlib.sha256(output.read_bytes()).hexdigest()
        inputs = session.execute(
            select(ArtifactInput.input_blob_id).where(ArtifactInput.artifact_id == artifact.id)
        ).all()
        assert len(inputs) == 1
    # post-gate: e0 passes untouched; e1's output is broken (frames dropped) and gets quarantined
    broken_key = output_key(step.config_hash, ids["e1.mcap"])
    broken = Path(ctx.store.path(f"{broken_key}/episode.mcap"))
    kept: list[int] = []

    def drop_frames(channel, message):  # type: ignore[no-untyped-def]
        if channel.topic == "/cam/front/h264":
            kept.append(1)
            if len(kept) > 30:
                return []
        return [message.data]

    tampered = rewrite(broken, tmp_path / "tampered.mcap", drop_frames)
    tampered.replace(broken)
    post = QualityPostStep(vendor, ctx)
    summary = run_step(post, items)
    assert (summary.succeeded, summary.rejected) == (1, 1)
    with session_scope(make_session_factory(ctx.engine)) as session:
        checks = session.execute(
            select(
                CheckResult.episode_id, CheckResult.check_name, CheckResult.status, CheckResult.reason
            ).where(CheckResult.gate == Gate.POST.value)
        ).all()
        state, reasons = session.execute(
            select(Episode.state, Episode.reasons).where(Episode.id == ids["e1.mcap"])
        ).one()
        good_state = session.execute(select(Episode.state).where(Episode.id == ids["e0.mcap"])).scalar_one()
    good = {c.check_name: c.status for c in checks if c.episode_id == ids["e0.mcap"]}
    assert set(good) >= {"decode", "frame_count", "gop", "psnr", "resample", "sha256"}
    assert set(good.values()) == {"passed"}
    bad = {c.check_name: c.reason for c in checks if c.episode_id == ids["e1.mcap"] and c.status == "failed"}
    assert bad["frame_count"] == ReasonCode.FRAME_COUNT_MISMATCH.value
    assert bad["sha256"] == ReasonCode.TRANSCODE_FAILED.value  # the file is not the one recorded
    assert state == FileState.QUARANTINED.value and ReasonCode.FRAME_COUNT_MISMATCH.value in reasons
    assert good_state == FileState.ACCEPTED.value
    marker = json.loads(Path(ctx.store.path(f"{broken_key}/QUARANTINED.json")).read_text())
    assert ReasonCode.FRAME_COUNT_MISMATCH.value in marker["reasons"]
    recorded, actual = _raw_sha(ctx, ids["e1.mcap"])
    assert recorded == actual  # the raw file is never touched
    ctx.engine.dispose()


def test_video_steps_make_clips_as_children_of_their_source(
    migrated_database_url: str, tmp_path: Path
) -> None:
    vendor = vendor_with(
        {"profile": "world_model", "clips": {"scene_cut_threshold": 0.2, "min_clip_duration_s": 0.5}},
        NORTHWIND,
    )
    ctx = _context(tmp_path, migrated_database_url)
    clip = tmp_path / "v.mp4"
    write_clip(clip, ClipSpec("v", "v.mp4", 4.0, seed=3, scene_cuts=2), ClipMedia())
    ids = _register(ctx, vendor, {"v.mp4": clip}, {"v.mp4": FileState.ACCEPTED})
    items = [WorkItem(key="v.mp4", episode_id=ids["v.mp4"])]
    assert run_step(TranscodeStep(vendor, ctx), items).succeeded == 1
    assert run_step(QualityPostStep(vendor, ctx), items).succeeded == 1
    with session_scope(make_session_factory(ctx.engine)) as session:
        rows = session.execute(
            select(Artifact.kind, func.count())
            .where(Artifact.episode_id == ids["v.mp4"])
            .group_by(Artifact.kind)
        ).all()
        lineage = session.execute(
            select(func.count(ArtifactInput.id))
            .join(Artifact, Artifact.id == ArtifactInput.artifact_id)
            .where(Artifact.episode_id == ids["v.mp4"], ArtifactInput.input_blob_id.is_not(None))
        ).scalar_one()
    assert rows == [(ArtifactKind.CLIP.value, 3)] and lineage == 3
    ctx.engine.dispose()


def test_an_input_the_transcode_refuses_ends_quarantined_with_its_reason(
    migrated_database_url: str, tmp_path: Path
) -> None:
    """A video in a colour matrix the transcode can neither keep nor convert (YCgCo) passes the pre-gate,
    then the transcode refuses it: the step run is rejected and the episode quarantined with the reason
    (it used to stay accepted, so status, quarantine listings and the run's counts called it clean)."""
    import av
    import numpy as np

    vendor = vendor_with({"profile": "vla"}, NORTHWIND)
    ctx = _context(tmp_path, migrated_database_url)
    clean, ycgco = tmp_path / "clean.mp4", tmp_path / "ycgco.mp4"
    write_clip(clean, ClipSpec("c", "clean.mp4", 2.0, seed=4, scene_cuts=0), ClipMedia())
    with av.open(str(ycgco), "w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=30)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        stream.codec_context.colorspace = 8  # AVCOL_SPC_YCGCO
        for i in range(60):
            frame = av.VideoFrame.from_ndarray(np.full((72, 64), 100, np.uint8), format="yuv420p")
            frame.pts = i
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    ids = _register(
        ctx,
        vendor,
        {"clean.mp4": clean, "ycgco.mp4": ycgco},
        dict.fromkeys(("clean.mp4", "ycgco.mp4"), FileState.ACCEPTED),
    )
    items = [WorkItem(key=name, episode_id=episode_id) for name, episode_id in ids.items()]
    summary = run_step(TranscodeStep(vendor, ctx), items)
    assert (summary.succeeded, summary.rejected, summary.failed) == (1, 1, 0)
    with session_scope(make_session_factory(ctx.engine)) as session:
        states = dict(session.execute(select(Episode.id, Episode.state)).tuples().all())
        reasons, detail = session.execute(
            select(Episode.reasons, Episode.detail).where(Episode.id == ids["ycgco.mp4"])
        ).one()
    assert states == {
        ids["clean.mp4"]: FileState.ACCEPTED.value,
        ids["ycgco.mp4"]: FileState.QUARANTINED.value,
    }
    assert reasons == [ReasonCode.UNSUPPORTED_ENCODING.value]
    # the detail says what is wrong, not the name of the raw object the transcode read (its sha256)
    assert detail.startswith("transcode: its pictures name the colour matrix ycgco"), detail
    # the post-gate has nothing of it to check, and a rerun does not transcode it again
    assert [i.key for i in QualityPostStep(vendor, ctx).items(items)] == ["clean.mp4"]
    assert [i.key for i in TranscodeStep(vendor, ctx).items(items)] == ["clean.mp4"]
    recorded, actual = _raw_sha(ctx, ids["ycgco.mp4"])
    assert recorded == actual
    ctx.engine.dispose()
