"""One synthetic robot episode as an MCAP file, laid out as TOPICS.md describes.

Every stream is generated as arrays first (hardware stamps, jittered log times, payloads), then the
messages of all topics are merged in log-time order, as a logger writes what arrives, into the stock
``mcap`` writer. Camera frames are rendered and encoded lazily inside the merge, so memory stays flat
however long the episode. Content depends only on the episode's seed and the media options.

Defects that change content (dropped frames, backward or jumping log times, a missing topic, an extra
channel with a made-up encoding) are :class:`EpisodeTweaks`; byte-level damage is in
:mod:`pipeline.synth.mutate`.
"""

from __future__ import annotations

import heapq
import json
import logging
import math
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal

import numpy as np
from foxglove_schemas_protobuf.CameraCalibration_pb2 import CameraCalibration
from foxglove_schemas_protobuf.CompressedVideo_pb2 import CompressedVideo
from mcap.writer import LIBRARY_IDENTIFIER, CompressionType, Writer
from mcap_protobuf.schema import register_schema

from pipeline.media.framecode import FrameCode
from pipeline.synth import layout
from pipeline.synth.calibration import NS_PER_S, Calibration, proto_timestamp
from pipeline.synth.encode import AnnexBEncoder, H264Settings
from pipeline.synth.scene import SceneGenerator, yuv420p_buffer
from pipeline.synth.streams import (
    ACTION_DELAY_NS,
    ACTION_STAMP_JITTER_NS,
    CAMERA_DELAY_NS,
    CAMERA_STAMP_JITTER_NS,
    JOINT_DELAY_NS,
    JOINT_STAMP_JITTER_NS,
    Stream,
    StreamTooShortError,
    Trajectory,
    apply_backward_steps,
    apply_clock_jump,
    timing,
)

log = logging.getLogger(__name__)

Compression = Literal["zstd", "lz4", "none"]
_COMPRESSION = {"zstd": CompressionType.ZSTD, "lz4": CompressionType.LZ4, "none": CompressionType.NONE}
LIBRARY = f"sluice-synth; {LIBRARY_IDENTIFIER}"

DIAGNOSTICS_RATE_HZ = 10.0


@dataclass(frozen=True)
class EpisodeMedia:
    """How an episode's media is made; the same for every episode of a drop."""

    width: int = 320
    height: int = 240
    h264: H264Settings = field(default_factory=lambda: H264Settings(zero_latency=True))
    compression: Compression = "zstd"
    chunk_size_bytes: int = 1 << 20  # the stock writer's default: a vendor logger's layout, not ours
    # The frame index drawn into every frame (tests find frames by it); benchmarks that compare codecs turn
    # it off, since high-contrast blocks that change every frame are nothing a camera sees.
    frame_code: bool = True


@dataclass(frozen=True)
class EpisodeSpec:
    """Who recorded what, when: everything that makes one episode different from another."""

    robot_id: str
    session_id: str
    episode_id: str
    task: str
    operator: str
    start_ns: int
    seconds: float
    seed: int
    calibration: Calibration

    @property
    def relpath(self) -> str:
        """Where the episode lives in the drop: ``<robot>/<session>/<episode>.mcap``."""
        return f"{self.robot_id}/{self.session_id}/{self.episode_id}.mcap"

    def metadata(self) -> dict[str, str]:
        """The ``episode`` metadata record."""
        return {
            "robot_id": self.robot_id,
            "session_id": self.session_id,
            "episode_id": self.episode_id,
            "task": self.task,
            "operator": self.operator,
        }


@dataclass(frozen=True)
class EpisodeTweaks:
    """Content defects; the default is a clean episode."""

    omit_topics: frozenset[str] = frozenset()
    drop_camera: str | None = None
    drop_fraction: float = 0.0
    backward_topic: str | None = None
    backward_steps: int = 0
    clock_jump_at_s: float | None = None
    clock_jump_ns: int = 0
    extra_channel_encoding: str | None = None


@dataclass(frozen=True)
class EpisodeResult:
    """What was written: per-topic message counts, the log-time range, and defect details."""

    message_counts: dict[str, int]
    start_ns: int
    end_ns: int
    details: dict[str, object]


def _json(obj: dict) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


class _Channels:
    """Registers schemas and channels on the writer, skipping omitted topics."""

    def __init__(self, writer: Writer, omit: frozenset[str]) -> None:
        self._writer = writer
        self._omit = omit
        self.ids: dict[str, int] = {}
        self._schema_ids: dict[str, int] = {}

    def _schema(self, key: str, make: object) -> int:
        if key not in self._schema_ids:
            self._schema_ids[key] = make()  # type: ignore[operator]
        return self._schema_ids[key]

    def protobuf(self, topic: str, message_class: Any) -> None:
        if topic in self._omit:
            return
        sid = self._schema(
            message_class.DESCRIPTOR.full_name, lambda: register_schema(self._writer, message_class)
        )
        self.ids[topic] = self._writer.register_channel(topic, "protobuf", sid)

    def json(self, topic: str, name: str, schema: dict) -> None:
        if topic in self._omit:
            return
        data = json.dumps(schema, sort_keys=True).encode()
        sid = self._schema(name, lambda: self._writer.register_schema(name, "jsonschema", data))
        self.ids[topic] = self._writer.register_channel(topic, "json", sid)

    def schemaless(self, topic: str, encoding: str) -> None:
        self.ids[topic] = self._writer.register_channel(topic, encoding, 0)


# A message on its way to the writer: (log_time_ns, channel_id, sequence, payload).
_Message = tuple[int, int, int, bytes]


def _camera_messages(
    channel_id: int,
    camera: str,
    camera_index: int,
    stream: Stream,
    frame_indices: np.ndarray,
    spec: EpisodeSpec,
    media: EpisodeMedia,
) -> Iterator[_Message]:
    """Render, encode and wrap one camera's frames; ``frame_indices`` are the frames the camera delivered."""
    fps = Fraction(layout.CAMERA_RATE_HZ).limit_denominator(1001)
    scene = SceneGenerator(media.width, media.height, seed=spec.seed * 16 + camera_index)
    encoder = AnnexBEncoder(media.width, media.height, fps, media.h264)
    buf = yuv420p_buffer(media.width, media.height)[0]
    row_of_frame = {int(k): row for row, k in enumerate(frame_indices)}

    def wrap(units: list) -> Iterator[_Message]:
        for unit in units:
            row = row_of_frame[unit.pts]
            msg = CompressedVideo(
                timestamp=proto_timestamp(int(stream.stamps[row])),
                frame_id=camera,
                data=unit.data,
                format=layout.VIDEO_FORMAT,
            )
            yield int(stream.log_times[row]), channel_id, int(stream.sequences[row]), msg.SerializeToString()

    for k in frame_indices:
        k = int(k)
        yuv = scene.render(
            k / layout.CAMERA_RATE_HZ,
            grain_index=k,
            code=FrameCode(k, camera_index) if media.frame_code else None,
            out=buf,
        )
        yield from wrap(encoder.encode(yuv, pts=k))
    yield from wrap(encoder.flush())


def _state_messages(
    channel_id: int, stream: Stream, traj: Trajectory, spec: EpisodeSpec, rng
) -> Iterator[_Message]:
    t_s = (stream.stamps - spec.start_ns) / NS_PER_S
    pos, vel, gripper = traj.at(t_s)
    # Effort: a gravity-like term of the pose plus sensor noise, N m.
    effort = 4.0 * np.sin(pos) + rng.normal(0.0, 0.05, pos.shape)
    pos_l, vel_l, eff_l = (np.round(a, 6).tolist() for a in (pos, vel, effort))
    grip_l = np.round(gripper, 4).tolist()
    for i in range(len(stream.stamps)):
        payload = _json(
            {
                "stamp_ns": int(stream.stamps[i]),
                "position": pos_l[i],
                "velocity": vel_l[i],
                "effort": eff_l[i],
                "gripper": grip_l[i],
            }
        )
        yield int(stream.log_times[i]), channel_id, int(stream.sequences[i]), payload


def _action_messages(
    channel_id: int, stream: Stream, traj: Trajectory, spec: EpisodeSpec, rng
) -> Iterator[_Message]:
    # The policy commands where the arm will be 50 ms later.
    t_s = (stream.stamps - spec.start_ns) / NS_PER_S + 0.05
    pos, _, gripper = traj.at(t_s)
    targets = np.round(pos + rng.normal(0.0, 0.002, pos.shape), 6).tolist()
    grip = (gripper > 0.5).astype(float).tolist()
    for i in range(len(stream.stamps)):
        payload = _json({"stamp_ns": int(stream.stamps[i]), "joint_targets": targets[i], "gripper": grip[i]})
        yield int(stream.log_times[i]), channel_id, int(stream.sequences[i]), payload


def _diagnostic_messages(channel_id: int, stream: Stream, rng) -> Iterator[_Message]:
    temps = rng.normal(41.0, 0.5, len(stream.stamps))
    for i in range(len(stream.stamps)):
        # A vendor's packed struct: stamp, motor temperature (C), bus voltage (V).
        payload = struct.pack("<qff", int(stream.stamps[i]), float(temps[i]), 48.0)
        yield int(stream.log_times[i]), channel_id, int(stream.sequences[i]), payload


def write_episode(
    path: Path, spec: EpisodeSpec, media: EpisodeMedia, tweaks: EpisodeTweaks | None = None
) -> EpisodeResult:
    """Write one episode to ``path`` (via a temporary name, so a crash leaves no half file)."""
    tweaks = tweaks or EpisodeTweaks()
    rng = np.random.default_rng([spec.seed, 0xE915])
    details: dict[str, object] = {}
    cameras = {
        camera: timing(
            rng, spec.start_ns, layout.CAMERA_RATE_HZ, spec.seconds, CAMERA_STAMP_JITTER_NS, CAMERA_DELAY_NS
        )
        for camera in layout.CAMERA_NAMES
    }
    joints = timing(
        rng, spec.start_ns, layout.JOINT_STATE_RATE_HZ, spec.seconds, JOINT_STAMP_JITTER_NS, JOINT_DELAY_NS
    )
    actions = timing(
        rng, spec.start_ns, layout.ACTION_RATE_HZ, spec.seconds, ACTION_STAMP_JITTER_NS, ACTION_DELAY_NS
    )
    diagnostics = timing(rng, spec.start_ns, DIAGNOSTICS_RATE_HZ, spec.seconds, 0, JOINT_DELAY_NS)
    traj = Trajectory.draw(rng)
    payload_rng = np.random.default_rng([spec.seed, 0xDA7A])

    frames = {camera: np.arange(len(s.stamps)) for camera, s in cameras.items()}
    if tweaks.drop_camera is not None:
        stream = cameras[tweaks.drop_camera]
        expected = len(stream.stamps)
        dropped = math.ceil(tweaks.drop_fraction * expected)
        if dropped >= expected:
            raise StreamTooShortError(expected, f"dropping {tweaks.drop_fraction:.0%} of its frames")
        # Never the first frame: the stream still starts where it should, only its middle has holes.
        gone = rng.choice(np.arange(1, expected), size=dropped, replace=False)
        keep = np.setdiff1d(np.arange(expected), gone)
        frames[tweaks.drop_camera] = keep
        cameras[tweaks.drop_camera] = Stream(
            stream.stamps[keep], stream.log_times[keep], stream.sequences[keep]
        )
        details.update(
            camera_topic=layout.camera_topic(tweaks.drop_camera),
            frames_expected=expected,
            frames_dropped=dropped,
            drop_fraction=dropped / expected,
        )
    if tweaks.backward_topic is not None:
        target = {layout.JOINT_STATE_TOPIC: joints, layout.ACTION_TOPIC: actions}[tweaks.backward_topic]
        details.update(
            backward_topic=tweaks.backward_topic,
            backward_at_sequence=apply_backward_steps(target, tweaks.backward_steps, rng),
        )
    if tweaks.clock_jump_at_s is not None:
        at_ns = spec.start_ns + int(tweaks.clock_jump_at_s * NS_PER_S)
        moved = sum(
            apply_clock_jump(s, at_ns, tweaks.clock_jump_ns)
            for s in (*cameras.values(), joints, actions, diagnostics)
        )
        details.update(clock_jump_at_ns=at_ns, clock_jump_ns=tweaks.clock_jump_ns, messages_after_jump=moved)

    if tweaks.omit_topics:
        details.update(omitted_topics=sorted(tweaks.omit_topics))
    tmp = path.with_name(path.name + ".part")
    path.parent.mkdir(parents=True, exist_ok=True)
    counts: dict[str, int] = {}
    first_ns = last_ns = None
    with open(tmp, "wb") as fh:
        writer = Writer(fh, chunk_size=media.chunk_size_bytes, compression=_COMPRESSION[media.compression])
        writer.start(profile="", library=LIBRARY)
        channels = _Channels(writer, tweaks.omit_topics)
        for camera in layout.CAMERA_NAMES:
            channels.protobuf(layout.calibration_topic(camera), CameraCalibration)
        for camera in layout.CAMERA_NAMES:
            channels.protobuf(layout.camera_topic(camera), CompressedVideo)
        channels.json(
            layout.JOINT_STATE_TOPIC, layout.JOINT_STATE_SCHEMA_NAME, layout.JOINT_STATE_JSON_SCHEMA
        )
        channels.json(layout.ACTION_TOPIC, layout.ACTION_SCHEMA_NAME, layout.ACTION_JSON_SCHEMA)
        if tweaks.extra_channel_encoding is not None:
            channels.schemaless(layout.DIAGNOSTICS_TOPIC, tweaks.extra_channel_encoding)
            details.update(topic=layout.DIAGNOSTICS_TOPIC, message_encoding=tweaks.extra_channel_encoding)
        writer.add_metadata(layout.EPISODE_METADATA_NAME, spec.metadata())

        ids = channels.ids
        sources: list[Iterator[_Message]] = []
        calib_msgs: list[_Message] = []
        for camera in layout.CAMERA_NAMES:
            topic = layout.calibration_topic(camera)
            if topic in ids:
                msg = spec.calibration.camera(camera).to_message(camera, spec.start_ns)
                calib_msgs.append((spec.start_ns, ids[topic], 0, msg.SerializeToString()))
        sources.append(iter(calib_msgs))
        for index, camera in enumerate(layout.CAMERA_NAMES):
            topic = layout.camera_topic(camera)
            if topic in ids:
                sources.append(
                    _camera_messages(ids[topic], camera, index, cameras[camera], frames[camera], spec, media)
                )
        if layout.JOINT_STATE_TOPIC in ids:
            sources.append(_state_messages(ids[layout.JOINT_STATE_TOPIC], joints, traj, spec, payload_rng))
        if layout.ACTION_TOPIC in ids:
            sources.append(_action_messages(ids[layout.ACTION_TOPIC], actions, traj, spec, payload_rng))
        if layout.DIAGNOSTICS_TOPIC in ids:
            sources.append(_diagnostic_messages(ids[layout.DIAGNOSTICS_TOPIC], diagnostics, payload_rng))

        topic_of = {cid: topic for topic, cid in ids.items()}
        # A logger writes in arrival order; merge keeps each topic's own order (even a backward one).
        for log_ns, channel_id, sequence, payload in heapq.merge(*sources, key=lambda m: m[0]):
            writer.add_message(
                channel_id, log_time=log_ns, data=payload, publish_time=log_ns, sequence=sequence
            )
            topic = topic_of[channel_id]
            counts[topic] = counts.get(topic, 0) + 1
            first_ns = log_ns if first_ns is None else min(first_ns, log_ns)
            last_ns = log_ns if last_ns is None else max(last_ns, log_ns)
        writer.finish()
    os.replace(tmp, path)
    log.debug("wrote %s: %s", path, counts)
    return EpisodeResult(message_counts=counts, start_ns=first_ns or 0, end_ns=last_ns or 0, details=details)
