"""The view's pages, gathered from the real catalog and rendered: what a user must find on each."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Engine
from view_fixtures import WorldDb
from world import CRC_DETAIL, DATASET, ROBOT, VERSION, World

from pipeline.catalog import repo
from pipeline.catalog.engine import make_engine
from pipeline.catalog.views import read_only_engine
from pipeline.ui.pages import ViewSources, lineage_page, overview, run_page, vendor_page
from pipeline.ui.quality import Figure
from pipeline.ui.render import render

pytestmark = pytest.mark.integration


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.targets: list[str] = []
        self.svgs = 0
        self.scripts = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.svgs += tag == "svg"
        self.scripts += tag == "script"
        self.targets += [v or "" for k, v in attrs if k in ("href", "src", "action") and tag != "use"]


def _parse(html: str) -> _Links:
    parser = _Links()
    parser.feed(html)
    return parser


def test_overview_shows_runs_quarantines_plots_and_versions(sources: ViewSources, world: World) -> None:
    html = render("overview", overview(sources))
    parsed = _parse(html)
    # every quarantined file with its reason code and detail
    for name, reason in (("e4", "crc_mismatch"), ("e5", "gap_rate_high"), ("c2", "blank_video")):
        row = re.search(
            rf'<tr class="held-file" data-episode="{world.episodes[name]}">(.*?)</tr>', html, re.S
        )
        assert row is not None, name
        assert world.paths[name] in row.group(1) and reason in row.group(1)
    assert CRC_DETAIL in html
    assert parsed.svgs == len(Figure) and html.count('class="plot"') == len(Figure)  # every figure has points
    assert f"{DATASET}@{VERSION}" in html and f"lineage?ref=manifest%3A{DATASET}%40{VERSION}%3A0" in html
    assert f'href="run?id={world.runs["video"]}"' in html and "succeeded with warnings" in html
    assert 'class="toggle off"' in html  # the video run switched annotate off
    # relative links only (the view lives under Airflow's prefix and in its iframe), and no script at all
    assert parsed.targets and all(not re.match(r"^(/|[a-z]+:)", t) for t in parsed.targets), parsed.targets
    assert parsed.scripts == 0


def test_vendor_and_run_pages(sources: ViewSources, world: World) -> None:
    vendor = render("vendor", vendor_page(sources, ROBOT))
    assert world.paths["e4"] in vendor and world.paths["c2"] not in vendor
    run = render("run", run_page(sources, world.runs["video"]))
    assert "transcode</b> (critical)" in run and "ray worker died (OOM)" in run
    assert "switched off for this run: annotate" in run and "blank_video" in run
    # gap rate and skew have no video points; PSNR, chroma shift and scores do
    assert run.count('class="plot"') == 3
    empty = render("vendor", vendor_page(sources, "nobody"))
    assert "No files of vendor nobody" in empty


def test_lineage_page_and_its_errors(sources: ViewSources, world: World) -> None:
    html = render("lineage", lineage_page(sources, f"manifest:{DATASET}@{VERSION}:0"))
    assert html.count('data-kind="') == 5 and world.blobs["e1"] in html
    form_only = render("lineage", lineage_page(sources, None))
    assert 'data-kind="' not in form_only and "manifest:&lt;dataset&gt;@&lt;version&gt;" in form_only
    bad = render("lineage", lineage_page(sources, "episode:abc"))
    assert 'class="error"' in bad and "numeric id" in bad


def test_a_run_that_warned_before_any_batch_renders_with_its_note(fresh_world: WorldDb) -> None:
    """Discover's notes (source_empty, source_missing, nothing_selected) carry no batches or item counts:
    the overview, the run page and the report show them (they failed with HTTP 500 and a traceback)."""
    from pipeline.catalog.runs import record_run_notes
    from pipeline.report.html import render_report

    note = {
        "step": "discover",
        "critical": False,
        "code": "source_empty",
        "detail": "source_empty: nothing in /drop",
    }
    engine: Engine = make_engine(fresh_world.url, pool_size=1)
    try:
        with repo.session_scope(repo.make_session_factory(engine)) as session:
            run = repo.start_pipeline_run(
                session, vendor_id=session.execute(text("SELECT id FROM vendors WHERE name = :v"), {"v": ROBOT}).scalar_one(),
                dag_id=f"sluice_{ROBOT}", run_id="scheduled__2025-06-07T00:00:00+00:00", config_hash="cfg-acme",
                step_toggles={},
            )  # fmt: skip
            record_run_notes(session, run, "discover", [note])
            repo.finish_pipeline_run(session, run, "succeeded_with_warnings", warnings=[note])
    finally:
        engine.dispose()
    reader = read_only_engine(fresh_world.roles.reader_url)
    try:
        sources = ViewSources(engine=reader)
        for html in (
            render("overview", overview(sources)),
            render("run", run_page(sources, run)),
            render("vendor", vendor_page(sources, ROBOT)),
            render_report(sources, str(run)),
        ):
            assert "discover</b> (non-critical): source_empty: nothing in /drop" in html
    finally:
        reader.dispose()


def test_values_from_vendors_are_escaped(fresh_world: WorldDb) -> None:
    """Paths and details come from vendors: they must never become markup."""
    engine: Engine = make_engine(fresh_world.url, pool_size=1)
    try:
        with repo.session_scope(repo.make_session_factory(engine)) as session:
            episode = fresh_world.world.episodes["e4"]
            repo.set_episode_state(
                session,
                episode,
                "quarantined",
                reasons=["crc_mismatch"],
                detail='<script>alert("x")</script>',
            )
    finally:
        engine.dispose()
    reader = read_only_engine(fresh_world.roles.reader_url)
    try:
        html = render("overview", overview(ViewSources(engine=reader)))
    finally:
        reader.dispose()
    assert "<script>alert" not in html and "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in html
