"""The pre-gate on every flavor: clean episodes pass, and each defect ends in the state and reason
``pipeline.synth.defects`` expects (a corrupt JPEG mid-stream, a raw Image with a wrong step and renamed
joints among them), with the frame and byte offset named; unknown codecs and size changes are refused."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import pytest
from family_helpers import flavor_contract, write_flavored
from foxglove_schemas_protobuf.CompressedImage_pb2 import CompressedImage
from foxglove_schemas_protobuf.CompressedVideo_pb2 import CompressedVideo
from mcap.records import Channel, Message

from pipeline.config import VendorConfig, load_vendor
from pipeline.enums import FileState, ReasonCode
from pipeline.mcaplog import read_log
from pipeline.mcaplog.rewrite import rewrite_with_stock_writer
from pipeline.quality.pregate import check_mcap, decide
from pipeline.steps.quality_pre import read_log_options
from pipeline.synth import RobotDefect, RobotDropConfig, make_robot_drop
from pipeline.synth.defects import defect_applies
from pipeline.synth.encode import StillEncoder
from pipeline.synth.flavors import FLAVOR_NAMES
from pipeline.synth.scene import SceneGenerator, yuv420p_buffer

REPO = Path(__file__).resolve().parents[2]
KESTREL = REPO / "dags" / "vendors" / "kestrel_ros2.yaml"


def vendor_for(flavor: str, **camera: Any) -> VendorConfig:
    """The ROS 2 example vendor with the flavor's topics (cameras changed by ``camera``)."""
    data = copy.deepcopy(load_vendor(KESTREL).model_dump(mode="json"))
    topics = flavor_contract(flavor)
    for entry in topics["cameras"]:
        entry.update(camera)
    data["topics"].update(topics)
    data["topics"]["message_encodings"] = ["cdr", "json", "protobuf"]
    data["topics"]["schema_encodings"] = ["jsonschema", "protobuf", "ros2msg"]
    return VendorConfig.model_validate(data)


def verdict(path: Path, vendor: VendorConfig) -> Any:
    return decide(check_mcap(read_log(path, **read_log_options(vendor)), vendor, calibration_id=1))


@pytest.mark.parametrize("flavor", FLAVOR_NAMES)
def test_each_defect_ends_in_its_expected_state(tmp_path: Path, flavor: str) -> None:
    defects = tuple(
        d
        for d in RobotDefect
        if defect_applies(d, flavor) and d not in (RobotDefect.DUPLICATE, RobotDefect.ZERO_BYTES)
    )
    config = RobotDropConfig(episodes=1, seconds=1.5, width=128, height=96, flavor=flavor, defects=defects)
    manifest = make_robot_drop(tmp_path / "drop", config)
    vendor = vendor_for(flavor)
    wrong = {}
    for made in manifest.files:
        got = verdict(tmp_path / "drop" / made.path, vendor)
        if got.state is not made.expected_state or not set(made.expected_reasons) <= set(got.reasons):
            wrong[made.defect] = (got.state.value, [r.value for r in got.reasons], got.detail)
    assert wrong == {}


def test_a_corrupt_jpeg_mid_stream_is_named_by_frame_and_offset(tmp_path: Path) -> None:
    from pipeline.synth.robot import EpisodeTweaks

    tweaks = EpisodeTweaks(corrupt_image_camera="front", corrupt_image_frame=22)
    path = write_flavored(tmp_path / "e.mcap", "ros2-jpeg", seconds=1.5, tweaks=tweaks)
    got = verdict(path, vendor_for("ros2-jpeg"))
    assert (got.state, got.reasons) == (FileState.QUARANTINED, (ReasonCode.DECODE_ERROR,))
    assert "/cam/front/image_raw/compressed: frame 22: jpeg ends at byte" in got.detail
    assert "inside the entropy-coded data" in got.detail and "byte offset" not in got.detail
    assert "of the payload" in got.detail


def test_a_raw_image_with_a_wrong_step_and_renamed_joints(tmp_path: Path) -> None:
    from pipeline.synth.robot import EpisodeTweaks

    step = write_flavored(
        tmp_path / "s.mcap", "ros2-raw", seconds=1.5,
        tweaks=EpisodeTweaks(corrupt_image_camera="wrist_left", corrupt_image_frame=10),
    )  # fmt: skip
    got = verdict(step, vendor_for("ros2-raw"))
    assert (got.state, got.reasons) == (FileState.QUARANTINED, (ReasonCode.DECODE_ERROR,))
    assert "frame 10: step 383 bytes is shorter than a row of 128 rgb8 pixels (384 bytes)" in got.detail
    renamed = write_flavored(
        tmp_path / "j.mcap", "ros2-raw", seconds=1.5, tweaks=EpisodeTweaks(rename_joints_at_s=0.75)
    )
    got = verdict(renamed, vendor_for("ros2-raw"))
    assert (got.state, got.reasons) == (FileState.QUARANTINED, (ReasonCode.SCHEMA_DRIFT,))
    assert "/robot/joint_states: message 150 names other entries" in got.detail


def test_h265_video_is_accepted_where_the_contract_allows_it_and_refused_where_not(tmp_path: Path) -> None:
    path = write_flavored(tmp_path / "e.mcap", "ros2-h265", seconds=1.5)
    assert verdict(path, vendor_for("ros2-h265")).state is FileState.ACCEPTED
    got = verdict(path, vendor_for("ros2-h265", formats=["h264"]))
    assert (got.state, got.reasons) == (FileState.QUARANTINED, (ReasonCode.UNSUPPORTED_ENCODING,))
    assert "format h265; the contract allows h264" in got.detail


def _rewrite(src: Path, dst: Path, topic: str, change: Any) -> Path:
    seen = {"n": 0}

    def edit(channel: Channel, message: Message) -> list[Message]:
        if channel.topic != topic:
            return [message]
        seen["n"] += 1
        return [dataclasses.replace(message, data=change(seen["n"] - 1, message.data))]

    return rewrite_with_stock_writer(src, dst, edit=edit, log_time_order=False)


def test_an_unknown_codec_is_a_rejection_with_a_reason(tmp_path: Path) -> None:
    path = write_flavored(tmp_path / "e.mcap", "default", seconds=1.5)

    def vp8(index: int, data: bytes) -> bytes:
        video = CompressedVideo.FromString(data)
        video.format = "vp8"
        return video.SerializeToString()

    bad = _rewrite(path, tmp_path / "vp8.mcap", "/cam/front/h264", vp8)
    got = verdict(bad, vendor_for("default"))
    assert (got.state, got.reasons) == (FileState.QUARANTINED, (ReasonCode.UNSUPPORTED_ENCODING,))
    assert "frame 0 has format 'vp8'; decodable: h264, h265" in got.detail


def test_pictures_that_change_size_mid_stream_are_refused(tmp_path: Path) -> None:
    path = write_flavored(tmp_path / "e.mcap", "foxglove-jpeg", seconds=1.5)
    small = yuv420p_buffer(64, 48)[0]
    SceneGenerator(64, 48, seed=1).render(0.0, grain_index=0, out=small)
    other = StillEncoder(64, 48, "jpeg").encode(small)

    def shrink(index: int, data: bytes) -> bytes:
        if index < 20:
            return data
        image = CompressedImage.FromString(data)
        image.data = other
        return image.SerializeToString()

    bad = _rewrite(path, tmp_path / "sizes.mcap", "/cam/front/compressed", shrink)
    vendor = vendor_for("foxglove-jpeg")
    got = verdict(bad, vendor)
    assert (got.state, got.reasons) == (FileState.QUARANTINED, (ReasonCode.RESOLUTION_OUT_OF_BOUNDS,))
    assert "pictures change size mid-stream (128x96 then 64x48)" in got.detail
    assert "pictures are 128x96" not in got.detail  # no size in the contract: only the change is refused
