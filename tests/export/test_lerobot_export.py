"""LeRobot v3 export of a dataset version: structure, frame counts, exact timestamps, keyframes."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import av
import numpy as np
import pyarrow.parquet as pq
import pytest
from sluice_world import land, make_world, vendor_from_example
from typer.testing import CliRunner

from pipeline.annotate.inputs import episode_inputs
from pipeline.catalog import make_session_factory, session_scope
from pipeline.catalog.outputs import add_dataset_episodes, create_dataset_version
from pipeline.cli import app as sluice_app
from pipeline.export import ExportError, export_dataset_version
from pipeline.export.stats import value_quantiles
from pipeline.synth import RobotDropConfig, VideoDropConfig, make_robot_drop, make_video_drop

pytestmark = pytest.mark.integration

# Run by the interpreter of SLUICE_LEROBOT_PYTHON: what a lerobot user does with the export. Prints JSON.
LEROBOT_LOAD = """
import json, sys
import numpy as np, torch
from lerobot.configs.types import FeatureType, NormalizationMode
from lerobot.datasets.compute_stats import compute_episode_stats
from lerobot.datasets.lerobot_dataset import LeRobotDataset
from lerobot.datasets.utils import dataset_to_policy_features
from lerobot.processor.converters import batch_to_transition, transition_to_batch
from lerobot.processor.normalize_processor import NormalizerProcessorStep

root = sys.argv[1]
KEYS = ("observation.state", "action", "observation.images.front")
out = {"backends": {}}
loaded = {}
for backend in (None, "pyav"):  # None: the decoder lerobot picks for this platform (torchcodec when it loads)
    ds = LeRobotDataset("sluice/export", root=root, video_backend=backend)
    batches = list(torch.utils.data.DataLoader(ds, batch_size=16, num_workers=2, shuffle=False))
    loaded[ds.video_backend] = batches
    out["backends"][ds.video_backend] = {
        "frames": sum(len(b["index"]) for b in batches),
        "indices": torch.cat([b["index"] for b in batches]).tolist() == list(range(len(ds))),
        "image_shape": list(batches[0]["observation.images.front"].shape[1:]),
    }
(_, one), (_, other) = loaded.items()
cameras = [k for k in ds.meta.features if k.startswith("observation.images.")]
out["decoders_gap"] = max(float((a[k] - b[k]).abs().max()) for a, b in zip(one, other) for k in cameras)
out["default_backend"] = next(iter(loaded))
batches = loaded[out["default_backend"]]
out.update(episodes=ds.meta.total_episodes, splits=ds.meta.info["splits"], robot_type=ds.meta.robot_type)
# each split's episodes as lerobot selects them, named by the source episode the export recorded
out["split_episodes"] = {}
for split, span in ds.meta.info["splits"].items():
    start, stop = map(int, span.split(":"))
    part = LeRobotDataset("sluice/export", root=root, episodes=list(range(start, stop)))
    out["split_episodes"][split] = {
        "sources": [part.meta.episodes[i]["sluice/source_episode_id"] for i in range(start, stop)],
        "frames": len(part),
        "episode_index": sorted(set(np.asarray(part.hf_dataset["episode_index"]).tolist())),
    }
# every normalization mode lerobot has, against its formula applied to the stats as the export wrote them
written = json.load(open(root + "/meta/stats.json"))
BOUNDS = {"MIN_MAX": ("min", "max"), "QUANTILES": ("q01", "q99"), "QUANTILE10": ("q10", "q90")}
features = dataset_to_policy_features(ds.meta.features)
for mode in (NormalizationMode.QUANTILES, NormalizationMode.QUANTILE10, NormalizationMode.MEAN_STD, NormalizationMode.MIN_MAX):
    step = NormalizerProcessorStep.from_lerobot_dataset(
        ds, features, {FeatureType.STATE: mode, FeatureType.ACTION: mode, FeatureType.VISUAL: mode}
    )
    normed = [transition_to_batch(step(batch_to_transition(dict(b)))) for b in batches]
    seen = {}
    for key in KEYS:
        x = torch.cat([b[key] for b in batches])
        y = torch.cat([n[key] for n in normed])
        s = {k: torch.tensor(v, dtype=torch.float32) for k, v in written[key].items()}
        if mode.value == "MEAN_STD":
            want = (x - s["mean"]) / (s["std"] + 1e-8)
        else:
            low, high = (s[b] for b in BOUNDS[mode.value])
            width = torch.where(high == low, torch.tensor(1e-8), high - low)
            want = 2 * (x - low) / width - 1
        seen[key] = {
            "finite": bool(torch.isfinite(y).all()),
            "changed": not torch.equal(x, y),
            "formula_gap": float((y - want).abs().max()),
            "range": [float(y.min()), float(y.max())],
            "inside": float(((y >= -1) & (y <= 1)).float().mean()),
        }
    out[mode.value] = seen
# the stats lerobot computes from episode 0's frames, against the export's stats of that episode
import pandas as pd
episodes = pd.read_parquet(root + "/meta/episodes/chunk-000/file-000.parquet")
data = ds.hf_dataset.with_format("numpy")
state = np.stack(data["observation.state"])[np.asarray(data["episode_index"]) == 0]
theirs = compute_episode_stats({"observation.state": state}, ds.meta.features)["observation.state"]
out["stats_gap"] = {
    k: float(np.max(np.abs(np.stack(episodes[f"stats/observation.state/{k}"][0]) - v)))
    for k, v in theirs.items() if k != "count"
}
out["state_range_width"] = float(np.max(state.max(axis=0) - state.min(axis=0)))
out["stat_keys"] = sorted(ds.meta.stats["observation.state"])
out["state_names"] = ds.meta.features["observation.state"]["names"]
print(json.dumps(out))
"""


def _transcode(world: Any, vendor: Any, episodes: dict[str, int]) -> None:
    """Run the transcode step on the landed episodes: an export reads an episode's transcoded output when it
    has one, as every episode of a `sluice run` does."""
    from pipeline.steps.base import WorkItem
    from pipeline.steps.runner import run_step
    from pipeline.steps.transcode import TranscodeStep

    items = [WorkItem(key=str(e), episode_id=e, source_path=p) for p, e in sorted(episodes.items())]
    summary = run_step(TranscodeStep(vendor, world.ctx), items)
    assert (summary.succeeded, summary.failed) == (len(items), 0)


def _lerobot_reads(out: Path) -> dict[str, Any] | None:
    """What lerobot reads of the export at ``out``, when SLUICE_LEROBOT_PYTHON names an interpreter that has
    lerobot (a separate venv: it pulls in torch; `make test-lerobot`); None without one."""
    lerobot_python = os.environ.get("SLUICE_LEROBOT_PYTHON")
    if not lerobot_python:
        return None
    assert Path(lerobot_python).is_file(), f"SLUICE_LEROBOT_PYTHON={lerobot_python} does not exist"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    done = subprocess.run(
        [lerobot_python, "-c", LEROBOT_LOAD, str(out)], capture_output=True, text=True, env=env, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return seen


def _assert_lerobot_reads(seen: dict[str, Any], frames: int, image_shape: list[int]) -> None:
    """lerobot read every frame with both its decoders, and normalizes with the stats as the export wrote them."""
    # every frame through a 2-worker DataLoader, with lerobot's default decoder and with pyav
    assert seen["default_backend"] == "torchcodec" and set(seen["backends"]) == {"torchcodec", "pyav"}
    for backend, read in seen["backends"].items():
        assert read == {"frames": frames, "indices": True, "image_shape": image_shape}, backend
    assert seen["decoders_gap"] < 0.1  # both decoders return the same frames (pixels in [0, 1])
    # each mode is lerobot's formula over the stats as written, for state, action and a camera
    for mode in ("QUANTILES", "QUANTILE10", "MEAN_STD", "MIN_MAX"):
        for key, normed in seen[mode].items():
            assert normed["finite"] and normed["changed"], (mode, key, normed)
            assert normed["formula_gap"] < 1e-4, (mode, key, normed)
    for key, normed in seen["MIN_MAX"].items():
        low, high = normed["range"]
        assert low >= -1.0 - 1e-5 and high <= 1.0 + 1e-5, (key, normed)
    # QUANTILES maps q01..q99 of the whole dataset to [-1, 1]: nearly every value lands inside
    for key in ("observation.state", "action"):
        assert 0.95 <= seen["QUANTILES"][key]["inside"] < 1.0, seen["QUANTILES"][key]
    # the episode's stats as lerobot computes them: quantiles within two of its 5,000 histogram bins
    gap, width = seen["stats_gap"], seen["state_range_width"]
    assert set(gap) == {"min", "max", "mean", "std", "q01", "q10", "q50", "q90", "q99"}, gap
    # min and max exact; mean and std to float32 rounding (lerobot takes np.mean and np.std of the float32
    # frames, the export sums in float64: 2e-5 on a ROS 2 JointState's efforts, 7 units wide)
    assert gap["min"] == gap["max"] == 0.0, gap
    assert all(gap[k] < 1e-5 * max(1.0, width) for k in ("mean", "std")), gap
    assert all(gap[q] <= 2 * width / 5000 + 1e-6 for q in ("q01", "q10", "q50", "q90", "q99")), gap
    assert set(seen["stat_keys"]) == {*gap, "count"}


def test_an_episode_gone_from_the_store_is_an_export_error_naming_it(
    tmp_path: Path, migrated_database_url: str
) -> None:
    world = make_world(tmp_path / "home", migrated_database_url)
    try:
        drop = tmp_path / "drop"
        make_robot_drop(drop, RobotDropConfig(episodes=1, seconds=1, width=64, height=48))
        (episode,) = land(world, vendor_from_example("acme_robotics", drop), drop, "*.mcap").values()
        with session_scope(make_session_factory(world.ctx.engine)) as session:
            version_id = create_dataset_version(
                session, name="lost", version="v1", spec_hash="s" * 64, spec={}
            )
            add_dataset_episodes(session, version_id, [(episode, "train")])
        uri = episode_inputs(world.ctx.engine, [episode])[episode].uri
        Path(uri.removeprefix("file://")).unlink()
        out = tmp_path / "export"
        with pytest.raises(ExportError, match=f"episode {episode} of lost@v1 cannot be read from {uri}"):
            export_dataset_version(world.ctx.engine, "lost", "v1", out)
        assert not out.exists()
    finally:
        world.close()


JOINTS = [f"joint_{i}" for i in range(1, 8)] + ["gripper"]


def test_a_ros2_fleet_exports_its_contracts_state_and_actions(
    tmp_path: Path, migrated_database_url: str
) -> None:
    """A ROS 2 fleet's episodes (JPEG CompressedImage cameras; JointState, PoseStamped, Float64MultiArray,
    TwistStamped and a vendor's own type in CDR), transcoded as `sluice run` does, export with every state
    and action topic of kestrel_ros2's contract, named by joint and axis; the raw logs are refused by name."""
    from mcap.reader import make_reader

    world = make_world(tmp_path / "home", migrated_database_url)
    try:
        drop = tmp_path / "drop"
        make_robot_drop(
            drop, RobotDropConfig(episodes=2, seconds=2, width=320, height=240, flavor="ros2-jpeg")
        )
        vendor = vendor_from_example("kestrel_ros2", drop)
        episodes = sorted(land(world, vendor, drop, "*.mcap").values())
        with session_scope(make_session_factory(world.ctx.engine)) as session:
            version_id = create_dataset_version(
                session, name="fleet", version="v1", spec_hash="s" * 64, spec={}
            )
            add_dataset_episodes(session, version_id, [(e, "train") for e in episodes])
        with pytest.raises(ExportError) as refused:  # raw: JPEG cameras the export does not decode
            export_dataset_version(world.ctx.engine, "fleet", "v1", tmp_path / "raw")
        said = str(refused.value)
        assert f"episode {episodes[0]} of fleet@v1 (vendor kestrel_ros2) cannot be exported" in said
        assert "camera /cam/front/image_raw/compressed is sensor_msgs/msg/CompressedImage (cdr)" in said
        assert "the transcode step makes it of every camera family: run it first" in said
        assert not (tmp_path / "raw").exists()

        _transcode(world, vendor, {str(e): e for e in episodes})
        out = tmp_path / "export"
        # as a user runs it: the command line, which reads the catalog from the environment
        env = {"SLUICE_HOME": str(world.settings.home), "SLUICE_DATABASE_URL": world.settings.database_url}
        done = CliRunner().invoke(
            sluice_app,
            ["export", "lerobot", "fleet@v1", str(out), "--robot-type", "kestrel_arm", "--json"],
            env=env,
            catch_exceptions=False,
        )
        transcoded = episode_inputs(world.ctx.engine, episodes)
    finally:
        world.close()

    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert report["ok"] and report["episodes"] == 2 and all(report["checks"].values()), report
    info = json.loads((out / "meta/info.json").read_text())
    features = info["features"]
    assert features["observation.state"]["names"] == [
        *(f"{j}.{field}" for field in ("position", "velocity", "effort") for j in JOINTS),
        *(f"ee_pose.position.{a}" for a in "xyz"),
        *(f"ee_pose.orientation.{a}" for a in "xyzw"),
    ]
    assert features["action"]["names"] == [
        *(f"joint_commands.data.{i}" for i in range(8)),
        *(f"ee_twist.{v}.{a}" for v in ("linear", "angular") for a in "xyz"),
        "gripper_command.position",
        "gripper_command.max_effort",
    ]
    assert sorted(k for k, f in features.items() if f["dtype"] == "video") == [
        f"observation.images.{c}" for c in ("front", "wrist_left", "wrist_right")
    ]
    assert features["observation.images.front"]["shape"] == [240, 320, 3]
    # each frame's state is the resampled JointState at or before the frame, never one after it
    data = pq.read_table(out / "data/chunk-000/file-000.parquet")
    state = np.stack(data.column("observation.state").to_numpy(zero_copy_only=False))
    episode_index = np.asarray(data.column("episode_index"))
    for index, episode in enumerate(episodes):
        with open(transcoded[episode].uri.removeprefix("file://"), "rb") as fh:
            resampled = [
                json.loads(m.data)["position"]
                for _, _, m in make_reader(fh).iter_messages(topics=["/robot/joint_states/resampled"])
            ]
        rows = np.asarray(resampled, dtype=np.float32)
        mine = state[episode_index == index][:, : len(JOINTS)]
        at = [int(np.flatnonzero((rows == row).all(axis=1))[0]) for row in mine]  # IndexError: not a record
        assert at == sorted(at) and len(set(at)) > len(at) // 2, at
    seen = _lerobot_reads(out)
    if seen is not None:
        lengths = [
            e["length"] for e in pq.read_table(out / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
        ]
        _assert_lerobot_reads(seen, sum(lengths), [3, 240, 320])
        assert seen["state_names"] == features["observation.state"]["names"]
        assert seen["splits"] == {"train": "0:2"} and seen["robot_type"] == "kestrel_arm"


def test_an_episode_without_an_optional_topic_exports_alone_but_not_beside_one_with_it(
    tmp_path: Path, migrated_database_url: str
) -> None:
    """kestrel_ros2 with /robot/joint_commands optional: an episode without it is accepted and exports with
    the other action topics; beside an episode that has it, the two would put other values in the same
    action columns, and the export names the difference instead."""
    drop = tmp_path / "drop"
    make_robot_drop(
        drop,
        RobotDropConfig(
            episodes=1, seconds=2, width=320, height=240, flavor="ros2-jpeg", defects=("missing_topic",)
        ),
    )
    topics = vendor_from_example("kestrel_ros2", drop).topics.model_dump(mode="json")
    assert topics["actions"][0]["topic"] == "/robot/joint_commands"
    topics["actions"][0]["required"] = False
    vendor = vendor_from_example("kestrel_ros2", drop, topics=topics)
    world = make_world(tmp_path / "home", migrated_database_url)
    try:
        landed = land(world, vendor, drop, "*.mcap")
        _transcode(world, vendor, landed)
        manifest = json.loads((drop / "drop.json").read_text())["files"]
        (defective,) = [f["path"] for f in manifest if f["defect"] == "missing_topic"]
        assert len(landed) == 2, landed  # the episode without the optional topic is accepted too
        without = next(e for p, e in landed.items() if p.endswith(defective))
        (full,) = set(landed.values()) - {without}
        with session_scope(make_session_factory(world.ctx.engine)) as session:
            for name, members in (("both", [full, without]), ("alone", [without])):
                version_id = create_dataset_version(
                    session, name=name, version="v1", spec_hash=name * 64, spec={}
                )
                add_dataset_episodes(session, version_id, [(e, "train") for e in members])
        with pytest.raises(ExportError) as refused:
            export_dataset_version(world.ctx.engine, "both", "v1", tmp_path / "both")
        assert (
            f"episode {without} cannot join the export: its action has other fields than episode {full}'s (8 against 16"
            in str(refused.value)
        )
        assert "joint_commands.data.0" in str(refused.value) and not (tmp_path / "both").exists()
        report = export_dataset_version(world.ctx.engine, "alone", "v1", tmp_path / "alone")
    finally:
        world.close()
    assert report.ok, report.checks
    info = json.loads((tmp_path / "alone" / "meta/info.json").read_text())
    assert [n.split(".")[0] for n in info["features"]["action"]["names"]] == ["ee_twist"] * 6 + [
        "gripper_command"
    ] * 2


@pytest.mark.parametrize("transcoded", [False, True], ids=["raw", "transcoded"])
def test_export_matches_v3_and_counts(tmp_path: Path, migrated_database_url: str, transcoded: bool) -> None:
    world = make_world(tmp_path / "home", migrated_database_url)
    try:
        drop = tmp_path / "drop"
        make_robot_drop(drop, RobotDropConfig(episodes=2, seconds=2, width=64, height=48))
        vendor = vendor_from_example("acme_robotics", drop)
        episodes = land(world, vendor, drop, "*.mcap")
        if transcoded:
            _transcode(world, vendor, episodes)
        # a video clip in the version too: left out (one feature set per dataset), and said
        clips = tmp_path / "clips"
        make_video_drop(clips, VideoDropConfig(clips=1, seconds=2, width=320, height=240, sidecars=False))
        (clip,) = land(world, vendor_from_example("northwind_video", clips), clips, "*.mp4").values()
        with session_scope(make_session_factory(world.ctx.engine)) as session:
            version_id = create_dataset_version(
                session, name="pick", version="v1", spec_hash="s" * 64, spec={}
            )
            first, second = sorted(episodes.values())
            add_dataset_episodes(session, version_id, [(second, "val"), (first, "train"), (clip, "eval")])
        out = tmp_path / "export"
        told: list[tuple[int, int]] = []
        report = export_dataset_version(
            world.ctx.engine,
            "pick",
            "v1",
            out,
            robot_type="acme_bimanual",
            progress=lambda done, total: told.append((done, total)),
        )
        with pytest.raises(ExportError, match="exists"):
            export_dataset_version(world.ctx.engine, "pick", "v1", out)
    finally:
        world.close()

    assert report.ok, report.checks
    assert [s["episode_id"] for s in report.skipped] == [clip]
    assert report.warnings == [
        "1 of 3 episodes of pick@v1 are video clips, left out: the export is not the whole version",
        "split(s) eval of the version have no episode in the export",
    ]
    assert told == [(0, 2), (1, 2), (2, 2)]  # before each episode is read, and when both are written
    assert [
        e["sluice/source_episode_id"]
        for e in pq.read_table(out / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    ] == [first, second]
    stats = json.loads((out / "meta/stats.json").read_text())
    for feature in ("observation.state", "action", "observation.images.front"):
        assert set(stats[feature]) == {
            "min",
            "max",
            "mean",
            "std",
            "count",
            "q01",
            "q10",
            "q50",
            "q90",
            "q99",
        }
    # the dataset's quantiles are those of every frame's values (not a mean of the episodes' quantiles)
    frames_table = pq.read_table(out / "data/chunk-000/file-000.parquet")
    for key in ("observation.state", "action"):
        values = np.stack(frames_table.column(key).to_numpy(zero_copy_only=False)).astype(np.float64)
        for name, want in value_quantiles(values).items():
            np.testing.assert_array_equal(stats[key][name], want)
    assert report.episodes == 2 and len(report.checks) == 4 + 3 * 3
    info = json.loads((out / "meta/info.json").read_text())
    assert info["codebase_version"] == "v3.0" and info["fps"] == 30
    assert info["splits"] == {"train": "0:1", "val": "1:2"} and info["robot_type"] == "acme_bimanual"
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
    # the contract's state topic, every numeric field of its JSON messages: 7 positions, velocities and
    # efforts, and the gripper
    assert info["features"]["observation.state"]["names"] == [
        *(f"joint_states.{field}.{i}" for field in ("position", "velocity", "effort") for i in range(7)),
        "joint_states.gripper",
    ]
    assert info["features"]["action"]["names"] == [
        *(f"action.joint_targets.{i}" for i in range(7)),
        "action.gripper",
    ]
    assert data.column("observation.state").type.list_size == 22
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

    seen = _lerobot_reads(out)
    if seen is not None:
        _assert_lerobot_reads(seen, sum(lengths), [3, 48, 64])
        assert seen["episodes"] == 2 and seen["robot_type"] == "acme_bimanual"
        # each split, as lerobot selects its episodes, holds the episodes the manifest gives that split
        assert seen["splits"] == info["splits"] == {"train": "0:1", "val": "1:2"}
        assert seen["split_episodes"] == {
            "train": {"sources": [first], "frames": lengths[0], "episode_index": [0]},
            "val": {"sources": [second], "frames": lengths[1], "episode_index": [1]},
        }
        assert seen["state_names"] == info["features"]["observation.state"]["names"]
