"""What makes the run report a quality tool: distributions against the vendor's thresholds and dataset
statistics (the contact sheet of frames is :mod:`pipeline.report.sheet`).

* **Histograms** of the gap rate, clock skew (p99), PSNR and chroma shift of the vendor's episodes (this run's in colour,
  the vendor's earlier ones in grey), each with the threshold the gate judged it against drawn as a dashed
  red line, and of every annotation score. Thresholds come from the vendor config the catalog recorded;
  when that is not the run's own config (the vendor file changed since), the report says so.
* **Dataset statistics**: hours of accepted data per vendor, task and robot, across the catalog; the range
  of every state and action field over this run's accepted robot episodes.

Everything is read with the view's read-only catalog session; media are read through fsspec from the URIs
the catalog records.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from pipeline.catalog.models import Episode, Vendor
from pipeline.enums import FileState, SourceKind
from pipeline.report.sheet import transcoded_uris
from pipeline.ui.quality import FIGURES, Figure, QualitySeries

log = logging.getLogger(__name__)

#: Accepted robot episodes whose state/action values are read for the ranges (each is read whole).
MAX_RANGE_EPISODES = 20
NS_PER_S = 1_000_000_000
THIS_RUN = "this run"
EARLIER = "the vendor's other episodes"


# -- thresholds ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VendorThresholds:
    """The limits a vendor's gates judge the plotted figures against (None: not configured or unknown)."""

    gap_rate: float | None = None
    skew_ms: float | None = None
    psnr_db: float | None = None
    chroma_shift: float | None = None
    note: str = ""


def vendor_thresholds(session: Session, vendor: str, run_config_hash: str) -> VendorThresholds:
    """The thresholds of the vendor config the catalog holds, and whether it is the run's own."""
    from pydantic import ValidationError

    from pipeline.config import VendorConfig

    row = session.execute(
        select(Vendor.config, Vendor.config_hash).where(Vendor.name == vendor)
    ).one_or_none()
    if row is None:
        return VendorThresholds(note=f"vendor {vendor} is not in the catalog: no thresholds")
    try:
        config = VendorConfig.model_validate(row.config)
    except ValidationError:
        return VendorThresholds(
            note="the catalog holds no readable config for this vendor: no thresholds drawn"
        )
    note = (
        f"thresholds of this run's config ({run_config_hash[:12]})"
        if row.config_hash == run_config_hash
        else f"thresholds of the vendor's current config ({row.config_hash[:12]}); this run used "
        f"{run_config_hash[:12]}"
    )
    return VendorThresholds(
        gap_rate=config.quality.pre.max_gap_rate,
        skew_ms=config.timestamps.max_skew_s * 1e3,
        psnr_db=config.quality.post.min_psnr_db,
        chroma_shift=config.quality.post.max_chroma_shift_levels,
        note=note,
    )


# -- histograms ---------------------------------------------------------------------------------------------


def histograms(
    series: Mapping[Figure, QualitySeries], run_episodes: Iterable[int], thresholds: VendorThresholds
) -> list[dict[str, Any]]:
    """One histogram per figure (one per score key), each with its threshold lines; figures without
    points are left out."""
    from pipeline.report.plots import Threshold, histogram_svg

    mine = set(run_episodes)
    limits = {
        Figure.GAP_RATE: [Threshold(thresholds.gap_rate, f"max_gap_rate {thresholds.gap_rate:g}")]
        if thresholds.gap_rate is not None
        else [],
        Figure.CLOCK_SKEW: [Threshold(thresholds.skew_ms, f"max_skew_s → {thresholds.skew_ms:g} ms")]
        if thresholds.skew_ms is not None
        else [],
        Figure.PSNR: [Threshold(thresholds.psnr_db, f"min_psnr_db {thresholds.psnr_db:g}")]
        if thresholds.psnr_db is not None
        else [],
        Figure.CHROMA_SHIFT: [
            Threshold(thresholds.chroma_shift, f"max_chroma_shift_levels {thresholds.chroma_shift:g}")
        ]
        if thresholds.chroma_shift is not None
        else [],
    }
    out = []
    for figure, data in series.items():
        keys = sorted({p.series for p in data.points}) if figure is Figure.SCORES else [figure.value]
        for key in keys:
            points = [p for p in data.points if p.series == key]
            groups = {
                THIS_RUN: [p.value for p in points if p.episode_id in mine],
                EARLIER: [p.value for p in points if p.episode_id not in mine],
            }
            title = FIGURES[figure].title if figure is not Figure.SCORES else f"Score {key}"
            name = figure.value if figure is not Figure.SCORES else key
            svg = histogram_svg(
                title, groups, x_label=FIGURES[figure].y_label, thresholds=limits.get(figure, []), figure=name
            )
            if svg is None:
                continue
            out.append(
                {
                    "figure": name,
                    "title": title,
                    "svg": svg,
                    "episodes": len(points),
                    "this_run": len(groups[THIS_RUN]),
                    "thresholds": [t.label for t in limits.get(figure, [])],
                }
            )
    return out


# -- dataset statistics -------------------------------------------------------------------------------------


def hours(session: Session) -> dict[str, list[dict[str, Any]]]:
    """Accepted (and flagged but kept) data across the catalog: episodes and hours per vendor, task, robot."""
    kept = (FileState.ACCEPTED.value, FileState.ACCEPTED_WITH_FLAGS.value)
    rows = session.execute(
        select(
            Vendor.name,
            Episode.task,
            Episode.robot_id,
            func.count(),
            func.coalesce(func.sum(Episode.duration_s), 0),
        )
        .join(Vendor, Vendor.id == Episode.vendor_id)
        .where(Episode.state.in_(kept))
        .group_by(Vendor.name, Episode.task, Episode.robot_id)
    ).all()
    out: dict[str, list[dict[str, Any]]] = {}
    for axis, pick in (("vendor", 0), ("task", 1), ("robot", 2)):
        totals: dict[str, list[float]] = {}
        for row in rows:
            key = row[pick] if row[pick] is not None else "(not recorded)"
            entry = totals.setdefault(str(key), [0, 0.0])
            entry[0] += int(row[3])
            entry[1] += float(row[4])
        out[axis] = [
            {axis: k, "episodes": int(n), "hours": round(s / 3600, 6)}
            for k, (n, s) in sorted(totals.items(), key=lambda kv: -kv[1][1])
        ]
    return out


def value_ranges(
    session: Session, episode_ids: Iterable[int], *, storage_options: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Min and max of every numeric state and action field over the accepted robot episodes among
    ``episode_ids`` (their transcoded, resampled streams), read from at most :data:`MAX_RANGE_EPISODES`."""
    from pipeline.reader import open_episode

    kept = (FileState.ACCEPTED.value, FileState.ACCEPTED_WITH_FLAGS.value)
    ids = (
        session.execute(
            select(Episode.id)
            .where(
                Episode.id.in_(list(episode_ids)),
                Episode.state.in_(kept),
                Episode.kind == SourceKind.MCAP.value,
            )
            .order_by(Episode.id)
        )
        .scalars()
        .all()
    )
    uris = transcoded_uris(session, ids)
    chosen = [uris[i] for i in ids if i in uris][:MAX_RANGE_EPISODES]
    bounds: dict[tuple[str, str], list[float]] = {}
    read = 0
    for uri in chosen:
        try:
            with open_episode(uri, storage_options=storage_options) as reader:
                window_s = (reader.end_ns - reader.start_ns) / NS_PER_S + 1.0
                sample = reader.sample(reader.end_ns, window_s=window_s, frames_per_camera=1, cameras=[])
        except Exception as exc:  # a range is a summary: one unreadable episode must not sink the report
            log.warning("value ranges: %s left out: %s", uri, exc)
            continue
        read += 1
        for topic, records in sample.proprio.items():
            for record in records:
                for name, value in _numbers(record):
                    span = bounds.setdefault((topic, name), [math.inf, -math.inf])
                    span[0], span[1] = min(span[0], value), max(span[1], value)
    rows = [
        {"topic": topic, "field": name, "min": round(lo, 6), "max": round(hi, 6)}
        for (topic, name), (lo, hi) in sorted(bounds.items())
    ]
    return {"rows": rows, "episodes": read, "of": len(ids)}


def _numbers(record: Mapping[str, Any]) -> Iterable[tuple[str, float]]:
    for key, value in record.items():
        if key == "stamp_ns" or isinstance(value, bool):
            continue
        if isinstance(value, int | float):
            yield key, float(value)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, int | float) and not isinstance(item, bool):
                    yield f"{key}[{i}]", float(item)
