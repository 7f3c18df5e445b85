"""The report of a real run, looked at in a real browser: the histograms carry the vendor's threshold lines
and the contact sheet shows frames, among them the one where a clock jump was found.

The run is made by the run-level functions a DAG's tasks call (open, discover, plan, each step on each
batch, finalize), on a synthetic acme_robotics drop with a clock jump and a truncated log, so every figure
is the pipeline's own. Headless Chromium from Debian (as in ``tests/ui/test_browser.py``) opens the file
offline; screenshots are kept under ``test-artifacts/``.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from pipeline.pgserver import LocalPostgres
from pipeline.synth import RobotDropConfig, make_robot_drop

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"
ACME = REPO / "dags" / "vendors" / "acme_robotics.yaml"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
STEPS = ("ingest", "quality_pre", "transcode", "quality_post", "annotate")
PAGE_TIMEOUT_MS = 30_000


@pytest.fixture(scope="module")
def report(pg_server: LocalPostgres, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The HTML report of one real run of acme_robotics over a small drop with two defects."""
    from pipeline import orchestrate
    from pipeline.catalog import migrate
    from pipeline.catalog.views import read_only_engine
    from pipeline.config import load_vendor
    from pipeline.report.html import write_report
    from pipeline.settings import load_settings
    from pipeline.steps.registry import step_class
    from pipeline.steps.runner import build_context
    from pipeline.ui.pages import ViewSources

    base = tmp_path_factory.mktemp("report-run")
    url = pg_server.create_database("report_browser_run")
    migrate.upgrade(url)
    drop = base / "drop"
    make_robot_drop(
        drop,
        RobotDropConfig(episodes=2, seconds=1.5, width=96, height=72, defects=("clock_jump", "truncated")),
    )
    data = yaml.safe_load(ACME.read_text())
    data["source"].update(url=str(drop), settle_s=0)
    vendors = base / "vendors"
    vendors.mkdir()
    (vendors / "acme_robotics.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    vendor = load_vendor(vendors / "acme_robotics.yaml")
    settings = load_settings(
        home=base / "home",
        database_url=url,
        vendors_dir=vendors,
        project_dir=base,
        store_url=str(base / "store"),
    )
    ctx = build_context(settings)
    try:
        toggles = orchestrate.validate_conf(vendor, {"annotate": True})
        run_id = orchestrate.start_run(
            ctx, vendor, dag_id=vendor.name, run_id="manual__report", toggles=toggles
        )
        orchestrate.discover(ctx, vendor, run_id)
        batch_ids = orchestrate.plan(ctx, vendor, run_id)["batch_ids"]
        for batch_id in batch_ids:
            for step in STEPS:
                orchestrate.run_batch_step(
                    settings, vendor, step, run_id, batch_id, ctx=ctx, step_cls=step_class(step)
                )
        states = [orchestrate.TaskState(t, -1, "success") for t in ("validate_conf", "discover", "plan")]
        orchestrate.finalize(ctx, vendor, run_id, states, batch_ids=batch_ids)
        engine = read_only_engine(url)
        try:
            yield write_report(ViewSources(engine=engine), str(run_id), base / "report.html")
        finally:
            engine.dispose()
    finally:
        ctx.engine.dispose()


def test_the_report_shows_distributions_with_thresholds_and_a_contact_sheet(
    chromium: str, report: Path
) -> None:
    from matplotlib.image import imread
    from playwright.sync_api import expect, sync_playwright

    from pipeline.report.html import remote_references

    assert remote_references(report.read_text()) == []
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.route(
                "**/*",
                lambda route: (
                    route.abort()
                    if not route.request.url.startswith(("file:", "data:"))
                    else route.continue_()
                ),
            )
            page.goto(report.as_uri(), timeout=PAGE_TIMEOUT_MS)

            # A histogram per measured figure, each with its threshold drawn as a visible vertical line.
            for figure in ("gap_rate", "clock_skew", "psnr", "chroma_shift"):
                card = page.locator(f'.plot-card.histogram[data-figure="{figure}"]')
                expect(card).to_be_visible()
                assert card.locator(f'[id^="histogram-{figure}-"]').count() > 0  # the bars
                line = card.locator(f'[id="threshold-{figure}-0"]')
                expect(line).to_have_count(1)
                box = line.bounding_box()
                assert box is not None and box["height"] > 50 and box["width"] < 10, box
            expect(page.locator(".plot-card.histogram")).to_contain_text(["max_gap_rate 0.02"])
            gap = page.locator('.plot-card.histogram[data-figure="gap_rate"]')
            gap.scroll_into_view_if_needed()
            page.screenshot(path=str(ARTIFACTS / "sluice-report-histograms.png"))

            # The contact sheet: decoded frames, the clock jump's at the jump; the truncated log says why not.
            sheet = page.locator("figure.thumb")
            assert sheet.count() >= 4
            images = page.locator("figure.thumb img")
            assert images.count() >= 3
            for i in range(images.count()):
                assert images.nth(i).evaluate("img => img.complete && img.naturalWidth") > 100
            jumped = page.locator("figure.thumb", has_text="clock_jump")
            expect(jumped).to_contain_text("max_clock_jump failed")
            expect(jumped.locator("img")).to_have_count(1)
            expect(page.locator("figure.thumb", has_text="truncated")).to_contain_text("no frame")
            sheet.first.scroll_into_view_if_needed()
            page.screenshot(path=str(ARTIFACTS / "sluice-report-sheet.png"))
            pixels = imread(io.BytesIO(jumped.locator("img").screenshot()), format="png")
            assert pixels.std() > 0.05  # a picture, not a blank box

            # Dataset statistics and a way to open each episode.
            expect(page.locator('table.hours[data-axis="task"]')).to_be_visible()
            expect(page.locator("table.ranges")).to_contain_text("position[0]")
            expect(sheet.first).to_contain_text("sluice lineage episode:")
            page.screenshot(path=str(ARTIFACTS / "sluice-report.png"), full_page=True)
        finally:
            browser.close()
