"""One robot episode on the export's frame grid: camera frames, state and action per frame.

The grid is the first camera's frames in stamp order (frame ``k`` at ``timestamp = k / fps``); every other
camera contributes its frame nearest in time, state and action their latest value at or before the frame
(never a value from after it, which a policy could not have seen).

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

from pipeline.enums import ReasonCode
from pipeline.errors import InputError
from pipeline.families.table import series_family
from pipeline.mcaplog import decode_json, iter_messages
from pipeline.transcode import layout as transcoded

if TYPE_CHECKING:
    from mcap.records import Channel, Schema

    from pipeline.config import VendorConfig

VIDEO_SCHEMA = "foxglove.CompressedVideo"
#: CompressedVideo ``format`` -> FFmpeg decoder.
DECODERS = {"h264": "h264", "h265": "hevc"}
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

    if vendor.topics is None or not vendor.topics.state or not vendor.topics.actions:
        raise StreamLayoutError(
            ReasonCode.MISSING_REQUIRED_TOPIC.value,
            f"vendor {vendor.name}'s contract lists no state or no action topic: a LeRobot episode needs both",
        )
    with open(path, "rb") as fh:  # the summary, once: the channels' schemas, encodings and metadata
        reader = make_reader(fh)
        summary = reader.get_summary()
        metadata = {m.name: dict(m.metadata) for m in reader.iter_metadata()} if summary else {}
    channels = {c.topic: c for c in summary.channels.values()} if summary else {}
    schemas = summary.schemas if summary else {}
    is_transcoded = transcoded.TRANSCODE_METADATA in metadata
    topic_of = transcoded.resampled_topic if is_transcoded else (lambda topic: topic)
    what = "resampled stream" if is_transcoded else "stream"
    roles: dict[str, list[str]] = {}
    for role, specs in (("state", vendor.topics.state), ("action", vendor.topics.actions)):
        roles[role] = [s.topic for s in specs if topic_of(s.topic) in channels]
        missing = [s.topic for s in specs if s.required and topic_of(s.topic) not in channels]
        if missing or not roles[role]:
            topic = (missing or [s.topic for s in specs])[0]
            raise StreamLayoutError(
                ReasonCode.MISSING_REQUIRED_TOPIC.value,
                f"{path.name} has no {what} {topic_of(topic)}, of the contract's {role} topic {topic}",
            )
    cameras = _cameras(path.name, channels, schemas, metadata.get(transcoded.TRANSCODE_METADATA))
    if is_transcoded:
        read = [t for topics in roles.values() for t in topics]
        streams = {t: _resampled(path, channels[transcoded.resampled_topic(t)], schemas) for t in read}
    else:
        streams = _native(path, vendor)
    optional = {s.topic for s in (*vendor.topics.state, *vendor.topics.actions) if not s.required}
    roles = {role: [t for t in topics if t in streams or t not in optional] for role, topics in roles.items()}
    empty = [t for topics in roles.values() for t in topics if t not in streams]
    if empty or not all(roles.values()):
        raise StreamLayoutError(
            ReasonCode.MISSING_REQUIRED_TOPIC.value,
            f"{path.name}: no state or action messages on {', '.join(empty) or 'any topic of a role'}",
        )
    decoded = {name: _decode_camera(path, topic) for name, topic in cameras.items()}
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


def _cameras(
    name: str,
    channels: Mapping[str, Channel],
    schemas: Mapping[int, Schema],
    transcode: Mapping[str, str] | None,
) -> dict[str, str]:
    """Camera name -> topic: the names the transcode recorded, else every compressed-video channel's."""
    videos = {
        t: c
        for t, c in channels.items()
        if c.schema_id in schemas and schemas[c.schema_id].name == VIDEO_SCHEMA
    }
    if transcode is not None and "cameras" in transcode:
        named = {cam: str(entry["topic"]) for cam, entry in json.loads(transcode["cameras"]).items()}
        found = {cam: topic for cam, topic in sorted(named.items()) if topic in videos}
    else:
        found = _camera_topics({t: VIDEO_SCHEMA for t in videos})
    if not found:
        kinds = sorted({schemas[c.schema_id].name for c in channels.values() if c.schema_id in schemas})
        raise StreamLayoutError(
            ReasonCode.MISSING_REQUIRED_TOPIC.value,
            f"{name} has no {VIDEO_SCHEMA} camera (its schemas: {', '.join(kinds) or 'none'}); the export "
            "decodes compressed video, which the transcode step makes of every camera family",
        )
    return found


def _camera_topics(topics: dict[str, str]) -> dict[str, str]:
    """Camera name -> topic for every compressed-video channel (``/cam/<name>/h264`` -> ``<name>``)."""
    out = {}
    for topic, schema in sorted(topics.items()):
        if schema == VIDEO_SCHEMA and not topic.endswith(transcoded.RESAMPLED_SUFFIX):
            parts = [p for p in topic.split("/") if p and p not in ("cam", "h264", "image", "compressed")]
            out["_".join(parts) or "camera"] = topic
    return out


def _decode_camera(path: Path, topic: str) -> tuple[np.ndarray, np.ndarray]:
    from foxglove_schemas_protobuf.CompressedVideo_pb2 import CompressedVideo

    decoder: Any = None  # a VideoCodecContext, made for the first message's format
    stamps: list[int] = []
    images: list[np.ndarray] = []
    for _schema, _channel, message in iter_messages(path, [topic]):
        msg = CompressedVideo.FromString(message.data)
        if decoder is None:
            if msg.format not in DECODERS:
                raise InputError(
                    ReasonCode.UNSUPPORTED_ENCODING.value,
                    f"{path.name} {topic}: video format {msg.format!r}; the export decodes {', '.join(DECODERS)}",
                )
            decoder = av.CodecContext.create(DECODERS[msg.format], "r")
        stamp = msg.timestamp.seconds * 1_000_000_000 + msg.timestamp.nanos or message.log_time
        stamps.append(stamp)
        packet = av.Packet(msg.data)
        packet.pts = len(stamps) - 1
        try:
            images += [f.to_ndarray(format="rgb24") for f in decoder.decode(packet)]
        except av.FFmpegError as exc:
            raise InputError(ReasonCode.DECODE_ERROR.value, f"{path.name} {topic}: {exc}") from None
    if decoder is not None:
        images += [f.to_ndarray(format="rgb24") for f in decoder.decode(None)]
    if not images:
        raise InputError(ReasonCode.TOO_FEW_FRAMES.value, f"{path.name}: no frame decodes on {topic}")
    n = min(len(images), len(stamps))
    order = np.argsort(np.asarray(stamps[:n]), kind="stable")
    return np.asarray(stamps[:n], dtype=np.int64)[order], np.stack(images[:n])[order]


def _resampled(path: Path, channel: Channel, schemas: Mapping[int, Schema]) -> _Stream:
    """A transcoded episode's resampled stream: JSON records at the grid instants (their MCAP log time)."""
    source_topic = channel.metadata.get(transcoded.SOURCE_TOPIC_KEY, channel.topic)
    interpolated = json.loads(channel.metadata.get(transcoded.INTERPOLATION_KEY, "{}"))
    entries = (
        json.loads(channel.metadata[transcoded.NAMES_KEY])
        if transcoded.NAMES_KEY in channel.metadata
        else None
    )
    schema = schemas[channel.schema_id].name if channel.schema_id in schemas else ""
    stamps, records = [], []
    for _schema, _channel, message in iter_messages(path, [channel.topic]):
        stamps.append(message.log_time)
        records.append(decode_json(message.data))
    fields = [f for f in records[0] if f in interpolated and f not in STAMP_KEYS] if records else []
    axes = _axes(schema.removeprefix(transcoded.RESAMPLED_SCHEMA_PREFIX))
    return _flatten(path.name, source_topic, stamps, records, fields, entries, axes)


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
    leaf = topic.rstrip("/").rsplit("/", 1)[-1] or topic
    names: list[str] = []
    kept: list[str] = []
    for field in fields:
        value = records[0][field]
        if _is_number(value):
            names.append(f"{leaf}.{field}")
        elif isinstance(value, list) and value and all(_is_number(x) for x in value):
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
        row: list[Any] = []
        for field in kept:
            value = record.get(field)
            row += value if isinstance(value, list) else [value]
        if len(row) != len(names) or not all(_is_number(x) for x in row):
            raise StreamLayoutError(
                ReasonCode.SCHEMA_DRIFT.value,
                f"{name}: {topic} message {i} holds other numbers than the first ({', '.join(kept)})",
            )
        rows.append(row)
    order = np.argsort(np.asarray(stamps, dtype=np.int64), kind="stable")
    return _Stream(
        topic,
        np.asarray(stamps, dtype=np.int64)[order],
        np.asarray(rows, dtype=np.float32)[order],
        names,
    )


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


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
