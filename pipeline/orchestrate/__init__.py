"""Run-level orchestration, usable without Airflow: each function is the body of one DAG task.

A vendor's run, task by task (``dags/sluice_factory.py`` wires them into one DAG per vendor file)::

    toggles = validate_conf(vendor, dag_run_conf)                  # unknown keys refused
    run_id  = start_run(ctx, vendor, dag_id=..., run_id=..., toggles=toggles)
    found   = discover(ctx, vendor, run_id)                        # listing kept in the store
    planned = plan(ctx, vendor, run_id)                            # batches in the catalog + store
    for batch_id in planned["batch_ids"]:                          # mapped tasks, one step each
        run_batch_step(settings, vendor, "ingest", run_id, batch_id, start_offset=True)
    dedup(ctx)                                                     # near-duplicate groups, all vendors
    warehouse_sync(ctx)                                            # DuckDB catches up
    finalize(ctx, vendor, run_id, task_states)                     # outcome from the tasks' states

``ctx`` is a :class:`pipeline.steps.base.StepContext` (engine, store, settings), built once per task with
:func:`pipeline.steps.runner.build_context`. Heavy modules are imported inside the functions, so importing
this package stays cheap enough for DAG parsing.
"""

from __future__ import annotations

from pipeline.orchestrate.batch import (
    BatchMismatchError,
    default_executor,
    load_batch,
    run_batch_step,
)
from pipeline.orchestrate.names import (
    DEDUP,
    DISCOVER,
    FINALIZE,
    HEAVY_STEPS,
    PLAN,
    RUN_TASKS,
    STEP_ORDER,
    VALIDATE_CONF,
    WAREHOUSE_SYNC,
)
from pipeline.orchestrate.outcome import RunDecision, TaskState, decide_outcome
from pipeline.orchestrate.planning import BatchPlan, PlannedBatch, PlannedFile, make_plan, plan
from pipeline.orchestrate.run import dedup, discover, finalize, start_run, warehouse_sync
from pipeline.orchestrate.toggles import ALLOWED_CONF_KEYS, toggle_description, validate_conf

__all__ = [
    "ALLOWED_CONF_KEYS",
    "DEDUP",
    "DISCOVER",
    "FINALIZE",
    "HEAVY_STEPS",
    "PLAN",
    "RUN_TASKS",
    "STEP_ORDER",
    "VALIDATE_CONF",
    "WAREHOUSE_SYNC",
    "BatchMismatchError",
    "BatchPlan",
    "PlannedBatch",
    "PlannedFile",
    "RunDecision",
    "TaskState",
    "decide_outcome",
    "dedup",
    "default_executor",
    "discover",
    "finalize",
    "load_batch",
    "make_plan",
    "plan",
    "run_batch_step",
    "start_run",
    "toggle_description",
    "validate_conf",
    "warehouse_sync",
]
