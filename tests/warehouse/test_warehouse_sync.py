"""Incremental sync: only new and changed rows move, and the warehouse matches the catalog row for row."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from compare import catalog_rows, warehouse_rows
from sqlalchemy.engine import Engine
from synthetic_catalog import SyntheticCatalog, sha

from pipeline.catalog import repo
from pipeline.catalog.roles import ensure_roles
from pipeline.enums import FileState, ReasonCode
from pipeline.warehouse import SyncReport, run_query, sync
from pipeline.warehouse.tables import synced_tables

pytestmark = pytest.mark.integration


def _fill(catalog: SyntheticCatalog, n: int = 6) -> list[int]:
    """Episodes over two vendors and sessions, plus a run, a batch, step runs, a dataset version, a shard."""
    with catalog.session() as s:
        ids = [
            catalog.episode(
                s, vendor=("acme", "bluefield")[i % 2], session_id=f"s{i % 3}", robot_id=f"r{i % 2}"
            )
            for i in range(n)
        ]
        vendor_id = catalog.vendor(s, "acme")
        run_id = repo.start_pipeline_run(
            s, vendor_id=vendor_id, dag_id="acme", run_id="r1", config_hash="c", step_toggles={"ingest": True}
        )
        batch_id = repo.upsert_batch(
            s, pipeline_run_id=run_id, batch_index=0, planned_bytes=10, n_files=n, start_offset_s=0.0
        )
        for episode_id in ids:
            repo.record_step_run(
                s, episode_id=episode_id, step="ingest", config_hash="c", status="succeeded",
                pipeline_run_id=run_id, batch_id=batch_id,
            )  # fmt: skip
        shard_artifact = repo.record_artifact(
            s, kind="shard", uri="file:///store/shards/000.tar", sha256=sha("shard"), size_bytes=1, step="shard",
            config_hash="s", code_version="test",
        )  # fmt: skip
        repo.record_shard(s, artifact_id=shard_artifact, n_episodes=n, n_samples=10 * n)
    return ids


def _assert_warehouse_matches(engine: Engine, warehouse: Path) -> None:
    for table in synced_tables():
        assert warehouse_rows(warehouse, table.name) == catalog_rows(engine, table.name), table.name


def _moved(report: SyncReport) -> dict[str, int]:
    return {t.table: t.rows_moved for t in report.tables if t.rows_moved}


def test_first_sync_copies_every_catalog_row(
    catalog: SyntheticCatalog, catalog_engine: Engine, warehouse_path: Path
) -> None:
    _fill(catalog)
    report = sync(catalog_engine, warehouse_path)
    assert {t.mode for t in report.tables} == {"full"}
    assert report.table("episodes").rows_moved == 6
    assert report.table("streams").rows_moved == 12
    assert report.table("vendors").rows_total == 2
    _assert_warehouse_matches(catalog_engine, warehouse_path)
    # the episode view has one row per episode, with its figures joined in
    view = run_query(warehouse_path, "SELECT * FROM episode_view ORDER BY episode_id").table.to_pylist()
    assert [r["episode_id"] for r in view] == [r["id"] for r in catalog_rows(catalog_engine, "episodes")]
    assert all(r["n_streams"] == 2 and r["transcoded_uri"] and r["quality_sync"] == 0.9 for r in view)


def test_incremental_sync_moves_only_new_and_changed_rows(
    catalog: SyntheticCatalog, catalog_engine: Engine, warehouse_path: Path
) -> None:
    ids = _fill(catalog)
    sync(catalog_engine, warehouse_path)

    nothing = sync(catalog_engine, warehouse_path)
    assert {t.mode for t in nothing.tables} == {"incremental"}
    assert _moved(nothing) == {}

    with catalog.session() as s:
        # rows updated in place: an episode changes state, another's stream is re-read, a shard is placed
        repo.set_episode_state(s, ids[0], FileState.QUARANTINED, reasons=[ReasonCode.CLOCK_JUMP])
        repo.record_streams(
            s, ids[1], [repo.StreamStats(topic="/joint_states", role="state", message_count=7)]
        )
        version_id = repo.create_dataset_version(s, name="d", version="v1", spec_hash="h", spec={})
        shard_artifact = s.execute(sa.text("SELECT artifact_id FROM shards")).scalar_one()
        repo.record_shard(
            s, artifact_id=shard_artifact, n_episodes=6, n_samples=60, dataset_version_id=version_id,
            split="train", shard_index=0,
        )  # fmt: skip
        # and one new episode with all its rows
        catalog.episode(s, vendor="acme", session_id="s9")

    report = sync(catalog_engine, warehouse_path)
    assert _moved(report) == {
        "episodes": 2,  # one changed, one new
        "streams": 3,  # one re-read, two new
        "shards": 1,
        "dataset_versions": 1,
        "blobs": 1,
        "source_files": 1,
        "check_results": 1,
        "annotations": 1,
        "artifacts": 1,
        "artifact_inputs": 1,
        "episode_state_changes": 2,  # the state history: the quarantine above, the new episode's state
    }
    assert {t.mode for t in report.tables} == {"incremental"}
    _assert_warehouse_matches(catalog_engine, warehouse_path)
    state = run_query(warehouse_path, "SELECT state FROM episode_view WHERE episode_id = $id", {"id": ids[0]})
    assert state.table.to_pylist() == [{"state": "quarantined"}]


def test_a_transaction_committing_after_a_sync_is_picked_up_by_the_next(
    catalog: SyntheticCatalog, catalog_engine: Engine, warehouse_path: Path
) -> None:
    """A writer that started before a later writer committed, and commits itself only after a sync: its
    rows are older (in time and in transaction id) than what that sync saw, and must still come over."""
    ids = _fill(catalog, n=2)
    sync(catalog_engine, warehouse_path)
    with catalog_engine.connect() as slow:
        transaction = slow.begin()
        slow.execute(
            sa.text("UPDATE episodes SET task = 'stack', updated_at = now() WHERE id = :id"), {"id": ids[1]}
        )
        with catalog.session() as s:  # a quicker writer commits meanwhile
            repo.set_episode_state(s, ids[0], FileState.QUARANTINED, reasons=[ReasonCode.TRUNCATED])
        during = sync(catalog_engine, warehouse_path)
        transaction.commit()
    assert during.table("episodes").rows_moved == 1  # the quick writer's row; the slow one is not visible
    after = sync(catalog_engine, warehouse_path)
    # the slow row, and the quick one again: rows of transactions at or after the oldest one running at
    # the last sync are re-read (harmless: they replace their copies)
    assert after.table("episodes").rows_moved == 2
    _assert_warehouse_matches(catalog_engine, warehouse_path)


def test_rows_deleted_from_the_catalog_leave_the_warehouse(
    catalog: SyntheticCatalog, catalog_engine: Engine, warehouse_path: Path
) -> None:
    ids = _fill(catalog, n=3)
    sync(catalog_engine, warehouse_path)
    with catalog_engine.begin() as conn:  # an operator's clean-up: the writer role cannot delete
        conn.execute(sa.text("DELETE FROM annotations WHERE episode_id = :id"), {"id": ids[2]})
    report = sync(catalog_engine, warehouse_path)
    assert report.table("annotations").rows_deleted == 1
    assert report.table("annotations").rows_total == 2
    _assert_warehouse_matches(catalog_engine, warehouse_path)


def test_sync_needs_only_the_curation_readers_privileges(
    catalog: SyntheticCatalog, catalog_engine: Engine, migrated_database_url: str, warehouse_path: Path
) -> None:
    _fill(catalog, n=2)
    urls = ensure_roles(migrated_database_url, "writer-pw-0", "reader-pw-0")
    report = sync(urls.reader_url, warehouse_path)
    assert report.table("episodes").rows_total == 2
    _assert_warehouse_matches(catalog_engine, warehouse_path)


def test_a_full_sync_reloads_every_table_under_the_views(
    catalog: SyntheticCatalog, catalog_engine: Engine, warehouse_path: Path
) -> None:
    _fill(catalog, n=2)
    sync(catalog_engine, warehouse_path)
    report = sync(catalog_engine, warehouse_path, full=True)
    assert {t.mode for t in report.tables} == {"full"}
    assert report.table("episodes").rows_moved == 2
    _assert_warehouse_matches(catalog_engine, warehouse_path)
    assert run_query(warehouse_path, "SELECT count(*) AS n FROM episode_view").table.to_pylist() == [{"n": 2}]
