"""Helpers for the MCAP reader tests: small files from the stock ``mcap`` writer, and a record walker.

The walker here is deliberately independent of ``pipeline.mcaplog`` (plain ``struct``), so that the tests
locate the bytes they damage without trusting the code under test.
"""

from __future__ import annotations

import json
import random
import struct
from dataclasses import dataclass
from pathlib import Path

from foxglove_schemas_protobuf.CameraCalibration_pb2 import CameraCalibration
from foxglove_schemas_protobuf.CompressedVideo_pb2 import CompressedVideo
from mcap.writer import CompressionType, IndexType, Writer
from mcap_protobuf.schema import build_file_descriptor_set

MAGIC = b"\x89MCAP0\r\n"
OP_FOOTER, OP_MESSAGE, OP_CHUNK, OP_STATISTICS, OP_DATA_END = 0x02, 0x05, 0x06, 0x0B, 0x0F
COMPRESSIONS = {"zstd": CompressionType.ZSTD, "lz4": CompressionType.LZ4, "": CompressionType.NONE}

CAMERAS = ("front", "wrist_left", "wrist_right")
JOINT_TOPIC = "/robot/joint_states"
ACTION_TOPIC = "/robot/action"
CAMERA_HZ, JOINT_HZ, ACTION_HZ = 30.0, 200.0, 50.0
EPISODE_META = {
    "robot_id": "r-07",
    "session_id": "s-0001",
    "episode_id": "e-0001",
    "task": "put the red cup on the tray",
    "operator": "op-3",
}
JOINT_SCHEMA = {"type": "object", "properties": {"stamp_ns": {"type": "integer"}}}
GROUP_CHUNK_MESSAGES = 60


def walk_records(data: bytes) -> list[tuple[int, int, int]]:
    """(offset, opcode, content length) of every top-level record of a well-formed file."""
    out = []
    pos = len(MAGIC)
    while pos < len(data) - len(MAGIC):
        opcode, length = struct.unpack_from("<BQ", data, pos)
        out.append((pos, opcode, length))
        pos += 9 + length
        if opcode == OP_FOOTER:
            break
    return out


def first(records: list[tuple[int, int, int]], opcode: int) -> tuple[int, int, int]:
    return next(r for r in records if r[1] == opcode)


def flip(data: bytes, offset: int, mask: int = 0x01) -> bytes:
    out = bytearray(data)
    out[offset] ^= mask
    return bytes(out)


def write_small(
    path: Path,
    *,
    chunked: bool = True,
    index: bool = True,
    compression: str = "zstd",
    crcs: bool = True,
    data_crcs: bool = False,
    messages: int = 40,
    chunk_size: int = 512,
    attachment: bool = True,
) -> Path:
    """A small two-topic JSON log with metadata and an attachment, written by the stock writer."""
    with path.open("wb") as out:
        writer = Writer(
            out,
            chunk_size=chunk_size,
            compression=COMPRESSIONS[compression],
            index_types=IndexType.ALL if index else IndexType.NONE,
            use_chunking=chunked,
            use_statistics=index,
            use_summary_offsets=index,
            repeat_channels=index,
            repeat_schemas=index,
            enable_crcs=crcs,
            enable_data_crcs=data_crcs,
        )
        writer.start(profile="", library="tests")
        schema_id = writer.register_schema(
            "sluice.JointState", "jsonschema", json.dumps(JOINT_SCHEMA).encode()
        )
        a = writer.register_channel("/a", "json", schema_id)
        b = writer.register_channel("/b", "json", schema_id)
        writer.add_metadata("episode", dict(EPISODE_META))
        for i in range(messages):
            t = 1_000_000_000 + i * 10_000_000
            payload = json.dumps({"stamp_ns": t - 2_000_000, "position": [i * 0.1] * 7}).encode()
            writer.add_message(a if i % 2 == 0 else b, log_time=t, publish_time=t, data=payload, sequence=i)
        if attachment:
            writer.add_attachment(
                create_time=5, log_time=6, name="calib.yaml", media_type="text/yaml", data=b"k: 1\n"
            )
        writer.finish()
    return path


@dataclass
class RobotLogSpec:
    """A short robot episode with the TOPICS.md layout; the knobs put defects in."""

    seconds: float = 2.0
    seed: int = 7
    drop_camera_fraction: float = 0.0  # fraction of /cam/front/h264 frames removed
    joint_clock_jump_ns: int = 0  # added to joint log times from mid-episode on
    camera_stamp_offset_ns: int = 0  # hardware stamps of the front camera shifted by this
    extra_channel_encoding: str | None = None
    drift_channel: bool = False  # a second /robot/action channel with another schema
    bad_json_every: int = 0  # every n-th joint payload is not JSON
    chunk_size: int = 64 * 1024
    group_flush: bool = False  # flush per topic group, as the transcoder lays files out
    index: bool = True
    compression: str = "zstd"
    frame_bytes: int = 2000


def write_robot_log(path: Path, spec: RobotLogSpec) -> dict[str, int]:
    """Write the episode; returns the message count per topic.

    Camera payloads are random bytes inside real ``foxglove.CompressedVideo`` messages: the reader treats
    the frame bytes as opaque, and what it must get right is the protobuf envelope and its timestamp.
    """
    rng = random.Random(spec.seed)
    start_ns = 1_700_000_000_000_000_000
    counts: dict[str, int] = {}
    events: list[tuple[int, int, bytes]] = []  # (log_time, channel, payload)
    with path.open("wb") as out:
        writer = Writer(
            out,
            chunk_size=spec.chunk_size if not spec.group_flush else 1 << 40,
            compression=COMPRESSIONS[spec.compression],
            index_types=IndexType.ALL if spec.index else IndexType.NONE,
            repeat_channels=spec.index,
            repeat_schemas=spec.index,
            use_statistics=spec.index,
            use_summary_offsets=spec.index,
        )
        writer.start(profile="", library="tests")
        video_fds = build_file_descriptor_set(CompressedVideo).SerializeToString()
        calib_fds = build_file_descriptor_set(CameraCalibration).SerializeToString()
        video_schema = writer.register_schema("foxglove.CompressedVideo", "protobuf", video_fds)
        calib_schema = writer.register_schema("foxglove.CameraCalibration", "protobuf", calib_fds)
        joint_schema = writer.register_schema(
            "sluice.JointState", "jsonschema", json.dumps(JOINT_SCHEMA).encode()
        )
        action_schema = writer.register_schema("sluice.Action", "jsonschema", b'{"type": "object"}')
        for cam in CAMERAS:
            calib_channel = writer.register_channel(f"/cam/{cam}/calibration", "protobuf", calib_schema)
            calib = CameraCalibration(frame_id=cam, width=320, height=240)
            calib.timestamp.FromNanoseconds(start_ns)
            events.append((start_ns + 1000, calib_channel, calib.SerializeToString()))
            counts[f"/cam/{cam}/calibration"] = 1
            channel = writer.register_channel(f"/cam/{cam}/h264", "protobuf", video_schema)
            n = int(spec.seconds * CAMERA_HZ)
            kept = 0
            for i in range(n):
                if cam == "front" and spec.drop_camera_fraction and rng.random() < spec.drop_camera_fraction:
                    continue
                stamp = start_ns + int(i * 1e9 / CAMERA_HZ)
                log_time = stamp + rng.randint(6_000_000, 16_000_000)
                msg = CompressedVideo(frame_id=cam, format="h264", data=rng.randbytes(spec.frame_bytes))
                msg.timestamp.FromNanoseconds(stamp + (spec.camera_stamp_offset_ns if cam == "front" else 0))
                events.append((log_time, channel, msg.SerializeToString()))
                kept += 1
            counts[f"/cam/{cam}/h264"] = kept
        joint = writer.register_channel(JOINT_TOPIC, "json", joint_schema)
        n = int(spec.seconds * JOINT_HZ)
        for i in range(n):
            stamp = start_ns + int(i * 1e9 / JOINT_HZ)
            log_time = stamp + rng.randint(300_000, 1_200_000)
            if spec.joint_clock_jump_ns and i >= n // 2:
                log_time += spec.joint_clock_jump_ns
            body = {
                "stamp_ns": stamp,
                "position": [0.1] * 7,
                "velocity": [0.0] * 7,
                "effort": [0.0] * 7,
                "gripper": 0.5,
            }
            payload = json.dumps(body).encode()
            if spec.bad_json_every and i % spec.bad_json_every == spec.bad_json_every - 1:
                payload = b"{not json"
            events.append((log_time, joint, payload))
        counts[JOINT_TOPIC] = n
        action = writer.register_channel(ACTION_TOPIC, "json", action_schema)
        n = int(spec.seconds * ACTION_HZ)
        for i in range(n):
            stamp = start_ns + int(i * 1e9 / ACTION_HZ)
            body = {"stamp_ns": stamp, "joint_targets": [0.2] * 7, "gripper": 0.4}
            events.append((stamp + rng.randint(500_000, 2_000_000), action, json.dumps(body).encode()))
        counts[ACTION_TOPIC] = n
        if spec.drift_channel:
            other = writer.register_schema("sluice.ActionV2", "jsonschema", b'{"type": "object", "v": 2}')
            drift = writer.register_channel(ACTION_TOPIC, "json", other)
            events.append((start_ns + 5_000_000, drift, b'{"stamp_ns": %d}' % (start_ns + 4_000_000)))
            counts[ACTION_TOPIC] += 1
        if spec.extra_channel_encoding:
            extra = writer.register_channel("/diagnostics", spec.extra_channel_encoding, 0)
            for i in range(5):
                events.append((start_ns + i * 100_000_000, extra, b"\x00\x01"))
            counts["/diagnostics"] = 5
        writer.add_metadata("episode", dict(EPISODE_META))
        events.sort(key=lambda e: e[0])
        if not spec.group_flush:
            for log_time, channel, payload in events:
                writer.add_message(channel, log_time=log_time, publish_time=log_time, data=payload)
        else:
            # Topic groups as the transcoder lays them out: buffer each group, cut a chunk per full buffer,
            # so chunks of the two groups overlap in time.
            buffers: dict[bool, list[tuple[int, int, bytes]]] = {True: [], False: []}
            for event in events:
                group = event[1] in (joint, action)
                buffers[group].append(event)
                if len(buffers[group]) >= GROUP_CHUNK_MESSAGES:
                    _write_group(writer, buffers[group])
            for group in (True, False):
                _write_group(writer, buffers[group])
        writer.finish()
    return counts


def _write_group(writer: Writer, buffer: list[tuple[int, int, bytes]]) -> None:
    for log_time, channel, payload in buffer:
        writer.add_message(channel, log_time=log_time, publish_time=log_time, data=payload)
    buffer.clear()
    writer.flush()
