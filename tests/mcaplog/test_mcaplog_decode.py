"""Payload decoding by encoding, and stamp lookup in decoded messages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from foxglove_schemas_protobuf.CompressedVideo_pb2 import CompressedVideo
from mcap.records import Channel, Schema
from mcap_protobuf.schema import build_file_descriptor_set

from pipeline.mcaplog import (
    DecodeError,
    UnsupportedEncodingError,
    decode_json,
    decode_message,
    decode_protobuf,
    iter_messages,
    stamp_ns,
)

VIDEO_SCHEMA = Schema(
    id=1,
    name="foxglove.CompressedVideo",
    encoding="protobuf",
    data=build_file_descriptor_set(CompressedVideo).SerializeToString(),
)


def _channel(encoding: str, schema_id: int = 1) -> Channel:
    return Channel(id=1, topic="/t", message_encoding=encoding, metadata={}, schema_id=schema_id)


def test_json_round_trip_and_errors() -> None:
    body = {"stamp_ns": 12, "position": [0.5] * 7}
    assert decode_json(json.dumps(body).encode()) == body
    with pytest.raises(DecodeError):
        decode_json(b"{broken")
    with pytest.raises(DecodeError):
        decode_json(b"\xff\xfe")
    with pytest.raises(DecodeError):
        decode_json(b"[" * 100_000)  # hostile nesting is a bad payload, not a crash


def test_protobuf_from_the_schema_descriptor_set() -> None:
    msg = CompressedVideo(frame_id="front", format="h264", data=b"\x00\x00\x00\x01\x67")
    msg.timestamp.FromNanoseconds(1_700_000_000_123_456_789)
    decoded = decode_protobuf(VIDEO_SCHEMA, msg.SerializeToString())
    assert (decoded.frame_id, decoded.format, decoded.data) == ("front", "h264", b"\x00\x00\x00\x01\x67")
    assert stamp_ns(decoded, "timestamp") == 1_700_000_000_123_456_789
    with pytest.raises(DecodeError):
        decode_protobuf(VIDEO_SCHEMA, b"\xff\xff\xff\xff")


def test_unset_protobuf_timestamp_is_no_stamp() -> None:
    decoded = decode_protobuf(VIDEO_SCHEMA, CompressedVideo(frame_id="x").SerializeToString())
    assert stamp_ns(decoded, "timestamp") is None  # not 0: an unset field must not look like epoch


def test_decode_message_dispatches_by_encoding() -> None:
    assert decode_message(None, _channel("json", 0), b'{"a": 1}') == {"a": 1}
    video = CompressedVideo(frame_id="f").SerializeToString()
    assert decode_message(VIDEO_SCHEMA, _channel("protobuf"), video).frame_id == "f"
    with pytest.raises(UnsupportedEncodingError, match="'a'"):
        decode_message(Schema(id=1, name="Example", encoding="c", data=b"\x04"), _channel("a"), b"\x01")


def test_stamp_paths() -> None:
    assert stamp_ns({"stamp_ns": 5}, "stamp_ns") == 5
    assert stamp_ns({"header": {"stamp": {"sec": 2, "nanosec": 7}}}, "header.stamp") == 2_000_000_007
    assert stamp_ns({"stamp_ns": 1.5}, "stamp_ns") is None  # a float's unit is a guess
    assert stamp_ns({"stamp_ns": True}, "stamp_ns") is None
    assert stamp_ns({"other": 1}, "stamp_ns") is None


def test_ros2_messages_decode_from_a_real_bag() -> None:
    bag = (
        Path(__file__).resolve().parents[3]
        / "shared/corpus/rosbag2/rosbag2_py_test_resources_mcap_talker_talker.mcap"
    )
    decoded = [decode_message(s, c, m.data) for s, c, m in iter_messages(bag, ["/topic"])]
    assert len(decoded) == 10 and all(d.data.startswith("Hello, world!") for d in decoded)


def test_a_ros2_definition_the_parser_refuses_is_a_decode_error_and_nothing_on_the_terminal(
    capfd: pytest.CaptureFixture[str],
) -> None:
    # a service's request and response, as rosbag2 records a service event's types: the vendored rosidl
    # parser prints the line it cannot read before it raises
    schema = Schema(
        id=1, name="example_interfaces/srv/AddTwoInts", encoding="ros2msg", data=b"int64 a\n---\n"
    )
    with pytest.raises(DecodeError, match="ros2 schema example_interfaces/srv/AddTwoInts"):
        decode_message(schema, _channel("cdr"), b"\x00\x01\x00\x00")
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")
