"""Runs, batches, step runs and gate checks, as the writer role."""

from __future__ import annotations

import hashlib

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from pipeline.catalog import repo
from pipeline.catalog.errors import CatalogMissingError, CatalogValueError
from pipeline.catalog.models import CheckResult, PipelineRun, StepRun
from pipeline.enums import RunOutcome, StepName, StepStatus
from pipeline.errors import DatabaseError, UnknownChoiceError

pytestmark = pytest.mark.integration


@pytest.fixture
def episode_id(writer_session: Session) -> int:
    vendor_id = repo.upsert_vendor(writer_session, name="acme", kind="mcap", config_hash="c", config={})
    sha = hashlib.sha256(b"x").hexdigest()
    blob_id = repo.register_blob(writer_session, sha256=sha, size_bytes=1, raw_uri=f"raw/{sha}")
    source = repo.register_source_file(writer_session, vendor_id=vendor_id, path="x.mcap", blob_id=blob_id)
    return repo.ensure_episode(
        writer_session, vendor_id=vendor_id, source_file_id=source.id, blob_id=blob_id, kind="mcap"
    ).id


@pytest.fixture
def run_id(writer_session: Session, episode_id: int) -> int:
    vendor_id = writer_session.execute(sa.text("SELECT id FROM vendors")).scalar_one()
    return repo.start_pipeline_run(
        writer_session, vendor_id=vendor_id, dag_id="acme", run_id="manual__1", config_hash="c",
        step_toggles={StepName.INGEST: True, "annotate": False},
    )  # fmt: skip


def test_a_cleared_run_reopens_the_same_row(writer_session: Session, run_id: int) -> None:
    repo.finish_pipeline_run(
        writer_session,
        run_id,
        RunOutcome.SUCCEEDED_WITH_WARNINGS,
        warnings=[{"step": "annotate", "detail": "x"}],
    )
    run = writer_session.get(PipelineRun, run_id)
    assert (run.outcome, run.warnings, run.ended_at is not None) == (
        "succeeded_with_warnings",
        [{"step": "annotate", "detail": "x"}],
        True,
    )
    again = repo.start_pipeline_run(
        writer_session, vendor_id=run.vendor_id, dag_id="acme", run_id="manual__1", config_hash="c2",
        step_toggles={"transcode": False},
    )  # fmt: skip
    assert again == run_id
    writer_session.refresh(run)
    assert (run.outcome, run.ended_at, run.step_toggles, run.config_hash) == (
        "running", None, {"transcode": False}, "c2",
    )  # fmt: skip
    with pytest.raises(UnknownChoiceError, match="step 'upload'"):
        repo.start_pipeline_run(
            writer_session, vendor_id=run.vendor_id, dag_id="acme", run_id="m2", config_hash="c",
            step_toggles={"upload": True},
        )  # fmt: skip
    with pytest.raises(CatalogMissingError):
        repo.finish_pipeline_run(writer_session, 999, "failed")


def test_a_replanned_batch_overwrites(writer_session: Session, run_id: int) -> None:
    first = repo.upsert_batch(
        writer_session, pipeline_run_id=run_id, batch_index=0, planned_bytes=10, n_files=2, start_offset_s=0
    )
    again = repo.upsert_batch(
        writer_session, pipeline_run_id=run_id, batch_index=0, planned_bytes=20, n_files=3, start_offset_s=1.5
    )
    other = repo.upsert_batch(
        writer_session, pipeline_run_id=run_id, batch_index=1, planned_bytes=5, n_files=1, start_offset_s=3
    )
    assert first == again != other
    rows = writer_session.execute(
        sa.text("SELECT batch_index, planned_bytes, n_files FROM batches ORDER BY 1")
    )
    assert [tuple(r) for r in rows] == [(0, 20, 3), (1, 5, 1)]
    with pytest.raises(CatalogValueError, match="start_offset_s"):
        repo.upsert_batch(
            writer_session,
            pipeline_run_id=run_id,
            batch_index=2,
            planned_bytes=5,
            n_files=1,
            start_offset_s=-1,
        )


def test_step_run_attempts_and_final_states(writer_session: Session, episode_id: int, run_id: int) -> None:
    key = {"episode_id": episode_id, "step": "transcode", "config_hash": "t1"}
    assert repo.step_status(writer_session, **key) is None
    started = repo.record_step_run(writer_session, **key, status="running", pipeline_run_id=run_id)
    assert (started.status, started.attempt) == (StepStatus.RUNNING, 1)
    failed = repo.record_step_run(writer_session, **key, status="failed", detail="worker lost")
    assert (failed.id, failed.status, failed.attempt) == (started.id, StepStatus.FAILED, 1)
    retried = repo.record_step_run(writer_session, **key, status="running")
    assert (retried.status, retried.attempt) == (StepStatus.RUNNING, 2)
    done = repo.record_step_run(writer_session, **key, status=StepStatus.SUCCEEDED)
    assert (done.status, done.attempt) == (StepStatus.SUCCEEDED, 2)
    # A late duplicate of the retry finds the work done and changes nothing.
    late = repo.record_step_run(writer_session, **key, status="running")
    assert late == done
    assert repo.step_status(writer_session, **key) is StepStatus.SUCCEEDED
    row = writer_session.execute(sa.select(StepRun)).scalar_one()
    assert (row.pipeline_run_id, row.ended_at is not None, row.detail) == (run_id, True, None)
    # Another config is another row.
    other = repo.record_step_run(
        writer_session, **{**key, "config_hash": "t2"}, status="rejected", reason="transcode_failed"
    )
    assert other.id != done.id and other.status is StepStatus.REJECTED
    assert writer_session.execute(sa.select(sa.func.count()).select_from(StepRun)).scalar_one() == 2
    with pytest.raises(UnknownChoiceError, match="reason code 'oops'"):
        repo.record_step_run(writer_session, **key, status="failed", reason="oops")


def test_record_check_overwrites_a_reevaluation(writer_session: Session, episode_id: int) -> None:
    key = {"episode_id": episode_id, "gate": "quality_pre", "check_name": "crc", "config_hash": "q1"}
    first = repo.record_check(
        writer_session,
        **key,
        status="failed",
        observed={"bad_chunks": 2},
        reason="crc_mismatch",
        severity="quarantine",
    )
    again = repo.record_check(writer_session, **key, status="passed")
    assert first == again
    row = writer_session.execute(sa.select(CheckResult)).scalar_one()
    writer_session.refresh(row)
    assert (row.status, row.reason, row.severity) == ("passed", None, None)
    # Absent observations are SQL NULL, not a JSON null.
    assert writer_session.execute(sa.text("SELECT observed IS NULL FROM check_results")).scalar_one()
    post = repo.record_check(writer_session, **{**key, "gate": "quality_post"}, status="warned")
    assert post != first
    with pytest.raises(UnknownChoiceError, match="gate 'quality_mid'"):
        repo.record_check(writer_session, **{**key, "gate": "quality_mid"}, status="passed")


def test_record_checks_writes_a_gate_in_one_statement_and_overwrites_like_record_check(
    writer_session: Session, episode_id: int
) -> None:
    key = {"episode_id": episode_id, "gate": "quality_pre", "config_hash": "q1"}
    first = repo.record_checks(
        writer_session,
        **key,
        checks=[
            repo.CheckRow("probe", "passed", {"messages": 10}),
            repo.CheckRow("crc", "failed", {"bad_chunks": 2}, "crc_mismatch", "quarantine", "2 chunks"),
            repo.CheckRow("gaps", "warned", None, "gap_rate_high", "flag"),
        ],
    )
    assert sorted(first) == ["crc", "gaps", "probe"]
    # a re-evaluation overwrites each row in place; a name given twice keeps its last row
    again = repo.record_checks(
        writer_session,
        **key,
        checks=[repo.CheckRow("crc", "failed", None, "crc_mismatch"), repo.CheckRow("crc", "passed")],
    )
    assert again == {"crc": first["crc"]}
    rows = {
        r.check_name: r
        for r in writer_session.execute(sa.select(CheckResult).execution_options(populate_existing=True))
        .scalars()
        .all()
    }
    assert (rows["crc"].status, rows["crc"].reason, rows["crc"].detail) == ("passed", None, None)
    assert (rows["gaps"].status, rows["gaps"].severity) == ("warned", "flag")
    assert rows["probe"].observed == {"messages": 10}
    assert repo.record_checks(writer_session, **key, checks=[]) == {}
    with pytest.raises(UnknownChoiceError, match="check status 'fine'"):
        repo.record_checks(writer_session, **key, checks=[repo.CheckRow("probe", "fine")])


def test_session_scope_turns_connection_faults_into_database_errors() -> None:
    engine = repo.make_engine("postgresql+psycopg2://nobody:secret@127.0.0.1:1/none")
    factory: sessionmaker[Session] = repo.make_session_factory(engine)
    with (
        pytest.raises(DatabaseError, match=r"nobody:\*\*\*@127\.0\.0\.1:1/none"),
        repo.session_scope(factory) as session,
    ):
        session.execute(sa.text("SELECT 1"))
    engine.dispose()
