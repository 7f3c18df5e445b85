"""One robot episode on the export's frame grid: camera frames, state and action per frame.

The grid is the first camera's frames in stamp order (frame ``k`` at ``timestamp = k / fps``); every other
camera contributes its frame nearest in time, state and action their latest message at or before the frame.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np

from pipeline.enums import ReasonCode
from pipeline.errors import InputError
from pipeline.mcaplog import decode_json, iter_messages

VIDEO_SCHEMA = "foxglove.CompressedVideo"


@dataclass(frozen=True)
class EpisodeFrames:
    cameras: dict[str, np.ndarray]  # camera -> (n, h, w, 3) uint8
    state: np.ndarray  # (n, d) float32
    action: np.ndarray  # (n, d) float32
    fps: int
    state_names: list[str]
    action_names: list[str]

    @property
    def length(self) -> int:
        return int(self.state.shape[0])


class StreamLayoutError(InputError):
    """An episode's state or action stream is absent, or not the JSON messages the export reads."""


#: The fields the export reads from the state and the action messages (JSON): a vector and the gripper.
STATE_FIELDS = ("position", "gripper")
ACTION_FIELDS = ("joint_targets", "gripper")


def read_episode(path: Path, state_topic: str, action_topic: str) -> EpisodeFrames:
    """The episode's cameras (:func:`camera_topics`), state and action on one frame grid; raises InputError
    when a stream is missing, and :class:`StreamLayoutError` (before decoding anything) when the state or
    action stream is absent or not JSON (:data:`STATE_FIELDS`, :data:`ACTION_FIELDS`)."""
    from mcap.reader import make_reader

    with open(path, "rb") as fh:  # the summary, once: the channels' schemas and encodings
        summary = make_reader(fh).get_summary()
    channels = list(summary.channels.values()) if summary else []
    schemas = summary.schemas if summary else {}
    encodings = {c.topic: c.message_encoding for c in channels}
    for role, topic, fields in (
        ("state", state_topic, STATE_FIELDS),
        ("action", action_topic, ACTION_FIELDS),
    ):
        _require_json(path.name, encodings, role, topic, fields)
    topics = {c.topic: schemas[c.schema_id].name if c.schema_id in schemas else "" for c in channels}
    decoded = {name: _decode_camera(path, topic) for name, topic in camera_topics(topics).items()}
    if not decoded:
        raise InputError(ReasonCode.MISSING_REQUIRED_TOPIC.value, f"{path.name}: no {VIDEO_SCHEMA} camera")
    first = next(iter(decoded.values()))
    grid_ns = first[0]
    if len(grid_ns) < 2:
        raise InputError(ReasonCode.TOO_FEW_FRAMES.value, f"{path.name}: fewer than 2 camera frames")
    fps = round(1e9 / float(np.median(np.diff(grid_ns))))
    frames = {}
    for name, (stamps, images) in decoded.items():
        nearest = np.clip(np.searchsorted(stamps, grid_ns), 0, len(stamps) - 1)
        earlier = np.clip(nearest - 1, 0, len(stamps) - 1)
        pick = np.where(
            np.abs(stamps[earlier] - grid_ns) <= np.abs(stamps[nearest] - grid_ns), earlier, nearest
        )
        frames[name] = images[pick]
    s_ns, s_val = _vectors(path, state_topic, STATE_FIELDS)
    a_ns, a_val = _vectors(path, action_topic, ACTION_FIELDS)
    joints = s_val.shape[1] - 1
    return EpisodeFrames(
        cameras=frames,
        state=_latest(s_ns, s_val, grid_ns),
        action=_latest(a_ns, a_val, grid_ns),
        fps=fps,
        state_names=[f"joint_{i}.pos" for i in range(joints)] + ["gripper.pos"],
        action_names=[f"joint_{i}.pos" for i in range(a_val.shape[1] - 1)] + ["gripper.pos"],
    )


def camera_topics(topics: dict[str, str]) -> dict[str, str]:
    """Camera name -> topic for every compressed-video channel (``/cam/<name>/h264`` -> ``<name>``)."""
    out = {}
    for topic, schema in sorted(topics.items()):
        if schema == VIDEO_SCHEMA and not topic.endswith("/resampled"):
            parts = [p for p in topic.split("/") if p and p not in ("cam", "h264", "image", "compressed")]
            out["_".join(parts) or "camera"] = topic
    return out


def _decode_camera(path: Path, topic: str) -> tuple[np.ndarray, np.ndarray]:
    from foxglove_schemas_protobuf.CompressedVideo_pb2 import CompressedVideo

    decoder = av.CodecContext.create("h264", "r")
    stamps: list[int] = []
    images: list[np.ndarray] = []
    for _schema, _channel, message in iter_messages(path, [topic]):
        msg = CompressedVideo.FromString(message.data)
        stamp = msg.timestamp.seconds * 1_000_000_000 + msg.timestamp.nanos or message.log_time
        stamps.append(stamp)
        packet = av.Packet(msg.data)
        packet.pts = len(stamps) - 1
        try:
            images += [f.to_ndarray(format="rgb24") for f in decoder.decode(packet)]
        except av.FFmpegError as exc:
            raise InputError(ReasonCode.DECODE_ERROR.value, f"{path.name} {topic}: {exc}") from None
    images += [f.to_ndarray(format="rgb24") for f in decoder.decode(None)]
    if not images:
        raise InputError(ReasonCode.TOO_FEW_FRAMES.value, f"{path.name}: no frame decodes on {topic}")
    n = min(len(images), len(stamps))
    order = np.argsort(np.asarray(stamps[:n]), kind="stable")
    return np.asarray(stamps[:n], dtype=np.int64)[order], np.stack(images[:n])[order]


def _require_json(
    name: str, encodings: dict[str, str], role: str, topic: str, fields: tuple[str, str]
) -> None:
    """Refuse an episode whose state or action topic is absent or not JSON: a ROS 2 log's JointState and
    Float64MultiArray (CDR) have other fields, named per joint."""
    wanted = f"the export reads the {role} from {topic}, JSON with {fields[0]} and {fields[1]}"
    if topic not in encodings:
        raise StreamLayoutError(ReasonCode.MISSING_REQUIRED_TOPIC.value, f"{name} has no {topic}: {wanted}")
    if encodings[topic] != "json":
        raise StreamLayoutError(
            ReasonCode.UNSUPPORTED_ENCODING.value, f"{name}: {topic} is {encodings[topic]}, and {wanted}"
        )


def _vectors(path: Path, topic: str, fields: tuple[str, str]) -> tuple[np.ndarray, np.ndarray]:
    stamps, rows = [], []
    for _schema, _channel, message in iter_messages(path, [topic]):
        payload = decode_json(message.data)
        stamps.append(int(payload.get("stamp_ns", message.log_time)))
        rows.append([*payload[fields[0]], payload[fields[1]]])
    if not rows:
        raise InputError(ReasonCode.MISSING_REQUIRED_TOPIC.value, f"{path.name}: no messages on {topic}")
    order = np.argsort(np.asarray(stamps), kind="stable")
    return np.asarray(stamps, dtype=np.int64)[order], np.asarray(rows, dtype=np.float32)[order]


def _latest(stamps: np.ndarray, values: np.ndarray, at_ns: np.ndarray) -> np.ndarray:
    """The latest value at or before each instant (the first value before the stream starts)."""
    index = np.clip(np.searchsorted(stamps, at_ns, side="right") - 1, 0, len(stamps) - 1)
    return values[index]
