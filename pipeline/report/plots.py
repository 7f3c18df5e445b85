"""Plots as inline SVG: quality figures over time, per vendor, for the Sluice view and the HTML report.

Each plot is a string holding one ``<svg>`` element, ready to paste into HTML: no XML prolog, no external
reference (text stays text, large scatters are embedded as a PNG ``data:`` URI), so a page or report that
inlines it opens offline. Rendering goes through matplotlib's object API (no pyplot state) under a lock,
because matplotlib's rc parameters and font cache are process-wide and the Airflow API server renders pages
on several threads.
"""

from __future__ import annotations

import io
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from pipeline.ui.quality import FIGURES, SCORE_KEYS, Figure, QualityPoint, QualitySeries

if TYPE_CHECKING:
    from matplotlib.axes import Axes

#: Figure size in inches at 100 dpi; the SVG scales to its container's width.
WIDTH_IN = 7.5
HEIGHT_IN = 2.8
#: Above this many points a scatter is drawn as an embedded raster: an SVG element per point would make
#: the page several MB and slow to draw.
RASTER_ABOVE_POINTS = 3_000
#: Time buckets of the median line: enough to follow a trend, few enough to smooth per-episode noise.
MEDIAN_BUCKETS = 24
#: A vendor's median line is drawn from this many points on: below it, the points themselves are the trend
#: and a line through a handful of buckets would suggest one that is not there.
MEDIAN_MIN_POINTS = 20
#: One colour per vendor, stable across plots (matplotlib's tab10 hex values, colour-blind friendly order).
PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
HIGHLIGHT_LABEL = "this run"
#: Least room on either side of the points' time span: points from one moment (a single run's episodes
#: without recording times) would otherwise get matplotlib's default span of years.
MIN_TIME_PAD = timedelta(minutes=30)

_LOCK = threading.Lock()
_RC: dict[Any, Any] = {
    "svg.fonttype": "none",  # text as <text>, not paths: smaller, selectable, searchable
    "svg.hashsalt": "sluice",  # deterministic element ids: the same data gives the same SVG
    "font.size": 8.5,
    "axes.spines.top": False,
    "axes.spines.right": False,
}
_PROLOG = re.compile(r"\A.*?(?=<svg\b)", re.S)
_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.S)
_ROOT_SIZE = re.compile(r'(<svg\b[^>]*?)\s(?:width|height)="[^"]*"')


def vendor_colors(vendors: Iterable[str]) -> dict[str, str]:
    """A colour per vendor, by sorted name, so every plot of a page agrees."""
    return {v: PALETTE[i % len(PALETTE)] for i, v in enumerate(sorted(set(vendors)))}


def quality_svg(
    series: QualitySeries,
    *,
    colors: Mapping[str, str] | None = None,
    highlight: Iterable[int] = (),
    title: str | None = None,
) -> str | None:
    """The figure's points over time, one colour per vendor, with each vendor's median over time.

    ``highlight`` episodes (e.g. a run's) are drawn ringed in black. Returns None when there are no points.
    """
    if not series.points:
        return None
    spec = FIGURES[series.figure]
    colors = dict(colors or vendor_colors(p.vendor for p in series.points))
    marked = set(highlight)
    if series.figure is Figure.SCORES:
        present = sorted({p.series for p in series.points}, key=_score_order)
        panels = [(key, [p for p in series.points if p.series == key]) for key in present]
    else:
        panels = [(spec.y_label, series.points)]
    with _LOCK:
        import matplotlib
        from matplotlib.figure import Figure as MplFigure

        with matplotlib.rc_context(_RC):
            fig = MplFigure(figsize=(WIDTH_IN, max(HEIGHT_IN, 1.15 * len(panels) + 0.9)), dpi=100)
            axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
            for ax, (label, points) in zip(axes, panels, strict=True):
                _scatter(ax, points, colors, marked)
                ax.set_ylabel(label)
                if series.figure is Figure.SCORES:
                    ax.set_ylim(-0.05, 1.05)
                ax.grid(True, alpha=0.25, linewidth=0.6)
            first, last = min(p.time for p in series.points), max(p.time for p in series.points)
            pad = max((last - first) * 0.04, MIN_TIME_PAD)
            axes[-1].set_xlim(*_x([first - pad, last + pad]))
            axes[0].set_title(title or spec.title, loc="left", fontsize=10)
            axes[-1].set_xlabel("recorded at (ingested at when unknown), UTC")
            fig.autofmt_xdate()
            _legend(fig, colors, sorted({p.vendor for p in series.points}), bool(marked & _ids(series)))
            fig.tight_layout()
            svg = _to_svg(fig)
    return _tidy(svg, title or spec.title)


@dataclass(frozen=True)
class Threshold:
    """A vertical line on a histogram: the vendor's limit, and which side of it is held back or flagged."""

    value: float
    label: str  # e.g. "max_gap_rate 0.02"


#: Histogram bins: enough to show a distribution's shape over a few hundred episodes, and to see a mode
#: sitting just on the wrong side of a threshold.
HISTOGRAM_BINS = 30
#: Colours of a histogram's groups (this run's episodes, the vendor's others) and of threshold lines.
HISTOGRAM_COLORS = (PALETTE[0], "#c7c7c7")
THRESHOLD_COLOR = "#d62728"


def histogram_svg(
    title: str,
    groups: Mapping[str, Sequence[float]],
    *,
    x_label: str,
    thresholds: Sequence[Threshold] = (),
    figure: str = "",
) -> str | None:
    """A stacked histogram of ``groups`` (label → values; the first is drawn in colour) with a dashed red
    line per threshold. Threshold lines and the bars carry element ids (``threshold-<figure>-<i>``,
    ``histogram-<figure>-<group>-<bin>``) so that a page can be checked for them. None when no group has a value."""
    import numpy as np

    present = {label: [float(v) for v in values] for label, values in groups.items() if len(values)}
    if not present:
        return None
    every = np.concatenate([np.asarray(v) for v in present.values()])
    low, high = float(every.min()), float(every.max())
    for t in thresholds:
        low, high = min(low, t.value), max(high, t.value)
    if high <= low:
        low, high = low - 0.5, high + 0.5
    edges = [float(x) for x in np.linspace(low, high, HISTOGRAM_BINS + 1)]
    with _LOCK:
        import matplotlib
        from matplotlib.figure import Figure as MplFigure

        with matplotlib.rc_context(_RC):
            fig = MplFigure(figsize=(WIDTH_IN / 2, HEIGHT_IN), dpi=100)
            ax = fig.subplots()
            labels = list(present)
            colors = [HISTOGRAM_COLORS[min(i, len(HISTOGRAM_COLORS) - 1)] for i in range(len(labels))]
            _, _, patches = ax.hist(
                [present[label] for label in labels], bins=edges, stacked=True, color=colors, label=labels
            )
            groups_drawn: list[Any] = patches if isinstance(patches, list) else [patches]
            for g, group in enumerate(groups_drawn):
                for k, bar in enumerate(group):
                    bar.set_gid(f"histogram-{figure}-{g}-{k}")
            for i, t in enumerate(thresholds):
                ax.axvline(
                    t.value, color=THRESHOLD_COLOR, linestyle="--", linewidth=1.4, label=t.label,
                    gid=f"threshold-{figure}-{i}",
                )  # fmt: skip
            ax.set_title(title, loc="left", fontsize=10)
            ax.set_xlabel(x_label)
            ax.set_ylabel("episodes")
            ax.grid(True, axis="y", alpha=0.25, linewidth=0.6)
            ax.legend(fontsize=7, frameon=False, loc="upper right")
            fig.tight_layout()
            svg = _to_svg(fig)
    return _tidy(svg, title)


def line_svg(title: str, values: Sequence[float], *, y_label: str = "", x_label: str = "") -> str:
    """A plain line plot of ``values`` against their index (benchmark series in the report)."""
    with _LOCK:
        import matplotlib
        from matplotlib.figure import Figure as MplFigure

        with matplotlib.rc_context(_RC):
            fig = MplFigure(figsize=(WIDTH_IN, HEIGHT_IN), dpi=100)
            ax = fig.subplots()
            ax.plot(range(len(values)), values, color=PALETTE[0], linewidth=1.2)
            ax.set_title(title, loc="left", fontsize=10)
            ax.set_xlabel(x_label)
            ax.set_ylabel(y_label)
            ax.grid(True, alpha=0.25, linewidth=0.6)
            fig.tight_layout()
            svg = _to_svg(fig)
    return _tidy(svg, title)


def _ids(series: QualitySeries) -> set[int]:
    return {p.episode_id for p in series.points}


def _score_order(key: str) -> tuple[int, str]:
    return (SCORE_KEYS.index(key) if key in SCORE_KEYS else len(SCORE_KEYS), key)


def _scatter(ax: Axes, points: Sequence[QualityPoint], colors: Mapping[str, str], marked: set[int]) -> None:
    import numpy as np

    raster = len(points) > RASTER_ABOVE_POINTS
    size = 9 if len(points) > 500 else 22
    by_vendor: dict[str, list[QualityPoint]] = {}
    for point in points:
        by_vendor.setdefault(point.vendor, []).append(point)
    for vendor, vendor_points in sorted(by_vendor.items()):
        times = [p.time for p in vendor_points]
        values = np.array([p.value for p in vendor_points], dtype=float)
        color = colors.get(vendor, PALETTE[-1])
        ax.scatter(_x(times), values, s=size, color=color, alpha=0.55, linewidths=0, rasterized=raster)
        centers, medians = _bucket_medians(times, values) if len(values) >= MEDIAN_MIN_POINTS else ([], [])
        if len(centers) >= 2:
            ax.plot(_x(centers), medians, color=color, linewidth=1.4)
    ringed = [p for p in points if p.episode_id in marked]
    if ringed:
        ax.scatter(
            _x([p.time for p in ringed]),
            [p.value for p in ringed],
            s=size * 2.6,
            facecolors="none",
            edgecolors="black",
            linewidths=0.9,
            rasterized=raster,
        )


def _x(times: Sequence[datetime]) -> Any:
    """Times as numpy datetimes in UTC (matplotlib's date axis; numpy has no time zones)."""
    import numpy as np

    return np.array(
        [t.astimezone(UTC).replace(tzinfo=None) if t.tzinfo else t for t in times], dtype="datetime64[us]"
    )


def _bucket_medians(times: Sequence[datetime], values: Any) -> tuple[list[datetime], list[float]]:
    """Median of ``values`` in equal time buckets over their span (empty buckets left out)."""
    import numpy as np

    start, end = min(times), max(times)
    span = (end - start).total_seconds()
    if span <= 0:
        return [], []
    offsets = np.array([(t - start).total_seconds() for t in times])
    index = np.minimum((offsets / span * MEDIAN_BUCKETS).astype(int), MEDIAN_BUCKETS - 1)
    centers, medians = [], []
    for bucket in range(MEDIAN_BUCKETS):
        chosen = values[index == bucket]
        if chosen.size:
            centers.append(start + timedelta(seconds=span * (bucket + 0.5) / MEDIAN_BUCKETS))
            medians.append(float(np.median(chosen)))
    return centers, medians


def _legend(fig: Any, colors: Mapping[str, str], vendors: Sequence[str], with_highlight: bool) -> None:
    from matplotlib.lines import Line2D

    handles = [
        Line2D([], [], marker="o", linestyle="-", color=colors.get(v, PALETTE[-1]), label=v, markersize=4)
        for v in vendors
    ]
    if with_highlight:
        handles.append(
            Line2D(
                [],
                [],
                marker="o",
                linestyle="",
                markerfacecolor="none",
                markeredgecolor="black",
                label=HIGHLIGHT_LABEL,
            )
        )
    fig.legend(handles=handles, loc="upper right", fontsize=7.5, frameon=False, ncols=min(len(handles), 4))


def _to_svg(fig: Any) -> str:
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
    return buffer.getvalue()


def _tidy(svg: str, title: str) -> str:
    """One inline ``<svg>``: no prolog or metadata, sized by CSS, titled for screen readers and tests."""
    svg = _PROLOG.sub("", svg, count=1)
    svg = _METADATA.sub("", svg, count=1)
    for _ in range(2):
        svg = _ROOT_SIZE.sub(r"\1", svg, count=1)
    escaped = title.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    return svg.replace("<svg ", f'<svg class="plot" role="img" aria-label="{escaped}" ', 1)
