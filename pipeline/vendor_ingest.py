"""Ingest a vendor without Airflow: discover, land and register, then gate. What ``sluice ingest`` runs.

The Airflow DAG runs the same steps batch by batch (:mod:`pipeline.orchestrate`); this function is the
one-machine path for the CLI, the demo and tests: one batch, the local runner (or Ray). Files that
discovery passed over (still being written, outside the vendor root, not regular files) are listed in the
report with the reason and, unless they are merely unfinished, recorded in the catalog's
``passed_over_files``: never dropped silently. Every discovered file ends with exactly one episode row per
content it held.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.discover import Discovery, discover
from pipeline.enums import PassOverReason, StepName
from pipeline.steps.base import StepContext, WorkItem
from pipeline.steps.ingest import catalog_path
from pipeline.steps.runner import StepSummary, run_step

if TYPE_CHECKING:
    from pipeline.config import VendorConfig

log = logging.getLogger(__name__)


@dataclass
class IngestReport:
    """What one ingest of a vendor did: discovery, per-step counts and the states its files are in."""

    vendor: str
    discovered: int
    discovered_bytes: int
    passed_over: list[dict[str, str]] = field(default_factory=list)
    unselected: int = 0  # files under the root that the include/exclude globs left out
    steps: dict[str, dict[str, Any]] = field(default_factory=dict)
    states: dict[str, int] = field(default_factory=dict)
    #: Why there was nothing to ingest (``source_empty: ...``; see ``Discovery.emptiness``), else empty.
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "vendor": self.vendor,
            "discovered": self.discovered,
            "discovered_bytes": self.discovered_bytes,
            "passed_over": self.passed_over,
            "unselected": self.unselected,
            "steps": self.steps,
            "states": self.states,
            "warnings": self.warnings,
        }


def discover_vendor(vendor: VendorConfig, project_dir: Path, *, settle_s: float | None = None) -> Discovery:
    """The vendor's finished files, by its globs, inside its root (relative roots resolve against
    ``project_dir``)."""
    import fsspec

    url = vendor.source_url(project_dir)
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
    vendor: VendorConfig,
    ctx: StepContext,
    *,
    executor: str = "local",
    settle_s: float | None = None,
    gate: bool = True,
    on_step: Callable[[str, StepSummary], None] | None = None,
) -> IngestReport:
    """Discover, ingest and (unless ``gate`` is False) pre-gate every ready file of a vendor.

    A source root that does not exist raises :class:`~pipeline.discover.SourceMissingError`, one that cannot
    be listed :class:`~pipeline.discover.SourceUnreachableError`; one that gives nothing to ingest is named
    in the report's ``warnings``.

    Safe to run again (files already done are skipped) and to run twice at once (registration is
    serialised per vendor in the catalog). Raises :class:`pipeline.steps.runner.StepFailedError` when some
    items hit infrastructure faults; the others are recorded and a re-run continues with the rest.
    """
    from pipeline.steps.registry import step_class

    found = discover_vendor(vendor, ctx.settings.project_dir_abs, settle_s=settle_s)
    empty = found.emptiness(vendor.source_url(ctx.settings.project_dir_abs))
    report = IngestReport(
        vendor=vendor.name,
        discovered=len(found.candidates),
        discovered_bytes=found.total_bytes,
        passed_over=[p.as_dict() for p in found.passed_over],
        unselected=found.unselected,
        warnings=[] if empty is None else [empty[1]],
    )
    if empty is not None:
        log.warning("%s: %s", vendor.name, empty[1])
    from pipeline.steps.ingest import IngestStep

    record_passed_over_files(ctx, IngestStep(vendor, ctx).vendor_id, found)
    items = [WorkItem(key=c.path, source_path=c.path, size_bytes=c.size_bytes) for c in found.candidates]
    steps = [StepName.INGEST] + ([StepName.QUALITY_PRE] if gate else [])
    for name in steps:
        step = step_class(name)(vendor, ctx)
        summary = run_step(step, items, executor=executor, ray_address=ctx.settings.ray_address)
        report.steps[name.value] = summary.as_dict()
        if on_step is not None:
            on_step(name.value, summary)
    report.states = file_states(vendor, ctx, [c.path for c in found.candidates])
    return report


def record_passed_over_files(ctx: StepContext, vendor_id: int, found: Discovery) -> int:
    """Log and record in the catalog (``passed_over_files``) every file discovery passed over, except those
    still being written (the next run looks at them again); returns how many were recorded."""
    from pipeline.catalog import make_session_factory, session_scope
    from pipeline.catalog.sources import record_passed_over

    lasting = [p for p in found.passed_over if p.why is not PassOverReason.NOT_READY]
    for over in found.passed_over:
        log.warning("passed over %r (%s): %s", catalog_path(over.path), over.why, over.detail)
    if lasting:
        with session_scope(make_session_factory(ctx.engine)) as session:
            for over in lasting:
                record_passed_over(
                    session,
                    vendor_id=vendor_id,
                    path=catalog_path(over.path),
                    why=over.why,
                    detail=over.detail,
                )
    return len(lasting)


def file_states(vendor: VendorConfig, ctx: StepContext, paths: list[str]) -> dict[str, int]:
    """How many of the inputs registered for ``paths`` (every version of each) are in each state."""
    from pipeline.steps.ingest import IngestStep, registered_episodes

    counts: dict[str, int] = {}
    known = registered_episodes(ctx.engine, IngestStep(vendor, ctx).vendor_id, paths)
    for versions in known.values():
        for reg in versions:
            counts[reg.state] = counts.get(reg.state, 0) + 1
    return dict(sorted(counts.items()))
