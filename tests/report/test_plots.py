"""Plots as inline SVG: self-contained, deterministic, one colour per vendor, a run's episodes ringed."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from pipeline.report.html import remote_references
from pipeline.report.plots import HIGHLIGHT_LABEL, RASTER_ABOVE_POINTS, quality_svg, vendor_colors
from pipeline.ui.quality import Figure, QualityPoint, QualitySeries

T0 = datetime(2025, 6, 2, tzinfo=UTC)


def _series(
    figure: Figure, n: int, *, series: str = "gap_rate", vendors: tuple[str, ...] = ("a", "b")
) -> QualitySeries:
    points = [
        QualityPoint(i, vendors[i % len(vendors)], T0 + timedelta(hours=i), series, (i % 7) / 100)
        for i in range(n)
    ]
    return QualitySeries(figure, points, "catalog", truncated=False)


def test_svg_is_one_inline_element_with_nothing_external() -> None:
    svg = quality_svg(_series(Figure.GAP_RATE, 40))
    assert svg is not None
    assert svg.startswith('<svg class="plot" role="img" aria-label="Gap rate"')
    assert "<?xml" not in svg and "<!DOCTYPE" not in svg and "<metadata>" not in svg
    root = svg[: svg.index(">")]
    assert "viewBox=" in root and " width=" not in root and " height=" not in root  # CSS sizes it
    assert remote_references(f"<html><body>{svg}</body></html>") == []
    assert ">Gap rate<" in svg and "data:image" not in svg  # text stays text; few points stay vectors


def test_same_data_same_svg_and_empty_data_no_plot() -> None:
    assert quality_svg(_series(Figure.CLOCK_SKEW, 30)) == quality_svg(_series(Figure.CLOCK_SKEW, 30))
    assert quality_svg(QualitySeries(Figure.PSNR, [], "catalog", truncated=False)) is None


def test_highlight_rings_only_episodes_that_are_plotted() -> None:
    series = _series(Figure.GAP_RATE, 30)
    assert HIGHLIGHT_LABEL in (quality_svg(series, highlight={3, 4}) or "")
    assert HIGHLIGHT_LABEL not in (quality_svg(series, highlight={999}) or "")


def test_scores_get_one_panel_per_key_and_many_points_become_a_raster() -> None:
    points = [
        QualityPoint(i, "a", T0 + timedelta(hours=i), key, 0.5)
        for i in range(10)
        for key in ("quality_visual", "quality_sync")
    ]
    svg = quality_svg(QualitySeries(Figure.SCORES, points, "catalog", truncated=False)) or ""
    labels = re.findall(r">(quality_\w+)<", svg)
    assert labels == ["quality_sync", "quality_visual"]  # in the manifest's order, each once
    big = quality_svg(_series(Figure.GAP_RATE, RASTER_ABOVE_POINTS + 1)) or ""
    assert "data:image/png;base64," in big and remote_references(big) == []


def test_vendor_colors_are_stable_whatever_the_order() -> None:
    assert vendor_colors(["b", "a", "b"]) == vendor_colors(["a", "b"])
    assert len(set(vendor_colors(["a", "b", "c"]).values())) == 3
