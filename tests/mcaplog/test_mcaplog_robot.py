"""Synthetic robot episodes (TOPICS.md layout): per-topic statistics, timing findings, message access."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from mcaplog_helpers import (
    ACTION_HZ,
    ACTION_TOPIC,
    CAMERA_HZ,
    CAMERAS,
    EPISODE_META,
    JOINT_HZ,
    JOINT_SCHEMA,
    JOINT_TOPIC,
)

from pipeline.enums import ReasonCode
from pipeline.mcaplog import FindingThresholds, iter_messages, probe_structure, read_log
from pipeline.mcaplog.stats import THREADED_DIGEST_MIN_BYTES, message_digest

RobotLog = Callable[..., tuple[Path, dict[str, int]]]
FRONT = "/cam/front/h264"
RATES = {**{f"/cam/{c}/h264": CAMERA_HZ for c in CAMERAS}, JOINT_TOPIC: JOINT_HZ, ACTION_TOPIC: ACTION_HZ}
ROBOT_ENCODINGS = {"json", "protobuf", "cdr"}


def test_clean_episode_statistics(robot_log: RobotLog) -> None:
    path, counts = robot_log()
    report = read_log(path, expected_rates_hz=RATES, allowed_encodings=ROBOT_ENCODINGS)
    assert report.ok and report.findings == ()
    assert {t.topic: t.message_count for t in report.topics} == counts
    assert report.metadata_record("episode") is not None
    assert report.metadata_record("episode").values == EPISODE_META  # type: ignore[union-attr]
    for name, rate in RATES.items():
        topic = report.topic(name)
        assert topic is not None and topic.rate_hz is not None
        assert topic.rate_hz == pytest.approx(rate, rel=0.02)
        assert topic.gap_rate is not None and topic.gap_rate < 0.01
        assert (topic.backward_steps, topic.duplicate_log_times) == (0, 0)
        assert topic.largest_jump_ns < 2 * 1e9 / rate
    front = report.topic(FRONT)
    assert front is not None
    assert (front.schema_name, front.schema_encoding, front.message_encoding) == (
        "foxglove.CompressedVideo",
        "protobuf",
        "protobuf",
    )
    # hardware stamps: protobuf `timestamp` for cameras, JSON `stamp_ns` for state and actions
    assert (front.stamp_field, front.stamped_count) == ("timestamp", counts[FRONT])
    assert front.skew_min_ns is not None and front.skew_max_ns is not None
    assert 6_000_000 <= front.skew_min_ns <= front.skew_max_ns <= 16_000_000  # the writer's transport delay
    joints = report.topic(JOINT_TOPIC)
    assert joints is not None
    assert (joints.stamp_field, joints.stamped_count, joints.decode_errors) == (
        "stamp_ns",
        counts[JOINT_TOPIC],
        0,
    )
    assert 300_000 <= joints.skew_min_ns <= joints.skew_max_ns <= 1_200_000  # type: ignore[operator]
    assert joints.schema_sha256 == hashlib.sha256(json.dumps(JOINT_SCHEMA).encode()).hexdigest()
    assert report.start_ns == min(t.start_ns for t in report.topics if t.start_ns is not None)
    assert report.crc is not None and report.crc.messages_covered  # chunk CRCs from the stock writer


def test_probe_of_a_stock_writer_episode(robot_log: RobotLog) -> None:
    path, counts = robot_log()
    probe = probe_structure(path)
    assert probe.ok and probe.head_magic_ok and probe.tail_magic_ok and probe.footer_ok
    assert probe.summary_present and probe.summary_crc_ok
    assert probe.chunk_index_present and probe.message_index_present
    assert probe.chunk_compressions == ("zstd",) and probe.chunk_crcs_present is True
    assert probe.data_section_crc == 0 and probe.data_end_offset is not None  # the stock default
    assert probe.statistics is not None and probe.statistics.message_count == sum(counts.values())
    assert probe.metadata_index_count == 1

    bare, _ = robot_log("bare.mcap", index=False)
    probe = probe_structure(bare)
    assert probe.ok and not probe.summary_present and probe.statistics is None
    assert probe.chunk_crcs_present is None  # unknown without an index: only the full read can tell


def test_dropped_camera_frames_raise_the_gap_rate(robot_log: RobotLog) -> None:
    path, counts = robot_log(drop_camera_fraction=0.2)
    report = read_log(path, expected_rates_hz=RATES)
    gaps = [f for f in report.findings if f.code == ReasonCode.GAP_RATE_HIGH]
    assert [f.topic for f in gaps] == [FRONT]
    front = report.topic(FRONT)
    assert front is not None and front.gap_rate == pytest.approx(1 - counts[FRONT] / front.expected_count)
    assert 0.1 < front.gap_rate < 0.3  # type: ignore[operator]
    # the gate may re-judge with its own threshold from the raw number
    lenient = read_log(path, expected_rates_hz=RATES, thresholds=FindingThresholds(max_gap_rate=0.5))
    assert ReasonCode.GAP_RATE_HIGH not in lenient.reason_codes


def test_clock_jump(robot_log: RobotLog) -> None:
    path, _ = robot_log(joint_clock_jump_ns=5_000_000_000)
    report = read_log(path, expected_rates_hz=RATES)
    assert report.ok
    jumps = [f for f in report.findings if f.code == ReasonCode.CLOCK_JUMP]
    assert [f.topic for f in jumps] == [JOINT_TOPIC]
    assert report.topic(JOINT_TOPIC).largest_jump_ns > 5_000_000_000  # type: ignore[union-attr]
    # the jumped log times now disagree with the hardware stamps too
    assert ReasonCode.CLOCK_SKEW in {f.code for f in report.findings if f.topic == JOINT_TOPIC}


def test_clock_skew_against_hardware_stamps(robot_log: RobotLog) -> None:
    path, _ = robot_log(camera_stamp_offset_ns=-400_000_000)
    report = read_log(path)
    skew = [f for f in report.findings if f.code == ReasonCode.CLOCK_SKEW]
    assert [f.topic for f in skew] == [FRONT]
    front = report.topic(FRONT)
    assert front is not None and front.skew_min_ns is not None and front.skew_min_ns > 400_000_000


def test_unknown_encoding_under_an_allow_list(robot_log: RobotLog) -> None:
    path, _ = robot_log(extra_channel_encoding="x-vendor-blob")
    open_report = read_log(path)
    assert ReasonCode.UNSUPPORTED_ENCODING not in open_report.reason_codes
    report = read_log(path, allowed_encodings=ROBOT_ENCODINGS)
    assert report.ok
    assert [(f.code, f.topic) for f in report.findings] == [(ReasonCode.UNSUPPORTED_ENCODING, "/diagnostics")]


def test_schema_drift_between_channels_of_one_topic(robot_log: RobotLog) -> None:
    path, _ = robot_log(drift_channel=True)
    report = read_log(path)
    assert [(f.code, f.topic) for f in report.findings] == [(ReasonCode.SCHEMA_DRIFT, ACTION_TOPIC)]
    assert len(report.topic(ACTION_TOPIC).channel_ids) == 2  # type: ignore[union-attr]


def test_undecodable_payloads_are_counted(robot_log: RobotLog) -> None:
    # every 2nd joint payload is broken: the first messages (decoded in full) catch it
    path, counts = robot_log(bad_json_every=2)
    report = read_log(path)
    joints = report.topic(JOINT_TOPIC)
    assert joints is not None and joints.decode_errors > 0
    assert ReasonCode.DECODE_ERROR in report.reason_codes
    assert joints.stamped_count <= counts[JOINT_TOPIC] // 2


def test_json_fast_path_agrees_with_full_decoding(robot_log: RobotLog) -> None:
    path, _ = robot_log(seconds=3.0)
    fast = read_log(path).topic(JOINT_TOPIC)
    # a dotted path never takes the regex path: decode every message in full and compare the stats
    slow_fields = ("nonexistent.field", "stamp_ns")
    slow = read_log(path, stamp_fields=slow_fields).topic(JOINT_TOPIC)
    assert fast is not None and slow is not None
    assert (fast.stamped_count, fast.skew_min_ns, fast.skew_max_ns, fast.skew_mean_ns) == (
        slow.stamped_count,
        slow.skew_min_ns,
        slow.skew_max_ns,
        slow.skew_mean_ns,
    )


@pytest.mark.parametrize("layout", ["interleaved", "groups", "no-index", "lz4"])
def test_iter_messages_filters_by_topic_and_time(robot_log: RobotLog, layout: str) -> None:
    options = {
        "interleaved": {},
        "groups": {"group_flush": True},
        "no-index": {"index": False},
        "lz4": {"compression": "lz4", "chunk_size": 8 * 1024},
    }[layout]
    path, counts = robot_log(**options)
    everything = list(iter_messages(path, log_time_order=False))
    assert len(everything) == sum(counts.values())
    start = everything[0][2].log_time + 500_000_000
    end = start + 700_000_000
    wanted = {FRONT, JOINT_TOPIC}
    expected = sorted(
        (
            (c.topic, m.log_time, m.data)
            for _, c, m in everything
            if c.topic in wanted and start <= m.log_time < end
        ),
        key=lambda x: x[1],
    )
    got = [(c.topic, m.log_time, m.data) for _, c, m in iter_messages(path, wanted, start, end)]
    assert sorted(got, key=lambda x: (x[1], x[0])) == sorted(expected, key=lambda x: (x[1], x[0]))
    assert [g[1] for g in got] == sorted(g[1] for g in got)  # log-time order across overlapping chunks
    schemas = {c.topic: s for s, c, _ in iter_messages(path, wanted, start, end)}
    assert schemas[FRONT] is not None and schemas[FRONT].name == "foxglove.CompressedVideo"


def test_content_digest_ignores_chunking_but_not_content(robot_log: RobotLog) -> None:
    small, _ = robot_log("a.mcap", chunk_size=4 * 1024)
    large, _ = robot_log("b.mcap", group_flush=True)
    other, _ = robot_log("c.mcap", seed=8)
    digests = [
        {t.topic: t.content_digest for t in read_log(p, content_digest=True).topics}
        for p in (small, large, other)
    ]
    assert digests[0] == digests[1]
    assert digests[0][FRONT] != digests[2][FRONT]
    assert read_log(small).topic(FRONT).content_digest is None  # type: ignore[union-attr]


def test_big_payloads_hashed_off_thread_give_the_digest_of_every_message(robot_log: RobotLog) -> None:
    # 40 kB frames: above THREADED_DIGEST_MIN_BYTES, so the cameras are hashed on the digest thread, in
    # batches of DIGEST_BATCH_BYTES, while the small state messages are hashed inline
    path, _ = robot_log(frame_bytes=40_000)
    assert THREADED_DIGEST_MIN_BYTES <= 40_000
    expected: dict[str, int] = {}
    for _, channel, message in iter_messages(path, log_time_order=False):
        part = message_digest(message.log_time, message.data)
        expected[channel.topic] = (expected.get(channel.topic, 0) + part) % 2**128
    got = {t.topic: t.content_digest for t in read_log(path, content_digest=True).topics}
    assert got == {topic: f"{value:032x}" for topic, value in expected.items()}
