"""One robot episode on the export's frame grid: camera frames, state and action per frame.

The grid is the contract's first camera's frames in stamp order (frame ``k`` at ``timestamp = k / fps``),
from the first frame at which every state and action stream has begun; every other camera contributes its
frame nearest in time, state and action their latest record at or before the frame (a policy cannot have
seen a later one).

State and action are the vendor contract's ``state`` and ``actions`` topics, in contract order, each
message's numbers flattened into one vector per role, as the transcode reads them
(:mod:`pipeline.families.series`): a type's own fields (``JointState`` position, velocity and effort by
joint, ``Float64MultiArray`` data, pose and twist vectors), the contract's ``fields`` when it lists them,
a JSON message's numeric fields. A transcoded episode is read from its resampled streams, a raw one from its
native streams, decoded with the same readers; either way a field of the vector is named after what it is:

* an entry of a named vector: ``<entry>.<field>`` (``joint_1.position``, ``gripper.effort``);
* an axis of a type's vector: ``<topic leaf>.<field>.<axis>`` (``ee_pose.orientation.w``);
* any other vector element: ``<topic leaf>.<field>.<index>``; a number: ``<topic leaf>.<field>``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import av
import numpy as np

from pipeline.config.contract import StampSource
from pipeline.enums import ReasonCode
from pipeline.errors import InputError
from pipeline.families.series import is_number
from pipeline.families.table import series_family
from pipeline.mcaplog import McapInputError, decode_json, iter_messages
from pipeline.mcaplog.exceptions import DecodeError
from pipeline.transcode import layout as transcoded
from pipeline.transcode.profiles import DECODERS  # CompressedVideo format -> FFmpeg decoder

if TYPE_CHECKING:
    from mcap.records import Channel, Schema

    from pipeline.config import VendorConfig
    from pipeline.config.contract import TopicContract

VIDEO_SCHEMA = "foxglove.CompressedVideo"
#: Fields of a resampled record that are its time, not a value.
STAMP_KEYS = frozenset({transcoded.RESAMPLED_STAMP_KEY, transcoded.RESAMPLED_TIME_KEY})


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
    """An episode lacks what the export reads: a state or action stream, a camera it can decode."""


@dataclass(frozen=True)
class _Stream:
    """One state or action topic as arrays: stamps (ns, ascending) and one flat row of numbers per stamp."""

    topic: str
    stamps_ns: np.ndarray
    values: np.ndarray  # (messages, width) float32
    names: list[str]


def read_episode(path: Path, vendor: VendorConfig) -> EpisodeFrames:
    """The episode at ``path`` (a raw log of ``vendor``, or its transcoded output) on one frame grid.

    Raises :class:`StreamLayoutError` before decoding any picture when a state or action topic of the
    contract is missing or the episode has no camera the export decodes, and :class:`InputError` for
    content that does not decode."""
    from mcap.reader import make_reader

    contract = vendor.topics
    if contract is None or not contract.state or not contract.actions:
        raise StreamLayoutError(
            ReasonCode.MISSING_REQUIRED_TOPIC.value,
            f"vendor {vendor.name}'s contract lists no state or no action topic: a LeRobot episode needs both",
        )
    try:  # the summary, once: the channels' schemas, encodings and metadata
        with open(path, "rb") as fh:
            reader = make_reader(fh)
            summary = reader.get_summary()
            metadata = {m.name: dict(m.metadata) for m in reader.iter_metadata()} if summary else {}
    except OSError:
        raise
    except Exception as exc:  # the stock reader raises its own, struct and EOF errors on damage
        raise McapInputError(ReasonCode.CONTAINER_ERROR, f"{path.name}: summary unreadable: {exc}") from None
    if summary is None or not summary.channels:
        raise StreamLayoutError(
            ReasonCode.CONTAINER_ERROR.value,
            f"{path.name} has no summary listing its channels, which the export reads them from "
            "(the transcode writes one into every episode it makes)",
        )
    channels = {c.topic: c for c in summary.channels.values()}
    schemas = summary.schemas
    is_transcoded = transcoded.TRANSCODE_METADATA in metadata
    specs = (*contract.state, *contract.actions)
    # a transcode with resample_rate_hz: null writes no resampled streams: its native copies are read then
    resampled = is_transcoded and any(transcoded.resampled_topic(s.topic) in channels for s in specs)
    topic_of = transcoded.resampled_topic if resampled else (lambda topic: topic)
    what = "resampled stream" if resampled else "stream"
    roles: dict[str, list[str]] = {}
    for role, role_specs in (("state", contract.state), ("action", contract.actions)):
        roles[role] = [s.topic for s in role_specs if topic_of(s.topic) in channels]
        missing = [s.topic for s in role_specs if s.required and topic_of(s.topic) not in channels]
        if missing or not roles[role]:
            topic = (missing or [s.topic for s in role_specs])[0]
            raise StreamLayoutError(
                ReasonCode.MISSING_REQUIRED_TOPIC.value,
                f"{path.name} has no {what} {topic_of(topic)}, of the contract's {role} topic {topic}",
            )
    cameras = _cameras(path.name, channels, schemas, contract, is_transcoded)
    if resampled:
        read = [t for topics in roles.values() for t in topics]
        streams = _resampled(path, [channels[transcoded.resampled_topic(t)] for t in read], schemas)
    else:
        streams = _native(path, vendor)
    optional = {s.topic for s in specs if not s.required}
    roles = {role: [t for t in topics if t in streams or t not in optional] for role, topics in roles.items()}
    empty = [t for topics in roles.values() for t in topics if t not in streams]
    if empty or not all(roles.values()):
        raise StreamLayoutError(
            ReasonCode.MISSING_REQUIRED_TOPIC.value,
            f"{path.name}: no state or action messages on {', '.join(empty) or 'any topic of a role'}",
        )
    # a transcoded camera's payload timestamp is the truth stamp already; a raw one's follows the contract
    stamp_fields: dict[str, str | None] = {c.topic: c.stamp_field for c in contract.cameras}
    truth = vendor.timestamps.truth
    if is_transcoded:
        truth, stamp_fields = StampSource.HARDWARE, dict.fromkeys(cameras.values(), "timestamp")
    by_topic = _decode_cameras(path, {t: stamp_fields.get(t) for t in cameras.values()}, truth)
    decoded = {name: by_topic[topic] for name, topic in cameras.items()}
    grid_ns = next(iter(decoded.values()))[0]
    fps = _fps(path.name, grid_ns)
    # frames before every state and action stream has begun have no value at or before them: left out
    begun = max(int(streams[t].stamps_ns[0]) for topics in roles.values() for t in topics)
    grid_ns = grid_ns[grid_ns >= begun]
    if len(grid_ns) < 2:
        raise InputError(
            ReasonCode.TOO_FEW_FRAMES.value,
            f"{path.name}: fewer than 2 camera frames from {begun} ns, where every state and action stream "
            "has begun",
        )
    frames = {}
    for name, (stamps, images) in decoded.items():
        nearest = np.clip(np.searchsorted(stamps, grid_ns), 0, len(stamps) - 1)
        earlier = np.clip(nearest - 1, 0, len(stamps) - 1)
        pick = np.where(
            np.abs(stamps[earlier] - grid_ns) <= np.abs(stamps[nearest] - grid_ns), earlier, nearest
        )
        frames[name] = images[pick]
    state, state_names = _on_grid([streams[t] for t in roles["state"]], grid_ns)
    action, action_names = _on_grid([streams[t] for t in roles["action"]], grid_ns)
    return EpisodeFrames(
        cameras=frames,
        state=state,
        action=action,
        fps=fps,
        state_names=state_names,
        action_names=action_names,
    )


def _fps(name: str, grid_ns: np.ndarray) -> int:
    """The frame rate of the grid camera: the median interval between its frames, rounded to frames/s."""
    if len(grid_ns) < 2:
        raise InputError(ReasonCode.TOO_FEW_FRAMES.value, f"{name}: fewer than 2 camera frames")
    interval = float(np.median(np.diff(grid_ns)))
    if interval <= 0:
        raise InputError(
            ReasonCode.NON_MONOTONIC_TIME.value,
            f"{name}: most of the first camera's frames share a stamp; a frame grid needs rising stamps",
        )
    fps = round(1e9 / interval)
    if fps < 1:
        raise InputError(
            ReasonCode.TOO_FEW_FRAMES.value,
            f"{name}: the first camera's frames are {interval / 1e9:.1f} s apart; LeRobot needs at least 1 fps",
        )
    return fps


def _cameras(
    name: str,
    channels: Mapping[str, Channel],
    schemas: Mapping[int, Schema],
    contract: TopicContract,
    is_transcoded: bool,
) -> dict[str, str]:
    """The contract's camera name -> topic, in contract order (the first is the frame grid), of every camera
    that is compressed video in this file: all of them in a transcoded episode."""
    videos = {
        t
        for t, c in channels.items()
        if c.message_encoding == "protobuf"
        and c.schema_id in schemas
        and schemas[c.schema_id].name == VIDEO_SCHEMA
    }
    found = {c.name: c.topic for c in contract.cameras if c.topic in videos}
    missing = [c.topic for c in contract.cameras if c.required and c.topic not in videos]
    if missing or not found:
        topic = (missing or [c.topic for c in contract.cameras] or ["(none in the contract)"])[0]
        schema = next(
            (schemas[c.schema_id].name for t, c in channels.items() if t == topic and c.schema_id in schemas),
            None,
        )
        raise StreamLayoutError(
            ReasonCode.MISSING_REQUIRED_TOPIC.value,
            f"{name}: camera {topic} is "
            + (f"{schema} ({channels[topic].message_encoding})" if schema else "absent")
            + f", and the export decodes {VIDEO_SCHEMA} (protobuf)"
            + ("" if is_transcoded else "; the transcode step makes it of every camera family: run it first"),
        )
    return found


class _CameraDecode:
    """One camera's pictures as its messages come, each with its message's index (decode order is not
    display order with B-frames: the decoder hands pictures back by ``pts``, the index)."""

    def __init__(self, name: str, topic: str) -> None:
        self.where = f"{name} {topic}"
        self.decoder: Any = None  # a VideoCodecContext, made for the first message's format
        self.stamps: list[int] = []
        self.images: list[tuple[int, np.ndarray]] = []

    def add(self, data: bytes, stamp: int, video_format: str) -> None:
        if self.decoder is None:
            if video_format not in DECODERS:
                raise InputError(
                    ReasonCode.UNSUPPORTED_ENCODING.value,
                    f"{self.where}: video format {video_format!r}; the export decodes {', '.join(DECODERS)}",
                )
            self.decoder = av.CodecContext.create(DECODERS[video_format], "r")
        self.stamps.append(stamp)
        packet = av.Packet(data)
        packet.pts = len(self.stamps) - 1
        self._take(packet)

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        if self.decoder is not None:
            self._take(None)
        kept = [
            (self.stamps[pts], im)
            for pts, im in self.images
            if pts is not None and 0 <= pts < len(self.stamps)
        ]
        if not kept:
            raise InputError(ReasonCode.TOO_FEW_FRAMES.value, f"{self.where}: no frame decodes")
        kept.sort(key=lambda pair: pair[0])
        return np.asarray([k[0] for k in kept], dtype=np.int64), np.stack([k[1] for k in kept])

    def _take(self, packet: av.Packet | None) -> None:
        try:
            self.images += [(f.pts, f.to_ndarray(format="rgb24")) for f in self.decoder.decode(packet)]
        except av.FFmpegError as exc:
            raise InputError(ReasonCode.DECODE_ERROR.value, f"{self.where}: {exc}") from None


def _decode_cameras(
    path: Path, stamp_fields: Mapping[str, str | None], truth: StampSource
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Topic -> (stamps, pictures in stamp order) of every camera, in one pass over the log; a message's
    stamp is its truth stamp as the transcode takes it (:func:`~pipeline.transcode.source.truth_stamp`)."""
    from foxglove_schemas_protobuf.CompressedVideo_pb2 import CompressedVideo
    from google.protobuf.message import DecodeError as ProtobufDecodeError

    from pipeline.transcode.source import truth_stamp

    cameras = {topic: _CameraDecode(path.name, topic) for topic in stamp_fields}
    for _schema, channel, message in iter_messages(path, list(stamp_fields)):
        camera = cameras[channel.topic]
        try:
            msg = CompressedVideo.FromString(message.data)
        except ProtobufDecodeError as exc:
            raise InputError(
                ReasonCode.DECODE_ERROR.value, f"{camera.where}: message {len(camera.stamps)}: {exc}"
            ) from None
        stamp = truth_stamp(truth, stamp_fields[channel.topic], msg, message, channel.topic)
        camera.add(msg.data, stamp, msg.format)
    return {topic: camera.result() for topic, camera in cameras.items()}


def _resampled(path: Path, channels: Sequence[Channel], schemas: Mapping[int, Schema]) -> dict[str, _Stream]:
    """A transcoded episode's resampled streams, by source topic, in one pass: JSON records at the grid
    instants (their MCAP log time)."""
    read: dict[str, tuple[list[int], list[Any]]] = {c.topic: ([], []) for c in channels}
    for _schema, channel, message in iter_messages(path, list(read)):
        stamps, records = read[channel.topic]
        stamps.append(message.log_time)
        try:
            records.append(decode_json(message.data))
        except DecodeError as exc:
            raise InputError(
                ReasonCode.DECODE_ERROR.value, f"{path.name} {channel.topic}: record {len(records)}: {exc}"
            ) from None
    out = {}
    for channel in channels:
        source_topic = channel.metadata.get(transcoded.SOURCE_TOPIC_KEY, channel.topic)
        interpolated = json.loads(channel.metadata.get(transcoded.INTERPOLATION_KEY, "{}"))
        names = channel.metadata.get(transcoded.NAMES_KEY)
        schema = schemas[channel.schema_id].name if channel.schema_id in schemas else ""
        stamps, records = read[channel.topic]
        first = records[0] if records and isinstance(records[0], Mapping) else {}
        fields = [f for f in first if f in interpolated and f not in STAMP_KEYS]
        axes = _axes(schema.removeprefix(transcoded.RESAMPLED_SCHEMA_PREFIX))
        out[source_topic] = _flatten(
            path.name, source_topic, stamps, records, fields, json.loads(names) if names else None, axes
        )
    return out


def _native(path: Path, vendor: VendorConfig) -> dict[str, _Stream]:
    """A raw log's state and action streams, read and decoded as the transcode reads them (the contract's
    cameras left out: the export decodes those itself)."""
    from pipeline.transcode.source import read_source

    assert vendor.topics is not None
    contract = vendor.topics.model_copy(update={"cameras": ()})
    episode = read_source(path, contract, vendor.timestamps.truth)
    out = {}
    for series in (*episode.state, *episode.actions):
        schema = episode.schemas.get(series.topic)
        axes = _axes(schema.name if schema is not None else None)
        records = list(series.records)
        fields = [f for f in records[0] if f != series.stamp_field and f not in STAMP_KEYS] if records else []
        out[series.topic] = _flatten(
            path.name,
            series.topic,
            series.stamps_ns.tolist(),
            records,
            fields,
            episode.names.get(series.topic),
            axes,
        )
    return out


def _axes(schema_name: str | None) -> dict[str, list[str]]:
    """Field -> axis names, for the vectors a message family gathers from named scalars (``position``:
    ``x``, ``y``, ``z`` of a pose)."""
    family = series_family(schema_name)
    if family is None:
        return {}
    return {p.name: [q.rsplit(".", 1)[-1] for q in p.paths] for p in family.fields if len(p.paths) > 1}


def _flatten(
    name: str,
    topic: str,
    stamps: Sequence[int],
    records: Sequence[Mapping[str, Any]],
    fields: Sequence[str],
    entries: Sequence[str] | None,
    axes: Mapping[str, Sequence[str]],
) -> _Stream:
    """Each record's numbers (a number or a list of numbers per field) in ``fields`` order, one row each."""
    if not records:
        raise StreamLayoutError(ReasonCode.MISSING_REQUIRED_TOPIC.value, f"{name}: no messages on {topic}")
    if not isinstance(records[0], Mapping):
        raise StreamLayoutError(
            ReasonCode.SCHEMA_DRIFT.value, f"{name}: {topic} message 0 is no object of fields"
        )
    leaf = topic.rstrip("/").rsplit("/", 1)[-1] or topic
    names: list[str] = []
    kept: list[str] = []
    for field in fields:
        value = records[0][field]
        if is_number(value):
            names.append(f"{leaf}.{field}")
        elif isinstance(value, list) and value and all(is_number(x) for x in value):
            if entries is not None and len(entries) == len(value):
                names += [f"{entry}.{field}" for entry in entries]
            elif len(axes.get(field, ())) == len(value):
                names += [f"{leaf}.{field}.{axis}" for axis in axes[field]]
            else:
                names += [f"{leaf}.{field}.{i}" for i in range(len(value))]
        else:
            continue  # text, flags, nested objects: not a value a policy reads
        kept.append(field)
    if not kept:
        raise StreamLayoutError(ReasonCode.SCHEMA_DRIFT.value, f"{name}: {topic} has no numeric field")
    rows = []
    for i, record in enumerate(records):
        if not isinstance(record, Mapping):
            raise StreamLayoutError(
                ReasonCode.SCHEMA_DRIFT.value, f"{name}: {topic} message {i} is no object of fields"
            )
        row: list[Any] = []
        for field in kept:
            value = record.get(field)
            row += value if isinstance(value, list) else [value]
        if len(row) != len(names) or not all(is_number(x) for x in row):
            raise StreamLayoutError(
                ReasonCode.SCHEMA_DRIFT.value,
                f"{name}: {topic} message {i} holds other numbers than the first ({', '.join(kept)})",
            )
        rows.append(row)
    with np.errstate(over="ignore"):
        try:
            values = np.asarray(rows, dtype=np.float64).astype(np.float32)
        except OverflowError:  # an integer beyond any float
            values = np.full((1, 1), np.inf, dtype=np.float32)
    if not np.isfinite(values).all():
        bad = (
            sorted({names[j] for j in np.flatnonzero(~np.isfinite(values).all(axis=0))})[:6]
            if values.shape[1] == len(names)
            else []
        )
        raise StreamLayoutError(
            ReasonCode.SCHEMA_DRIFT.value,
            f"{name}: {topic} holds a value that is no finite float32 ({', '.join(bad) or 'an integer beyond any float'})",
        )
    order = np.argsort(np.asarray(stamps, dtype=np.int64), kind="stable")
    return _Stream(topic, np.asarray(stamps, dtype=np.int64)[order], values[order], names)


def _on_grid(streams: Sequence[_Stream], at_ns: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """The streams' latest values at or before each instant, side by side, and their names."""
    columns = [_latest(s.stamps_ns, s.values, at_ns) for s in streams]
    names = [n for s in streams for n in s.names]
    if len(set(names)) != len(names):  # two topics with the same entries (two arms' joints): qualify by topic
        names = [f"{s.topic.strip('/')}/{n}" for s in streams for n in s.names]
    return np.concatenate(columns, axis=1), names


def _latest(stamps: np.ndarray, values: np.ndarray, at_ns: np.ndarray) -> np.ndarray:
    """The latest value at or before each instant (the first value before the stream starts)."""
    index = np.clip(np.searchsorted(stamps, at_ns, side="right") - 1, 0, len(stamps) - 1)
    return values[index]
