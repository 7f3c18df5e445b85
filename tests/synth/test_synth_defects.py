"""Each defect flag makes the defect it names, and only that file carries it."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import av
import numpy as np
import pytest
from foxglove_schemas_protobuf.CompressedVideo_pb2 import CompressedVideo
from mcap.stream_reader import CRCValidationError
from mcap.well_known import MessageEncoding
from synth_helpers import READ_ERRORS, decode_annexb, decode_clip, only, read_indexed, read_linear

from pipeline.enums import FileState, ReasonCode
from pipeline.media.framecode import FrameCodeError, read_frame_code, read_frame_index
from pipeline.synth import EXPECTED_REASONS, RobotDefect, VideoDefect, expected_outcome, layout
from pipeline.synth.defects import CLOCK_JUMP_NS, DROPPED_FRAMES_CAMERA

NS = 1_000_000_000


def test_every_flag_has_a_function_and_an_expected_outcome() -> None:
    from pipeline.synth.defects import ROBOT_DEFECTS, VIDEO_DEFECTS

    assert set(ROBOT_DEFECTS) == set(RobotDefect) and set(VIDEO_DEFECTS) == set(VideoDefect)
    assert set(EXPECTED_REASONS) == {d.value for d in (*RobotDefect, *VideoDefect)}
    assert expected_outcome("crc_flipped") == (FileState.QUARANTINED, (ReasonCode.CRC_MISMATCH,))
    assert expected_outcome("rotated") == (FileState.ACCEPTED_WITH_FLAGS, (ReasonCode.ROTATED,))
    assert expected_outcome("duplicate") == (FileState.DUPLICATE, ())


def test_drop_has_one_file_per_flag(robot_drop, video_drop) -> None:
    from pipeline.synth.defects import defect_applies

    # The default flavor's H.264 cameras and unnamed joints cannot carry corrupt_image or renamed_joints.
    robot_flags = [d for d in RobotDefect if defect_applies(d, "default")]
    assert set(RobotDefect) - set(robot_flags) == {RobotDefect.CORRUPT_IMAGE, RobotDefect.RENAMED_JOINTS}
    for (_, manifest), flags in ((robot_drop, robot_flags), (video_drop, list(VideoDefect))):
        assert sorted(f.defect for f in manifest.files if f.defect) == sorted(flags)
        for made in manifest.files:
            assert (made.expected_state, made.expected_reasons) == expected_outcome(made.defect)


# --- robot logs -------------------------------------------------------------------------------------------


def test_truncated_fails_crc_validated_reads(robot_drop) -> None:
    root, manifest = robot_drop
    made = only(manifest, "truncated")
    path = root / made.path
    assert path.stat().st_size == made.details["truncated_at"] < made.details["original_size_bytes"]
    with pytest.raises(READ_ERRORS):
        read_indexed(path)
    with pytest.raises(READ_ERRORS):
        read_linear(path)


def test_crc_flipped_raises_a_crc_error_and_nothing_else(robot_drop) -> None:
    from mcap.reader import make_reader

    root, manifest = robot_drop
    path = root / only(manifest, "crc_flipped").path
    with pytest.raises(CRCValidationError):
        read_indexed(path)
    with pytest.raises(CRCValidationError):
        read_linear(path)
    with open(path, "rb") as fh:  # without validation the file reads: only the CRC is wrong
        assert sum(1 for _ in make_reader(fh).iter_messages()) > 0


def _backward_steps(log_times: list[int]) -> int:
    return sum(1 for a, b in itertools.pairwise(log_times) if b < a)


def test_non_monotonic_log_times_on_one_topic(robot_drop) -> None:
    root, manifest = robot_drop
    made = only(manifest, "non_monotonic")
    linear = read_linear(root / made.path)
    assert _backward_steps([m.log_time for m in linear.topic(layout.JOINT_STATE_TOPIC)]) == 5
    for topic in linear.topics - {layout.JOINT_STATE_TOPIC}:
        assert _backward_steps([m.log_time for m in linear.topic(topic)]) == 0
    clean = read_linear(root / only(manifest, None).path)
    assert _backward_steps([m.log_time for m in clean.topic(layout.JOINT_STATE_TOPIC)]) == 0


def test_clock_jump_of_an_hour(robot_drop) -> None:
    root, manifest = robot_drop
    made = only(manifest, "clock_jump")
    messages = read_linear(root / made.path).topic(layout.JOINT_STATE_TOPIC)
    steps = np.diff([m.log_time for m in messages])
    assert steps.max() >= CLOCK_JUMP_NS and int((steps > NS).sum()) == 1
    # The whole clock stepped: hardware stamps jump with the log times, so their skew stays small.
    skews = [m.log_time - json.loads(m.data)["stamp_ns"] for m in messages]
    assert max(skews) < 20_000_000 and min(skews) > 0
    assert made.end_ns - made.start_ns > CLOCK_JUMP_NS


def test_dropped_frames_gap_rate_above_threshold(robot_drop) -> None:
    root, manifest = robot_drop
    linear = read_linear(root / only(manifest, "dropped_frames").path)
    for camera in layout.CAMERA_NAMES:
        messages = linear.topic(layout.camera_topic(camera))
        videos = [CompressedVideo.FromString(m.data) for m in messages]
        stamps = np.array([v.timestamp.seconds * NS + v.timestamp.nanos for v in videos])
        expected = 45  # 1.5 s at 30 Hz
        missing = int(np.round(np.diff(stamps) / (NS / 30)).sum()) + 1 - len(stamps)
        gap_rate = missing / expected
        # The frames still decode, and the indices drawn into them show the holes too.
        indices = [read_frame_index(f) for f in decode_annexb([v.data for v in videos])]
        assert indices == [m.sequence for m in messages]
        if camera == DROPPED_FRAMES_CAMERA:
            assert gap_rate > 0.10 and len(indices) < expected
        else:
            assert gap_rate == 0 and indices == list(range(expected))


def test_missing_topic(robot_drop) -> None:
    root, manifest = robot_drop
    linear = read_linear(root / only(manifest, "missing_topic").path)
    assert layout.ACTION_TOPIC not in linear.topics
    assert linear.topics == (set(layout.REQUIRED_TOPICS) | set(layout.CALIBRATION_TOPICS)) - {
        layout.ACTION_TOPIC
    }


def test_unknown_encoding_channel(robot_drop) -> None:
    root, manifest = robot_drop
    linear = read_linear(root / only(manifest, "unknown_encoding").path)
    known = {v for k, v in vars(MessageEncoding).items() if not k.startswith("_")}
    odd = [c for c in linear.channels.values() if c.message_encoding not in known]
    assert [(c.topic, c.message_encoding) for c in odd] == [(layout.DIAGNOSTICS_TOPIC, "x-acme-packed")]
    assert len(linear.topic(layout.DIAGNOSTICS_TOPIC)) > 0
    assert set(layout.REQUIRED_TOPICS) <= linear.topics


def _duplicate_and_empty(drop) -> None:
    root, manifest = drop
    dup = only(manifest, "duplicate")
    source = manifest.files[[f.path for f in manifest.files].index(dup.duplicate_of)]
    assert source.defect is None and dup.path != source.path
    assert (root / dup.path).read_bytes() == (root / source.path).read_bytes()
    empty = only(manifest, "zero_bytes")
    assert (root / empty.path).stat().st_size == 0 == empty.size_bytes


def test_robot_duplicate_and_zero_bytes(robot_drop) -> None:
    _duplicate_and_empty(robot_drop)


# --- videos -----------------------------------------------------------------------------------------------


def test_video_duplicate_and_zero_bytes(video_drop) -> None:
    _duplicate_and_empty(video_drop)


def test_interlaced_decodes_as_interlaced_top_field_first(video_drop) -> None:
    root, manifest = video_drop
    frames, errors = decode_clip(root / only(manifest, "interlaced").path)
    assert errors == 0 and len(frames) == 60 and all(f.interlaced_frame for f in frames)
    import av

    with av.open(str(root / only(manifest, "interlaced").path)) as container:
        assert container.streams.video[0].codec_context.field_order == 2  # AV_FIELD_TT
    clean, _ = decode_clip(root / only(manifest, None).path)
    assert not any(f.interlaced_frame for f in clean)
    # Both fields carry the code, so the index still reads.
    assert [read_frame_index(f.to_ndarray(format="rgb24")) for f in frames] == list(range(60))


def test_all_black_decodes_to_black_frames(video_drop) -> None:
    root, manifest = video_drop
    frames, errors = decode_clip(root / only(manifest, "all_black").path)
    assert errors == 0 and len(frames) == 60
    for frame in frames:
        rgb = frame.to_ndarray(format="rgb24")
        assert rgb.max() <= 8
        with pytest.raises(FrameCodeError):
            read_frame_index(rgb)


def test_rotated_reports_its_rotation_through_pyav(video_drop) -> None:
    root, manifest = video_drop
    frames, errors = decode_clip(root / only(manifest, "rotated").path)
    assert errors == 0 and {f.rotation for f in frames} == {90}
    clean, _ = decode_clip(root / only(manifest, None).path)
    assert {f.rotation for f in clean} == {0}
    rgb = frames[5].to_ndarray(format="rgb24")
    assert read_frame_code(np.rot90(rgb, 1)).frame_index == 5  # as a player would show it


def test_corrupt_bitstream_makes_the_decoder_report_errors(video_drop) -> None:
    root, manifest = video_drop
    made = only(manifest, "corrupt_bitstream")
    _frames, errors = decode_clip(root / made.path)
    assert errors >= 1
    assert len(made.details["damaged_samples"]) == 3
    _, clean_errors = decode_clip(root / only(manifest, None).path)
    assert clean_errors == 0


def test_colour_change_splices_pictures_in_another_matrix_the_header_does_not_name(video_drop) -> None:
    """The first half as the drop's other clips (untagged: BT.601), the second tagged BT.709 in parameter
    sets of its own from a keyframe on; every frame whole and in order, the container naming the first."""
    root, manifest = video_drop
    made = only(manifest, "colour_change")
    at = made.details["colour_change_frame"]
    frames, errors = decode_clip(root / made.path)
    assert errors == 0 and len(frames) == made.details["frames"] and 0 < at < len(frames)
    assert [f.colorspace for f in frames] == [2] * at + [1] * (len(frames) - at)  # unspecified, then BT.709
    assert frames[at].key_frame
    assert [read_frame_index(f.to_ndarray(format="rgb24")) for f in frames] == list(range(len(frames)))
    with av.open(str(root / made.path)) as container:
        assert container.streams.video[0].codec_context.colorspace == 2


def test_defect_names_match_the_cli() -> None:
    from pipeline.cli.synth import ROBOT_DEFECT_NAMES, VIDEO_DEFECT_NAMES

    assert set(ROBOT_DEFECT_NAMES) == {d.value for d in RobotDefect}
    assert set(VIDEO_DEFECT_NAMES) == {d.value for d in VideoDefect}


def test_files_do_not_hint_at_their_defect(robot_drop, video_drop) -> None:
    for root, manifest in (robot_drop, video_drop):
        for made in manifest.files:
            assert not any(flag in made.path for flag in EXPECTED_REASONS), made.path
            assert Path(root / made.path).exists()
