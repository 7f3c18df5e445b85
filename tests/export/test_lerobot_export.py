"""LeRobot v3 export of a dataset version: structure, frame counts, exact timestamps, keyframes."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import av
import pyarrow.parquet as pq
import pytest
from sluice_world import land, make_world, vendor_from_example

from pipeline.catalog import make_session_factory, session_scope
from pipeline.catalog.outputs import add_dataset_episodes, create_dataset_version
from pipeline.export import ExportError, export_dataset_version
from pipeline.synth import RobotDropConfig, make_robot_drop

pytestmark = pytest.mark.integration

LEROBOT_LOAD = """
import sys
from lerobot.datasets.lerobot_dataset import LeRobotDataset
ds = LeRobotDataset("sluice/export", root=sys.argv[1], video_backend="pyav")
n = 0
for i in range(len(ds)):
    item = ds[i]
    n += 1
print(n, ds.meta.total_episodes, tuple(item["observation.images.front"].shape))
"""


def test_export_matches_v3_and_counts(tmp_path: Path, migrated_database_url: str) -> None:
    world = make_world(tmp_path / "home", migrated_database_url)
    try:
        drop = tmp_path / "drop"
        make_robot_drop(drop, RobotDropConfig(episodes=2, seconds=2, width=64, height=48))
        episodes = land(world, vendor_from_example("acme_robotics", drop), drop, "*.mcap")
        with session_scope(make_session_factory(world.ctx.engine)) as session:
            version_id = create_dataset_version(
                session, name="pick", version="v1", spec_hash="s" * 64, spec={}
            )
            add_dataset_episodes(session, version_id, [(e, "train") for e in episodes.values()])
        out = tmp_path / "export"
        report = export_dataset_version(world.ctx.engine, "pick", "v1", out, robot_type="acme_bimanual")
        with pytest.raises(ExportError, match="exists"):
            export_dataset_version(world.ctx.engine, "pick", "v1", out)
    finally:
        world.close()

    assert report.ok, report.checks
    assert report.episodes == 2 and len(report.checks) == 4 + 3 * 3
    info = json.loads((out / "meta/info.json").read_text())
    assert info["codebase_version"] == "v3.0" and info["fps"] == 30
    for name in (
        "meta/stats.json",
        "meta/tasks.parquet",
        "meta/episodes/chunk-000/file-000.parquet",
        "data/chunk-000/file-000.parquet",
        "sluice_export_report.json",
    ):
        assert (out / name).is_file(), name
    cameras = ["front", "wrist_left", "wrist_right"]
    assert sorted(k for k, f in info["features"].items() if f["dtype"] == "video") == [
        f"observation.images.{c}" for c in cameras
    ]
    eps = pq.read_table(out / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    data = pq.read_table(out / "data/chunk-000/file-000.parquet")
    lengths = [e["length"] for e in eps]
    assert all(55 <= n <= 61 for n in lengths)  # 2 s at 30 fps, give or take the edges
    assert data.num_rows == sum(lengths) == info["total_frames"]
    assert (
        eps[1]["dataset_from_index"] == lengths[0]
        and eps[1]["videos/observation.images.front/from_timestamp"] == lengths[0] / 30
    )
    assert data.column("observation.state").type.list_size == 8
    assert data.column("timestamp").to_pylist()[lengths[0]] == 0.0  # the second episode restarts its clock
    tasks = pq.read_table(out / "meta/tasks.parquet").to_pandas()
    assert tasks.index.name == "task" and list(tasks["task_index"]) == list(range(len(tasks)))
    assert set(eps[0]) >= {
        "stats/observation.state/mean",
        "stats/observation.images.front/std",
        "tasks",
        "length",
    }
    for camera in cameras:
        path = out / f"videos/observation.images.{camera}/chunk-000/file-000.mp4"
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            assert stream.codec_context.name == "h264"
            frames = list(container.decode(stream))
        assert len(frames) == sum(lengths)
        assert [f.key_frame for f in frames if f.pts is not None][
            lengths[0]
        ]  # episode 2 starts on a keyframe

    lerobot_python = os.environ.get("SLUICE_LEROBOT_PYTHON")
    if lerobot_python:  # an interpreter with lerobot installed (a separate venv; it pulls in torch)
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
        done = subprocess.run(
            [lerobot_python, "-c", LEROBOT_LOAD, str(out)],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        n, episodes_seen, shape = done.stdout.split(maxsplit=2)
        assert int(n) == sum(lengths) and int(episodes_seen) == 2 and "48" in shape
