"""Ingest a vendor without Airflow: discover, land and register, then gate. What ``sluice ingest`` runs.

The Airflow DAG runs the same steps batch by batch (:mod:`pipeline.orchestrate`); this function is the
one-machine path for the CLI, the demo and tests: one batch, the local runner (or Ray).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pipeline.discover import Discovery, discover
from pipeline.enums import StepName
from pipeline.steps.base import StepContext, WorkItem
from pipeline.steps.runner import StepSummary, run_step

log = logging.getLogger(__name__)


@dataclass
class IngestReport:
    vendor: str
    discovered: int
    discovered_bytes: int
    passed_over: list[dict[str, str]] = field(default_factory=list)
    steps: dict[str, dict[str, Any]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "vendor": self.vendor,
            "discovered": self.discovered,
            "discovered_bytes": self.discovered_bytes,
            "passed_over": self.passed_over,
            "steps": self.steps,
        }


def discover_vendor(vendor: Any, ctx: StepContext, *, settle_s: float | None = None) -> Discovery:
    """The vendor's finished files, by its globs, inside its root."""
    import fsspec

    url = vendor.source_url(ctx.settings.project_dir_abs)
    fs, root = fsspec.core.url_to_fs(url, **dict(vendor.source.storage_options))
    return discover(
        fs,
        root,
        include=vendor.source.include,
        exclude=vendor.source.exclude,
        ready_marker=vendor.source.ready_marker,
        settle_s=vendor.source.settle_s if settle_s is None else settle_s,
    )


def ingest_vendor(
    vendor: Any,
    ctx: StepContext,
    *,
    executor: str = "local",
    settle_s: float | None = None,
    gate: bool = True,
    on_step: Callable[[str, StepSummary], None] | None = None,
) -> IngestReport:
    """Discover, ingest and (unless ``gate`` is False) pre-gate every ready file of a vendor."""
    from pipeline.steps.registry import step_class

    found = discover_vendor(vendor, ctx, settle_s=settle_s)
    report = IngestReport(
        vendor=vendor.name,
        discovered=len(found.candidates),
        discovered_bytes=found.total_bytes,
        passed_over=[{"path": p.path, "why": p.why, "detail": p.detail} for p in found.passed_over],
    )
    items = [WorkItem(key=c.path, source_path=c.path, size_bytes=c.size_bytes) for c in found.candidates]
    steps = [StepName.INGEST] + ([StepName.QUALITY_PRE] if gate else [])
    for name in steps:
        step = step_class(name)(vendor, ctx)
        summary = run_step(step, items, executor=executor, ray_address=ctx.settings.ray_address)
        report.steps[name.value] = summary.as_dict()
        if on_step is not None:
            on_step(name.value, summary)
    return report
