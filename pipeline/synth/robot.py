"""One synthetic robot episode as an MCAP file, laid out as TOPICS.md describes.

Every stream is generated as arrays first (hardware stamps, jittered log times, payloads), then the
messages of all topics are merged in log-time order, as a logger writes what arrives, into the stock
``mcap`` writer. Camera frames are rendered and encoded lazily inside the merge, so memory stays flat
however long the episode. Content depends only on the episode's seed and the media options.

The messages' shapes come from the media's *flavor* (:mod:`pipeline.synth.flavors`): the default is
TOPICS.md's (protobuf H.264 cameras, JSON state and actions); others are what ROS 2 and Foxglove fleets
record (JPEG, PNG, raw and H.265 cameras, CDR JointState...).

Defects that change content (dropped frames, backward or jumping log times, a missing topic, an extra
channel with a made-up encoding, a corrupt picture, joints renamed mid-episode) are
:class:`EpisodeTweaks`; byte-level damage is in :mod:`pipeline.synth.mutate`.
"""

from __future__ import annotations

import functools
import heapq
import json
import logging
import math
import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal

import numpy as np
from foxglove_schemas_protobuf.CameraCalibration_pb2 import CameraCalibration
from foxglove_schemas_protobuf.CompressedImage_pb2 import CompressedImage
from foxglove_schemas_protobuf.CompressedVideo_pb2 import CompressedVideo
from foxglove_schemas_protobuf.PoseInFrame_pb2 import PoseInFrame
from foxglove_schemas_protobuf.RawImage_pb2 import RawImage
from mcap.writer import LIBRARY_IDENTIFIER, CompressionType, Writer
from mcap_protobuf.schema import register_schema

from pipeline.media.framecode import FrameCode
from pipeline.synth import flavors, layout
from pipeline.synth import ros2 as ros2_msgs
from pipeline.synth.calibration import NS_PER_S, Calibration, proto_timestamp
from pipeline.synth.encode import AnnexBEncoder, H264Settings, HevcAnnexBEncoder, StillEncoder, raw_picture
from pipeline.synth.flavors import Flavor
from pipeline.synth.footage import FootageScene
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
    flavor: str = "default"  # see pipeline.synth.flavors
    pixel_encoding: str = "rgb8"  # raw flavors' pixel encoding (ROS name)
    # A video file the cameras film instead of the procedural scene (pipeline.synth.footage): each camera
    # sees its own window of it. None: the procedural scene.
    footage: str | None = None


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
    corrupt_image_camera: str | None = None  # this camera's picture at corrupt_image_frame is damaged
    corrupt_image_frame: int = 0
    rename_joints_at_s: float | None = None  # JointState names change from this time on (ROS flavors)


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

    def ros2(self, topic: str, schema_name: str) -> None:
        if topic in self._omit:
            return
        data = ros2_msgs.MSGDEFS[schema_name].encode()
        sid = self._schema(schema_name, lambda: self._writer.register_schema(schema_name, "ros2msg", data))
        self.ids[topic] = self._writer.register_channel(topic, "cdr", sid)

    def schemaless(self, topic: str, encoding: str) -> None:
        self.ids[topic] = self._writer.register_channel(topic, encoding, 0)


# A message on its way to the writer: (log_time_ns, channel_id, sequence, payload).
_Message = tuple[int, int, int, bytes]


class _Pictures:
    """Turns rendered yuv420p frames into a camera's pictures: video access units (which may come out
    after their frame), still images or raw pixels, one per frame."""

    def __init__(self, flavor: Flavor, media: EpisodeMedia, fps: Fraction) -> None:
        self.flavor = flavor
        self.media = media
        self._video: AnnexBEncoder | None = None
        self._still: StillEncoder | None = None
        if flavor.camera == "video":
            make = HevcAnnexBEncoder if flavor.format == "h265" else AnnexBEncoder
            self._video = make(media.width, media.height, fps, media.h264)
        elif flavor.camera == "image":
            self._still = StillEncoder(media.width, media.height, flavor.format)

    def add(self, yuv: np.ndarray, k: int) -> list[tuple[int, bytes, int]]:
        """``(frame index, data, step)`` of what came out (step only for raw pixels)."""
        if self._video is not None:
            return [(u.pts, u.data, 0) for u in self._video.encode(yuv, pts=k)]
        if self._still is not None:
            return [(k, self._still.encode(yuv), 0)]
        data, step = raw_picture(yuv, self.media.pixel_encoding, self.media.width, self.media.height)
        return [(k, data, step)]

    def flush(self) -> list[tuple[int, bytes, int]]:
        return [(u.pts, u.data, 0) for u in self._video.flush()] if self._video is not None else []


def _damage(flavor: Flavor, media: EpisodeMedia, data: bytes, step: int) -> tuple[bytes, int]:
    """A corrupt picture: a still image cut at 60 % of its bytes (a frame lost mid-transfer), a raw picture
    whose ``step`` claims one byte less than a row (a driver's stride bug)."""
    if flavor.camera == "raw":
        from pipeline.families import pixel_layout

        pixel = pixel_layout(media.pixel_encoding)
        assert pixel is not None
        return data, media.width * pixel.bytes_per_pixel - 1
    return data[: len(data) * 6 // 10], step


def _envelope(
    flavor: Flavor, camera: str, media: EpisodeMedia, stamp_ns: int, data: bytes, step: int
) -> bytes:
    """One camera message of the flavor's family around a picture."""
    if flavor.ros2:
        if flavor.camera == "video":
            fields: dict[str, Any] = {
                "timestamp": ros2_msgs.ros_time(stamp_ns), "frame_id": camera, "data": data,
                "format": flavor.format,
            }  # fmt: skip
        elif flavor.camera == "image":
            fields = {"header": ros2_msgs.header(stamp_ns, camera), "format": flavor.format, "data": data}
        else:
            fields = {
                "header": ros2_msgs.header(stamp_ns, camera), "height": media.height, "width": media.width,
                "encoding": media.pixel_encoding, "is_bigendian": 0, "step": step, "data": data,
            }  # fmt: skip
        return ros2_msgs.encoder(flavor.camera_schema())(fields)
    stamp = proto_timestamp(stamp_ns)
    if flavor.camera == "video":
        msg: Any = CompressedVideo(timestamp=stamp, frame_id=camera, data=data, format=flavor.format)
    elif flavor.camera == "image":
        msg = CompressedImage(timestamp=stamp, frame_id=camera, data=data, format=flavor.format)
    else:
        msg = RawImage(
            timestamp=stamp, frame_id=camera, width=media.width, height=media.height,
            encoding=media.pixel_encoding, step=step, data=data,
        )  # fmt: skip
    return msg.SerializeToString()


def _camera_messages(
    channel_id: int,
    camera: str,
    camera_index: int,
    stream: Stream,
    frame_indices: np.ndarray,
    spec: EpisodeSpec,
    media: EpisodeMedia,
    corrupt_frame: int | None = None,
) -> Iterator[_Message]:
    """Render, encode and wrap one camera's frames; ``frame_indices`` are the frames the camera delivered;
    the picture of frame ``corrupt_frame`` (if any) is damaged (:func:`_damage`)."""
    flavor = flavors.flavor(media.flavor)
    fps = Fraction(layout.CAMERA_RATE_HZ).limit_denominator(1001)
    scene: SceneGenerator | FootageScene
    if media.footage is not None:
        scene = FootageScene(media.footage, media.width, media.height, camera_index, len(layout.CAMERA_NAMES))
    else:
        scene = SceneGenerator(media.width, media.height, seed=spec.seed * 16 + camera_index)
    pictures = _Pictures(flavor, media, fps)
    buf = yuv420p_buffer(media.width, media.height)[0]
    row_of_frame = {int(k): row for row, k in enumerate(frame_indices)}

    def wrap(made: list[tuple[int, bytes, int]]) -> Iterator[_Message]:
        for k, data, step in made:
            if k == corrupt_frame:
                data, step = _damage(flavor, media, data, step)
            row = row_of_frame[k]
            payload = _envelope(flavor, camera, media, int(stream.stamps[row]), data, step)
            yield int(stream.log_times[row]), channel_id, int(stream.sequences[row]), payload

    for k in frame_indices:
        k = int(k)
        yuv = scene.render(
            k / layout.CAMERA_RATE_HZ,
            grain_index=k,
            code=FrameCode(k, camera_index) if media.frame_code else None,
            out=buf,
        )
        yield from wrap(pictures.add(yuv, k))
    yield from wrap(pictures.flush())


def _state_values(stream: Stream, traj: Trajectory, spec: EpisodeSpec, rng) -> tuple[np.ndarray, ...]:
    """Positions (rad), velocities (rad/s), efforts (N m) and gripper openings at the stream's stamps."""
    t_s = (stream.stamps - spec.start_ns) / NS_PER_S
    pos, vel, gripper = traj.at(t_s)
    # Effort: a gravity-like term of the pose plus sensor noise, N m.
    effort = 4.0 * np.sin(pos) + rng.normal(0.0, 0.05, pos.shape)
    return np.round(pos, 6), np.round(vel, 6), np.round(effort, 6), np.round(gripper, 4)


def _action_values(stream: Stream, traj: Trajectory, spec: EpisodeSpec, rng) -> tuple[np.ndarray, np.ndarray]:
    """Joint targets (rad) and gripper commands (0 or 1) at the stream's stamps."""
    # The policy commands where the arm will be 50 ms later.
    t_s = (stream.stamps - spec.start_ns) / NS_PER_S + 0.05
    pos, _, gripper = traj.at(t_s)
    targets = np.round(pos + rng.normal(0.0, 0.002, pos.shape), 6)
    return targets, (gripper > 0.5).astype(float)


def _messages(channel_id: int, stream: Stream, make: Callable[[int], bytes]) -> Iterator[_Message]:
    for i in range(len(stream.stamps)):
        yield int(stream.log_times[i]), channel_id, int(stream.sequences[i]), make(i)


def _state_messages(
    channel_id: int, stream: Stream, traj: Trajectory, spec: EpisodeSpec, rng
) -> Iterator[_Message]:
    pos, vel, effort, gripper = (a.tolist() for a in _state_values(stream, traj, spec, rng))

    def make(i: int) -> bytes:
        return _json(
            {
                "stamp_ns": int(stream.stamps[i]),
                "position": pos[i],
                "velocity": vel[i],
                "effort": effort[i],
                "gripper": gripper[i],
            }
        )

    return _messages(channel_id, stream, make)


def _action_messages(
    channel_id: int, stream: Stream, traj: Trajectory, spec: EpisodeSpec, rng
) -> Iterator[_Message]:
    targets, grip = (a.tolist() for a in _action_values(stream, traj, spec, rng))

    def make(i: int) -> bytes:
        return _json({"stamp_ns": int(stream.stamps[i]), "joint_targets": targets[i], "gripper": grip[i]})

    return _messages(channel_id, stream, make)


def _diagnostic_messages(channel_id: int, stream: Stream, rng) -> Iterator[_Message]:
    temps = rng.normal(41.0, 0.5, len(stream.stamps))
    for i in range(len(stream.stamps)):
        # A vendor's packed struct: stamp, motor temperature (C), bus voltage (V).
        payload = struct.pack("<qff", int(stream.stamps[i]), float(temps[i]), 48.0)
        yield int(stream.log_times[i]), channel_id, int(stream.sequences[i]), payload


@dataclass
class _Robot:
    """The state and action streams of a flavor: timing per topic, and what writes each topic."""

    streams: dict[str, Stream]
    writers: dict[str, Callable[[int], Iterator[_Message]]]  # topic -> (channel id -> messages)


def _robot_streams(
    flavor: Flavor, joints: Stream, actions: Stream, traj: Trajectory, spec: EpisodeSpec, payload_rng,
    extra: dict[str, Stream], tweaks: EpisodeTweaks,
) -> _Robot:  # fmt: skip
    """The flavor's state and action topics (see :mod:`pipeline.synth.flavors`)."""
    streams = {layout.JOINT_STATE_TOPIC: joints, **extra}
    writers: dict[str, Callable[[int], Iterator[_Message]]] = {}
    if not flavor.ros2:
        streams[layout.ACTION_TOPIC] = actions
        writers[layout.JOINT_STATE_TOPIC] = lambda cid: _state_messages(cid, joints, traj, spec, payload_rng)
        writers[layout.ACTION_TOPIC] = lambda cid: _action_messages(cid, actions, traj, spec, payload_rng)
        if flavors.EE_POSE_TOPIC in extra:
            pose = extra[flavors.EE_POSE_TOPIC]
            pose_pos = traj.at((pose.stamps - spec.start_ns) / NS_PER_S)[0]
            writers[flavors.EE_POSE_TOPIC] = lambda cid: _messages(
                cid, pose, flavors.foxglove_pose(pose.stamps, pose_pos)
            )
        return _Robot(streams, writers)
    streams[flavors.JOINT_COMMAND_TOPIC] = actions
    pos, vel, effort, gripper = _state_values(joints, traj, spec, payload_rng)
    targets, grip = _action_values(actions, traj, spec, payload_rng)
    rename_from = None
    if tweaks.rename_joints_at_s is not None:
        at_ns = spec.start_ns + int(tweaks.rename_joints_at_s * NS_PER_S)
        rename_from = int(np.searchsorted(joints.stamps, at_ns))

    def cdr(schema: str, make: Callable[[int], dict[str, Any]]) -> Callable[[int], bytes]:
        encode = ros2_msgs.encoder(schema)
        return lambda i: encode(make(i))

    def at(topic: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return traj.at((extra[topic].stamps - spec.start_ns) / NS_PER_S)

    pose, twist = extra[flavors.EE_POSE_TOPIC], extra[flavors.EE_TWIST_TOPIC]
    grip_stream = extra[flavors.GRIPPER_COMMAND_TOPIC]
    grip_cmd = (traj.at((grip_stream.stamps - spec.start_ns) / NS_PER_S)[2] > 0.5).astype(float)
    makers = {
        layout.JOINT_STATE_TOPIC: (
            joints,
            cdr(
                ros2_msgs.JOINT_STATE,
                flavors.ros2_joint_state(joints.stamps, pos, vel, effort, gripper, rename_from),
            ),
        ),
        flavors.EE_POSE_TOPIC: (
            pose,
            cdr(ros2_msgs.POSE_STAMPED, flavors.ros2_pose(pose.stamps, at(flavors.EE_POSE_TOPIC)[0])),
        ),
        flavors.JOINT_COMMAND_TOPIC: (
            actions,
            cdr(ros2_msgs.FLOAT64_MULTI_ARRAY, flavors.ros2_joint_command(targets, grip)),
        ),
        flavors.EE_TWIST_TOPIC: (
            twist,
            cdr(ros2_msgs.TWIST_STAMPED, flavors.ros2_twist(twist.stamps, at(flavors.EE_TWIST_TOPIC)[1])),
        ),
        flavors.GRIPPER_COMMAND_TOPIC: (
            grip_stream,
            cdr(ros2_msgs.GRIPPER_COMMAND, flavors.ros2_gripper(grip_stream.stamps, grip_cmd)),
        ),
    }
    for topic, (stream, make) in makers.items():
        writers[topic] = functools.partial(_bound_messages, stream, make)
    return _Robot(streams, writers)


def _bound_messages(stream: Stream, make: Callable[[int], bytes], channel_id: int) -> Iterator[_Message]:
    return _messages(channel_id, stream, make)


#: The CDR schema of each state and action topic of the ROS flavors.
ROS2_SERIES_SCHEMAS: dict[str, str] = {
    layout.JOINT_STATE_TOPIC: ros2_msgs.JOINT_STATE,
    flavors.EE_POSE_TOPIC: ros2_msgs.POSE_STAMPED,
    flavors.JOINT_COMMAND_TOPIC: ros2_msgs.FLOAT64_MULTI_ARRAY,
    flavors.EE_TWIST_TOPIC: ros2_msgs.TWIST_STAMPED,
    flavors.GRIPPER_COMMAND_TOPIC: ros2_msgs.GRIPPER_COMMAND,
}
#: Rates of the extra streams of the non-default flavors.
EXTRA_RATES_HZ: dict[str, float] = {
    flavors.EE_POSE_TOPIC: flavors.EE_POSE_RATE_HZ,
    flavors.EE_TWIST_TOPIC: flavors.EE_TWIST_RATE_HZ,
    flavors.GRIPPER_COMMAND_TOPIC: flavors.GRIPPER_COMMAND_RATE_HZ,
}


def write_episode(
    path: Path, spec: EpisodeSpec, media: EpisodeMedia, tweaks: EpisodeTweaks | None = None
) -> EpisodeResult:
    """Write one episode to ``path`` (via a temporary name, so a crash leaves no half file)."""
    tweaks = tweaks or EpisodeTweaks()
    flavor = flavors.flavor(media.flavor)
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
    # the extra streams are drawn after everything the default flavor draws: its bytes stay as they were
    extra_topics = [t for t in (*flavor.state_topics, *flavor.action_topics) if t in EXTRA_RATES_HZ]
    extra = {
        t: timing(rng, spec.start_ns, EXTRA_RATES_HZ[t], spec.seconds, JOINT_STAMP_JITTER_NS, JOINT_DELAY_NS)
        for t in extra_topics
    }

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
            camera_topic=flavor.camera_topic(tweaks.drop_camera),
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
            for s in (*cameras.values(), joints, actions, diagnostics, *extra.values())
        )
        details.update(clock_jump_at_ns=at_ns, clock_jump_ns=tweaks.clock_jump_ns, messages_after_jump=moved)
    corrupt_frame = None
    if tweaks.corrupt_image_camera is not None:
        if flavor.camera == "video":
            raise ValueError(f"flavor {flavor.name} has video cameras: no picture stands alone to corrupt")
        corrupt_frame = int(frames[tweaks.corrupt_image_camera][tweaks.corrupt_image_frame])
        details.update(
            camera_topic=flavor.camera_topic(tweaks.corrupt_image_camera),
            corrupt_frame=tweaks.corrupt_image_frame,
            damage="row step one byte short of a row"
            if flavor.camera == "raw"
            else "cut at 60 % of its bytes",
        )
    if tweaks.rename_joints_at_s is not None:
        if not flavor.ros2:
            raise ValueError(f"flavor {flavor.name} has no named joints to rename")
        details.update(renamed_joint=list(flavors.RENAMED_JOINT), renamed_at_s=tweaks.rename_joints_at_s)
    robot = _robot_streams(flavor, joints, actions, traj, spec, payload_rng, extra, tweaks)

    if tweaks.omit_topics:
        details.update(omitted_topics=sorted(tweaks.omit_topics))
    tmp = path.with_name(path.name + ".part")
    path.parent.mkdir(parents=True, exist_ok=True)
    counts: dict[str, int] = {}
    first_ns = last_ns = None
    with open(tmp, "wb") as fh:
        writer = Writer(fh, chunk_size=media.chunk_size_bytes, compression=_COMPRESSION[media.compression])
        writer.start(profile="ros2" if flavor.ros2 else "", library=LIBRARY)
        channels = _Channels(writer, tweaks.omit_topics)
        if not flavor.ros2:  # a ROS fleet's calibrations come from the sidecar
            for camera in layout.CAMERA_NAMES:
                channels.protobuf(layout.calibration_topic(camera), CameraCalibration)
        for camera in layout.CAMERA_NAMES:
            topic = flavor.camera_topic(camera)
            if flavor.ros2:
                channels.ros2(topic, flavor.camera_schema())
            else:
                channels.protobuf(
                    topic,
                    {"video": CompressedVideo, "image": CompressedImage, "raw": RawImage}[flavor.camera],
                )
        for topic in robot.writers:
            if flavor.ros2:
                channels.ros2(topic, ROS2_SERIES_SCHEMAS[topic])
            elif topic == layout.JOINT_STATE_TOPIC:
                channels.json(topic, layout.JOINT_STATE_SCHEMA_NAME, layout.JOINT_STATE_JSON_SCHEMA)
            elif topic == layout.ACTION_TOPIC:
                channels.json(topic, layout.ACTION_SCHEMA_NAME, layout.ACTION_JSON_SCHEMA)
            else:
                channels.protobuf(topic, PoseInFrame)
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
            topic = flavor.camera_topic(camera)
            if topic in ids:
                damaged = corrupt_frame if camera == tweaks.corrupt_image_camera else None
                sources.append(
                    _camera_messages(
                        ids[topic], camera, index, cameras[camera], frames[camera], spec, media, damaged
                    )
                )
        for topic, write in robot.writers.items():
            if topic in ids:
                sources.append(write(ids[topic]))
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
