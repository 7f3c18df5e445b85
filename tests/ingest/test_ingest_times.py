"""Time data as curation reads it, after a real ingest and pre-gate: the 99th-percentile clock skew of every
stamped stream, and a clip's recording time from its container (never 1970-01-01)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import av
import numpy as np
import pytest
from ingest_helpers import ACME, REPO, make_context, vendor_config
from mcap.reader import make_reader

from pipeline.config import load_vendor
from pipeline.mcaplog.decode import decode_message, stamp_ns
from pipeline.synth import VideoDropConfig, make_video_drop
from pipeline.synth.drop import DropManifest
from pipeline.vendor_ingest import ingest_vendor
from pipeline.warehouse import run_query, sync

pytestmark = pytest.mark.integration

NORTHWIND = REPO / "dags" / "vendors" / "northwind_video.yaml"
EPISODES_SQL = """
SELECT source_path, start_time_utc, skew_median_abs_max_ns, skew_p99_abs_max_ns, skew_abs_max_ns
FROM episode_view WHERE is_accepted ORDER BY source_path"""


def _p99_abs_skew_ns(path: Path, stamp_fields: dict[str, str]) -> int:
    """Worst topic's 99th percentile of |log time - stamp|, read with the stock mcap reader."""
    skews: dict[str, list[int]] = {}
    with path.open("rb") as fh:
        for schema, channel, message in make_reader(fh).iter_messages(topics=list(stamp_fields)):
            stamp = stamp_ns(decode_message(schema, channel, message.data), stamp_fields[channel.topic])
            if stamp is not None:
                skews.setdefault(channel.topic, []).append(message.log_time - stamp)
    return max(int(np.percentile(np.abs(v), 99, method="higher")) for v in skews.values())


@pytest.fixture(scope="module")
def ingested(
    tmp_path_factory: pytest.TempPathFactory,
    module_database: Callable[[str], str],
    robot_drop: tuple[Path, DropManifest],
) -> tuple[Path, dict[str, Path], list[tuple]]:  # type: ignore[type-arg]
    base = tmp_path_factory.mktemp("times")
    ctx = make_context(base, module_database("times"))
    robot_root = base / "acme"
    shutil.copytree(robot_drop[0], robot_root)
    clips_root = base / "northwind"
    make_video_drop(clips_root, VideoDropConfig(clips=2, seconds=1.2, width=320, height=240, sidecars=False))
    (clips_root / "_READY").touch()
    robot = vendor_config(ACME, robot_root)
    video = vendor_config(NORTHWIND, clips_root)
    for vendor in (robot, video):
        ingest_vendor(vendor, ctx, settle_s=0)
    warehouse = base / "warehouse.duckdb"
    sync(ctx.engine, warehouse)
    rows = run_query(warehouse, EPISODES_SQL).table.to_pylist()
    return warehouse, {"acme": robot_root, "northwind": clips_root}, rows


def test_every_stamped_episode_has_its_p99_skew(ingested: tuple) -> None:  # type: ignore[type-arg]
    warehouse, roots, rows = ingested
    robot = [r for r in rows if r["source_path"].endswith(".mcap")]
    assert robot
    contract = load_vendor(ACME).topics
    assert contract is not None
    fields = {t.topic: t.stamp_field for t in contract.all_topics() if t.stamp_field}
    for row in robot:
        p99, worst = row["skew_p99_abs_max_ns"], row["skew_abs_max_ns"]
        assert p99 is not None, row  # was NULL for every episode while skew_abs_max_ns was set
        assert row["skew_median_abs_max_ns"] is not None
        assert 0 < p99 <= worst
        assert p99 == _p99_abs_skew_ns(roots["acme"] / row["source_path"], fields)
    # so a spec's skew bound filters: below every episode's p99, nothing is left
    tightest = min(r["skew_p99_abs_max_ns"] for r in robot)
    kept = run_query(
        warehouse,
        "SELECT count(*) AS n FROM episode_view WHERE is_accepted AND kind = 'mcap' "
        "AND coalesce(skew_p99_abs_max_ns, 0) <= $max_skew_ns",
        {"max_skew_ns": tightest - 1},
    ).table.to_pylist()
    assert kept == [{"n": 0}]


def test_a_clip_starts_when_its_container_says_it_was_recorded(ingested: tuple) -> None:  # type: ignore[type-arg]
    warehouse, roots, rows = ingested
    clips = [r for r in rows if r["source_path"].endswith(".mp4")]
    assert len(clips) == 2
    for row in clips:
        with av.open(str(roots["northwind"] / row["source_path"])) as container:
            recorded = datetime.fromisoformat(container.metadata["creation_time"])
        assert row["start_time_utc"].replace(tzinfo=UTC) == recorded
        assert row["start_time_utc"].year == 2025  # not 1970-01-01
    since = "SELECT count(*) AS n FROM episode_view WHERE kind = 'video' AND is_accepted AND start_time_utc >= CAST($since AS TIMESTAMP)"
    assert run_query(warehouse, since, {"since": "2025-06-01"}).table.to_pylist() == [{"n": 2}]
    assert run_query(warehouse, since, {"since": "2025-07-01"}).table.to_pylist() == [{"n": 0}]


def test_a_clip_without_creation_time_falls_back_to_its_file_time() -> None:
    from pipeline.quality.recorded import RecordedFrom, clip_start_ns

    mtime = datetime(2025, 6, 3, 9, 30, tzinfo=UTC).timestamp()
    assert clip_start_ns("2025-06-02T08:03:24.000000Z", mtime) == (1748851404 * 10**9, RecordedFrom.CONTAINER)
    assert clip_start_ns(None, mtime) == (int(mtime) * 10**9, RecordedFrom.FILE_MTIME)
    # a muxer's zero date is no recording time
    assert clip_start_ns("1970-01-01T00:00:00.000000Z", None) == (None, RecordedFrom.UNKNOWN)
    assert clip_start_ns("not a date", 0.0) == (None, RecordedFrom.UNKNOWN)
