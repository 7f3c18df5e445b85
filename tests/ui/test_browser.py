"""The Sluice view in a real browser, inside the local Airflow the project starts itself.

Headless Chromium from Debian (``apt-get install -y chromium``; never Playwright's own download) logs into
Airflow with the generated admin password, opens the Sluice entry of the navigation, and finds a quarantined
file with its reason and detail, a plot, and the lineage of a manifest row down to the raw file. The view
reads the catalog as the curation reader. Screenshots are kept under ``test-artifacts/``.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from world import CRC_DETAIL, DATASET, VERSION, World

from pipeline.airflow_local import LocalAirflow
from pipeline.catalog.roles import RoleUrls
from pipeline.ui.quality import Figure

pytestmark = [pytest.mark.integration, pytest.mark.airflow, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
#: The first page of a fresh API server imports the view's libraries and warms matplotlib's font cache.
FIRST_PAGE_TIMEOUT_MS = 90_000
PAGE_TIMEOUT_MS = 30_000


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def airflow(chromium: str, world: World, role_urls: RoleUrls, tmp_path: Path) -> Iterator[LocalAirflow]:
    """The project's local Airflow (what ``sluice airflow up`` runs), its view reading the test catalog."""
    local = LocalAirflow(
        tmp_path / "airflow",
        sluice_env={"SLUICE_HOME": str(tmp_path / "home"), "SLUICE_DATABASE_URL": role_urls.reader_url},
        port=_free_port(),  # never a developer's 8080
    )
    try:
        local.up()
        yield local
    finally:
        local.down()


def test_view_shows_quarantine_plot_and_manifest_lineage(
    chromium: str, airflow: LocalAirflow, world: World
) -> None:
    from playwright.sync_api import expect, sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            # Without a login the view gives nothing away: it sends the browser to Airflow's login page.
            anonymous = playwright.request.new_context()
            answer = anonymous.get(f"{airflow.url}/sluice/", max_redirects=0)
            assert answer.status == 303 and "/auth/login" in answer.headers["location"]
            assert world.paths["e4"] not in answer.text()
            # ...and back to a page of this server, whatever Host the client claims
            forged = anonymous.get(
                f"{airflow.url}/sluice/vendor?name=x", headers={"Host": "evil.example"}, max_redirects=0
            )
            assert forged.status == 303
            assert forged.headers["location"].endswith("?next=%2Fsluice%2Fvendor%3Fname%3Dx")
            assert "evil.example" not in forged.headers["location"]
            anonymous.dispose()

            page = browser.new_page(viewport={"width": 1500, "height": 1100})
            page.goto(f"{airflow.url}/auth/login")
            page.get_by_label("Username").fill("admin")
            page.get_by_label("Password").fill(airflow.admin_password())
            page.get_by_role("button", name="Sign in").click()
            page.wait_for_url(lambda url: "/auth/login" not in url, timeout=PAGE_TIMEOUT_MS)

            # The navigation entry the plugin registers, and the page it opens inside Airflow.
            page.get_by_role("link", name="Sluice").first.click()
            page.wait_for_url("**/plugin/sluice", timeout=PAGE_TIMEOUT_MS)
            view = page.frame_locator("iframe")

            quarantined = view.locator(f'tr.held-file[data-episode="{world.episodes["e4"]}"]')
            expect(quarantined).to_be_visible(timeout=FIRST_PAGE_TIMEOUT_MS)
            expect(quarantined).to_contain_text(world.paths["e4"])
            expect(quarantined.locator(".reason")).to_have_text("crc_mismatch")
            expect(quarantined).to_contain_text(CRC_DETAIL)

            plot = view.locator('.plot-card[data-figure="gap_rate"] svg.plot')
            expect(plot).to_be_visible()
            assert plot.bounding_box()["height"] > 100  # type: ignore[index]
            assert plot.locator("path, use").count() > 10  # axes, ticks and the points themselves
            expect(view.locator("svg.plot")).to_have_count(len(Figure))  # every figure has points here
            expect(view.locator('.plot-card[data-figure="chroma_shift"] svg.plot')).to_be_visible()
            page.screenshot(path=str(ARTIFACTS / "sluice-view.png"))
            plot.scroll_into_view_if_needed()
            page.screenshot(path=str(ARTIFACTS / "sluice-plots.png"))

            view.locator("table.versions").get_by_role("link", name="row 0").click()
            chain = view.locator("ol.chain > li")
            expect(chain).to_have_count(5, timeout=PAGE_TIMEOUT_MS)
            kinds = [chain.nth(i).get_attribute("data-kind") for i in range(5)]
            assert kinds == ["manifest_row", "manifest", "artifact", "episode", "blob"]
            first = world.manifest_rows[0]
            expect(chain.nth(0)).to_contain_text(f"row 0 of {DATASET}@{VERSION}")
            expect(chain.nth(2)).to_contain_text("transcode")
            expect(chain.nth(4)).to_contain_text(world.blobs[first])
            expect(view.locator("table.steps")).to_contain_text("transcode-cfg")
            page.screenshot(path=str(ARTIFACTS / "sluice-lineage.png"))
        finally:
            browser.close()
