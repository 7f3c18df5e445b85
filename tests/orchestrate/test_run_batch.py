"""The run-level functions without Airflow, against a real catalog: open, discover, plan, run, finalize."""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

import pytest
from orchestrate_helpers import write_vendor
from sqlalchemy import text

from pipeline.enums import RunOutcome
from pipeline.orchestrate import (
    BatchMismatchError,
    TaskState,
    discover,
    finalize,
    plan,
    run_batch_step,
    start_run,
    validate_conf,
)
from pipeline.settings import Settings
from pipeline.steps.base import StepContext
from pipeline.steps.ingest import IngestStep

pytestmark = pytest.mark.integration


def _open(ctx: StepContext, drop: Path, tmp_path: Path, *, stagger_s: float = 0.0) -> tuple:  # type: ignore[type-arg]
    vendor = write_vendor(tmp_path, drop, stagger_s=stagger_s)
    run_id = start_run(ctx, vendor, dag_id=vendor.name, run_id="manual__1", toggles=validate_conf(vendor, {}))
    return vendor, run_id


def test_discover_and_plan_record_batches_and_their_files(
    ctx: StepContext, drop: Path, tmp_path: Path
) -> None:
    vendor, run_id = _open(ctx, drop, tmp_path)
    found = discover(ctx, vendor, run_id)
    assert (found["n_candidates"], found["total_bytes"]) == (5, 15000)
    listing = json.loads(Path(found["listing_uri"].removeprefix("file://")).read_text())
    assert sorted(c["path"] for c in listing["candidates"]) == [f"part_{i}.mcap" for i in range(5)]
    planned = plan(ctx, vendor, run_id)
    assert planned["k"] == 2
    with ctx.engine.connect() as conn:
        rows = conn.execute(
            text("SELECT id, batch_index, n_files, planned_bytes FROM batches WHERE pipeline_run_id = :r"),
            {"r": run_id},
        ).all()
    assert sorted(r.id for r in rows) == sorted(planned["batch_ids"])
    assert sum(r.n_files for r in rows) == 5 and sum(r.planned_bytes for r in rows) == 15000
    files = [
        f["path"]
        for r in rows
        for f in json.loads((tmp_path / "store" / f"runs/{run_id}/batches/{r.batch_index}.json").read_text())[
            "files"
        ]
    ]
    assert sorted(files) == [f"part_{i}.mcap" for i in range(5)]
    # A retried plan task overwrites the same rows.
    assert plan(ctx, vendor, run_id)["batch_ids"] == planned["batch_ids"]
    # A retried run (same Airflow run id) is the same pipeline run.
    assert start_run(ctx, vendor, dag_id=vendor.name, run_id="manual__1", toggles={}) == run_id


def test_a_batch_step_resumes_and_waits_its_start_offset_once(
    settings: Settings, ctx: StepContext, drop: Path, tmp_path: Path
) -> None:
    vendor, run_id = _open(ctx, drop, tmp_path, stagger_s=0.4)
    discover(ctx, vendor, run_id)
    first, second = plan(ctx, vendor, run_id)["batch_ids"]
    started = time.monotonic()
    done = run_batch_step(
        settings, vendor, "ingest", run_id, second, ctx=ctx, step_cls=IngestStep, start_offset=True
    )
    assert time.monotonic() - started >= 0.4 and done["waited_s"] == pytest.approx(0.4)
    assert done["succeeded"] == done["files"] > 0 and done["failed"] == 0
    # The same step again (a cleared task): everything is already done under this config.
    again = run_batch_step(settings, vendor, "ingest", run_id, second, ctx=ctx, step_cls=IngestStep)
    assert (again["succeeded"], again["skipped"]) == (0, done["files"])
    assert again["waited_s"] < 0.4  # no offset again, at most the pace behind the first start
    # The first batch has no offset; a batch id of another run is refused.
    assert (
        run_batch_step(settings, vendor, "ingest", run_id, first, ctx=ctx, step_cls=IngestStep)["failed"] == 0
    )
    other = start_run(ctx, vendor, dag_id=vendor.name, run_id="manual__2", toggles={})
    with pytest.raises(BatchMismatchError):
        run_batch_step(settings, vendor, "ingest", other, first, ctx=ctx, step_cls=IngestStep)


def test_finalize_records_the_outcome_and_the_warnings(ctx: StepContext, drop: Path, tmp_path: Path) -> None:
    vendor, run_id = _open(ctx, drop, tmp_path)
    states = [TaskState(t, -1, "success") for t in ("validate_conf", "discover", "plan", "warehouse_sync")]
    states += [TaskState("annotate", 0, "failed"), TaskState("annotate", 1, "success")]
    decision = finalize(ctx, vendor, run_id, states, batch_ids=[7, 8])
    assert decision.outcome is RunOutcome.SUCCEEDED_WITH_WARNINGS
    with ctx.engine.connect() as conn:
        outcome, warnings, ended = conn.execute(
            text("SELECT outcome, warnings, ended_at FROM pipeline_runs WHERE id = :r"), {"r": run_id}
        ).one()
    assert outcome == "succeeded_with_warnings" and ended is not None
    assert warnings == [
        {
            "step": "annotate",
            "critical": False,
            "batches": [7],
            "detail": "failed in 1 of 2 batch(es)",
            "failed_items": 0,
        }
    ]


def test_starts_of_one_step_are_paced_whatever_order_the_tasks_arrive_in(ctx: StepContext) -> None:
    from concurrent.futures import ThreadPoolExecutor
    from datetime import UTC, datetime, timedelta

    from pipeline.enums import StepName
    from pipeline.orchestrate.batch import reserve_start

    now = datetime.now(UTC)
    pace = timedelta(seconds=3)

    def first_step(offset_s: float, arrival_s: float) -> datetime:
        arrival = now + timedelta(seconds=arrival_s)
        return reserve_start(ctx, 1, StepName.INGEST, now=arrival, pace_s=3.0, offset_s=offset_s)

    # Four batches planned 3 s apart reach their first step last-first and a little apart: each still
    # gets its planned slot, counted from the first arrival.
    slots = [
        first_step(offset, arrival) for offset, arrival in ((9.0, 0.0), (6.0, 0.4), (3.0, 0.2), (0.0, 0.7))
    ]
    assert slots == [now + 3 * pace, now + 2 * pace, now + pace, now + timedelta(seconds=0.7)]
    # A later step whose tasks are launched in the same instant: they start a pace apart.
    with ThreadPoolExecutor(4) as pool:
        starts = sorted(
            pool.map(lambda _: reserve_start(ctx, 1, StepName.TRANSCODE, now=now, pace_s=3.0), range(4))
        )
    assert [(b - a).total_seconds() for a, b in itertools.pairwise(starts)] == [3.0, 3.0, 3.0]
    assert starts[0] == now
    # Another run, or a rerun long after, is not held back by these reservations.
    assert reserve_start(ctx, 2, StepName.TRANSCODE, now=now, pace_s=3.0) == now
    later = now + timedelta(hours=1)
    assert reserve_start(ctx, 1, StepName.TRANSCODE, now=later, pace_s=3.0) == later


def _run_row(ctx: StepContext, run_id: int) -> tuple[str, list[dict[str, object]]]:
    with ctx.engine.connect() as conn:
        outcome, warnings = conn.execute(
            text("SELECT outcome, warnings FROM pipeline_runs WHERE id = :r"), {"r": run_id}
        ).one()
    return outcome, warnings


def test_an_empty_source_is_a_recorded_warning_and_a_missing_one_fails_with_source_missing(
    ctx: StepContext, drop: Path, tmp_path: Path
) -> None:
    from pipeline.discover import SourceMissingError

    for f in drop.glob("*.mcap"):
        f.unlink()  # notes.txt stays: present, but no include glob selects it
    vendor, run_id = _open(ctx, drop, tmp_path)
    found = discover(ctx, vendor, run_id)
    assert found["n_candidates"] == 0 and found["unselected"] == 1
    assert found["warnings"] and found["warnings"][0].startswith("nothing_selected: 1 file(s) under")
    ok = [TaskState(t, -1, "success") for t in ("validate_conf", "discover", "plan", "warehouse_sync")]
    assert finalize(ctx, vendor, run_id, ok).outcome is RunOutcome.SUCCEEDED_WITH_WARNINGS
    outcome, warnings = _run_row(ctx, run_id)
    assert outcome == "succeeded_with_warnings"
    assert [(w["step"], w["code"], w["critical"]) for w in warnings] == [
        ("discover", "nothing_selected", False)
    ]
    # A retried discover that now finds files replaces its note; finalize is then clean.
    (drop / "late.mcap").write_bytes(b"x" * 10)
    assert discover(ctx, vendor, run_id)["warnings"] == []
    assert finalize(ctx, vendor, run_id, ok).outcome is RunOutcome.SUCCEEDED
    assert _run_row(ctx, run_id) == ("succeeded", [])

    # An empty folder says so; a folder that is not there fails discover, and the run names the cause.
    (drop / "late.mcap").unlink()
    (drop / "notes.txt").unlink()
    rerun = start_run(ctx, vendor, dag_id=vendor.name, run_id="manual__1", toggles={})
    assert discover(ctx, vendor, rerun)["warnings"][0] == f"source_empty: no files under {drop}"
    drop.rmdir()
    with pytest.raises(SourceMissingError, match="source_missing"):
        discover(ctx, vendor, rerun)
    failed = [*ok[:1], TaskState("discover", -1, "failed"), TaskState("plan", -1, "upstream_failed")]
    decision = finalize(ctx, vendor, rerun, failed)
    assert decision.outcome is RunOutcome.FAILED
    outcome, warnings = _run_row(ctx, rerun)
    assert outcome == "failed"
    by_step = {(w["step"], w.get("code")): w for w in warnings}
    assert set(by_step) == {("discover", "source_missing"), ("plan", None)}
    assert str(drop) in by_step[("discover", "source_missing")]["detail"]


def test_a_source_that_cannot_be_listed_fails_the_run_with_source_unreachable(
    ctx: StepContext, drop: Path, tmp_path: Path
) -> None:
    from pipeline.discover import SourceUnreachableError

    vendor, run_id = _open(ctx, drop, tmp_path)
    # a host that refuses the connection: the HTTP client's error, not an empty listing
    source = vendor.source.model_copy(update={"url": "http://127.0.0.1:1/drop"})
    vendor = vendor.model_copy(update={"source": source})
    with pytest.raises(
        SourceUnreachableError, match=r"source_unreachable: .*127\.0\.0\.1:1/drop cannot be listed"
    ):
        discover(ctx, vendor, run_id)
    failed = [TaskState("validate_conf", -1, "success"), TaskState("discover", -1, "failed")]
    assert finalize(ctx, vendor, run_id, failed).outcome is RunOutcome.FAILED
    outcome, warnings = _run_row(ctx, run_id)
    assert outcome == "failed"
    recorded = [w for w in warnings if w.get("code") == "source_unreachable"]
    assert len(recorded) == 1 and recorded[0]["step"] == "discover" and recorded[0]["critical"]
    assert "Cannot connect" in str(recorded[0]["detail"])


#: A DAG task in its own process: opens the run, starts the ingest step (its batch's items recorded as
#: running), then hangs until it is killed -9, as a worker node that dies mid-run does.
DOOMED_TASK = r"""
import sys, time
from pathlib import Path
from pipeline.config import load_vendor
from pipeline.orchestrate import run_batch_step, start_run, discover, plan, validate_conf
from pipeline.settings import load_settings
from pipeline.steps.runner import build_context
settings = load_settings(home=sys.argv[2], database_url=sys.argv[3], store_url=sys.argv[4], project_dir=sys.argv[5])
ctx = build_context(settings)
vendor = load_vendor(Path(sys.argv[1]))
run_id = start_run(ctx, vendor, dag_id=vendor.name, run_id="killed__1", toggles=validate_conf(vendor, {}))
discover(ctx, vendor, run_id)
planned = plan(ctx, vendor, run_id)
run_batch_step(settings, vendor, "ingest", run_id, planned["batch_ids"][0], ctx=ctx)
print(run_id, flush=True)
time.sleep(3600)
"""


def test_a_run_whose_process_was_killed_is_closed_by_the_next_run(
    ctx: StepContext, settings: Settings, drop: Path, tmp_path: Path
) -> None:
    import os
    import signal
    import subprocess
    import sys

    vendor = write_vendor(tmp_path, drop)
    vendor_file = next(tmp_path.glob(f"**/{vendor.name}.yaml"))
    child = subprocess.Popen(
        [sys.executable, "-c", DOOMED_TASK, str(vendor_file), str(settings.home), str(settings.database_url),
         str(settings.store_url), str(settings.project_dir)],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    killed_run = int(child.stdout.readline())  # type: ignore[union-attr]
    os.kill(child.pid, signal.SIGKILL)
    child.wait()

    def outcomes() -> dict[int, tuple[str, list]]:  # type: ignore[type-arg]
        with ctx.engine.connect() as conn:
            rows = conn.execute(text("SELECT id, outcome, warnings FROM pipeline_runs")).all()
        return {r.id: (r.outcome, r.warnings) for r in rows}

    assert outcomes()[killed_run][0] == "running"  # nothing of the killed process will ever close it
    # A run opened while the killed one is recent leaves it alone: it may still be alive.
    start_run(ctx, vendor, dag_id=vendor.name, run_id="manual__2", toggles=validate_conf(vendor, {}))
    assert outcomes()[killed_run][0] == "running"
    time.sleep(1.5)
    quick = ctx.settings.model_copy(update={"run_abandoned_after_s": 1.0})
    fresh = start_run(
        StepContext(quick, ctx.engine, ctx.store, ctx.code_version),
        vendor,
        dag_id=vendor.name,
        run_id="manual__3",
        toggles=validate_conf(vendor, {}),
    )
    runs = outcomes()
    outcome, warnings = runs[killed_run]
    assert outcome == "failed"
    assert [(w["step"], w["critical"]) for w in warnings] == [("abandoned", True)]
    assert "stopped without an outcome" in warnings[0]["detail"]
    assert runs[fresh][0] == "running"
