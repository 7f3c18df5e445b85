"""A small but complete catalog for the view, the CLI and the report, written with the catalog's own upserts.

Two vendors (a robot-log one with recording times, a video one without), files in every state with their
reasons, details and failed checks, stream statistics, post-gate PSNR checks of both shapes (per camera and
per clip), annotation scores (one superseded, one not a number), three pipeline runs (warnings, a critical
failure, a step switched off), transcoded and annotation artifacts, and a dataset version with a real manifest
(written by :func:`pipeline.manifest.write_manifest`), its manifest artifact and a shard.

Shared by ``tests/ui`` and ``tests/report`` (the latter puts this folder on ``sys.path``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from pipeline.catalog import repo
from pipeline.enums import FileState
from pipeline.manifest import write_manifest

SECOND_NS = 1_000_000_000
DAY_NS = 86_400 * SECOND_NS
#: Recording time of the first robot episode: 2025-06-02T08:00:00Z.
T0_NS = int(datetime(2025, 6, 2, 8, tzinfo=UTC).timestamp()) * SECOND_NS

ROBOT = "acme_robotics"
VIDEO = "vidco"
DATASET = "pick_place"
VERSION = "v1"
TRANSCODE_CONFIG = "tc-5f1e2a"
CODE_VERSION = "0.1.0+gabc123"

CRC_DETAIL = "chunk 3 CRC mismatch: stored 0x1a2b3c4d, computed 0x5e6f7a8b"
GAP_DETAIL = "camera /cam/front: 31% of expected frames missing; threshold 5%"
BLANK_DETAIL = "98% of sampled frames are black"


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class World:
    """Ids of what :func:`build_world` wrote."""

    episodes: dict[str, int] = field(default_factory=dict)
    blobs: dict[str, str] = field(default_factory=dict)  # episode name -> sha256 of its raw file
    paths: dict[str, str] = field(default_factory=dict)  # episode name -> vendor path
    transcoded: dict[str, int] = field(default_factory=dict)  # episode name -> artifact id
    runs: dict[str, int] = field(default_factory=dict)
    annotation_artifact: int = 0
    manifest_uri: str = ""
    manifest_rows: list[str] = field(default_factory=list)  # episode names in manifest row order
    manifest_artifact: int = 0
    shard_id: int = 0
    # expected figures per episode name
    gap_rate: dict[str, float] = field(default_factory=dict)
    skew_ms: dict[str, float] = field(default_factory=dict)
    psnr: dict[str, float] = field(default_factory=dict)
    chroma_shift: dict[str, float] = field(default_factory=dict)
    scores: dict[tuple[str, str], float] = field(default_factory=dict)


# name, vendor, state, reasons, detail, day offset (None: no recording time)
FILES = [
    ("e1", ROBOT, FileState.ACCEPTED, [], None, 0),
    ("e2", ROBOT, FileState.ACCEPTED, [], None, 1),
    ("e3", ROBOT, FileState.ACCEPTED_WITH_FLAGS, ["clock_skew"], "skew p99 25 ms on /joint_states", 1),
    ("e4", ROBOT, FileState.QUARANTINED, ["crc_mismatch"], CRC_DETAIL, 2),
    ("e5", ROBOT, FileState.QUARANTINED, ["gap_rate_high"], GAP_DETAIL, 2),
    ("e6", ROBOT, FileState.DUPLICATE, [], None, 0),
    ("e7", ROBOT, FileState.ACCEPTED, [], None, 3),
    ("e8", ROBOT, FileState.PENDING, [], None, 3),
    ("c1", VIDEO, FileState.ACCEPTED, [], None, None),
    ("c2", VIDEO, FileState.QUARANTINED, ["blank_video"], BLANK_DETAIL, None),
    ("c3", VIDEO, FileState.QUARANTINED, ["decode_error"], "h264: 12 corrupt slices in 30 frames", None),
    ("c4", VIDEO, FileState.ACCEPTED_WITH_FLAGS, ["rotated"], "display matrix -90°", None),
]
# gap rate and p99 skew (ns) per stream of the robot episodes: (camera, state)
STREAMS = {
    "e1": ((0.0, 200_000), (0.01, -150_000)),
    "e2": ((0.02, 300_000), (0.0, 100_000)),
    "e3": ((0.0, 1_000_000), (0.0, -25_000_000)),
    "e4": ((0.0, 400_000), (0.0, 0)),
    "e5": ((0.31, 500_000), (0.0, 0)),
    "e7": ((0.015, 250_000), (0.005, 90_000)),
}
PSNR_CAMERAS = {
    "e1": {"front": 41.25, "wrist": 38.5},
    "e2": {"front": 40.0},
    "e3": {"front": 36.0, "wrist": 37.0},
}
PSNR_CLIPS = {"c1": 39.1, "c4": 37.5}
#: the colour check's largest mean chroma shift, per camera of a robot log or of a video's clips
CHROMA_CAMERAS = {"e1": {"front": 0.4, "wrist": 0.9}, "e3": {"front": 2.6}}
CHROMA_CLIPS: dict[str, float | None] = {"c1": 0.25, "c4": None}  # c4: no clip picture was compared
IN_DATASET = [("e1", "train"), ("e2", "train"), ("e3", "val"), ("e7", "eval")]


def build_world(engine: Engine, store_dir: Path) -> World:
    """Write the world into the migrated catalog behind ``engine``; manifest files go under ``store_dir``."""
    world = World()
    factory = repo.make_session_factory(engine)
    with repo.session_scope(factory) as session:
        vendors = {
            ROBOT: repo.upsert_vendor(session, name=ROBOT, kind="mcap", config_hash="cfg-acme", config={}),
            VIDEO: repo.upsert_vendor(session, name=VIDEO, kind="video", config_hash="cfg-vid", config={}),
        }
        blob_ids: dict[str, int] = {}
        for name, vendor, _state, _reasons, _detail, day in FILES:
            content = "e1" if name == "e6" else name  # e6 delivers e1's bytes under another name
            world.blobs[name] = sha(f"raw {content}")
            blob_ids[name] = repo.register_blob(
                session,
                sha256=world.blobs[name],
                size_bytes=1_000_000 + len(content),
                raw_uri=f"file:///store/raw/{world.blobs[name]}",
                verified_at=datetime.now(UTC),
            )
            ext = "mcap" if vendor == ROBOT else "mp4"
            world.paths[name] = f"drop/{name}.{ext}"
            source = repo.register_source_file(
                session, vendor_id=vendors[vendor], path=world.paths[name], blob_id=blob_ids[name]
            )
            times = {}
            if day is not None:
                start = T0_NS + day * DAY_NS + int(name[1:]) * 3600 * SECOND_NS
                times = {"start_time_ns": start, "end_time_ns": start + 30 * SECOND_NS}
            world.episodes[name] = repo.ensure_episode(
                session,
                vendor_id=vendors[vendor],
                source_file_id=source.id,
                blob_id=blob_ids[name],
                kind="mcap" if vendor == ROBOT else "video",
                robot_id="rb01" if vendor == ROBOT else None,
                session_id=f"s{day}" if day is not None else None,
                task="pick_place",
                **times,
            ).id
        for name, _vendor, state, reasons, detail, _day in FILES:
            if state is FileState.PENDING:
                continue
            duplicate_of = world.episodes["e1"] if state is FileState.DUPLICATE else None
            repo.set_episode_state(
                session,
                world.episodes[name],
                state,
                reasons=reasons,
                detail=detail,
                duplicate_of_id=duplicate_of,
            )
        _streams_and_checks(session, world)
        _annotations(session, world)

    with repo.session_scope(factory) as session:
        _runs(session, world, vendors)
    with repo.session_scope(factory) as session:
        _artifacts(session, world, blob_ids)
        _dataset(session, world, blob_ids, store_dir)
    return world


def _streams_and_checks(session: Session, world: World) -> None:
    for name, ((cam_gap, cam_skew), (state_gap, state_skew)) in STREAMS.items():
        episode = world.episodes[name]
        repo.record_streams(
            session,
            episode,
            [
                repo.StreamStats(topic="/cam/front", role="camera", message_count=900, rate_hz=30.0,
                                 gap_rate=cam_gap, skew_p99_ns=cam_skew),
                repo.StreamStats(topic="/joint_states", role="state", message_count=3000, rate_hz=100.0,
                                 gap_rate=state_gap, skew_p99_ns=state_skew),
            ],
        )  # fmt: skip
        world.gap_rate[name] = max(cam_gap, state_gap)
        world.skew_ms[name] = max(abs(cam_skew), abs(state_skew)) / 1e6
    checks = [
        ("e4", "crc", "failed", "crc_mismatch", "quarantine", CRC_DETAIL),
        ("e5", "gap_rate", "failed", "gap_rate_high", "quarantine", GAP_DETAIL),
        ("e3", "clock_skew", "warned", "clock_skew", "flag", "skew p99 25 ms on /joint_states"),
        ("c2", "blank", "failed", "blank_video", "quarantine", BLANK_DETAIL),
        ("c3", "decode", "failed", "decode_error", "quarantine", "h264: 12 corrupt slices in 30 frames"),
        ("e1", "crc", "passed", None, None, None),
    ]
    for name, check, status, reason, severity, detail in checks:
        repo.record_check(
            session,
            episode_id=world.episodes[name], gate="quality_pre", check_name=check, config_hash="q-pre-1",
            status=status, reason=reason, severity=severity, detail=detail, observed={"check": check},
        )  # fmt: skip
    # the post-gate's figures: a robot log records them per camera, a video's clips once
    post = {
        "psnr": ({"frames": 8}, "min_db", PSNR_CAMERAS, PSNR_CLIPS, min, world.psnr),
        "colour": (
            {"source": ["bt601"]},
            "chroma_shift_max",
            CHROMA_CAMERAS,
            CHROMA_CLIPS,
            max,
            world.chroma_shift,
        ),
    }
    for check, (extra, key, per_camera, per_clip, worst, figure) in post.items():
        observed_of: dict[str, dict[str, Any]] = {
            name: {"cameras": {c: {**extra, key: v} for c, v in cameras.items()}}
            for name, cameras in per_camera.items()
        } | {name: {**extra, key: value} for name, value in per_clip.items()}
        for name, observed in observed_of.items():
            repo.record_check(
                session,
                episode_id=world.episodes[name], gate="quality_post", check_name=check,
                config_hash=TRANSCODE_CONFIG, status="passed", observed=observed,
            )  # fmt: skip
        figure |= {name: worst(cameras.values()) for name, cameras in per_camera.items()}
        # a clip with nothing compared (None) gives no point, not a perfect value
        figure |= {name: v for name, v in per_clip.items() if v is not None}


def _annotations(session: Session, world: World) -> None:
    values = [
        ("e1", "quality_sync", "1", 0.93),
        ("e1", "quality_visual", "1", 0.88),
        ("e2", "quality_sync", "1", 0.5),  # superseded by version 2 below
        ("e2", "quality_sync", "2", 0.9),
        ("e3", "quality_motion", "1", 0.4),
        ("c1", "quality_visual", "1", 0.7),
        ("c4", "quality_visual", "1", "n/a"),  # not a number: no point
        ("e7", "objects", "1", ["cup", "plate"]),  # not a score key: no point
    ]
    for name, key, version, value in values:
        repo.record_annotation(
            session,
            episode_id=world.episodes[name], annotator="quality", annotator_version=version, key=key, value=value,
        )  # fmt: skip
        if isinstance(value, float):
            world.scores[(name, key)] = value


def _step(session: Session, world: World, name: str, step: str, status: str, run: int, **kw: object) -> None:
    repo.record_step_run(
        session,
        episode_id=world.episodes[name], step=step, config_hash=f"{step}-cfg", status=status,
        pipeline_run_id=run, **kw,
    )  # fmt: skip


def _runs(session: Session, world: World, vendors: dict[str, int]) -> None:
    all_on = dict.fromkeys(("ingest", "quality_pre", "transcode", "quality_post", "annotate", "shard"), True)
    old = repo.start_pipeline_run(
        session,
        vendor_id=vendors[ROBOT], dag_id=f"sluice_{ROBOT}", run_id="scheduled__2025-06-01T00:00:00+00:00",
        config_hash="cfg-acme", step_toggles=all_on,
    )  # fmt: skip
    repo.finish_pipeline_run(session, old, "succeeded")
    robot = repo.start_pipeline_run(
        session,
        vendor_id=vendors[ROBOT], dag_id=f"sluice_{ROBOT}", run_id="manual__2025-06-05T10:00:00+00:00",
        config_hash="cfg-acme", step_toggles=all_on,
    )  # fmt: skip
    for name in ("e1", "e2", "e3", "e4", "e5", "e7"):
        _step(session, world, name, "ingest", "succeeded", robot)
    for name in ("e1", "e2", "e3", "e7"):
        _step(session, world, name, "quality_pre", "succeeded", robot)
        _step(session, world, name, "transcode", "succeeded", robot)
    _step(session, world, "e4", "quality_pre", "rejected", robot, reason="crc_mismatch", detail=CRC_DETAIL)
    _step(session, world, "e5", "quality_pre", "rejected", robot, reason="gap_rate_high", detail=GAP_DETAIL)
    _step(session, world, "e3", "annotate", "failed", robot, detail="annotator model timed out after 600 s")
    repo.finish_pipeline_run(
        session,
        robot, "succeeded_with_warnings",
        warnings=[{"step": "annotate", "critical": False, "batches": [2], "failed_items": 1,
                   "detail": "failed in 1 of 2 batch(es)"}],
    )  # fmt: skip
    video = repo.start_pipeline_run(
        session,
        vendor_id=vendors[VIDEO], dag_id=f"sluice_{VIDEO}", run_id="scheduled__2025-06-06T00:00:00+00:00",
        config_hash="cfg-vid", step_toggles={**all_on, "annotate": False},
    )  # fmt: skip
    for name in ("c1", "c2", "c3", "c4"):
        _step(session, world, name, "ingest", "succeeded", video)
    _step(session, world, "c2", "quality_pre", "rejected", video, reason="blank_video", detail=BLANK_DETAIL)
    _step(session, world, "c3", "quality_pre", "rejected", video, reason="decode_error")
    _step(session, world, "c1", "transcode", "succeeded", video)
    _step(session, world, "c4", "transcode", "failed", video, detail="ray worker died (OOM)")
    repo.finish_pipeline_run(
        session,
        video, "failed",
        warnings=[{"step": "transcode", "critical": True, "batches": [0], "failed_items": 1,
                   "detail": "failed in 1 of 1 batch(es)"}],
    )  # fmt: skip
    world.runs = {"old": old, "robot": robot, "video": video}


def _artifacts(session: Session, world: World, blob_ids: dict[str, int]) -> None:
    for name in ("e1", "e2", "e3", "e7", "c1"):
        uri = f"file:///store/derived/transcode/{TRANSCODE_CONFIG}/{world.episodes[name]}/episode.mcap"
        world.transcoded[name] = repo.record_artifact(
            session,
            kind="transcoded_episode", uri=uri, sha256=sha(uri), size_bytes=500_000, step="transcode",
            config_hash=TRANSCODE_CONFIG, code_version=CODE_VERSION, episode_id=world.episodes[name],
            input_blob_ids=[blob_ids[name]],
        )  # fmt: skip
    uri = f"file:///store/derived/annotate/an-1/{world.episodes['e1']}/annotations.json"
    world.annotation_artifact = repo.record_artifact(
        session,
        kind="annotation", uri=uri, sha256=sha(uri), size_bytes=2_000, step="annotate", config_hash="an-1",
        code_version=CODE_VERSION, episode_id=world.episodes["e1"], input_artifact_ids=[world.transcoded["e1"]],
    )  # fmt: skip


def manifest_table(world: World) -> pa.Table:
    rows = []
    for name, split in IN_DATASET:
        start = T0_NS
        rows.append(
            {
                "episode_id": str(world.episodes[name]),
                "uri": f"file:///store/derived/transcode/{TRANSCODE_CONFIG}/{world.episodes[name]}/episode.mcap",
                "start_ns": start,
                "end_ns": start + 30 * SECOND_NS,
                "duration_s": 30.0,
                "vendor": ROBOT,
                "quality_sync": world.scores.get((name, "quality_sync")),
                "quality_completeness": None,
                "quality_visual": world.scores.get((name, "quality_visual")),
                "quality_motion": world.scores.get((name, "quality_motion")),
                "quality_transcode": None,
                "split": split,
                "source_sha256": world.blobs[name],
            }
        )
    return pa.Table.from_pylist(rows)


def _dataset(session: Session, world: World, blob_ids: dict[str, int], store_dir: Path) -> None:
    files = write_manifest(manifest_table(world), store_dir / "manifests" / DATASET / VERSION)
    world.manifest_rows = [name for name, _ in IN_DATASET]
    world.manifest_uri = files.ipc_path.as_uri()
    version_id = repo.create_dataset_version(
        session, name=DATASET, version=VERSION, spec_hash="spec-77", spec={"name": DATASET}
    )
    repo.record_manifest(
        session,
        dataset_version_id=version_id, format="arrow_ipc", uri=world.manifest_uri, sha256=files.ipc_sha256,
        size_bytes=files.ipc_size_bytes, row_count=files.num_rows,
    )  # fmt: skip
    repo.record_manifest(
        session,
        dataset_version_id=version_id, format="parquet", uri=files.parquet_path.as_uri(),
        sha256=files.parquet_sha256, size_bytes=files.parquet_size_bytes, row_count=files.num_rows,
    )  # fmt: skip
    repo.add_dataset_episodes(session, version_id, [(world.episodes[n], s) for n, s in IN_DATASET])
    world.manifest_artifact = repo.record_artifact(
        session,
        kind="manifest", uri=world.manifest_uri, sha256=files.ipc_sha256, size_bytes=files.ipc_size_bytes,
        step=None, config_hash="spec-77", code_version=CODE_VERSION,
        input_artifact_ids=[world.transcoded[n] for n, _ in IN_DATASET],
        input_blob_ids=[blob_ids[n] for n, _ in IN_DATASET],
    )  # fmt: skip
    shard_uri = f"file:///store/shards/{DATASET}/{VERSION}/train-000000.tar"
    shard_artifact = repo.record_artifact(
        session,
        kind="shard", uri=shard_uri, sha256=sha(shard_uri), size_bytes=9_000_000, step="shard",
        config_hash="sh-1", code_version=CODE_VERSION,
        input_artifact_ids=[world.transcoded["e1"], world.transcoded["e2"]],
    )  # fmt: skip
    world.shard_id = repo.record_shard(
        session,
        artifact_id=shard_artifact, n_episodes=2, n_samples=40, dataset_version_id=version_id, split="train",
        shard_index=0,
    )  # fmt: skip
