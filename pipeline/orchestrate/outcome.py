"""Deciding a run's outcome from the states its tasks ended in (pure logic, no Airflow, no database).

Airflow fails a DAG run as soon as a leaf task fails, whatever the step's criticality. The DAG therefore has
one leaf, ``finalize``, which runs whatever happened upstream, calls :func:`decide_outcome` on the states
Airflow recorded, and ends in ``failed`` only when the decision is :attr:`RunOutcome.FAILED`: the run's own
state then carries the outcome, and a non-critical failure leaves it ``success`` with a recorded warning.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pipeline.enums import RunOutcome
from pipeline.orchestrate.names import DEDUP, RUN_TASKS, STEP_ORDER, WAREHOUSE_SYNC

if TYPE_CHECKING:
    from pipeline.config import VendorConfig

#: Task states that mean "this task itself went wrong" (Airflow's words).
FAILED = "failed"
#: A task that never ran because something it needs failed; the failure is counted where it happened.
UPSTREAM_FAILED = "upstream_failed"


@dataclass(frozen=True)
class TaskState:
    """One task instance as Airflow recorded it (``map_index`` is -1 for an unmapped task)."""

    task_id: str
    map_index: int
    state: str | None


@dataclass(frozen=True)
class RunDecision:
    """The run's outcome and why: ``failures`` break the run, ``warnings`` do not."""

    outcome: RunOutcome
    failures: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[dict[str, Any]] = field(default_factory=list)

    def summary(self) -> str:
        parts = [f"{e['step']}: {e['detail']}" for e in (*self.failures, *self.warnings)]
        return f"{self.outcome.value}" + (f" ({'; '.join(parts)})" if parts else "")


def decide_outcome(
    vendor: VendorConfig, task_states: Iterable[TaskState], *, batch_ids: Sequence[int] = ()
) -> RunDecision:
    """Failed if a run-level task or a critical step failed; with warnings if only non-critical ones did.

    ``batch_ids[i]`` names the batch of map index ``i`` in the messages (the map index is used without it).
    A run-level task counts as failed when it failed or never ran because its upstream failed; a step
    counts only where it failed itself, since its downstream's ``upstream_failed`` is the same failure.
    """
    by_task: dict[str, list[TaskState]] = {}
    for ti in task_states:
        by_task.setdefault(ti.task_id, []).append(ti)
    failures: list[dict[str, Any]] = []
    warnings: list[dict[str, Any]] = []
    for task_id in RUN_TASKS:
        bad = [ti for ti in by_task.get(task_id, []) if ti.state in (FAILED, UPSTREAM_FAILED)]
        if bad:
            failures.append({"step": task_id, "critical": True, "detail": f"{task_id} {bad[0].state}"})
    for step in STEP_ORDER:
        instances = by_task.get(step.value, [])
        failed = sorted(ti.map_index for ti in instances if ti.state == FAILED)
        if not failed:
            continue
        critical = vendor.steps[step].critical
        batches = [batch_ids[i] if 0 <= i < len(batch_ids) else i for i in failed]
        entry = {
            "step": step.value,
            "critical": critical,
            "batches": batches,
            "detail": f"failed in {len(failed)} of {len(instances)} batch(es)",
        }
        (failures if critical else warnings).append(entry)
    if any(ti.state == FAILED for ti in by_task.get(DEDUP, [])):
        # Groups are decided over everything fingerprinted: the next run's grouping catches up.
        warnings.append({"step": DEDUP, "critical": False, "detail": "near-duplicate grouping failed"})
    if any(ti.state == FAILED for ti in by_task.get(WAREHOUSE_SYNC, [])):
        # The catalog holds everything; a stale warehouse is caught up by the next run's sync.
        warnings.append({"step": WAREHOUSE_SYNC, "critical": False, "detail": "warehouse sync failed"})
    if failures:
        outcome = RunOutcome.FAILED
    elif warnings:
        outcome = RunOutcome.SUCCEEDED_WITH_WARNINGS
    else:
        outcome = RunOutcome.SUCCEEDED
    return RunDecision(outcome, failures, warnings)
