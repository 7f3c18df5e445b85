"""Planning a run: split its discovered files into batches, size them from the vendor's limits, stagger them.

:func:`make_plan` is pure (used by ``sluice plan VENDOR`` to show a plan without recording it); :func:`plan`
reads the run's discovery listing, records one catalog batch per split (:func:`upsert_batch`) and keeps
each batch's file list as a run artifact, since the catalog's batches table holds only the totals.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pipeline.enums import StepName
from pipeline.orchestrate import artifacts

if TYPE_CHECKING:
    from pipeline.config import VendorConfig
    from pipeline.planner import Plan, Sizing
    from pipeline.steps.base import StepContext

log = logging.getLogger(__name__)

#: Bytes one worker processes per second in the heaviest step, transcode: decode + veryfast re-encode runs
#: at ≈ 78 fps per core at 720p (MEASURED.md) and a compressed 720p frame is ≈ 50 KB, so ≈ 4 MB/s.
WORKER_BYTES_PER_S = 4_000_000
#: Catalog rows one input writes: blob, alias, episode, a row per stream (≈ 6) and per check (≈ 15), and a
#: step run per step.
ROWS_PER_FILE = 30


@dataclass(frozen=True)
class PlannedFile:
    path: str  # relative to the vendor's source root, as discovery lists it
    size_bytes: int


@dataclass(frozen=True)
class PlannedBatch:
    index: int
    files: tuple[PlannedFile, ...]
    planned_bytes: int
    start_offset_s: float


@dataclass(frozen=True)
class BatchPlan:
    """What :func:`make_plan` decided: the batches, and the planner's figures that justify them."""

    batches: tuple[PlannedBatch, ...]
    figures: dict[str, Any]


def make_plan(vendor: VendorConfig, files: Sequence[PlannedFile]) -> BatchPlan:
    """Split ``files`` into batches within the vendor's caps, near-equal in bytes (or cost), staggered.

    ``k`` starts from :func:`pipeline.planner.choose_k_and_workers` on the vendor's declared limits, is
    raised until the per-split caps can hold the files, and is kept within ``min_splits..max_splits`` and
    at most one batch per file. Cost is estimated from bytes: duration and resolution are only known after
    the pre-gate has probed a file. Files are not cut into time ranges here, since ingest lands whole files.
    """
    from pipeline.planner import Caps, Item, Limits, choose_k_and_workers, split, stagger

    limits_config = vendor.planner
    if not files:
        return BatchPlan((), {"k": 0, "n_files": 0, "total_bytes": 0})
    total = sum(f.size_bytes for f in files)
    transcode = vendor.steps[StepName.TRANSCODE]
    lanes = max(1, vendor.pools[transcode.pool].slots // transcode.pool_slots)
    limits = Limits(
        network_bytes_per_s=float(limits_config.network_bytes_per_s),
        storage_bytes_per_s=float(limits_config.storage_bytes_per_s),
        db_rows_per_s=float(limits_config.db_writes_per_s),
        worker_slots=limits_config.worker_slots,
        worker_bytes_per_s=float(WORKER_BYTES_PER_S),
        rows_per_file=float(ROWS_PER_FILE),
        # Batches that can transcode at once: the heaviest step's pool over the slots one task takes.
        max_concurrent_batches=lanes,
    )
    sizing = choose_k_and_workers(total, len(files), limits)
    max_bytes = int(limits_config.max_bytes_per_split)
    caps = Caps(
        max_files=limits_config.max_files_per_split,
        max_bytes=max_bytes,
        max_cost=limits_config.max_cost_per_split,
    )
    # The fewest batches that can hold the files at all within each cap.
    by_caps = [math.ceil(len(files) / limits_config.max_files_per_split), math.ceil(total / max_bytes)]
    if caps.max_cost is not None:
        by_caps.append(math.ceil(total / caps.max_cost))
    k = min(max(sizing.k, limits_config.min_splits, *by_caps), limits_config.max_splits, len(files))
    objective = limits_config.balance
    items = [
        Item(id=f.path, size_bytes=f.size_bytes, cost=float(f.size_bytes), splittable=False) for f in files
    ]
    result = split(items, k, caps, objective, time_limit_s=limits_config.solver_time_limit_s)
    offsets = stagger(k, sizing.expected_batch_s, min_gap_s=limits_config.batch_stagger_s)
    by_path = {f.path: f for f in files}
    batches = tuple(
        PlannedBatch(
            index=s.index,
            files=tuple(by_path[p.item_id] for p in s.pieces),
            planned_bytes=s.size_bytes,
            start_offset_s=offsets[s.index],
        )
        for s in result.splits
    )
    return BatchPlan(batches, _figures(result, sizing, total, len(files), offsets))


def plan(ctx: StepContext, vendor: VendorConfig, pipeline_run_id: int) -> dict[str, Any]:
    """Plan the run from its discovery listing; record its batches; returns the batch ids in order.

    Each batch's file list is written to ``runs/<pipeline_run_id>/batches/<index>.json`` with its start
    offset, which :func:`~pipeline.orchestrate.run_batch_step` waits before the batch's first step.
    """
    from pipeline.catalog import make_session_factory, session_scope
    from pipeline.catalog.runs import upsert_batch

    listing = artifacts.read_json(ctx.store, artifacts.discovery_key(pipeline_run_id))
    files = [PlannedFile(c["path"], int(c["size_bytes"])) for c in listing["candidates"]]
    planned = make_plan(vendor, files)
    planned_at = datetime.now(UTC)
    batch_ids: list[int] = []
    with session_scope(make_session_factory(ctx.engine)) as session:
        for batch in planned.batches:
            batch_ids.append(
                upsert_batch(
                    session,
                    pipeline_run_id=pipeline_run_id,
                    batch_index=batch.index,
                    planned_bytes=batch.planned_bytes,
                    n_files=len(batch.files),
                    start_offset_s=batch.start_offset_s,
                )
            )
    # Written after the rows commit, so that every batch id handed out has its file list.
    for batch, batch_id in zip(planned.batches, batch_ids, strict=True):
        artifacts.write_json(
            ctx.store,
            artifacts.batch_key(pipeline_run_id, batch.index),
            {
                "pipeline_run_id": pipeline_run_id,
                "batch_id": batch_id,
                "batch_index": batch.index,
                "planned_bytes": batch.planned_bytes,
                "start_offset_s": batch.start_offset_s,
                "pace_s": planned.figures["pace_s"],
                "planned_at": planned_at.isoformat(),
                "files": [{"path": f.path, "size_bytes": f.size_bytes} for f in batch.files],
            },
        )
    figures = {**planned.figures, "batch_ids": batch_ids, "planned_at": planned_at.isoformat()}
    uri = artifacts.write_json(ctx.store, artifacts.plan_key(pipeline_run_id), figures)
    log.info("pipeline run %d planned into %d batch(es): %s", pipeline_run_id, len(batch_ids), figures)
    return {
        "pipeline_run_id": pipeline_run_id,
        "batch_ids": batch_ids,
        "k": len(batch_ids),
        "imbalance": figures.get("imbalance"),
        "plan_uri": uri,
    }


def _figures(
    result: Plan, sizing: Sizing, total: int, n_files: int, offsets: Sequence[float]
) -> dict[str, Any]:
    return {
        "k": result.k,
        "n_files": n_files,
        "total_bytes": total,
        "objective": result.objective,
        "imbalance": round(result.imbalance, 6),
        "violations": [str(v) for v in result.violations],
        "method": result.method,
        "solve_s": round(result.solve_s, 3),
        "stopped_by": result.stopped_by,
        "offsets_s": list(offsets),
        # The spacing of the offsets, kept between starts of every step (see run_batch_step).
        "pace_s": offsets[1] - offsets[0] if len(offsets) > 1 else 0.0,
        "workers_per_batch": sizing.workers_per_batch,
        "concurrent_batches": sizing.concurrent_batches,
        "expected_batch_s": round(sizing.expected_batch_s, 3),
        "sizing_reasons": list(sizing.reasons),
    }
