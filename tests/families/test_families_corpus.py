"""The real rosbag2 bags of ../shared/corpus/rosbag2/ under ROS 2 vendor profiles.

Under the ROS 2 example vendor (Kestrel: JPEG cameras, JointState...) none of the bags has the fleet's
topics, so each is held back for the contract's reasons and never as corrupt; ``wrong_rmw`` alone adds
``unsupported_encoding``, as the corpus README says. Under a profile written for the two bags that carry
numbers (``cdr_test`` and its ``wrong_rmw`` copy: ``test_msgs`` BasicTypes and Arrays read by field path),
the valid bag passes every contract and content check and transcodes to resampled series of its real
values; the other is refused for its encoding. The README's ingest outcomes (duplicates, the split
recording) are checked under the generic profile in tests/ingest/test_ingest_corpus.py.

Real rosbag2 bags carry no ``episode`` metadata record (robot and session id), so a profile that lists
topics holds them back with ``missing_metadata`` unless it says where the ids are: the field-path profile
takes them from the bag's file name (``episode_metadata.path_pattern``), as a fleet takes them from its
folder layout, and its bag is accepted.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

from mcap.reader import make_reader

from pipeline.config import StampSource, VendorConfig, load_vendor
from pipeline.enums import CheckStatus, FileState, ReasonCode
from pipeline.mcaplog import read_log
from pipeline.quality.pregate import check_mcap, decide, episode_ids
from pipeline.steps.quality_pre import read_log_options
from pipeline.transcode import Provenance, RobotTranscodeConfig, transcode_episode
from pipeline.transcode.layout import resampled_topic

R = ReasonCode
REPO = Path(__file__).resolve().parents[2]
KESTREL = REPO / "dags" / "vendors" / "kestrel_ros2.yaml"
STRUCTURAL = {
    R.ZERO_BYTES, R.BAD_MAGIC, R.TRUNCATED, R.CRC_MISMATCH, R.RECORD_TOO_LARGE, R.UNKNOWN_COMPRESSION,
    R.CONTAINER_ERROR, R.DECODE_ERROR,
}  # fmt: skip
CDR_TEST = "rosbag2_tests_resources_mcap_cdr_test_cdr_test_0.mcap"
WRONG_RMW = "rosbag2_tests_resources_mcap_wrong_rmw_test_wrong_rmw_test_0.mcap"


def _facts(path: Path) -> dict[str, object]:
    """What the stock reader says about a bag: its topics, encodings and metadata records."""
    with open(path, "rb") as fh:
        reader = make_reader(fh)
        summary = reader.get_summary()
        assert summary is not None
        metadata = {m.name for m in reader.iter_metadata()}
    return {
        "topics": {c.topic for c in summary.channels.values()},
        "encodings": {c.message_encoding for c in summary.channels.values()},
        "episode_metadata": "episode" in metadata,
    }


def _verdict(path: Path, vendor: VendorConfig):  # type: ignore[no-untyped-def]
    report = read_log(path, **read_log_options(vendor))
    return decide(check_mcap(report, vendor, calibration_id=None, relative_path=path.name))


def test_real_bags_under_the_ros2_example_vendor_are_held_back_for_contract_reasons_only(
    corpus_dir: Path,
) -> None:
    vendor = load_vendor(KESTREL)
    required = {spec.topic for spec in vendor.topics.all_topics() if spec.required}  # type: ignore[union-attr]
    bags = sorted((corpus_dir / "rosbag2").glob("*.mcap"))
    assert len(bags) == 20
    wrong = {}
    for bag in bags:
        facts = _facts(bag)
        got = _verdict(bag, vendor)
        reasons = set(got.reasons)
        expected = {R.MISSING_REQUIRED_TOPIC} if required - facts["topics"] else set()  # type: ignore[operator]
        if not facts["episode_metadata"]:
            expected.add(R.MISSING_METADATA)
        if facts["encodings"] - {"cdr"}:  # type: ignore[operator]
            expected.add(R.UNSUPPORTED_ENCODING)
        if (
            got.state is not FileState.QUARANTINED
            or not expected <= reasons
            or (R.UNSUPPORTED_ENCODING in reasons) != (R.UNSUPPORTED_ENCODING in expected)
            or reasons & STRUCTURAL
            or R.SCHEMA_DRIFT in reasons
        ):
            wrong[bag.name] = ([r.value for r in got.reasons], got.detail)
    assert wrong == {}
    rmw = _verdict(corpus_dir / "rosbag2" / WRONG_RMW, vendor)
    assert "message encoding 'wrong_format'" in rmw.detail


def _field_path_vendor(*, ids_from_path: bool = True) -> VendorConfig:
    """A ROS 2 profile for cdr_test's two topics, their numbers picked by path (no cameras); the robot
    and session ids from the bag's name (``<robot>_..._mcap_<session>_0.mcap`` here)."""
    data = copy.deepcopy(load_vendor(KESTREL).model_dump(mode="json"))
    if ids_from_path:
        data["episode_metadata"] = {
            "path_pattern": r"^(?P<robot_id>[a-z0-9]+)_.*?_mcap_(?P<session_id>.+)_0\.mcap$"
        }
    data["name"] = "corpus_ros2_fields"
    data["topics"]["cameras"] = []
    data["topics"]["state"] = [
        {
            "topic": "/test_topic",
            "rate_hz": 20,
            "message_encodings": ["cdr"],
            "schema_names": ["test_msgs/msg/BasicTypes"],
            "fields": ["int32_value", "float64_value"],
        }
    ]
    data["topics"]["actions"] = [
        {
            "topic": "/array_topic",
            "rate_hz": 20,
            "message_encodings": ["cdr"],
            "schema_names": ["test_msgs/msg/Arrays"],
            "fields": ["float64_values", "int32_values"],
        }
    ]
    data["calibration"] = {}
    data["quality"]["pre"] = {"min_duration_s": 0.1, "min_frames": 1}
    return VendorConfig.model_validate(data)


def test_a_real_cdr_bag_read_by_field_path_passes_its_contract_and_transcodes(
    corpus_dir: Path, tmp_path: Path
) -> None:
    bag = corpus_dir / "rosbag2" / CDR_TEST
    # Without a source for the ids only the metadata record a rosbag2 bag never has is missing ...
    got = _verdict(bag, _field_path_vendor(ids_from_path=False))
    assert (got.state, got.reasons) == (FileState.QUARANTINED, (R.MISSING_METADATA,)), got.detail
    assert "episode_metadata.path_pattern" in got.detail  # ... and the reason says where they could come from
    # ... with the ids from the bag's name, every contract and content check passes: accepted, flagged
    # only because rosbag2 wrote its chunk without a CRC (corruption there could not be detected).
    vendor = _field_path_vendor()
    assert episode_ids(read_log(bag), vendor, bag.name) == {
        "robot_id": "rosbag2",
        "session_id": "cdr_test_cdr_test",
    }
    got = _verdict(bag, vendor)
    assert (got.state, got.reasons) == (FileState.ACCEPTED_WITH_FLAGS, (R.CRC_ABSENT,)), got.detail
    checks = {
        c.name: c for c in check_mcap(read_log(bag, **read_log_options(vendor)), vendor, calibration_id=None)
    }
    assert checks["series_content"].status is CheckStatus.PASSED
    assert set(checks["series_content"].observed) == {"/test_topic", "/array_topic"}  # both read
    # The same messages under an encoding name rosbag2 does not write: refused for it.
    rmw = _verdict(corpus_dir / "rosbag2" / WRONG_RMW, vendor)
    assert R.UNSUPPORTED_ENCODING in rmw.reasons and rmw.state is FileState.QUARANTINED

    config = RobotTranscodeConfig(vendor.transcode, vendor.topics, StampSource.LOG_TIME)  # type: ignore[arg-type]
    out = tmp_path / "episode.mcap"
    transcode_episode(bag, out, config, Provenance("ab" * 32, "cd" * 32, "test"))
    series: dict[str, list[dict]] = {}
    with open(out, "rb") as fh:
        for _, channel, message in make_reader(fh).iter_messages():
            if channel.topic.endswith("/resampled"):
                series.setdefault(channel.topic, []).append(json.loads(message.data))
    basic = series[resampled_topic("/test_topic")]
    arrays = series[resampled_topic("/array_topic")]
    # On the 50 Hz grid over the span both topics cover, read from the bag by the stock reader.
    with open(bag, "rb") as fh:
        times: dict[str, list[int]] = {}
        for _, channel, message in make_reader(fh).iter_messages():
            times.setdefault(channel.topic, []).append(message.log_time)
    step_ns = 20_000_000
    first = -(-max(min(t) for t in times.values()) // step_ns) * step_ns
    last = min(max(t) for t in times.values()) // step_ns * step_ns
    grid = list(range(first, last + 1, step_ns))
    assert len(grid) >= 4
    for records in (basic, arrays):
        assert [r["stamp_ns"] for r in records] == grid
    # The bag's own values (the stock decoder reads int32_value 123 in every BasicTypes message).
    assert {r["int32_value"] for r in basic} == {123}
    assert all(len(r["float64_values"]) == 3 and len(r["int32_values"]) == 3 for r in arrays)
