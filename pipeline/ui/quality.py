"""The main quality figures per episode over time, read from the catalog or the warehouse.

Five figures, one value per episode (and per score key for the annotation scores):

* ``gap_rate`` – the worst stream's share of missing messages (streams, written by ingest);
* ``clock_skew`` – the worst stream's 99th-percentile |log time - hardware stamp|, in ms (streams);
* ``psnr`` – the lowest sampled PSNR of the transcoded output against its source, in dB (the latest
  ``psnr`` check of the post gate: ``min_db`` of a clip, or the lowest camera's ``min_db`` of a robot log);
* ``chroma_shift`` – the largest shift of a sampled output picture's mean Cb or Cr against its source, in
  8-bit levels (the latest ``colour`` check of the post gate, ``chroma_shift_max`` likewise): a colour cast
  shows here before it crosses the gate's limit;
* ``scores`` – the annotation scores the manifest carries (``quality_*`` keys, in [0, 1]).

An episode's time is when it was recorded (its first log time) when known, else when it was ingested.

The same points come from either source: the catalog (Postgres, always current) or the warehouse (DuckDB,
columnar: the place for aggregates over millions of episodes, current as of its last sync). A test checks that
both give the same points for the same catalog.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

log = logging.getLogger(__name__)

#: The annotation keys plotted as scores: the manifest's quality columns (a test keeps them equal).
SCORE_KEYS = ("quality_sync", "quality_completeness", "quality_visual", "quality_motion", "quality_transcode")
#: Points per figure by default: the most recent ones. Enough to show a trend and outliers; a plot with more
#: is drawn as a raster (see :mod:`pipeline.report.plots`).
DEFAULT_POINT_LIMIT = 20_000


class Figure(StrEnum):
    GAP_RATE = "gap_rate"
    CLOCK_SKEW = "clock_skew"
    PSNR = "psnr"
    CHROMA_SHIFT = "chroma_shift"
    SCORES = "scores"


@dataclass(frozen=True)
class FigureSpec:
    title: str
    y_label: str
    description: str


FIGURES: dict[Figure, FigureSpec] = {
    Figure.GAP_RATE: FigureSpec(
        "Gap rate", "gap rate (worst stream)", "Share of expected messages missing, worst stream per episode."
    ),
    Figure.CLOCK_SKEW: FigureSpec(
        "Clock skew",
        "|skew| p99, ms (worst stream)",
        "99th percentile of |log time - hardware stamp|, worst stream per episode.",
    ),
    Figure.PSNR: FigureSpec(
        "PSNR after transcode",
        "lowest sampled PSNR, dB",
        "Lowest PSNR of sampled output frames against the source (post gate).",
    ),
    Figure.CHROMA_SHIFT: FigureSpec(
        "Chroma shift after transcode",
        "largest mean Cb/Cr shift, 8-bit levels",
        "Largest shift of a sampled output frame's mean Cb or Cr against its source (post gate): a colour cast.",
    ),
    Figure.SCORES: FigureSpec(
        "Annotation scores", "score", "Quality scores the annotators recorded (latest value per key)."
    ),
}


@dataclass(frozen=True)
class QualityPoint:
    episode_id: int
    vendor: str
    time: datetime
    series: str  # the figure's name, or a score key for ``scores``
    value: float


@dataclass(frozen=True)
class QualitySeries:
    """The points of one figure, newest first, and where they were read."""

    figure: Figure
    points: list[QualityPoint]
    source: str  # "catalog" or "warehouse"
    truncated: bool  # more points matched than the limit


# --- catalog (Postgres) ------------------------------------------------------------------------------------

# Recorded time to the microsecond by integer arithmetic (a float epoch would round differently from DuckDB).
_PG_TIME = "coalesce(timestamptz 'epoch' + (e.start_time_ns / 1000) * interval '1 microsecond', e.created_at)"
_PG_FILTER = "(CAST(:vendor AS text) IS NULL OR v.name = :vendor)"


def _pg_post_figure(series: Figure, check: str, key: str, worst: str) -> str:
    """``series`` from the latest post-gate ``check`` of each episode: its ``key`` (a clip's), else the
    ``worst`` (``min`` or ``max``) of its cameras' (a robot log's)."""
    return f"""
        WITH latest AS (
            SELECT DISTINCT ON (c.episode_id) c.episode_id, c.observed
            FROM check_results c
            WHERE c.gate = 'quality_post' AND c.check_name = '{check}' AND c.observed IS NOT NULL
            ORDER BY c.episode_id, c.checked_at DESC, c.id DESC
        ), valued AS (
            SELECT l.episode_id, coalesce(
                CASE WHEN jsonb_typeof(l.observed -> '{key}') = 'number'
                     THEN (l.observed ->> '{key}')::float8 END,
                (SELECT {worst}((cam.value ->> '{key}')::float8)
                 FROM jsonb_each(CASE WHEN jsonb_typeof(l.observed -> 'cameras') = 'object'
                                      THEN l.observed -> 'cameras' ELSE '{{}}'::jsonb END) AS cam
                 WHERE jsonb_typeof(cam.value -> '{key}') = 'number')
            ) AS value
            FROM latest l
        )
        SELECT e.id AS episode_id, v.name AS vendor, {_PG_TIME} AS t, '{series.value}' AS series, q.value
        FROM valued q JOIN episodes e ON e.id = q.episode_id JOIN vendors v ON v.id = e.vendor_id
        WHERE q.value IS NOT NULL AND {_PG_FILTER}
        ORDER BY t DESC, episode_id DESC LIMIT :limit"""


_PG_SQL: dict[Figure, str] = {
    Figure.GAP_RATE: f"""
        SELECT e.id AS episode_id, v.name AS vendor, {_PG_TIME} AS t, 'gap_rate' AS series,
               max(s.gap_rate) AS value
        FROM episodes e JOIN vendors v ON v.id = e.vendor_id JOIN streams s ON s.episode_id = e.id
        WHERE s.gap_rate IS NOT NULL AND {_PG_FILTER}
        GROUP BY e.id, v.name
        ORDER BY t DESC, episode_id DESC LIMIT :limit""",
    Figure.CLOCK_SKEW: f"""
        SELECT e.id AS episode_id, v.name AS vendor, {_PG_TIME} AS t, 'clock_skew' AS series,
               max(abs(s.skew_p99_ns))::float8 / 1e6 AS value
        FROM episodes e JOIN vendors v ON v.id = e.vendor_id JOIN streams s ON s.episode_id = e.id
        WHERE s.skew_p99_ns IS NOT NULL AND {_PG_FILTER}
        GROUP BY e.id, v.name
        ORDER BY t DESC, episode_id DESC LIMIT :limit""",
    Figure.PSNR: _pg_post_figure(Figure.PSNR, "psnr", "min_db", "min"),
    Figure.CHROMA_SHIFT: _pg_post_figure(Figure.CHROMA_SHIFT, "colour", "chroma_shift_max", "max"),
    Figure.SCORES: f"""
        WITH latest AS (
            SELECT DISTINCT ON (a.episode_id, a.key) a.episode_id, a.key, a.value
            FROM annotations a
            WHERE a.key = ANY(:keys)
            ORDER BY a.episode_id, a.key, a.updated_at DESC, a.id DESC
        )
        SELECT e.id AS episode_id, v.name AS vendor, {_PG_TIME} AS t, l.key AS series,
               (l.value #>> '{{}}')::float8 AS value
        FROM latest l JOIN episodes e ON e.id = l.episode_id JOIN vendors v ON v.id = e.vendor_id
        WHERE jsonb_typeof(l.value) = 'number' AND {_PG_FILTER}
        ORDER BY t DESC, episode_id DESC, series LIMIT :limit""",
}


def catalog_points(
    session: Session, figure: Figure | str, *, vendor: str | None = None, limit: int = DEFAULT_POINT_LIMIT
) -> QualitySeries:
    """The points of ``figure`` from the catalog, newest first (at most ``limit``)."""
    figure = Figure(figure)
    params: dict[str, Any] = {"vendor": vendor, "limit": limit + 1, "keys": list(SCORE_KEYS)}
    rows = session.execute(text(_PG_SQL[figure]), params).all()
    return _series(figure, rows, "catalog", limit)


# --- warehouse (DuckDB) ------------------------------------------------------------------------------------

_DK_TIME = "coalesce(CAST(ev.start_time_utc AS TIMESTAMPTZ), ev.created_at)"
_DK_FILTER = "($vendor IS NULL OR ev.vendor = $vendor)"


def _duck_post_figure(series: Figure, check: str, key: str, worst: str) -> str:
    """:func:`_pg_post_figure` over the warehouse's ``latest_checks``."""
    return f"""
        WITH valued AS (
            SELECT episode_id, coalesce(
                TRY_CAST(json_extract_string(observed, '$.{key}') AS DOUBLE),
                list_{worst}(list_transform(json_extract(observed, '$.cameras.*.{key}'),
                                        lambda x: TRY_CAST(CAST(x AS VARCHAR) AS DOUBLE)))
            ) AS value
            FROM latest_checks
            WHERE gate = 'quality_post' AND check_name = '{check}' AND observed IS NOT NULL
        )
        SELECT ev.episode_id, ev.vendor, {_DK_TIME} AS t, '{series.value}' AS series, q.value
        FROM valued q JOIN episode_view ev USING (episode_id)
        WHERE q.value IS NOT NULL AND {_DK_FILTER}
        ORDER BY t DESC, ev.episode_id DESC LIMIT $limit"""


_DUCK_SQL: dict[Figure, str] = {
    Figure.GAP_RATE: f"""
        SELECT ev.episode_id, ev.vendor, {_DK_TIME} AS t, 'gap_rate' AS series, ev.gap_rate_max AS value
        FROM episode_view ev
        WHERE ev.gap_rate_max IS NOT NULL AND {_DK_FILTER}
        ORDER BY t DESC, ev.episode_id DESC LIMIT $limit""",
    Figure.CLOCK_SKEW: f"""
        SELECT ev.episode_id, ev.vendor, {_DK_TIME} AS t, 'clock_skew' AS series,
               CAST(ev.skew_p99_abs_max_ns AS DOUBLE) / 1e6 AS value
        FROM episode_view ev
        WHERE ev.skew_p99_abs_max_ns IS NOT NULL AND {_DK_FILTER}
        ORDER BY t DESC, ev.episode_id DESC LIMIT $limit""",
    Figure.PSNR: _duck_post_figure(Figure.PSNR, "psnr", "min_db", "min"),
    Figure.CHROMA_SHIFT: _duck_post_figure(Figure.CHROMA_SHIFT, "colour", "chroma_shift_max", "max"),
    Figure.SCORES: f"""
        SELECT ev.episode_id, ev.vendor, {_DK_TIME} AS t, a.key AS series,
               TRY_CAST(CAST(a.value AS VARCHAR) AS DOUBLE) AS value
        FROM annotation_values a JOIN episode_view ev USING (episode_id)
        WHERE list_contains($keys, a.key) AND TRY_CAST(CAST(a.value AS VARCHAR) AS DOUBLE) IS NOT NULL AND {_DK_FILTER}
        ORDER BY t DESC, ev.episode_id DESC, series LIMIT $limit""",
}


def warehouse_points(
    warehouse_path: Path | str,
    figure: Figure | str,
    *,
    vendor: str | None = None,
    limit: int = DEFAULT_POINT_LIMIT,
) -> QualitySeries:
    """The points of ``figure`` from the warehouse (read-only, sandboxed), newest first.

    Raises :class:`~pipeline.warehouse.WarehouseMissingError` when it was never synced,
    :class:`~pipeline.warehouse.WarehouseBusyError` while a sync holds it and
    :class:`~pipeline.warehouse.WarehouseUnreadableError` when DuckDB cannot open the file.
    """
    from pipeline.warehouse import open_warehouse
    from pipeline.warehouse.connection import WarehouseLimits, statement_deadline

    figure = Figure(figure)
    params: dict[str, Any] = {"vendor": vendor, "limit": limit + 1}
    if figure is Figure.SCORES:
        params["keys"] = list(SCORE_KEYS)
    con = open_warehouse(warehouse_path, read_only=True)
    try:
        with statement_deadline(con, WarehouseLimits(), _DUCK_SQL[figure]):
            rows = con.execute(_DUCK_SQL[figure], params).fetchall()
    finally:
        con.close()
    return _series(figure, rows, "warehouse", limit)


def quality_series(
    session: Session,
    *,
    warehouse_path: Path | str | None = None,
    vendor: str | None = None,
    limit: int = DEFAULT_POINT_LIMIT,
) -> dict[Figure, QualitySeries]:
    """Every figure: from the warehouse when one is given and readable, else from the catalog.

    A warehouse that is missing, held by a sync, not a file DuckDB can open, or older than its views (a
    failed query) is passed over for the catalog, which always answers.
    """
    if warehouse_path is not None:
        import duckdb

        from pipeline.warehouse import WarehouseBusyError, WarehouseMissingError, WarehouseUnreadableError

        try:
            return {f: warehouse_points(warehouse_path, f, vendor=vendor, limit=limit) for f in Figure}
        except (WarehouseMissingError, WarehouseBusyError, WarehouseUnreadableError) as exc:
            log.info("quality figures from the catalog: %s", exc)
        except duckdb.Error as exc:
            log.warning("quality figures from the catalog: the warehouse query failed: %s", exc)
    return {f: catalog_points(session, f, vendor=vendor, limit=limit) for f in Figure}


def _series(figure: Figure, rows: Sequence[Any], source: str, limit: int) -> QualitySeries:
    points = [
        QualityPoint(int(r[0]), str(r[1]), r[2], str(r[3]), float(r[4]))
        for r in rows[:limit]
        if r[4] is not None
    ]
    return QualitySeries(figure, points, source, truncated=len(rows) > limit)
