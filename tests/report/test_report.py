"""``sluice report``: one self-contained HTML file with the plots, that opens offline."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from world import BLANK_DETAIL, VIDEO, World

from pipeline.report.html import ReportError, remote_references, render_report, resolve_run, write_report
from pipeline.ui.pages import ViewSources


def test_remote_references_finds_every_way_of_loading_another_host() -> None:
    page = """<html><head><style>@import "x.css"; body { background: url(//cdn.example/b.png) }</style>
    <link rel="stylesheet" href="https://cdn.example/s.css"></head>
    <body><script src="http://cdn.example/a.js"></script><img src="//cdn.example/i.png">
    <div style="background: url('https://cdn.example/c.png')"></div>
    <svg><image xlink:href="http://cdn.example/p.png"/></svg>
    <a href="run?id=3">local</a><a href="#top">fragment</a><img src="data:image/png;base64,AAAA">
    <svg><use xlink:href="#m1"/></svg></body></html>"""
    found = remote_references(page)
    assert {(tag, attr) for tag, attr, _ in found} == {
        ("style", "css"), ("link", "href"), ("script", "src"), ("img", "src"), ("div", "style"),
        ("image", "xlink:href"),
    }  # fmt: skip
    assert remote_references('<a href="lineage?ref=blob:ab">x</a><img src="data:image/png;base64,AA">') == []


@pytest.mark.integration
def test_report_is_self_contained_with_plots_and_the_run(
    sources: ViewSources, world: World, tmp_path: Path
) -> None:
    out = write_report(sources, str(world.runs["video"]), tmp_path / "reports" / "run.html")
    html = out.read_text()
    assert remote_references(html) == []
    # no URL of any host at all: not even the SVG namespaces are left (they are implied in HTML)
    assert not re.search(r"(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}", html, re.I), "a URL is left in the report"
    assert "<script" not in html and "<link" not in html
    histograms = html.count('<div class="plot-card histogram"')
    # over time: PSNR, chroma shift and scores, the video vendor's figures; then their distributions
    assert html.count("<svg") == 3 + histograms and 'class="plot"' in html
    assert '<div class="plot-card histogram" data-figure="psnr">' in html
    assert '<div class="plot-card histogram" data-figure="chroma_shift">' in html
    # this world's vendors recorded no config: the report says it has no thresholds, and draws none
    assert "no readable config" in html and 'id="threshold-' not in html
    assert "this run" in html  # the run's episodes are ringed
    assert f"Run #{world.runs['video']} of {VIDEO}" in html and "failed" in html
    assert world.paths["c2"] in html and "blank_video" in html and BLANK_DETAIL in html
    assert "lineage?ref=" not in html  # nothing to link to in a single file
    assert not list(out.parent.glob(".*.tmp"))


@pytest.mark.integration
def test_report_includes_benchmark_figures(sources: ViewSources, world: World, tmp_path: Path) -> None:
    bench = tmp_path / "e2e.json"
    bench.write_text(json.dumps({"bench": "e2e", "time_to_first_batch_s": 41.5, "data_stall_pct": 3.2,
                                 "stall_ms_per_step": [0.0, 1.5, 0.2, 9.0], "ok": True, "note": "x"}))  # fmt: skip
    html = render_report(sources, "latest", bench_files=[bench])
    assert "time_to_first_batch_s" in html and "41.5" in html and "data_stall_pct" in html
    assert html.count('aria-label="stall_ms_per_step"') == 1
    assert ">ok<" not in html  # booleans and strings are not figures
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    with pytest.raises(ReportError, match="expected a JSON object"):
        render_report(sources, "latest", bench_files=[bad])


@pytest.mark.integration
def test_run_refs_resolve_or_say_which_runs_exist(sources: ViewSources, world: World) -> None:
    assert resolve_run(sources, "latest").id == world.runs["video"]
    assert resolve_run(sources, "manual__2025-06-05T10:00:00+00:00").id == world.runs["robot"]
    with pytest.raises(ReportError, match=r"no pipeline run 'nope'.*latest runs: "):
        resolve_run(sources, "nope")
