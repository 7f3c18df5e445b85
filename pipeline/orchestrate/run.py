"""Run-level work: open a run, discover its inputs, sync the warehouse, and close it with its outcome.

Each function is the body of one DAG task and takes the clients (a
:class:`~pipeline.steps.base.StepContext`, built once per task from settings) as an argument. Every write
is an upsert keyed by the run, so Airflow's retries and a cleared-and-rerun task never duplicate anything.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pipeline.enums import RunOutcome, StepStatus
from pipeline.orchestrate import artifacts
from pipeline.orchestrate.names import DISCOVER
from pipeline.orchestrate.outcome import RunDecision, TaskState, decide_outcome

if TYPE_CHECKING:
    from pipeline.config import VendorConfig
    from pipeline.steps.base import StepContext

log = logging.getLogger(__name__)


def start_run(
    ctx: StepContext, vendor: VendorConfig, *, dag_id: str, run_id: str, toggles: Mapping[str, bool]
) -> int:
    """Register the vendor's current config and open (or re-open) the run ``dag_id``/``run_id``.

    Returns the catalog's ``pipeline_run_id``; a re-run of the same Airflow run gets the same id back.
    Runs that were killed before they recorded an outcome (idle for ``run_abandoned_after_s``) are closed
    first (:func:`pipeline.catalog.runs.close_abandoned_runs`).
    """
    from pipeline.catalog import make_session_factory, session_scope
    from pipeline.catalog.runs import close_abandoned_runs, start_pipeline_run
    from pipeline.catalog.sources import upsert_vendor
    from pipeline.config import config_hash

    digest = config_hash(vendor)
    with session_scope(make_session_factory(ctx.engine)) as session:
        closed = close_abandoned_runs(session, idle_s=ctx.settings.run_abandoned_after_s)
        if closed:
            log.warning(
                "closed abandoned pipeline runs %s (running, idle for %g s)",
                closed,
                ctx.settings.run_abandoned_after_s,
            )
    with session_scope(make_session_factory(ctx.engine)) as session:
        vendor_id = upsert_vendor(
            session,
            name=vendor.name,
            kind=vendor.kind,
            config_hash=digest,
            config=vendor.model_dump(mode="json"),
        )
        pipeline_run_id = start_pipeline_run(
            session,
            vendor_id=vendor_id,
            dag_id=dag_id,
            run_id=run_id,
            config_hash=digest,
            step_toggles=toggles,
        )
    log.info("run %s/%s is pipeline run %d (toggles %s)", dag_id, run_id, pipeline_run_id, dict(toggles))
    return pipeline_run_id


def discover(ctx: StepContext, vendor: VendorConfig, pipeline_run_id: int) -> dict[str, Any]:
    """List the vendor's finished input files and keep the listing as a run artifact.

    Returns counts and the listing's URL (what XCom carries); files passed over are counted by reason. A
    source root that does not exist fails the task (:class:`~pipeline.discover.SourceMissingError`) and is
    recorded on the run as a critical ``source_missing`` entry, one that cannot be listed likewise as
    ``source_unreachable``; a discovery that finds nothing to ingest is
    recorded as a warning (:meth:`~pipeline.discover.Discovery.emptiness`), so the run ends
    ``succeeded_with_warnings`` instead of green and empty.
    """
    from pipeline.discover import DiscoveryIssue, SourceMissingError, SourceUnreachableError
    from pipeline.steps.ingest import IngestStep
    from pipeline.vendor_ingest import discover_vendor, record_passed_over_files

    url = vendor.source_url(ctx.settings.project_dir_abs)
    try:
        found = discover_vendor(vendor, ctx.settings.project_dir_abs)
    except SourceMissingError as exc:
        _note(ctx, pipeline_run_id, [_entry(DiscoveryIssue.SOURCE_MISSING, str(exc), critical=True)])
        raise
    except SourceUnreachableError as exc:
        _note(ctx, pipeline_run_id, [_entry(DiscoveryIssue.SOURCE_UNREACHABLE, str(exc), critical=True)])
        raise
    empty = found.emptiness(url)
    notes = [] if empty is None else [_entry(empty[0], empty[1], critical=False)]
    _note(ctx, pipeline_run_id, notes)
    if empty is not None:
        log.warning("%s: %s", vendor.name, empty[1])
    record_passed_over_files(ctx, IngestStep(vendor, ctx).vendor_id, found)
    passed_over: dict[str, int] = {}
    for skipped in found.passed_over:
        passed_over[skipped.why] = passed_over.get(skipped.why, 0) + 1
    listing = {
        "vendor": vendor.name,
        "source": url,
        "candidates": [
            {"path": c.path, "size_bytes": c.size_bytes, "mtime": c.mtime} for c in found.candidates
        ],
        "passed_over": [p.as_dict() for p in found.passed_over],
        "unselected": found.unselected,
    }
    uri = artifacts.write_json(ctx.store, artifacts.discovery_key(pipeline_run_id), listing)
    return {
        "pipeline_run_id": pipeline_run_id,
        "n_candidates": len(found.candidates),
        "total_bytes": found.total_bytes,
        "passed_over": passed_over,
        "unselected": found.unselected,
        "warnings": [n["detail"] for n in notes],
        "listing_uri": uri,
    }


def _entry(code: str, detail: str, *, critical: bool) -> dict[str, Any]:
    return {"step": DISCOVER, "critical": critical, "code": str(code), "detail": detail}


def _note(ctx: StepContext, pipeline_run_id: int, notes: list[dict[str, Any]]) -> None:
    from pipeline.catalog import make_session_factory, session_scope
    from pipeline.catalog.runs import record_run_notes

    with session_scope(make_session_factory(ctx.engine)) as session:
        record_run_notes(session, pipeline_run_id, DISCOVER, notes)


def warehouse_sync(ctx: StepContext) -> dict[str, Any]:
    """Bring the DuckDB warehouse up to date with the catalog (incrementally), when the module exists.

    Returns ``{"status": "synced", "rows_moved": ..., ...}`` (counts for XCom), or ``{"status": "skipped",
    "reason": ...}`` while ``pipeline.warehouse.sync`` is not installed.
    """
    try:
        module = importlib.import_module("pipeline.warehouse")
    except ModuleNotFoundError as exc:
        if exc.name not in ("pipeline.warehouse", "pipeline"):
            raise
        return {"status": "skipped", "reason": "pipeline.warehouse is not installed"}
    sync = getattr(module, "sync", None)
    if sync is None:
        return {"status": "skipped", "reason": "pipeline.warehouse has no sync function"}
    report = sync(ctx.engine, ctx.settings.warehouse_path)
    return {
        "status": "synced",
        "warehouse": str(ctx.settings.warehouse_path),
        "rows_moved": int(getattr(report, "rows_moved", 0)),
        "tables": len(getattr(report, "tables", ())),
        "duration_s": round(float(getattr(report, "duration_s", 0.0)), 3),
    }


def dedup(ctx: StepContext) -> dict[str, Any]:
    """Group near-duplicate episodes over everything fingerprinted so far, every vendor's (counts for XCom).

    Run-level, not a batch step: a group joins episodes of other batches, runs and vendors, so it can only
    be decided over all of them; and before the warehouse sync, so that the sync brings this run's groups
    (``dedup_group`` in ``episode_view``) to the dataset builds that act on them.
    """
    from pipeline.dedup.catalog import run_dedup_counted

    _, _, counts = run_dedup_counted(ctx.engine)
    return {"status": "grouped", **counts}


def finalize(
    ctx: StepContext | None,
    vendor: VendorConfig,
    pipeline_run_id: int | None,
    task_states: Iterable[TaskState],
    *,
    batch_ids: Sequence[int] = (),
) -> RunDecision:
    """Decide the run's outcome from its tasks' states and record it in the catalog.

    Failed if a run-level task or a critical step failed in any batch; succeeded with warnings if only
    non-critical steps (or the warehouse sync) failed; succeeded otherwise. Each warning names the step, the
    batches it failed in and how many of its items failed. ``pipeline_run_id`` is None when the run never
    opened (its conf was refused): the decision is then returned but nothing is recorded.
    """
    decision = decide_outcome(vendor, task_states, batch_ids=batch_ids)
    if ctx is None or pipeline_run_id is None:
        return decision
    from pipeline.catalog import make_session_factory, session_scope
    from pipeline.catalog.runs import finish_pipeline_run, run_notes

    failed_items = _failed_items(ctx, pipeline_run_id)
    with session_scope(make_session_factory(ctx.engine)) as session:
        decision = with_notes(decision, run_notes(session, pipeline_run_id))
        entries = [
            {**entry, "failed_items": failed_items.get(str(entry.get("step")), 0)}
            for entry in (*decision.failures, *decision.warnings)
        ]
        finish_pipeline_run(session, pipeline_run_id, decision.outcome, warnings=entries)
    level = logging.WARNING if decision.outcome is not RunOutcome.SUCCEEDED else logging.INFO
    log.log(level, "pipeline run %d: %s %s", pipeline_run_id, decision.outcome.value, entries)
    return decision


def with_notes(decision: RunDecision, notes: Sequence[Mapping[str, Any]]) -> RunDecision:
    """The decision with the notes run-level tasks recorded: a note replaces the generic entry of the same
    step and criticality (``discover failed`` becomes ``source_missing: ...``), and a warning note turns a
    clean success into a success with warnings."""
    failures = [dict(n) for n in notes if n.get("critical")]
    warnings = [dict(n) for n in notes if not n.get("critical")]
    noted = {(n.get("step"), bool(n.get("critical"))) for n in notes}
    failures += [e for e in decision.failures if (e.get("step"), True) not in noted]
    warnings += [e for e in decision.warnings if (e.get("step"), False) not in noted]
    outcome = decision.outcome
    if outcome is RunOutcome.SUCCEEDED and warnings:
        outcome = RunOutcome.SUCCEEDED_WITH_WARNINGS
    if failures:
        outcome = RunOutcome.FAILED
    return RunDecision(outcome, failures, warnings)


def _failed_items(ctx: StepContext, pipeline_run_id: int) -> dict[str, int]:
    """Items each step recorded as failed during this run (infrastructure faults, not rejections)."""
    from sqlalchemy import func, select

    from pipeline.catalog import make_session_factory, session_scope
    from pipeline.catalog.models import StepRun

    with session_scope(make_session_factory(ctx.engine)) as session:
        rows = session.execute(
            select(StepRun.step, func.count())
            .where(StepRun.pipeline_run_id == pipeline_run_id, StepRun.status == StepStatus.FAILED.value)
            .group_by(StepRun.step)
        ).all()
    return {str(step): int(count) for step, count in rows}
