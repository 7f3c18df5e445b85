"""Every camera and state family through the transcode and the post-gate, step by step: the output's
frames decode, and each drawn frame index comes back at the stamp its source message carried.

The scheduled run of the same families (``sluice run``) is in ``test_families_scheduled.py``; this module
covers what a run would be too slow for (every raw pixel encoding) and reads each output in detail.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from family_helpers import (
    CAMERAS,
    contract,
    output_frames,
    source_stamps,
    with_absent_camera,
    write_flavored,
)
from mcap.reader import make_reader

from pipeline.config import QualityPost, StampSource, TranscodeOptions
from pipeline.config.contract import TopicContract
from pipeline.enums import ReasonCode
from pipeline.synth.encode import RAW_ENCODINGS
from pipeline.synth.flavors import FLAVOR_NAMES, flavor
from pipeline.synth.robot import EpisodeTweaks
from pipeline.transcode import Provenance, RobotTranscodeConfig, transcode_episode
from pipeline.transcode.errors import TranscodeInputError
from pipeline.transcode.layout import NAMES_KEY, RESAMPLED_TIME_KEY, resampled_topic
from pipeline.transcode.postgate import check_episode

PROVENANCE = Provenance("ab" * 32, "cd" * 32, "test")


def _config(name: str, **kwargs: object) -> RobotTranscodeConfig:
    options = TranscodeOptions.model_validate({"profile": "vla"})
    return RobotTranscodeConfig(options, contract(name, **kwargs), StampSource.HARDWARE)  # type: ignore[arg-type]


def _transcode(
    tmp_path: Path, name: str, pixel_encoding: str = "rgb8"
) -> tuple[Path, Path, RobotTranscodeConfig]:
    source = write_flavored(tmp_path / "source.mcap", name, pixel_encoding=pixel_encoding)
    config = _config(name)
    out = tmp_path / "out" / "episode.mcap"
    transcode_episode(source, out, config, PROVENANCE)
    return source, out, config


def _assert_frames_come_back_at_their_stamps(source: Path, out: Path, name: str) -> None:
    shape = flavor(name)
    for camera in CAMERAS:
        topic = shape.camera_topic(camera)
        stamps = source_stamps(source, topic)
        frames = output_frames(out, topic)
        assert len(frames) == len(stamps), camera
        assert [stamp for stamp, index in frames] == [stamps[index] for _, index in frames], camera
        assert sorted(index for _, index in frames) == list(range(len(stamps)))


@pytest.mark.parametrize("name", FLAVOR_NAMES)
def test_each_camera_family_transcodes_with_every_frame_at_its_source_stamp(
    tmp_path: Path, name: str
) -> None:
    source, out, config = _transcode(tmp_path, name)
    _assert_frames_come_back_at_their_stamps(source, out, name)
    failed = [(c.name, c.detail) for c in check_episode(out, source, config, QualityPost()) if not c.passed]
    assert failed == []


@pytest.mark.parametrize("encoding", sorted(RAW_ENCODINGS))
def test_every_raw_pixel_encoding_transcodes(tmp_path: Path, encoding: str) -> None:
    source, out, config = _transcode(tmp_path, "ros2-raw", encoding)
    _assert_frames_come_back_at_their_stamps(source, out, "ros2-raw")
    psnr = next(c for c in check_episode(out, source, config, QualityPost()) if c.name == "psnr")
    assert psnr.passed, psnr.detail


def _resampled(out: Path) -> dict[str, tuple[dict[str, str], list[dict]]]:
    found: dict[str, tuple[dict[str, str], list[dict]]] = {}
    with open(out, "rb") as fh:
        for _, channel, message in make_reader(fh).iter_messages(log_time_order=True):
            if channel.topic.endswith("/resampled"):
                _, records = found.setdefault(channel.topic, (dict(channel.metadata), []))
                record = json.loads(message.data)
                time = record[RESAMPLED_TIME_KEY]
                assert time["sec"] * 1_000_000_000 + time["nsec"] == message.log_time
                records.append(record)
    return found


def test_ros2_state_and_action_families_are_resampled_by_their_own_fields(tmp_path: Path) -> None:
    _, out, _ = _transcode(tmp_path, "ros2-jpeg")
    series = _resampled(out)
    meta, joints = series[resampled_topic("/robot/joint_states")]
    assert json.loads(meta[NAMES_KEY]) == [*(f"joint_{k}" for k in range(1, 8)), "gripper"]
    assert {"position", "velocity", "effort", "stamp_ns"} <= set(joints[0])
    assert len(joints[0]["position"]) == 8
    _, pose = series[resampled_topic("/robot/ee_pose")]
    assert len(pose[0]["position"]) == 3 and len(pose[0]["orientation"]) == 4
    _, commands = series[resampled_topic("/robot/joint_commands")]
    assert len(commands[0]["data"]) == 8
    _, twist = series[resampled_topic("/robot/ee_twist")]
    assert set(twist[0]) >= {"linear", "angular"}
    _, gripper = series[resampled_topic("/robot/gripper_command")]
    assert set(gripper[0]) >= {"position", "max_effort"} and gripper[0]["max_effort"] == 40.0


def test_protobuf_state_is_resampled_by_its_numeric_fields(tmp_path: Path) -> None:
    _, out, _ = _transcode(tmp_path, "foxglove-jpeg")
    _, pose = _resampled(out)[resampled_topic("/robot/ee_pose")]
    assert {"pose.position.x", "pose.orientation.w"} <= set(pose[0])


def test_joints_listed_in_another_order_are_put_back_in_the_first_messages_order(tmp_path: Path) -> None:
    """A JointState publisher may list the joints in any order: values follow their names."""
    import dataclasses

    from mcap_ros2.decoder import DecoderFactory

    from pipeline.mcaplog.rewrite import rewrite_with_stock_writer
    from pipeline.synth import ros2 as msgs

    source = write_flavored(tmp_path / "source.mcap", "ros2-jpeg")
    decode = None
    seen = {"n": 0}

    def reverse(channel, message):  # type: ignore[no-untyped-def]
        nonlocal decode
        if channel.topic != "/robot/joint_states":
            return [message]
        seen["n"] += 1
        if seen["n"] % 2:
            return [message]
        if decode is None:
            from mcap.records import Schema

            decode = DecoderFactory().decoder_for(
                "cdr",
                Schema(
                    id=1,
                    name=msgs.JOINT_STATE,
                    encoding="ros2msg",
                    data=msgs.MSGDEFS[msgs.JOINT_STATE].encode(),
                ),
            )
        js = decode(message.data)
        fields = {
            "header": {
                "stamp": {"sec": js.header.stamp.sec, "nanosec": js.header.stamp.nanosec},
                "frame_id": "",
            },
            "name": js.name[::-1],
            "position": js.position[::-1],
            "velocity": js.velocity[::-1],
            "effort": js.effort[::-1],
        }
        return [dataclasses.replace(message, data=msgs.encoder(msgs.JOINT_STATE)(fields))]

    shuffled = rewrite_with_stock_writer(
        source, tmp_path / "reversed.mcap", edit=reverse, log_time_order=False
    )
    config = _config("ros2-jpeg")
    a = tmp_path / "a" / "episode.mcap"
    b = tmp_path / "b" / "episode.mcap"
    transcode_episode(source, a, config, PROVENANCE)
    transcode_episode(shuffled, b, config, PROVENANCE)
    topic = resampled_topic("/robot/joint_states")
    assert _resampled(a)[topic][1] == _resampled(b)[topic][1]


def _positions_only(name: str) -> RobotTranscodeConfig:
    """The flavor's contract with ``fields: [position]`` on its JointState topic."""
    topics = contract(name).model_dump(mode="json")
    assert topics["state"][0]["topic"] == "/robot/joint_states"
    topics["state"][0]["fields"] = ["position"]
    options = TranscodeOptions.model_validate({"profile": "vla"})
    return RobotTranscodeConfig(options, TopicContract.model_validate(topics), StampSource.HARDWARE)


@pytest.mark.parametrize("picked", [False, True], ids=["own fields", "fields: [position]"])
def test_renamed_joints_are_schema_drift(tmp_path: Path, picked: bool) -> None:
    """Also when the contract picks the JointState's fields: they were not keyed by name then, and a joint
    renamed mid-episode passed, its position column silently another joint's."""
    source = write_flavored(tmp_path / "s.mcap", "ros2-jpeg", tweaks=EpisodeTweaks(rename_joints_at_s=0.6))
    config = _positions_only("ros2-jpeg") if picked else _config("ros2-jpeg")
    with pytest.raises(TranscodeInputError, match="gone: joint_3; new: elbow") as caught:
        transcode_episode(source, tmp_path / "out.mcap", config, PROVENANCE)
    assert caught.value.code is ReasonCode.SCHEMA_DRIFT


def test_picked_joint_state_fields_keep_their_joint_names(tmp_path: Path) -> None:
    source = write_flavored(tmp_path / "s.mcap", "ros2-jpeg")
    out = tmp_path / "out" / "episode.mcap"
    transcode_episode(source, out, _positions_only("ros2-jpeg"), PROVENANCE)
    metadata, records = _resampled(out)[resampled_topic("/robot/joint_states")]
    assert json.loads(metadata[NAMES_KEY])[:2] == ["joint_1", "joint_2"]
    assert set(records[0]) == {"position", RESAMPLED_TIME_KEY, "stamp_ns"}


@pytest.mark.parametrize("name", ["ros2-jpeg", "ros2-raw"])
def test_a_corrupt_picture_is_a_decode_error_naming_its_frame(tmp_path: Path, name: str) -> None:
    tweaks = EpisodeTweaks(corrupt_image_camera="front", corrupt_image_frame=17)
    source = write_flavored(tmp_path / "s.mcap", name, tweaks=tweaks)
    with pytest.raises(TranscodeInputError, match="frame 17") as caught:
        transcode_episode(source, tmp_path / "out.mcap", _config(name), PROVENANCE)
    assert caught.value.code is ReasonCode.DECODE_ERROR


def test_an_optional_camera_absent_from_the_episode_is_left_out(tmp_path: Path) -> None:
    source = write_flavored(tmp_path / "s.mcap", "ros2-jpeg")
    options = TranscodeOptions.model_validate({"profile": "vla"})
    optional = RobotTranscodeConfig(
        options, with_absent_camera("ros2-jpeg", required=False), StampSource.HARDWARE
    )
    result = transcode_episode(source, tmp_path / "out.mcap", optional, PROVENANCE)
    assert [c.name for c in result.cameras] == list(CAMERAS)
    required = RobotTranscodeConfig(
        options, with_absent_camera("ros2-jpeg", required=True), StampSource.HARDWARE
    )
    with pytest.raises(TranscodeInputError, match="no messages on /cam/rear") as caught:
        transcode_episode(source, tmp_path / "out2.mcap", required, PROVENANCE)
    assert caught.value.code is ReasonCode.MISSING_REQUIRED_TOPIC
