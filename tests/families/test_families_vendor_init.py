"""``sluice vendor init NAME --from SAMPLE --source URL``: a vendor file proposed from one sample log.

The expectations come from the synthetic flavors' own description (topics, schemas, rates, stamp fields),
not from :mod:`pipeline.config.propose`; the file written is loaded by the project's loader and gates the
sample (and a damaged copy of it) as the vendor's real drops would be gated.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from family_helpers import CAMERAS, HEIGHT, RATES_HZ, WIDTH, write_flavored
from typer.testing import CliRunner

from pipeline.cli.vendor import app
from pipeline.config import VendorConfig, load_vendor
from pipeline.config.propose import ProposeError
from pipeline.enums import FileState, ReasonCode
from pipeline.mcaplog import read_log
from pipeline.quality.pregate import check_mcap, decide
from pipeline.steps.quality_pre import read_log_options
from pipeline.synth.flavors import flavor
from pipeline.synth.robot import EpisodeTweaks

runner = CliRunner(env={"COLUMNS": "200"})


def init(tmp_path: Path, name: str, sample: Path, *extra: str) -> tuple[int, str, Path]:
    out = tmp_path / f"{name}.yaml"
    args = [
        "init",
        name,
        "--from",
        str(sample),
        "--source",
        str(tmp_path / "drop"),
        "--out",
        str(out),
        *extra,
    ]
    result = runner.invoke(app, args)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.output, out


def gate(path: Path, vendor: VendorConfig) -> tuple[FileState, set[ReasonCode], str]:
    verdict = decide(check_mcap(read_log(path, **read_log_options(vendor)), vendor, calibration_id=1))
    return verdict.state, set(verdict.reasons), verdict.detail


@pytest.mark.parametrize("name", ["ros2-jpeg", "ros2-raw", "ros2-h265", "foxglove-png", "default"])
def test_the_proposal_names_what_the_sample_holds(tmp_path: Path, name: str) -> None:
    shape = flavor(name)
    sample = write_flavored(tmp_path / "sample.mcap", name, seconds=1.5, pixel_encoding="bgr8")
    code, output, out = init(tmp_path, "fleet", sample)
    assert code == 0, output
    assert f"wrote {out}" in output
    vendor = load_vendor(out)
    assert vendor.name == "fleet" and vendor.source.url == str(tmp_path / "drop")
    topics = vendor.topics
    assert topics is not None
    encoding = "cdr" if shape.ros2 else "protobuf"
    cameras = {c.name: c for c in topics.cameras}
    assert sorted(cameras) == sorted(CAMERAS)
    for camera_name, camera in cameras.items():
        assert camera.topic == shape.camera_topic(camera_name)
        assert camera.schema_names == (shape.camera_schema(),)
        assert camera.message_encodings == (encoding,)
        assert camera.rate_hz == 30
        assert (camera.width_px, camera.height_px) == (WIDTH, HEIGHT)
        if shape.camera == "raw":
            assert camera.pixel_encodings == ("bgr8",)
        else:
            assert camera.formats == (shape.format,)
        # ROS pictures carry header.stamp; Foxglove's types (and ROS's CompressedVideo) a timestamp
        expected_stamp = "header.stamp" if shape.ros2 and shape.camera != "video" else "timestamp"
        assert camera.stamp_field == expected_stamp
    assert [s.topic for s in topics.state] == list(shape.state_topics)
    assert [a.topic for a in topics.actions] == list(shape.action_topics)
    for series in (*topics.state, *topics.actions):
        assert series.rate_hz == RATES_HZ[series.topic], series.topic
    if shape.ros2:
        assert topics.message_encodings == ("cdr",) and topics.schema_encodings == ("ros2msg",)
        stamps = {s.topic: s.stamp_field for s in (*topics.state, *topics.actions)}
        assert stamps["/robot/joint_states"] == "header.stamp"
        assert stamps["/robot/joint_commands"] is None  # Float64MultiArray has no header: log time
        gripper = next(a for a in topics.actions if a.topic == "/robot/gripper_command")
        assert set(gripper.fields) == {"position", "max_effort"}  # a vendor's own type: fields by path
    text = out.read_text()
    # a comment above every proposed topic, with the rate it was measured at
    for topic in [c.topic for c in topics.cameras] + [s.topic for s in (*topics.state, *topics.actions)]:
        before = text.split(f'topic: "{topic}"')[0].rsplit("- ", 1)[0].splitlines()
        assert any("measured" in line and line.strip().startswith("#") for line in before[-6:]), topic


def test_the_proposal_gates_the_vendors_episodes(tmp_path: Path) -> None:
    """Onboarding is `vendor init`, read, run: the proposed contract accepts a clean episode of the fleet
    and refuses one whose camera sends a broken JPEG."""
    sample = write_flavored(tmp_path / "sample.mcap", "ros2-jpeg", seconds=1.5)
    code, output, out = init(tmp_path, "kestrel", sample)
    assert code == 0, output
    vendor = load_vendor(out)
    clean = write_flavored(tmp_path / "clean.mcap", "ros2-jpeg", seconds=1.5, seed=11)
    state, reasons, detail = gate(clean, vendor)
    assert state in (FileState.ACCEPTED, FileState.ACCEPTED_WITH_FLAGS), detail
    assert not reasons - {ReasonCode.NO_CALIBRATION}, detail
    broken = write_flavored(
        tmp_path / "broken.mcap",
        "ros2-jpeg",
        seconds=1.5,
        seed=12,
        tweaks=EpisodeTweaks(corrupt_image_camera="wrist_left", corrupt_image_frame=20),
    )
    state, reasons, detail = gate(broken, vendor)
    assert (state, ReasonCode.DECODE_ERROR in reasons) == (FileState.QUARANTINED, True), detail
    assert "/cam/wrist_left/image_raw/compressed" in detail


def test_a_topic_of_no_known_kind_is_listed_as_ignored(tmp_path: Path) -> None:
    sample = write_flavored(
        tmp_path / "sample.mcap", "ros2-png", seconds=1.5, tweaks=EpisodeTweaks(extra_channel_encoding="cbor")
    )
    code, output, out = init(tmp_path, "fleet", sample)
    assert code == 0, output
    text = out.read_text()
    (line,) = [line for line in text.splitlines() if "/robot/diagnostics" in line]
    assert line.startswith("  #   /robot/diagnostics: ")  # listed under "ignored", not proposed
    topics = load_vendor(out).topics
    assert topics is not None
    assert "/robot/diagnostics" not in {t.topic for t in topics.all_topics()}
    assert "ignored: /robot/diagnostics" in output


def test_refusals_are_errors_that_say_why(tmp_path: Path) -> None:
    sample = write_flavored(tmp_path / "sample.mcap", "ros2-jpeg", seconds=1.5)
    code, _, out = init(tmp_path, "fleet", sample)
    assert code == 0
    before = out.read_bytes()
    code, output, _ = init(tmp_path, "fleet", sample)
    assert code == 2 and "exists; pass --force" in output
    assert out.read_bytes() == before
    assert init(tmp_path, "fleet", sample, "--force")[0] == 0
    result = runner.invoke(
        app, ["init", "fleet", "--from", str(sample), "--source", "x", "--out", str(tmp_path / "other.yaml")]
    )
    assert result.exit_code == 2 and "must be the vendor's: fleet.yaml" in result.output
    not_mcap = tmp_path / "notes.mcap"
    not_mcap.write_bytes(b"not a log\n")
    with pytest.raises(ProposeError, match="bad_magic"):
        init(tmp_path, "fleet2", not_mcap)
    assert not (tmp_path / "fleet2.yaml").exists()


def test_a_real_bag_without_cameras_or_state_is_refused_with_its_topics(
    tmp_path: Path, corpus_dir: Path
) -> None:
    talker = corpus_dir / "rosbag2" / "rosbag2_py_test_resources_mcap_talker_talker.mcap"
    with pytest.raises(ProposeError, match=r"no camera, state or action topic found.*/rosout"):
        init(tmp_path, "talker", talker)
    assert not (tmp_path / "talker.yaml").exists()


def test_a_real_bag_of_a_vendor_s_own_types_is_onboarded_by_naming_its_topics(
    tmp_path: Path, corpus_dir: Path
) -> None:
    """rosbag2's cdr_test bag: test_msgs types on topics whose names say nothing. Refused with what each
    topic holds and how to name it; with ``--state`` it is read by its numeric fields, and the file gates
    the bag itself."""
    bag = corpus_dir / "rosbag2" / "rosbag2_tests_resources_mcap_cdr_test_cdr_test_0.mcap"
    with pytest.raises(ProposeError) as refused:
        init(tmp_path, "cdr", bag)
    said = str(refused.value)
    assert "/array_topic (test_msgs/msg/Arrays in cdr" in said and "numeric fields: " in said
    assert "--state /test_topic or --actions /test_topic" in said
    code, output, out = init(tmp_path, "cdr", bag, "--state", "/array_topic")
    assert code == 0, output
    vendor = load_vendor(out)
    assert vendor.topics is not None
    (state,) = vendor.topics.state
    assert state.topic == "/array_topic" and "float64_values" in (state.fields or ())
    assert "ignored: /test_topic" in output and "named on the command line" in out.read_text()
    # the proposed contract holds for the bag: what it is refused for is what a 0.15 s test bag without
    # robot or session ids lacks, which the file's comments leave to the vendor (path_pattern, durations)
    assert gate(bag, vendor)[1] == {ReasonCode.MISSING_METADATA, ReasonCode.DURATION_OUT_OF_BOUNDS}
    with pytest.raises(ProposeError, match=r"has no topic /nope; its topics: "):
        init(tmp_path, "cdr2", bag, "--actions", "/nope")
    code, output, _ = init(tmp_path, "cdr3", bag, "--state", "/array_topic", "--actions", "/array_topic")
    assert code == 2 and "named both --state and --actions" in output
