"""Vendor DAGs run by a real scheduler, triggered as the UI's trigger form does: what users run.

Every run here goes through the session's Airflow services (scheduler, LocalExecutor, API server, DAG
processor; see scheduler_harness) with the registered steps, wrapped for failure injection. The transcode
runs its camera encodes in two encoder processes started from the Airflow task process: before
pipeline.processes those children re-imported the task's main module (the ``airflow`` script), hence
Airflow, and died on the task's deliberately unusable metadata-DB URL, so every transcode failed with
``BrokenProcessPool``. The runs of the module start together (different DAGs run side by side) and each
test then reads its own vendor's run.
"""

from __future__ import annotations

import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from mcap.reader import make_reader
from scheduler_harness import HARNESS_APPLICATION, ScheduledVendor, SchedulerHarness, task_states
from sqlalchemy.engine import make_url

from pipeline.orchestrate.scheduled import ScheduledRun

#: The module's runs share two cores with their tasks' start-up (each task process imports Airflow and
#: the pipeline): a few minutes on an idle CI machine, more beside other work. The fixture is charged to the
#: first test.
pytestmark = [
    pytest.mark.airflow,
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.timeout(3600),
]

STEPS = ("ingest", "quality_pre", "transcode", "quality_post", "annotate", "shard")
#: Two encoder processes per transcode task (the Acme example's own setting).
TWO_ENCODERS = {"transcode": {"resources": {"cpus": 2, "memory_bytes": "2 GiB"}}}


class Runs:
    """The module's vendors and the first run of each."""

    def __init__(self, harness: SchedulerHarness) -> None:
        self.harness = harness
        self.vendors: dict[str, ScheduledVendor] = {}
        self.runs: dict[str, ScheduledRun] = {}
        self.run_ids: dict[str, str] = {}
        #: the user of every catalog connection the runs' tasks opened (the harness's own left out)
        self.catalog_users: list[str] = []

    def __getitem__(self, name: str) -> tuple[ScheduledVendor, ScheduledRun]:
        return self.vendors[name], self.runs[name]


@pytest.fixture(scope="module")
def runs(
    scheduler: SchedulerHarness, connection_log: Callable[..., Callable[[], list[str]]]
) -> Iterator[Runs]:
    out = Runs(scheduler)
    # name: (steps, conf, failures, batches); two episodes each, one per batch unless one batch.
    plans: dict[str, tuple[dict[str, Any], dict[str, Any] | None, dict[str, list[int]], int]] = {
        "sched_all_steps": (TWO_ENCODERS, None, {}, 2),
        "sched_no_transcode": ({}, {"transcode": False}, {}, 1),
        "sched_annotate_fails": ({}, None, {"annotate": [0]}, 2),
        # A critical step failing as badly as it can: its encoder process dies.
        "sched_encoder_crash": (TWO_ENCODERS, None, {"transcode_encoder_crash": [1]}, 2),
        "sched_empty_source": ({}, None, {}, 1),  # the vendor delivered nothing (emptied below)
        # every box of the trigger form unticked: refused, not a green run that did nothing
        "sched_all_off": ({}, dict.fromkeys(STEPS, False), {}, 1),
    }
    for name, (steps, _, failures, batches) in plans.items():
        vendor = scheduler.add_vendor(name, steps=steps, batches=batches)
        keys = vendor.episode_keys()
        vendor.fail({step: [keys[i] for i in picks] for step, picks in failures.items()})
        out.vendors[name] = vendor
    for path in out.vendors["sched_empty_source"].drop.iterdir():
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    database = make_url(scheduler.catalog_url).database or ""
    users = connection_log(database, ignore_application=HARNESS_APPLICATION, with_application=True)
    for name, (_, conf, _, _) in plans.items():
        out.run_ids[name] = scheduler.trigger(out.vendors[name], conf)
    for name in plans:
        out.runs[name] = scheduler.follow(out.vendors[name], out.run_ids[name])
    out.catalog_users = users()
    yield out


def _pipeline_run(vendor: ScheduledVendor) -> tuple[Any, ...]:
    rows = vendor.catalog(
        "SELECT r.id, r.outcome, r.warnings, r.step_toggles FROM pipeline_runs r "
        "JOIN vendors v ON v.id = r.vendor_id WHERE v.name = :vendor"
    )
    assert len(rows) == 1
    return rows[0]


def _step_counts(vendor: ScheduledVendor, run_id: int, status: str = "succeeded") -> dict[str, int]:
    return dict(
        vendor.catalog(
            "SELECT step, count(*) FROM step_runs WHERE status = :s AND pipeline_run_id = :r GROUP BY step",
            s=status,
            r=run_id,
        )
    )


def test_a_robot_vendor_runs_every_step_under_the_scheduler_with_two_encoder_processes(runs: Runs) -> None:
    vendor, run = runs["sched_all_steps"]
    states = task_states(run)
    assert run.state == "success", run.failures
    for step in STEPS:
        assert [states[(step, i)] for i in (0, 1)] == ["success", "success"], step
    for task in ("validate_conf", "discover", "plan", "warehouse_sync", "finalize"):
        assert states[(task, -1)] == "success", task
    run_id, outcome, warnings, toggles = _pipeline_run(vendor)
    assert (outcome, warnings) == ("succeeded", [])
    assert toggles == dict.fromkeys(STEPS, True)
    assert _step_counts(vendor, run_id) == dict.fromkeys(STEPS, 2)
    # The episodes were transcoded: one published episode file each, which the stock reader opens.
    episodes = vendor.catalog(
        "SELECT a.uri FROM artifacts a JOIN episodes e ON e.id = a.episode_id JOIN vendors v "
        "ON v.id = e.vendor_id WHERE v.name = :vendor AND a.kind = 'transcoded_episode'"
    )
    assert len(episodes) == 2
    for (uri,) in episodes:
        with open(uri.removeprefix("file://"), "rb") as fh:
            summary = make_reader(fh).get_summary()
        assert summary is not None
        video = [c for c in summary.channels.values() if c.metadata.get("sluice.group") == "cameras"]
        assert len(video) == 3 and all(summary.statistics.channel_message_counts[c.id] > 0 for c in video)
    # Tasks waited for the scheduler, not for each other: the latency is reported, and it is finite.
    assert run.queue_latency_s() and max(run.queue_latency_s()) < 120


def test_every_catalog_connection_of_the_scheduled_runs_is_the_ingest_role(runs: Runs) -> None:
    """The tasks' environment holds the superuser's catalog URL as well as the ingest role's, as a
    deployment's does: every task of the five runs (discover, plan, the steps, warehouse sync, finalize, the
    failed and the empty runs' too) connects as the ingest role, which cannot rewrite recorded history."""
    assert len(runs.catalog_users) >= 5 * len(STEPS)  # every step of every run connected
    others = Counter(u for u in runs.catalog_users if not u.startswith("sluice_ingest "))
    assert not others, others


def test_a_step_switched_off_in_the_trigger_form_is_skipped_and_the_next_steps_run_on_what_is_there(
    runs: Runs,
) -> None:
    vendor, run = runs["sched_no_transcode"]
    states = task_states(run)
    assert run.state == "success"
    assert states[("transcode", 0)] == "skipped"
    for step in ("quality_post", "annotate", "shard"):
        assert states[(step, 0)] == "success", step
    run_id, outcome, _, toggles = _pipeline_run(vendor)
    assert outcome == "succeeded"
    assert toggles["transcode"] is False and toggles["quality_post"] is True
    processed = {call["step"] for call in vendor.calls()}
    assert "transcode" not in processed and {"ingest", "quality_pre"} <= processed
    assert (
        vendor.catalog(
            "SELECT s.id FROM step_runs s WHERE s.step = 'transcode' AND s.pipeline_run_id = :r", r=run_id
        )
        == []
    )
    # The episodes stay as the pre-gate left them.
    episodes = vendor.catalog(
        "SELECT e.state FROM episodes e JOIN vendors v ON v.id = e.vendor_id WHERE v.name = :vendor"
    )
    assert [state for (state,) in episodes] == ["accepted"] * 2


def test_a_failed_non_critical_step_is_a_warning_and_the_run_succeeds(runs: Runs) -> None:
    vendor, run = runs["sched_annotate_fails"]
    states = task_states(run)
    assert run.state == "success"
    assert sorted(states[("annotate", i)] for i in (0, 1)) == ["failed", "success"]
    assert [states[("shard", i)] for i in (0, 1)] == ["success", "success"]
    _, outcome, warnings, _ = _pipeline_run(vendor)
    assert outcome == "succeeded_with_warnings"
    assert [(w["step"], w["critical"], w["failed_items"]) for w in warnings] == [("annotate", False, 1)]
    # `sluice run` would print the underlying error: the failed task's exception from its log.
    errors = [f.error for f in run.failures if f.task.startswith("annotate")]
    assert errors and "StepFailedError" in str(errors[0]) and "injected failure of annotate" in str(errors[0])


def test_an_empty_source_is_a_recorded_warning_not_a_green_empty_run(runs: Runs) -> None:
    vendor, run = runs["sched_empty_source"]
    assert run.succeeded
    _, outcome, warnings, _ = _pipeline_run(vendor)
    assert outcome == "succeeded_with_warnings"
    assert warnings == [
        {
            "step": "discover",
            "critical": False,
            "code": "source_empty",
            "detail": f"source_empty: no files under {vendor.drop}",
            "failed_items": 0,
        }
    ]
    landed = "SELECT count(*) FROM source_files f JOIN vendors v ON v.id = f.vendor_id WHERE v.name = :vendor"
    assert vendor.catalog(landed) == [(0,)]


def test_a_run_with_every_step_switched_off_in_the_trigger_form_fails_at_its_first_task_and_says_why(
    runs: Runs,
) -> None:
    vendor, run = runs["sched_all_off"]
    states = task_states(run)
    assert run.state == "failed"
    assert states[("validate_conf", -1)] == "failed"
    # finalize (all done) fails the run; dedup and the warehouse sync skip a run that was never opened
    assert states[("finalize", -1)] == "failed"
    assert states[("dedup", -1)] == states[("warehouse_sync", -1)] == "skipped"
    later = ("discover", "plan", *STEPS)
    assert [states[(task, -1)] for task in later] == ["upstream_failed"] * len(later)
    [refused] = [f for f in run.failures if f.task == "validate_conf"]
    assert "every step is off, so the run would do nothing" in str(refused.error)
    # refused before the run was opened: no pipeline run, nothing listed or landed
    runs_of_vendor = (
        "SELECT count(*) FROM pipeline_runs r JOIN vendors v ON v.id = r.vendor_id WHERE v.name = :vendor"
    )
    assert vendor.catalog(runs_of_vendor) == [(0,)]
    assert vendor.calls() == []


def test_a_dead_encoder_process_fails_the_run_with_its_first_traceback_line_and_clearing_it_resumes(
    runs: Runs, tmp_path: Path
) -> None:
    vendor, first = runs["sched_encoder_crash"]
    harness = runs.harness
    doomed = vendor.episode_keys()[1]
    states = task_states(first)
    assert first.state == "failed"
    failed_index = next(i for i in (0, 1) if states[("transcode", i)] == "failed")
    other = 1 - failed_index
    assert states[("quality_post", failed_index)] == "upstream_failed"
    assert states[("shard", failed_index)] == "skipped"  # after non-critical annotate, it checks itself
    assert all(states[(step, other)] == "success" for step in STEPS)
    run_id, outcome, warnings, _ = _pipeline_run(vendor)
    assert outcome == "failed"
    assert [(w["step"], w["critical"]) for w in warnings] == [("transcode", True)]
    # The underlying error, not only that a pool broke: the dead child's signal and first traceback line.
    failed = [item for item in first.failed_items if item["step"] == "transcode"]
    assert [item["path"] for item in failed] == [doomed]
    detail = failed[0]["detail"]
    assert "WorkerCrashedError: transcode encoder worker died: pid " in detail
    assert "killed by SIGSEGV: Fatal Python error: Segmentation fault" in detail
    assert any("SIGSEGV" in str(f.error) for f in first.failures)  # what `sluice run` prints
    # ... on the run page and in `sluice report`.
    from sqlalchemy import create_engine
    from typer.testing import CliRunner

    from pipeline.cli import app
    from pipeline.ui.pages import ViewSources, run_page

    env = {"SLUICE_DATABASE_URL": harness.catalog_url, "SLUICE_HOME": str(harness.root / "home")}
    report = tmp_path / "report.html"
    done = CliRunner().invoke(
        app, ["report", str(run_id), "--out", str(report)], env=env, catch_exceptions=False
    )
    assert done.exit_code == 0, done.output
    assert "killed by SIGSEGV: Fatal Python error: Segmentation fault" in report.read_text()
    engine = create_engine(harness.catalog_url)
    try:
        page = run_page(ViewSources(engine, harness.root / "home" / "warehouse.duckdb"), run_id)
    finally:
        engine.dispose()
    assert any("SIGSEGV" in (problem.detail or "") for problem in page["failed_steps"])
    first_calls = vendor.calls()

    # Clear the failed tasks of the same run, as from the UI, with the fault gone: it resumes.
    vendor.heal()
    harness.clear_failed(vendor, runs.run_ids[vendor.name])
    second = harness.follow(vendor, runs.run_ids[vendor.name])
    assert second.state == "success"
    assert all(state in ("success", "skipped") for state in task_states(second).values())
    assert _pipeline_run(vendor)[:3] == (run_id, "succeeded", [])
    second_calls = vendor.calls()[len(first_calls) :]
    done_before = {(c["step"], c["key"]) for c in first_calls}
    assert [c for c in second_calls if (c["step"], c["key"]) in done_before] == []
    assert ("transcode", doomed) in {(c["step"], c["key"]) for c in second_calls}
    assert not {c["step"] for c in second_calls} & {"ingest", "quality_pre"}
    assert _step_counts(vendor, run_id)["transcode"] == 2


def test_unpausing_a_scheduled_vendor_starts_no_run_for_a_time_already_past(
    scheduler: SchedulerHarness,
) -> None:
    vendor = scheduler.add_vendor("sched_nightly", cron="0 2 * * *")
    client = scheduler.client
    client.wait_for_dags([vendor.name], timeout_s=180)
    assert client.dag(vendor.name)["is_paused"] is True  # a new vendor's DAG waits to be switched on
    unpaused_at = datetime.now(UTC)
    client.set_paused(vendor.name, False)
    time.sleep(15)  # three scheduler loops
    assert client.runs(vendor.name) == []
    next_run = datetime.fromisoformat(client.dag(vendor.name)["next_dagrun_run_after"].replace("Z", "+00:00"))
    assert next_run > unpaused_at and (next_run.hour, next_run.minute) == (2, 0)
    client.set_paused(vendor.name, True)
