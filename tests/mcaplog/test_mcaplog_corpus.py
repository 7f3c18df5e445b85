"""The reader against real files nobody here wrote: foxglove's conformance set and rosbag2's test bags."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

import pytest

from pipeline.enums import ReasonCode
from pipeline.mcaplog import LogReport, iter_messages, probe_structure, read_log

CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus"
CONFORMANCE = sorted((CORPUS / "mcap-conformance").glob("*.mcap"))
ROSBAGS = sorted((CORPUS / "rosbag2").glob("*.mcap"))
ROBOT_ENCODINGS = {"json", "protobuf", "cdr"}
TIMING_CODES = {ReasonCode.NON_MONOTONIC_TIME, ReasonCode.DUPLICATE_TIMESTAMPS}


def _fields(record: dict) -> dict:
    return dict(record["fields"])


def _bytes(values: list[str]) -> bytes:
    return bytes(int(v) for v in values)


class Expected:
    """What the upstream JSON beside a conformance file says it holds."""

    def __init__(self, path: Path) -> None:
        records = json.loads(path.with_suffix(".json").read_text())["records"]
        self.messages = []
        self.schemas: dict[int, tuple[str, str, str]] = {}
        self.channels: dict[int, tuple[str, str, int, dict]] = {}
        self.attachments = []
        self.metadata = []
        self.statistics: dict | None = None
        self.data_section_crc: int | None = None
        self.footer: dict = {}
        for record in records:
            kind, f = record["type"], _fields(record)
            if kind == "Message":
                self.messages.append(
                    (
                        int(f["channel_id"]),
                        int(f["log_time"]),
                        int(f["publish_time"]),
                        int(f["sequence"]),
                        _bytes(f["data"]),
                    )
                )
            elif kind == "Schema":
                digest = hashlib.sha256(_bytes(f["data"])).hexdigest()
                self.schemas[int(f["id"])] = (f["name"], f["encoding"], digest)
            elif kind == "Channel":
                self.channels[int(f["id"])] = (
                    f["topic"],
                    f["message_encoding"],
                    int(f["schema_id"]),
                    f["metadata"],
                )
            elif kind == "Attachment":
                data = _bytes(f["data"])
                self.attachments.append(
                    (
                        f["name"],
                        f["media_type"],
                        int(f["log_time"]),
                        int(f["create_time"]),
                        hashlib.sha256(data).hexdigest(),
                    )
                )
            elif kind == "Metadata":
                self.metadata.append((f["name"], f["metadata"]))
            elif kind == "Statistics":
                self.statistics = f
            elif kind == "DataEnd":
                self.data_section_crc = int(f["data_section_crc"])
            elif kind == "Footer":
                self.footer = {k: int(v) for k, v in f.items()}


def _messages(report_source: Path, *, log_time_order: bool) -> list[tuple]:
    return [
        (m.channel_id, m.log_time, m.publish_time, m.sequence, m.data)
        for _, _, m in iter_messages(report_source, log_time_order=log_time_order)
    ]


def test_corpus_is_there() -> None:
    assert len(CONFORMANCE) == 208
    assert len(ROSBAGS) == 20


@pytest.mark.parametrize("path", CONFORMANCE, ids=lambda p: p.stem)
def test_conformance_file_reads_cleanly_and_matches_its_json(path: Path) -> None:
    expected = Expected(path)
    report = read_log(path)

    assert report.ok, report.findings
    assert {f.code for f in report.findings} <= TIMING_CODES | {ReasonCode.NO_MESSAGES}
    assert {
        c.id: (c.topic, c.message_encoding, c.schema_id, c.metadata) for c in report.channels
    } == expected.channels
    assert {s.id: (s.name, s.encoding, s.sha256) for s in report.schemas} == expected.schemas
    assert [
        (a.name, a.media_type, a.log_time_ns, a.create_time_ns, a.sha256) for a in report.attachments
    ] == expected.attachments
    assert [(m.name, m.values) for m in report.metadata] == expected.metadata
    assert report.message_count == len(expected.messages)
    per_topic = Counter(expected.channels[m[0]][0] for m in expected.messages)
    assert {t.topic: t.message_count for t in report.topics if t.message_count} == dict(per_topic)

    # Messages, whichever path iter_messages takes for this variant (index or linear scan).
    assert _messages(path, log_time_order=False) == expected.messages
    assert _messages(path, log_time_order=True) == sorted(expected.messages, key=lambda m: m[1])

    probe = probe_structure(path)
    assert probe.ok
    assert probe.data_section_crc == expected.data_section_crc
    assert (probe.summary_start, probe.summary_offset_start, probe.summary_crc) == (
        expected.footer["summary_start"],
        expected.footer["summary_offset_start"],
        expected.footer["summary_crc"],
    )
    if expected.statistics is None:
        assert probe.statistics is None
    else:
        assert probe.statistics is not None
        assert probe.statistics.message_count == int(expected.statistics["message_count"])
        assert probe.statistics.channel_message_counts == {
            int(k): int(v) for k, v in expected.statistics["channel_message_counts"].items()
        }
    # Every conformance file carries a data-section CRC: a full read verifies all of it.
    assert report.crc is not None and report.crc.data_section_crc_present and report.crc.messages_covered


@pytest.mark.parametrize(
    "path", [p for p in CONFORMANCE if p.stem.startswith("TenMessages")], ids=lambda p: p.stem
)
def test_ten_messages_timing_is_a_finding_not_corruption(path: Path) -> None:
    report = read_log(path)
    assert report.ok
    topic = report.topic("example")
    assert topic is not None
    # log times 0,2,1,3,3,5,4,7,8,9: two steps back (2->1, 5->4) and one repeat (3,3)
    assert (topic.backward_steps, topic.max_backward_step_ns, topic.duplicate_log_times) == (2, 1, 1)
    assert {f.code for f in report.findings} == TIMING_CODES
    assert not any(f.fatal for f in report.findings)


@pytest.mark.parametrize(
    "path", [p for p in CONFORMANCE if p.stem.startswith("NoData")], ids=lambda p: p.stem
)
def test_no_data_reports_no_messages(path: Path) -> None:
    report = read_log(path)
    assert report.ok and report.message_count == 0 and report.topics == ()
    assert [f.code for f in report.findings] == [ReasonCode.NO_MESSAGES]


@pytest.mark.parametrize("path", CONFORMANCE[::13], ids=lambda p: p.stem)
def test_conformance_encodings_fail_a_robot_allow_list_for_that_reason_only(path: Path) -> None:
    report = read_log(path, allowed_encodings=ROBOT_ENCODINGS)
    assert report.ok
    unsupported = [f for f in report.findings if f.code == ReasonCode.UNSUPPORTED_ENCODING]
    assert len(unsupported) == len(report.channels)  # "a" and "text" are no robot encodings
    assert not any(f.fatal for f in report.findings)


def _rosbag_counts(report: LogReport) -> dict[str, int]:
    """Per-topic message counts from the bag's own Statistics record (written by rosbag2, not by us)."""
    stats = report.structure.statistics
    assert stats is not None
    topic_of = {c.id: c.topic for c in report.channels}
    counts: Counter[str] = Counter()
    for channel_id, n in stats.channel_message_counts.items():
        counts[topic_of[channel_id]] += n
    return {k: v for k, v in counts.items() if v}


@pytest.mark.parametrize("path", ROSBAGS, ids=lambda p: p.stem.removeprefix("rosbag2_"))
def test_rosbag2_bags_read_cleanly(path: Path) -> None:
    report = read_log(path, allowed_encodings={"cdr"})
    assert report.ok, report.findings
    assert not any(f.fatal for f in report.findings)
    assert {t.topic: t.message_count for t in report.topics if t.message_count} == _rosbag_counts(report)
    encodings = {c.message_encoding for c in report.channels}
    unsupported = {f.topic for f in report.findings if f.code == ReasonCode.UNSUPPORTED_ENCODING}
    if "wrong_rmw_test" in path.stem:
        assert encodings == {"wrong_format"}
        assert unsupported == {c.topic for c in report.channels}
    else:
        assert encodings == {"cdr"}
        assert unsupported == set()
    assert all(s.encoding == "ros2msg" for s in report.schemas)


def test_rosbag2_crc_presence_is_reported_per_writer() -> None:
    by_name = {p.stem: p for p in ROSBAGS}
    # libmcap 0.8 (rosbag2 C++) wrote neither chunk nor data-section CRCs: nothing can be verified
    plain = read_log(by_name["rosbag2_tests_resources_mcap_cdr_test_cdr_test_0"])
    assert plain.crc is not None and plain.crc.chunks_with_crc == 0 and not plain.crc.data_section_crc_present
    assert ReasonCode.CRC_ABSENT in plain.reason_codes and plain.ok
    # the Go writer puts CRCs on its zstd chunks
    talker = read_log(by_name["rosbag2_py_test_resources_mcap_talker_talker"])
    assert talker.crc is not None and talker.crc.chunks_with_crc == talker.crc.chunks_total > 0
    assert ReasonCode.CRC_ABSENT not in talker.reason_codes


def test_rosbag2_log_stamps_are_read_through_cdr() -> None:
    report = read_log(CORPUS / "rosbag2" / "rosbag2_py_test_resources_mcap_talker_talker.mcap")
    rosout = report.topic("/rosout")
    assert rosout is not None
    assert (rosout.stamp_field, rosout.stamped_count, rosout.decode_errors) == ("stamp", 10, 0)
    assert rosout.skew_min_ns is not None and rosout.skew_max_ns is not None
    # rcl stamps a log line before rosbag2 receives it: log time is never earlier than the stamp
    assert 0 <= rosout.skew_min_ns <= rosout.skew_max_ns < 10**9
