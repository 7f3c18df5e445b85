"""Vendor DAGs run end to end with ``dag.test()`` against a real catalog: toggles, criticality, resume.

The synthetic vendor is the Acme example pointed at three clean two-second episodes and planned into two
batches, with every step on; the steps are the registered ones, wrapped for failure injection
(:mod:`dag_test_steps`). ``dag.test()`` runs tasks in this process and ignores pools (the pool test uses
a real scheduler).
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from dag_helpers import SyntheticVendor, task_states
from dag_test_steps import read_calls
from sqlalchemy import create_engine, text

pytestmark = [pytest.mark.airflow, pytest.mark.integration, pytest.mark.slow]

STEPS = ("ingest", "quality_pre", "transcode", "quality_post", "annotate", "shard")


def _catalog(vendor: SyntheticVendor, sql: str, **params: object) -> list[tuple]:
    engine = create_engine(vendor.database_url)
    try:
        with engine.connect() as conn:
            return [tuple(row) for row in conn.execute(text(sql), params)]
    finally:
        engine.dispose()


def _run_row(vendor: SyntheticVendor) -> tuple:
    rows = _catalog(vendor, "SELECT id, outcome, warnings, step_toggles FROM pipeline_runs")
    assert len(rows) == 1
    return rows[0]


def test_all_steps_run_and_the_catalog_holds_the_results(synthetic_vendor: SyntheticVendor) -> None:
    dag_run = synthetic_vendor.run()
    states = task_states(dag_run)
    assert dag_run.state == "success"
    for step in STEPS:
        assert [states[(step, i)] for i in (0, 1)] == ["success", "success"], step
    assert states[("finalize", -1)] == "success"
    # The warehouse caught up with what the run wrote.
    assert states[("warehouse_sync", -1)] == "success"
    assert (synthetic_vendor.store.parent / "home" / "warehouse.duckdb").exists()
    run_id, outcome, warnings, toggles = _run_row(synthetic_vendor)
    assert outcome == "succeeded" and warnings == []
    assert toggles == dict.fromkeys(STEPS, True)
    batches = _catalog(synthetic_vendor, "SELECT n_files FROM batches WHERE pipeline_run_id = :r", r=run_id)
    assert sorted(n for (n,) in batches) == [1, 2]
    episodes = _catalog(synthetic_vendor, "SELECT state, reasons, detail FROM episodes")
    assert [e[0] for e in episodes] == ["accepted"] * 3, episodes
    done = _catalog(
        synthetic_vendor,
        "SELECT step, count(*) FROM step_runs WHERE status = 'succeeded' AND pipeline_run_id = :r GROUP BY step",
        r=run_id,
    )
    assert dict(done) == dict.fromkeys(STEPS, 3)


def test_a_step_switched_off_is_skipped_and_the_next_steps_run_on_what_is_there(
    synthetic_vendor: SyntheticVendor,
) -> None:
    dag_run = synthetic_vendor.run({"transcode": False})
    states = task_states(dag_run)
    assert dag_run.state == "success"
    assert [states[("transcode", i)] for i in (0, 1)] == ["skipped", "skipped"]
    for step in ("quality_post", "annotate", "shard"):
        assert [states[(step, i)] for i in (0, 1)] == ["success", "success"], step
    _, outcome, _, toggles = _run_row(synthetic_vendor)
    assert outcome == "succeeded"
    assert toggles["transcode"] is False and toggles["quality_post"] is True
    # Transcode did no work; the steps before it did theirs, the ones after ran on what was there.
    processed = {call["step"] for call in read_calls(synthetic_vendor.store)}
    assert "transcode" not in processed and {"ingest", "quality_pre"} <= processed
    assert _catalog(synthetic_vendor, "SELECT id FROM step_runs WHERE step = 'transcode'") == []


def test_switching_transcode_off_leaves_the_episodes_as_they_were(synthetic_vendor: SyntheticVendor) -> None:
    assert synthetic_vendor.run({"transcode": False}).state == "success"
    episodes = _catalog(synthetic_vendor, "SELECT state, reasons FROM episodes")
    assert [state for state, _ in episodes] == ["accepted"] * 3, episodes


def test_an_unknown_conf_key_fails_the_run_before_anything_is_opened(
    synthetic_vendor: SyntheticVendor,
) -> None:
    dag_run = synthetic_vendor.run({"transcod": False})
    states = task_states(dag_run)
    assert dag_run.state == "failed"
    assert states[("validate_conf", -1)] == "failed"
    assert states[("discover", -1)] == "upstream_failed"
    assert states[("finalize", -1)] == "failed"
    assert _catalog(synthetic_vendor, "SELECT id FROM pipeline_runs") == []
    assert read_calls(synthetic_vendor.store) == []


def test_a_missing_source_fails_the_run_with_source_missing(synthetic_vendor: SyntheticVendor) -> None:
    import shutil

    shutil.rmtree(synthetic_vendor.drop)  # a typo in source.url, an unmounted volume
    dag_run = synthetic_vendor.run()
    states = task_states(dag_run)
    assert dag_run.state == "failed"
    assert states[("discover", -1)] == "failed" and states[("finalize", -1)] == "failed"
    _, outcome, warnings, _ = _run_row(synthetic_vendor)
    assert outcome == "failed"
    (entry,) = [w for w in warnings if w["step"] == "discover"]
    assert entry["code"] == "source_missing" and entry["critical"] is True
    assert str(synthetic_vendor.drop) in entry["detail"]


def test_an_empty_source_is_a_recorded_warning_not_a_green_empty_run(
    synthetic_vendor: SyntheticVendor,
) -> None:
    import shutil

    shutil.rmtree(synthetic_vendor.drop)
    synthetic_vendor.drop.mkdir()  # the vendor delivered nothing
    dag_run = synthetic_vendor.run()
    assert dag_run.state == "success"
    _, outcome, warnings, _ = _run_row(synthetic_vendor)
    assert outcome == "succeeded_with_warnings"
    assert warnings == [
        {
            "step": "discover",
            "critical": False,
            "code": "source_empty",
            "detail": f"source_empty: no files under {synthetic_vendor.drop}",
            "failed_items": 0,
        }
    ]


def test_a_failed_non_critical_step_is_a_warning_and_the_run_succeeds(
    synthetic_vendor: SyntheticVendor,
) -> None:
    doomed = synthetic_vendor.episode_keys()[0]
    synthetic_vendor.fail("annotate", [doomed])
    dag_run = synthetic_vendor.run()
    states = task_states(dag_run)
    assert dag_run.state == "success"
    annotate = sorted(states[("annotate", i)] for i in (0, 1))
    assert annotate == ["failed", "success"]
    # The batch goes on after a non-critical failure: shard still ran on both batches.
    assert [states[("shard", i)] for i in (0, 1)] == ["success", "success"]
    run_id, outcome, warnings, _ = _run_row(synthetic_vendor)
    assert outcome == "succeeded_with_warnings"
    assert len(warnings) == 1
    warning = warnings[0]
    assert warning["step"] == "annotate" and warning["critical"] is False
    assert warning["failed_items"] == 1
    (batch_of_doomed,) = _catalog(
        synthetic_vendor,
        "SELECT batch_id FROM step_runs WHERE step = 'annotate' AND status = 'failed' AND pipeline_run_id = :r",
        r=run_id,
    )
    assert warning["batches"] == [batch_of_doomed[0]]


def test_a_failed_critical_step_fails_the_run_and_a_rerun_resumes_without_redoing_work(
    synthetic_vendor: SyntheticVendor,
) -> None:
    doomed = synthetic_vendor.episode_keys()[1]
    synthetic_vendor.fail("transcode", [doomed])
    logical_date = datetime.now(UTC)
    first = synthetic_vendor.run(logical_date=logical_date)
    states = task_states(first)
    assert first.state == "failed"
    failed_index = next(i for i in (0, 1) if states[("transcode", i)] == "failed")
    other = 1 - failed_index
    assert states[("quality_post", failed_index)] == "upstream_failed"
    assert states[("shard", failed_index)] == "skipped"  # after non-critical annotate, it checks itself
    assert all(states[(step, other)] == "success" for step in STEPS)
    run_id, outcome, warnings, _ = _run_row(synthetic_vendor)
    assert outcome == "failed"
    assert [(w["step"], w["critical"]) for w in warnings] == [("transcode", True)]
    first_calls = read_calls(synthetic_vendor.store)

    # Clear the run and run it again (same Airflow run id, so the same pipeline run), fault gone.
    synthetic_vendor.heal()
    second = synthetic_vendor.run(logical_date=logical_date)
    assert second.state == "success"
    assert all(state == "success" for state in task_states(second).values())
    rerun_id, outcome, warnings, _ = _run_row(synthetic_vendor)
    assert (rerun_id, outcome, warnings) == (run_id, "succeeded", [])
    second_calls = read_calls(synthetic_vendor.store)[len(first_calls) :]
    done_before = {(c["step"], c["key"]) for c in first_calls}
    redone = [c for c in second_calls if (c["step"], c["key"]) in done_before]
    assert redone == []
    assert {"step": "transcode", "key": doomed} in [
        {"step": c["step"], "key": c["key"]} for c in second_calls
    ]
    assert not {c["step"] for c in second_calls} & {"ingest", "quality_pre"}
    attempts = _catalog(
        synthetic_vendor,
        "SELECT s.step, s.attempt, s.status FROM step_runs s JOIN episodes e ON e.id = s.episode_id "
        "JOIN source_files f ON f.id = e.source_file_id WHERE f.path = :p ORDER BY s.step",
        p=doomed,
    )
    assert ("transcode", 2, "succeeded") in attempts
    assert all(status == "succeeded" for _, _, status in attempts)
