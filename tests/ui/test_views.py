"""The view's catalog reads (``pipeline.catalog.views``) against the real catalog, as the curation reader."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from view_fixtures import WorldDb
from world import BLANK_DETAIL, CRC_DETAIL, GAP_DETAIL, ROBOT, VIDEO, World

from pipeline.catalog import views
from pipeline.catalog.errors import CatalogMissingError
from pipeline.ui.pages import ViewSources

pytestmark = pytest.mark.integration


def test_latest_runs_split_failures_from_warnings_and_keep_toggles(
    sources: ViewSources, world: World
) -> None:
    with sources.session() as session:
        runs = views.latest_runs(session)
    assert [r.id for r in runs] == [world.runs["video"], world.runs["robot"], world.runs["old"]]
    video, robot, old = runs
    assert (video.vendor, video.outcome) == (VIDEO, "failed")
    assert [f["step"] for f in video.failures] == ["transcode"] and video.warnings == []
    assert video.steps_off == ["annotate"]
    assert list(video.step_toggles) == [
        "ingest",
        "quality_pre",
        "transcode",
        "quality_post",
        "annotate",
        "shard",
    ]
    assert robot.outcome == "succeeded_with_warnings"
    assert robot.failures == [] and [w["step"] for w in robot.warnings] == ["annotate"]
    assert robot.step_counts == {
        "ingest": {"succeeded": 6},
        "quality_pre": {"rejected": 2, "succeeded": 4},
        "transcode": {"succeeded": 4},
        "annotate": {"failed": 1},
    }
    assert old.step_counts == {} and old.duration_s is not None and old.duration_s >= 0
    assert views.needs_attention(runs) == [video, robot]
    with sources.session() as session:
        assert [r.id for r in views.latest_runs(session, vendor=ROBOT, limit=1)] == [world.runs["robot"]]


def test_find_runs_by_id_airflow_run_id_dag_and_run_and_latest(sources: ViewSources, world: World) -> None:
    robot = world.runs["robot"]
    with sources.session() as session:
        assert [r.id for r in views.find_runs(session, str(robot))] == [robot]
        assert [r.id for r in views.find_runs(session, "manual__2025-06-05T10:00:00+00:00")] == [robot]
        assert [
            r.id for r in views.find_runs(session, f"sluice_{ROBOT}/manual__2025-06-05T10:00:00+00:00")
        ] == [robot]
        assert [r.id for r in views.find_runs(session, "latest")] == [world.runs["video"]]
        assert views.find_runs(session, "no-such-run") == []
        with pytest.raises(CatalogMissingError, match="pipeline run"):
            views.get_run(session, 999_999)


def test_file_states_and_quarantine_reasons_per_vendor(sources: ViewSources, world: World) -> None:
    with sources.session() as session:
        states = {(c.vendor, c.state): c.files for c in views.file_state_counts(session)}
        reasons = [(r.vendor, r.reason, r.files) for r in views.quarantine_reasons(session)]
        run_episodes = views.run_episode_ids(session, world.runs["video"])
        run_reasons = [
            (r.reason, r.files) for r in views.quarantine_reasons(session, episode_ids=run_episodes)
        ]
        pending = views.pending_files(session)
    assert states == {
        (ROBOT, "pending"): 1,
        (ROBOT, "accepted"): 3,
        (ROBOT, "accepted_with_flags"): 1,
        (ROBOT, "quarantined"): 2,
        (ROBOT, "duplicate"): 1,
        (VIDEO, "accepted"): 1,
        (VIDEO, "accepted_with_flags"): 1,
        (VIDEO, "quarantined"): 2,
    }
    assert sorted(reasons) == [
        (ROBOT, "crc_mismatch", 1),
        (ROBOT, "gap_rate_high", 1),
        (VIDEO, "blank_video", 1),
        (VIDEO, "decode_error", 1),
    ]
    assert run_episodes == {world.episodes[n] for n in ("c1", "c2", "c3", "c4")}
    assert sorted(run_reasons) == [("blank_video", 1), ("decode_error", 1)]
    assert pending == 1


def test_held_files_carry_reason_detail_and_failed_checks(sources: ViewSources, world: World) -> None:
    with sources.session() as session:
        held = {f.path: f for f in views.held_files(session, vendor=ROBOT)}
        flagged = views.held_files(session, state="accepted_with_flags")
        limited = views.held_files(session, limit=1)
    assert set(held) == {world.paths["e4"], world.paths["e5"]}
    crc = held[world.paths["e4"]]
    assert (crc.reasons, crc.detail, crc.sha256) == (["crc_mismatch"], CRC_DETAIL, world.blobs["e4"])
    assert [(c["check"], c["status"], c["detail"]) for c in crc.checks] == [("crc", "failed", CRC_DETAIL)]
    assert held[world.paths["e5"]].checks[0]["detail"] == GAP_DETAIL
    assert {f.path for f in flagged} == {world.paths["e3"], world.paths["c4"]}
    assert {c["status"] for f in flagged for c in f.checks} <= {"warned"}
    assert len(limited) == 1


def test_step_problems_name_failed_steps_and_rejections(sources: ViewSources, world: World) -> None:
    with sources.session() as session:
        failed = views.step_problems(session)
        rejected = views.step_problems(session, statuses=["rejected"], pipeline_run_id=world.runs["video"])
    assert sorted((f.path, f.step, f.detail) for f in failed) == [
        (world.paths["c4"], "transcode", "ray worker died (OOM)"),
        (world.paths["e3"], "annotate", "annotator model timed out after 600 s"),
    ]
    assert sorted((r.path, r.reason, r.detail) for r in rejected) == [
        (world.paths["c2"], "blank_video", BLANK_DETAIL),
        (world.paths["c3"], "decode_error", None),
    ]


def test_reader_engine_cannot_write_even_as_owner(world_db: WorldDb) -> None:
    """The second fence: transactions of the view's engine are read-only whatever the role may do."""
    engine = views.read_only_engine(world_db.url)
    try:
        with engine.connect() as conn:
            assert conn.execute(text("SHOW transaction_read_only")).scalar_one() == "on"
            with pytest.raises(DBAPIError, match="read-only transaction"):
                conn.execute(text("UPDATE episodes SET detail = 'x'"))
    finally:
        engine.dispose()


def test_dataset_versions_with_manifests_and_splits(sources: ViewSources, world: World) -> None:
    with sources.session() as session:
        (version,) = views.dataset_versions(session)
        assert views.dataset_versions(session, limit=0) == []
    assert (version.ref, version.row_count) == ("pick_place@v1", 4)
    assert version.split_episodes == {"train": 2, "val": 1, "eval": 1}
    assert [m["format"] for m in version.manifests] == ["arrow_ipc", "parquet"]
    assert version.manifests[0]["uri"] == world.manifest_uri
