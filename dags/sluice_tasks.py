"""The bodies of the vendor DAGs' tasks: each a few lines around one :mod:`pipeline.orchestrate` call.

Kept apart from the wiring in :mod:`sluice_factory`. Every body builds its clients from settings once
(:func:`with_clients`), turns product errors that a retry cannot fix into ``AirflowFailException`` and lets
infrastructure faults propagate so that Airflow retries (:func:`product_call`). Heavy modules are imported
inside the functions.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import get_current_context
from airflow.sdk.exceptions import AirflowFailException, AirflowRescheduleException, AirflowSkipException

from pipeline.config import VendorConfig
from pipeline.enums import RunOutcome, StepName
from pipeline.orchestrate.names import FINALIZE, PLAN, VALIDATE_CONF
from pipeline.settings import load_settings

if TYPE_CHECKING:
    from pipeline.steps.base import Step, StepContext


def open_run(vendor: VendorConfig) -> int:
    """validate_conf: refuse unknown run options, wait out the vendor's schedule offset, open the run."""
    from pipeline import orchestrate

    context = get_current_context()
    dag_run = context["dag_run"]
    toggles = product_call(orchestrate.validate_conf, vendor, dag_run.conf)
    offset_s = vendor.schedule.stagger_offset_s
    if dag_run.run_type == "scheduled" and offset_s:
        # The vendor's place in the night: runs on the same cron start this much apart.
        due = dag_run.run_after + timedelta(seconds=offset_s)
        if datetime.now(UTC) < due:
            raise AirflowRescheduleException(due)
    return with_clients(
        lambda ctx: orchestrate.start_run(
            ctx, vendor, dag_id=dag_run.dag_id, run_id=dag_run.run_id, toggles=toggles
        )
    )


def discover(vendor: VendorConfig, pipeline_run_id: int) -> dict[str, Any]:
    """discover: the listing goes to the store; XCom gets counts and its URI."""
    from pipeline import orchestrate

    return with_clients(lambda ctx: orchestrate.discover(ctx, vendor, pipeline_run_id))


def plan(vendor: VendorConfig, pipeline_run_id: int) -> list[int]:
    """plan: record the batches; the batch ids are what the steps are mapped over."""
    from pipeline import orchestrate

    planned = with_clients(lambda ctx: orchestrate.plan(ctx, vendor, pipeline_run_id))
    return list(planned["batch_ids"])


def dedup(vendor: VendorConfig) -> dict[str, Any]:
    """dedup: skipped when the run never opened or annotate (which makes the fingerprints) was off."""
    from pipeline import orchestrate

    context = get_current_context()
    if context["ti"].xcom_pull(task_ids=VALIDATE_CONF) is None:
        raise AirflowSkipException("the run was never opened: nothing new to group")
    toggles = product_call(orchestrate.validate_conf, vendor, context["dag_run"].conf)
    if not toggles[StepName.ANNOTATE.value]:
        raise AirflowSkipException("annotate is switched off for this run: no new fingerprints to group")
    result: dict[str, Any] = with_clients(orchestrate.dedup)
    return result


def sync_warehouse() -> dict[str, Any]:
    """warehouse_sync: skipped when the run never opened or the warehouse module is missing."""
    from pipeline import orchestrate

    if get_current_context()["ti"].xcom_pull(task_ids=VALIDATE_CONF) is None:
        raise AirflowSkipException("the run was never opened: nothing new to sync")
    result: dict[str, Any] = with_clients(orchestrate.warehouse_sync)
    if result["status"] == "skipped":
        raise AirflowSkipException(f"warehouse sync skipped: {result['reason']}")
    return result


def run_batch_step(
    vendor: VendorConfig,
    step: StepName,
    pipeline_run_id: int,
    batch_id: int,
    guard: tuple[str, ...],
    step_resolver: str,
    executor: str | None,
) -> dict[str, Any]:
    """One step on one batch: skipped if switched off or a critical step of the batch failed."""
    from pipeline import orchestrate

    context = get_current_context()
    toggles = product_call(orchestrate.validate_conf, vendor, context["dag_run"].conf)
    if not toggles[step.value]:
        raise AirflowSkipException(f"{step.value} is switched off for this run")
    failed = failed_critical_upstream(guard)
    if failed:
        raise AirflowSkipException(f"not run: critical step {failed} in this batch")
    step_cls = resolve_steps(step_resolver)(step)
    # The batch's first step waits its stagger offset, once: retries and cleared reruns start at once.
    first_step = next(s for s in toggles if toggles[s]) == step.value
    return product_call(
        orchestrate.run_batch_step,
        load_settings(),
        vendor,
        step,
        pipeline_run_id,
        batch_id,
        step_cls=step_cls,
        executor=executor,
        start_offset=first_step and context["ti"].try_number == 1,
    )


def failed_critical_upstream(guard: tuple[str, ...]) -> str | None:
    """``"<task> <state>"`` of the first critical step of this batch that failed, if any."""
    if not guard:
        return None
    ti = get_current_context()["ti"]
    found = ti.get_task_states(
        dag_id=ti.dag_id, map_index=ti.map_index, task_ids=list(guard), run_ids=[ti.run_id]
    )
    states = found.get(ti.run_id, {})
    for task_id in guard:
        state = states.get(f"{task_id}_{ti.map_index}", states.get(task_id))
        if state in ("failed", "upstream_failed"):
            return f"{task_id} {state}"
    return None


def finalize(vendor: VendorConfig) -> dict[str, Any]:
    """finalize: decide and record the outcome from the run's task states; fail the run only if it failed."""
    from pipeline import orchestrate

    ti = get_current_context()["ti"]
    pipeline_run_id = ti.xcom_pull(task_ids=VALIDATE_CONF)
    batch_ids = ti.xcom_pull(task_ids=PLAN) or []
    states = [
        orchestrate.TaskState(str(crumb["task_id"]), int(crumb["map_index"]), crumb["state"])
        for crumb in ti.get_task_breadcrumbs(dag_id=ti.dag_id, run_id=ti.run_id)
        if crumb["task_id"] != FINALIZE
    ]
    if pipeline_run_id is None:
        decision = orchestrate.finalize(None, vendor, None, states, batch_ids=batch_ids)
    else:
        decision = with_clients(
            lambda ctx: orchestrate.finalize(ctx, vendor, int(pipeline_run_id), states, batch_ids=batch_ids)
        )
    if decision.outcome is RunOutcome.FAILED:
        # The only leaf task: its failure is what fails the DAG run.
        raise AirflowFailException(f"run failed: {decision.summary()}")
    return {
        "pipeline_run_id": pipeline_run_id,
        "outcome": decision.outcome.value,
        "warnings": [f"{w['step']}: {w['detail']}" for w in decision.warnings],
    }


def with_clients(body: Callable[[StepContext], Any]) -> Any:
    """Build the clients once for this task from settings, call ``body``, release them."""
    from pipeline.steps.runner import build_context

    ctx = build_context(load_settings())
    try:
        return product_call(body, ctx)
    finally:
        ctx.engine.dispose()


def product_call(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Infrastructure faults propagate (Airflow retries); other product errors fail without retrying."""
    from pipeline.errors import InfrastructureError, SluiceError

    try:
        return function(*args, **kwargs)
    except InfrastructureError:
        raise
    except SluiceError as exc:
        raise AirflowFailException(f"{type(exc).__name__}: {exc}") from exc


def resolve_steps(target: str) -> Callable[[StepName], type[Step]]:
    """The step resolver named ``"module:function"`` (the registry, or a test's or benchmark's own)."""
    module_name, _, attr = target.partition(":")
    resolver: Callable[[StepName], type[Step]] = getattr(importlib.import_module(module_name), attr)
    return resolver
