"""Quality figures per episode: the catalog gives the values the pipeline recorded, and the warehouse the same."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pytest
from view_fixtures import WorldDb
from world import DAY_NS, ROBOT, SECOND_NS, T0_NS, VIDEO, World

from pipeline.manifest.format import QUALITY_SCORE_COLUMNS
from pipeline.settings import Settings
from pipeline.ui.pages import ViewSources
from pipeline.ui.quality import SCORE_KEYS, Figure, catalog_points, quality_series, warehouse_points
from pipeline.ui.source import ROLES_FILE, reader_url

pytestmark = pytest.mark.integration


def test_score_keys_are_the_manifest_quality_columns() -> None:
    assert SCORE_KEYS == QUALITY_SCORE_COLUMNS


def _by_episode(world: World, points: list) -> dict[str, float]:
    names = {v: k for k, v in world.episodes.items()}
    return {names[p.episode_id]: p.value for p in points}


def test_catalog_points_are_the_recorded_figures(sources: ViewSources, world: World) -> None:
    with sources.session() as session:
        series = {f: catalog_points(session, f) for f in Figure}
    assert _by_episode(world, series[Figure.GAP_RATE].points) == pytest.approx(world.gap_rate)
    assert _by_episode(world, series[Figure.CLOCK_SKEW].points) == pytest.approx(world.skew_ms)
    # robot logs: the lowest camera's min_db; clips: their own min_db
    assert _by_episode(world, series[Figure.PSNR].points) == pytest.approx(world.psnr)
    # the colour check's: the largest camera's shift of a robot log, a video's own
    assert _by_episode(world, series[Figure.CHROMA_SHIFT].points) == pytest.approx(world.chroma_shift)
    names = {v: k for k, v in world.episodes.items()}
    scores = {(names[p.episode_id], p.series): p.value for p in series[Figure.SCORES].points}
    # the latest annotator version wins (e2's 0.5 was superseded); "n/a" and non-score keys give no point
    assert scores == pytest.approx(world.scores | {("e2", "quality_sync"): 0.9})
    assert all(s.source == "catalog" and not s.truncated for s in series.values())


def test_points_are_dated_by_recording_else_ingestion_and_newest_first(
    sources: ViewSources, world: World
) -> None:
    with sources.session() as session:
        gap = catalog_points(session, Figure.GAP_RATE).points
        psnr = catalog_points(session, Figure.PSNR).points
    e5 = next(p for p in gap if p.episode_id == world.episodes["e5"])
    assert e5.time == datetime.fromtimestamp((T0_NS + 2 * DAY_NS + 5 * 3600 * SECOND_NS) / 1e9, UTC)
    assert [p.time for p in gap] == sorted((p.time for p in gap), reverse=True)
    clip = next(p for p in psnr if p.episode_id == world.episodes["c1"])
    assert abs(clip.time - datetime.now(UTC)) < timedelta(minutes=10)  # no recording time: ingested


def test_vendor_filter_and_limit(sources: ViewSources, world: World) -> None:
    with sources.session() as session:
        robot_psnr = catalog_points(session, Figure.PSNR, vendor=ROBOT)
        video_gap = catalog_points(session, Figure.GAP_RATE, vendor=VIDEO)
        two = catalog_points(session, Figure.GAP_RATE, limit=2)
    assert {p.vendor for p in robot_psnr.points} == {ROBOT} and len(robot_psnr.points) == 3
    assert video_gap.points == []
    assert len(two.points) == 2 and two.truncated
    assert [p.episode_id for p in two.points] == [world.episodes["e7"], world.episodes["e5"]]


def test_warehouse_gives_the_same_points_as_the_catalog(
    sources: ViewSources, world: World, world_db: WorldDb, tmp_path: Path
) -> None:
    from pipeline.warehouse import sync

    path = tmp_path / "warehouse.duckdb"
    sync(world_db.url, path)
    with sources.session() as session:
        for figure in Figure:
            expected = catalog_points(session, figure)
            got = warehouse_points(path, figure)
            assert got.source == "warehouse"
            key = lambda p: (p.episode_id, p.series)  # noqa: E731
            assert sorted(map(key, got.points)) == sorted(map(key, expected.points)), figure
            for a, b in zip(sorted(got.points, key=key), sorted(expected.points, key=key), strict=True):
                assert (a.vendor, a.time) == (b.vendor, b.time) and a.value == pytest.approx(b.value), figure
        # the view prefers the warehouse when there is one, and falls back to the catalog when there is not
        assert {s.source for s in quality_series(session, warehouse_path=path).values()} == {"warehouse"}
        missing = quality_series(session, warehouse_path=tmp_path / "none.duckdb")
        assert {s.source for s in missing.values()} == {"catalog"}
        unsynced = tmp_path / "empty.duckdb"
        duckdb.connect(str(unsynced)).close()  # a file without the curation views
        assert {s.source for s in quality_series(session, warehouse_path=unsynced).values()} == {"catalog"}
        damaged = tmp_path / "damaged.duckdb"
        damaged.write_bytes(b"not a database" * 100)  # DuckDB cannot open it at all
        assert {s.source for s in quality_series(session, warehouse_path=damaged).values()} == {"catalog"}


def test_reader_url_uses_the_curation_role_of_the_local_cluster(pg_server, role_urls) -> None:  # type: ignore[no-untyped-def]
    """``sluice db migrate`` keeps the role passwords beside the cluster; the view connects as the reader."""
    from sqlalchemy import make_url

    settings = Settings(home=pg_server.root.parent)
    secrets_file = pg_server.root / ROLES_FILE
    assert not secrets_file.exists()
    assert make_url(reader_url(settings)).username != "sluice_curation"  # no roles file: the owner
    reader_password = make_url(role_urls.reader_url).password
    writer_password = make_url(role_urls.writer_url).password
    secrets_file.write_text(json.dumps({"writer": writer_password, "reader": reader_password}))
    try:
        url = make_url(reader_url(settings))
        assert (url.username, url.password) == ("sluice_curation", reader_password)
        assert url.port == pg_server.status().port
    finally:
        secrets_file.unlink()
