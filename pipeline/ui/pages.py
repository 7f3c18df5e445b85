"""What each page of the Sluice view shows, gathered from the catalog and the warehouse (read-only).

Each function returns a plain dict for a template of :mod:`pipeline.ui.render`; the plots are already SVG.
The same gatherers feed ``sluice report`` (:mod:`pipeline.report.html`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from pipeline.catalog import views
from pipeline.catalog.engine import make_session_factory, session_scope
from pipeline.enums import REASON_DESCRIPTIONS, FileState, StepName
from pipeline.ui.quality import DEFAULT_POINT_LIMIT, FIGURES, Figure, QualitySeries, quality_series

log = logging.getLogger(__name__)

#: Held files listed per vendor on the overview; the vendor page lists up to the catalog default.
OVERVIEW_FILES_PER_VENDOR = 25
#: Dataset versions on the overview (newest).
OVERVIEW_VERSIONS = 20


@dataclass(frozen=True)
class ViewSources:
    """Where the view reads: a (read-only) catalog engine, and the warehouse file if there is one."""

    engine: Engine
    warehouse_path: Path | None = None
    storage_options: dict[str, Any] | None = field(default=None, repr=False)

    @contextmanager
    def session(self) -> Iterator[Session]:
        with session_scope(make_session_factory(self.engine)) as session:
            yield session


def reason_help() -> dict[str, str]:
    """Reason code -> what it means (shown as a tooltip beside every code)."""
    return {code.value: text for code, text in REASON_DESCRIPTIONS.items()}


def plots(series: dict[Figure, QualitySeries], *, highlight: set[int] | None = None) -> list[dict[str, Any]]:
    """The SVG of each figure (None when it has no points yet) with its caption and source."""
    from pipeline.report.plots import quality_svg, vendor_colors

    colors = vendor_colors(p.vendor for s in series.values() for p in s.points)
    out = []
    for figure, data in series.items():
        spec = FIGURES[figure]
        out.append(
            {
                "figure": figure.value,
                "title": spec.title,
                "description": spec.description,
                "svg": quality_svg(data, colors=colors, highlight=highlight or ()),
                "points": len(data.points),
                "source": data.source,
                "truncated": data.truncated,
            }
        )
    return out


def _vendor_blocks(
    session: Session, *, files_per_vendor: int, vendor: str | None = None
) -> list[dict[str, Any]]:
    """Per vendor: files by state, quarantines by reason, and the latest quarantined files with details."""
    states: dict[str, dict[str, int]] = {}
    for count in views.file_state_counts(session):
        if vendor is None or count.vendor == vendor:
            states.setdefault(count.vendor, {})[count.state] = count.files
    reasons: dict[str, list[views.ReasonCount]] = {}
    for reason in views.quarantine_reasons(session, vendor=vendor):
        reasons.setdefault(reason.vendor, []).append(reason)
    blocks = []
    for name in sorted(set(states) | set(reasons)):
        counts = states.get(name, {})
        blocks.append(
            {
                "vendor": name,
                "states": {s.value: counts.get(s.value, 0) for s in FileState},
                "total": sum(counts.values()),
                "reasons": reasons.get(name, []),
                "quarantined": views.held_files(session, vendor=name, limit=files_per_vendor),
                "flagged": views.held_files(
                    session, state=FileState.ACCEPTED_WITH_FLAGS, vendor=name, limit=files_per_vendor
                ),
            }
        )
    return blocks


def overview(sources: ViewSources, *, run_limit: int = views.DEFAULT_RUN_LIMIT) -> dict[str, Any]:
    """The front page: latest runs, files per vendor, quality plots, dataset versions, open recalls."""
    from pipeline.annotate.recall import open_recalls

    with sources.session() as session:
        runs = views.latest_runs(session, limit=run_limit)
        vendors = _vendor_blocks(session, files_per_vendor=OVERVIEW_FILES_PER_VENDOR)
        series = quality_series(session, warehouse_path=sources.warehouse_path, limit=DEFAULT_POINT_LIMIT)
        versions = views.dataset_versions(session, limit=OVERVIEW_VERSIONS)
        pending = views.pending_files(session)
        recalls = open_recalls(session)
    return {
        "runs": runs,
        "steps": [s.value for s in StepName],
        "vendors": vendors,
        "plots": plots(series),
        "versions": versions,
        "pending": pending,
        "recalls": recalls,
        "reason_help": reason_help(),
    }


def vendor_page(sources: ViewSources, vendor: str) -> dict[str, Any]:
    """One vendor: its files by state, every quarantine reason, the held files, its runs and plots."""
    with sources.session() as session:
        blocks = _vendor_blocks(session, files_per_vendor=views.DEFAULT_FILE_LIMIT, vendor=vendor)
        runs = views.latest_runs(session, vendor=vendor)
        series = quality_series(session, warehouse_path=sources.warehouse_path, vendor=vendor)
    return {
        "vendor": vendor,
        "block": blocks[0] if blocks else None,
        "runs": runs,
        "steps": [s.value for s in StepName],
        "plots": plots(series),
        "reason_help": reason_help(),
    }


def run_page(sources: ViewSources, pipeline_run_id: int) -> dict[str, Any]:
    """One run: toggles, outcome, failures and warnings, per-step counts, what it quarantined, its plots."""
    with sources.session() as session:
        run = views.get_run(session, pipeline_run_id)
        episodes = views.run_episode_ids(session, pipeline_run_id)
        states = views.file_state_counts(session, episode_ids=episodes)
        reasons = views.quarantine_reasons(session, episode_ids=episodes)
        quarantined = views.held_files(session, episode_ids=episodes)
        failed = views.step_problems(session, pipeline_run_id=pipeline_run_id)
        rejected = views.step_problems(
            session, statuses=("rejected",), pipeline_run_id=pipeline_run_id, limit=views.DEFAULT_FILE_LIMIT
        )
        series = quality_series(session, warehouse_path=sources.warehouse_path, vendor=run.vendor)
    return {
        "run": run,
        "steps": [s.value for s in StepName],
        "episodes": len(episodes),
        "episode_ids": sorted(episodes),
        "series": series,
        "states": states,
        "reasons": reasons,
        "quarantined": quarantined,
        "failed_steps": failed,
        "rejected_steps": rejected,
        "plots": plots(series, highlight=episodes),
        "reason_help": reason_help(),
    }


def lineage_page(sources: ViewSources, ref: str | None) -> dict[str, Any]:
    """The lineage of ``ref`` (nothing but the search form when None); a bad or unknown id is an error text."""
    from pipeline.errors import SluiceError
    from pipeline.ui.lineage import REF_SYNTAX, trace

    page: dict[str, Any] = {"ref": ref or "", "syntax": REF_SYNTAX, "lineage": None, "error": None}
    if not ref:
        return page
    try:
        with sources.session() as session:
            page["lineage"] = trace(session, ref, storage_options=sources.storage_options)
    except SluiceError as exc:
        page["error"] = str(exc)
    page["reason_help"] = reason_help()
    return page
