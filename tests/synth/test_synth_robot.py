"""Clean synthetic robot logs read back through the stock ``mcap`` readers with CRCs validated."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from foxglove_schemas_protobuf.CameraCalibration_pb2 import CameraCalibration
from foxglove_schemas_protobuf.CompressedVideo_pb2 import CompressedVideo
from mcap.reader import make_reader
from synth_helpers import decode_annexb, read_indexed, read_linear

from pipeline.enums import FileState
from pipeline.media.framecode import read_frame_code
from pipeline.synth import DropManifest, RobotDropConfig, layout, make_robot_drop, read_manifest
from pipeline.synth.drop import sha256_file

NS = 1_000_000_000


def _clean(drop: tuple[Path, DropManifest]) -> list[Path]:
    root, manifest = drop
    files = [root / f.path for f in manifest.by_defect(None)]
    assert len(files) == 2
    return files


def test_clean_episodes_pass_both_crc_validated_reads(robot_drop) -> None:
    for path in _clean(robot_drop):
        linear = read_linear(path)
        assert read_indexed(path) == len(linear.messages) > 0
        with open(path, "rb") as fh:
            summary = make_reader(fh, validate_crcs=True).get_summary()
        assert summary is not None and len(summary.chunk_indexes) > 1
        assert all(c.compression == "zstd" for c in summary.chunk_indexes)


def test_topics_schemas_and_encodings(robot_drop) -> None:
    linear = read_linear(_clean(robot_drop)[0])
    assert linear.topics == set(layout.REQUIRED_TOPICS) | set(layout.CALIBRATION_TOPICS)
    for channel in linear.channels.values():
        schema = linear.schemas[channel.schema_id]
        if channel.topic in layout.CAMERA_TOPICS:
            assert (schema.name, schema.encoding, channel.message_encoding) == (
                "foxglove.CompressedVideo",
                "protobuf",
                "protobuf",
            )
        elif channel.topic in layout.CALIBRATION_TOPICS:
            assert schema.name == "foxglove.CameraCalibration"
        else:
            expected = {layout.JOINT_STATE_TOPIC: "sluice.JointState", layout.ACTION_TOPIC: "sluice.Action"}
            assert (schema.name, schema.encoding, channel.message_encoding) == (
                expected[channel.topic],
                "jsonschema",
                "json",
            )
            assert json.loads(schema.data)["title"] == expected[channel.topic]


@pytest.mark.parametrize(
    ("topic", "rate_hz"),
    [
        (layout.camera_topic("front"), 30.0),
        (layout.camera_topic("wrist_right"), 30.0),
        (layout.JOINT_STATE_TOPIC, 200.0),
        (layout.ACTION_TOPIC, 50.0),
    ],
)
def test_rates_stamps_and_jittered_log_times(robot_drop, topic: str, rate_hz: float) -> None:
    messages = read_linear(_clean(robot_drop)[0]).topic(topic)
    assert len(messages) == int(1.5 * rate_hz)
    if topic in layout.CAMERA_TOPICS:
        stamps = []
        for m in messages:
            ts = CompressedVideo.FromString(m.data).timestamp
            stamps.append(ts.seconds * NS + ts.nanos)
    else:
        stamps = [json.loads(m.data)["stamp_ns"] for m in messages]
    logs = [m.log_time for m in messages]
    periods = [b - a for a, b in itertools.pairwise(stamps)]
    assert min(periods) > 0.9 * NS / rate_hz and max(periods) < 1.1 * NS / rate_hz
    delays = [log - stamp for log, stamp in zip(logs, stamps, strict=True)]
    assert min(delays) > 0 and max(delays) < 20_000_000  # transport delay: positive, a few ms
    assert len(set(delays)) > len(delays) // 2  # jittered, not a constant offset
    assert logs == sorted(logs)  # clean episodes: monotonic per topic
    # every ns is reachable: stamps once came out of one float64 at ~1.7e18 ns, all multiples of 256
    assert len({s % 256 for s in stamps}) > len(stamps) // 4
    assert [m.sequence for m in messages] == list(range(len(messages)))
    assert all(m.publish_time == m.log_time for m in messages)


def test_payloads_follow_the_layout(robot_drop) -> None:
    linear = read_linear(_clean(robot_drop)[0])
    state = json.loads(linear.topic(layout.JOINT_STATE_TOPIC)[10].data)
    assert set(state) == {"stamp_ns", "position", "velocity", "effort", "gripper"}
    assert all(len(state[k]) == 7 for k in ("position", "velocity", "effort"))
    action = json.loads(linear.topic(layout.ACTION_TOPIC)[10].data)
    assert set(action) == {"stamp_ns", "joint_targets", "gripper"} and len(action["joint_targets"]) == 7


def test_frames_are_annexb_h264_with_the_index_drawn_in(robot_drop) -> None:
    linear = read_linear(_clean(robot_drop)[0])
    for camera_id, camera in enumerate(layout.CAMERA_NAMES):
        messages = linear.topic(layout.camera_topic(camera))
        videos = [CompressedVideo.FromString(m.data) for m in messages]
        assert {v.format for v in videos} == {"h264"} and {v.frame_id for v in videos} == {camera}
        assert all(v.data.startswith(b"\x00\x00\x00\x01") for v in videos)
        # Every keyframe message carries its SPS (NAL type 7): one GOP per second at 30 Hz.
        with_sps = [i for i, v in enumerate(videos) if b"\x00\x00\x00\x01\x67" in v.data]
        assert with_sps == [0, 30]
        frames = decode_annexb([v.data for v in videos])
        assert len(frames) == len(messages)  # one access unit per message, no B-frame delay
        codes = [read_frame_code(f) for f in frames]
        assert [c.frame_index for c in codes] == [m.sequence for m in messages]
        assert {c.camera_id for c in codes} == {camera_id}


def test_metadata_and_calibrations(robot_drop) -> None:
    root, manifest = robot_drop
    calibrations = {c["calibration_id"]: c for c in json.loads((root / layout.CALIBRATIONS_FILE).read_text())}
    for made in manifest.by_defect(None):
        with open(root / made.path, "rb") as fh:
            reader = make_reader(fh, validate_crcs=True)
            (metadata,) = [m for m in reader.iter_metadata() if m.name == layout.EPISODE_METADATA_NAME]
            calib = [
                CameraCalibration.FromString(m.data)
                for _, _, m in reader.iter_messages(topics=list(layout.CALIBRATION_TOPICS))
            ]
        assert set(metadata.metadata) == set(layout.EPISODE_METADATA_KEYS)
        assert metadata.metadata["episode_id"] == made.episode_id == Path(made.path).stem
        assert metadata.metadata["robot_id"] == made.robot_id and metadata.metadata["task"]
        window = calibrations[made.calibration_id]
        assert window["robot_id"] == made.robot_id
        assert window["valid_from_ns"] <= made.start_ns < made.end_ns <= window["valid_to_ns"]
        assert sorted(c.frame_id for c in calib) == sorted(layout.CAMERA_NAMES)
        for c in calib:
            intrinsics = window["cameras"][c.frame_id]
            assert (c.K[0], c.K[2], c.width) == (intrinsics["fx"], intrinsics["cx"], intrinsics["width"])


def test_sessions_and_robots(robot_drop) -> None:
    _, manifest = robot_drop
    assert {f.robot_id for f in manifest.files} == {"rb01", "rb02"}
    sessions = {(f.robot_id, f.session_id) for f in manifest.files}
    assert all(session.startswith(robot) for robot, session in sessions)
    per_session = {}
    for f in manifest.files:
        per_session.setdefault(f.session_id, []).append(f)
    assert max(len(v) for v in per_session.values()) == 3  # episodes_per_session
    for files in per_session.values():  # episodes of a session never overlap
        spans = sorted((f.start_ns, f.end_ns) for f in files if f.start_ns)
        assert all(a[1] < b[0] for a, b in itertools.pairwise(spans))


def test_manifest_is_an_oracle_that_vendor_globs_skip(robot_drop) -> None:
    root, manifest = robot_drop
    assert read_manifest(root) == manifest
    listed = {f.path for f in manifest.files}
    assert {p.relative_to(root).as_posix() for p in root.glob("**/*.mcap")} == listed
    for made in manifest.files:
        assert sha256_file(root / made.path) == made.sha256
        assert (root / made.path).stat().st_size == made.size_bytes
    assert manifest.total_bytes == sum(f.size_bytes for f in manifest.files)
    assert {f.expected_state for f in manifest.by_defect(None)} == {FileState.ACCEPTED}


def _hashes(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): sha256_file(p) for p in sorted(root.rglob("*")) if p.is_file()}


def test_same_seed_same_bytes_in_one_process_or_two(tmp_path: Path) -> None:
    config = RobotDropConfig(
        episodes=2, seconds=0.5, width=64, height=48, defects=("dropped_frames", "duplicate")
    )
    make_robot_drop(tmp_path / "a", config, jobs=1)
    make_robot_drop(tmp_path / "b", config, jobs=2)
    make_robot_drop(tmp_path / "c", config.model_copy(update={"seed": 1}), jobs=1)
    a, b, c = _hashes(tmp_path / "a"), _hashes(tmp_path / "b"), _hashes(tmp_path / "c")
    assert len(a) == 6  # 4 episodes, calibrations.json, drop.json
    assert a == b
    assert set(a) == set(c) and all(a[k] != c[k] for k in a if k.endswith(".mcap"))


def test_size_target_adds_clean_episodes(tmp_path: Path) -> None:
    config = RobotDropConfig(episodes=1, seconds=0.5, width=64, height=48, defects=("zero_bytes",))
    one = make_robot_drop(tmp_path / "one", config)
    target = 3 * one.total_bytes + 1
    grown = make_robot_drop(tmp_path / "grown", config.model_copy(update={"target_size_bytes": target}))
    assert grown.total_bytes >= target
    assert len(grown.by_defect(None)) >= 4 and len(grown.by_defect("zero_bytes")) == 1
    # The first episodes are the same bytes either way: size only decides how many there are.
    assert grown.files[0].sha256 == one.files[0].sha256


def test_refuses_a_non_empty_output(tmp_path: Path) -> None:
    (tmp_path / "x").write_text("")
    from pipeline.synth.generate import SynthError

    with pytest.raises(SynthError, match="not an empty folder"):
        make_robot_drop(tmp_path, RobotDropConfig(episodes=1, seconds=0.5, width=64, height=48))
