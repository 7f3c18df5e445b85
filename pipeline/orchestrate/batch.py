"""Running one step over one planned batch: the body of every per-batch DAG task.

The batch's files come from its run artifact; the step's own ``items`` decides which of them it works on
(e.g. only accepted episodes after the pre-gate), and the runner skips items already recorded as done under
the step's config hash, so a cleared and re-run task continues where it stopped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from pipeline.enums import StepName
from pipeline.errors import SluiceError
from pipeline.orchestrate import artifacts
from pipeline.orchestrate.names import HEAVY_STEPS

if TYPE_CHECKING:
    from pipeline.config import VendorConfig
    from pipeline.settings import Settings
    from pipeline.steps.base import Step, StepContext, WorkItem

log = logging.getLogger(__name__)

#: First key of the advisory lock that serialises start reservations (``pg_advisory_xact_lock(int4,
#: int4)``); any int4 no other module uses (ingest's vendor lock is 0x5100E).
PACE_LOCK_NAMESPACE = 0x5100F


class BatchMismatchError(SluiceError):
    """A batch id that does not belong to the pipeline run it was handed with."""


@dataclass(frozen=True)
class BatchFiles:
    """A batch as its run artifact describes it."""

    batch_id: int
    index: int
    start_offset_s: float
    pace_s: float  # at least this long between starts of the same step of two batches of the run
    files: tuple[tuple[str, int], ...]  # (path relative to the source root, size in bytes)


def load_batch(ctx: StepContext, pipeline_run_id: int, batch_id: int) -> BatchFiles:
    """The batch's files and start offset, from the catalog row and the run artifact it points to."""
    from sqlalchemy import select

    from pipeline.catalog import make_session_factory, session_scope
    from pipeline.catalog.errors import CatalogMissingError
    from pipeline.catalog.models import Batch

    with session_scope(make_session_factory(ctx.engine)) as session:
        row = session.execute(
            select(Batch.pipeline_run_id, Batch.batch_index, Batch.start_offset_s).where(Batch.id == batch_id)
        ).one_or_none()
    if row is None:
        raise CatalogMissingError("batch", batch_id)
    if row.pipeline_run_id != pipeline_run_id:
        raise BatchMismatchError(
            f"batch {batch_id} belongs to pipeline run {row.pipeline_run_id}, not {pipeline_run_id}"
        )
    payload = artifacts.read_json(ctx.store, artifacts.batch_key(pipeline_run_id, row.batch_index))
    return BatchFiles(
        batch_id=batch_id,
        index=row.batch_index,
        start_offset_s=float(row.start_offset_s),
        pace_s=float(payload.get("pace_s", 0.0)),
        files=tuple((f["path"], int(f["size_bytes"])) for f in payload["files"]),
    )


def episode_items(ctx: StepContext, vendor: VendorConfig, paths: Sequence[str]) -> list[WorkItem]:
    """One work item per episode registered for the batch's files (every content version of a path).

    Steps after ingest work on episodes; the step's own ``items`` then keeps those in a state it handles.
    """
    from sqlalchemy import select

    from pipeline.catalog import make_session_factory, session_scope
    from pipeline.catalog.models import Vendor
    from pipeline.steps.base import WorkItem
    from pipeline.steps.ingest import registered_episodes

    with session_scope(make_session_factory(ctx.engine)) as session:
        vendor_id = session.execute(select(Vendor.id).where(Vendor.name == vendor.name)).scalar_one_or_none()
    if vendor_id is None:
        return []
    known = registered_episodes(ctx.engine, vendor_id, paths)
    return [
        WorkItem(key=path, episode_id=version.episode_id, source_path=path, size_bytes=version.size_bytes)
        for path in paths
        for version in known.get(path, ())
    ]


def reserve_start(
    ctx: StepContext,
    pipeline_run_id: int,
    step: StepName,
    *,
    now: datetime,
    pace_s: float,
    offset_s: float | None = None,
) -> datetime:
    """When this task may start ``step``: its earliest start, or, if that is within half a pace of a start
    already reserved for the same step of the run, the first slot a whole pace after such starts.

    The earliest start is ``now``, or, for a batch's first step (``offset_s`` given), the batch's offset
    after the moment the run's first batch reached this point: one clock for all batches, so the jitter of
    task start-up does not stretch or squeeze the planned offsets. Reservations of one (run, step) are
    serialised by a catalog advisory lock and kept in the store (``runs/<id>/pace/<step>.json``), so tasks
    the scheduler launches in the same instant still start ``pace_s`` apart, and a batch whose planned slot
    is free gets exactly that slot whatever order the tasks arrive in. A retry or rerun long after finds the
    reservations in the past and starts at once. Nothing waits for another task, so pools never deadlock.
    """
    from sqlalchemy import func, select

    from pipeline.catalog import make_session_factory, session_scope

    key = artifacts.pace_key(pipeline_run_id, step.value)
    lock_key = (pipeline_run_id * len(StepName) + list(StepName).index(step)) % 2**31
    # Closer than half a pace is a clash: enough to keep completions out of each other's second, and a
    # batch that reaches its slot a little late (task start-up jitter) keeps it.
    clash_s = pace_s / 2
    with session_scope(make_session_factory(ctx.engine)) as session:
        session.execute(select(func.pg_advisory_xact_lock(PACE_LOCK_NAMESPACE, lock_key)))
        record: dict[str, Any] = {"anchor": None, "starts": []}
        if ctx.store.fs.exists(ctx.store.path(key)):
            record = artifacts.read_json(ctx.store, key)
        start = now
        if offset_s is not None:
            record["anchor"] = record.get("anchor") or now.isoformat()
            start = max(now, datetime.fromisoformat(record["anchor"]) + timedelta(seconds=offset_s))
        for taken in sorted(datetime.fromisoformat(text) for text in record["starts"]):
            if abs((start - taken).total_seconds()) < clash_s:
                start = taken + timedelta(seconds=pace_s)
        record["starts"] = [*record["starts"], start.isoformat()]
        artifacts.write_json(ctx.store, key, record)
    return start


def default_executor(step: StepName, settings: Settings) -> str:
    """Heavy media steps go to Ray when a cluster address is set; everything else runs in the task.

    Unset, there is no Ray (see :mod:`pipeline.raycluster`): the step runs in the task process and its
    worker pool.
    """
    return "ray" if settings.ray_address and step in HEAVY_STEPS else "local"


def run_batch_step(
    settings: Settings,
    vendor: VendorConfig,
    step: StepName | str,
    pipeline_run_id: int,
    batch_id: int,
    *,
    ctx: StepContext | None = None,
    step_cls: type[Step] | None = None,
    executor: str | None = None,
    start_offset: bool = False,
) -> dict[str, Any]:
    """Run ``step`` over the files of batch ``batch_id``; returns the step's counts (what XCom carries).

    Staggering, so that identical steps of different batches do not finish together: ``start_offset``
    says that this call starts the batch (its first step, first try), which then waits the batch's planned
    start offset, measured from the call rather than from the plan (task start-up on a busy machine takes
    longer than the offsets and would swallow them). Every step then keeps the plan's pace: it starts at
    least ``pace_s`` after the run's previous start of the same step (:func:`reserve_start`), which keeps
    the batches apart when scheduler latency would bring their later steps back together. ``step_cls`` overrides the
    registered implementation; ``ctx`` reuses clients (built from ``settings`` otherwise). Items that hit
    infrastructure faults make the runner raise after the others finished, so that the task is retried;
    items already done under the step's config hash are skipped.
    """
    from pipeline.steps.base import WorkItem
    from pipeline.steps.runner import build_context, run_step

    step = StepName(step)
    own_ctx = ctx is None
    ctx = ctx if ctx is not None else build_context(settings)
    try:
        batch = load_batch(ctx, pipeline_run_id, batch_id)
        now = datetime.now(UTC)
        if batch.pace_s > 0:
            earliest = reserve_start(
                ctx,
                pipeline_run_id,
                step,
                now=now,
                pace_s=batch.pace_s,
                offset_s=batch.start_offset_s if start_offset else None,
            )
        else:
            earliest = now + timedelta(seconds=batch.start_offset_s if start_offset else 0.0)
        waited_s = max(0.0, (earliest - now).total_seconds())
        if waited_s > 0:
            log.info("batch %d starts %s after %.3g s (stagger)", batch_id, step.value, waited_s)
            time.sleep(waited_s)
        if step_cls is None:
            from pipeline.steps.registry import step_class

            step_cls = step_class(step)
        instance = step_cls(vendor, ctx)
        if step is StepName.INGEST:
            items = [WorkItem(key=path, source_path=path, size_bytes=size) for path, size in batch.files]
        else:
            items = episode_items(ctx, vendor, [path for path, _ in batch.files])
        summary = run_step(
            instance,
            items,
            pipeline_run_id=pipeline_run_id,
            batch_id=batch_id,
            executor=executor or default_executor(step, settings),
            ray_address=settings.ray_address,
        )
    finally:
        if own_ctx:
            ctx.engine.dispose()
    counts = summary.as_dict()
    return {
        "step": step.value,
        "pipeline_run_id": pipeline_run_id,
        "batch_id": batch_id,
        "batch_index": batch.index,
        "files": len(batch.files),
        "succeeded": counts["succeeded"],
        "rejected": counts["rejected"],
        "skipped": counts["skipped"],
        "failed": counts["failed"],
        "seconds": counts["seconds"],
        "episodes": len(counts["episode_ids"]),
        "waited_s": waited_s,
        "ray_nodes": counts["ray_nodes"],
    }
