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

import functools
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
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
from pipeline.transcode.bitstream import unit_letter
from pipeline.transcode.h264 import KEY_LETTERS
from pipeline.transcode.profiles import DECODERS  # CompressedVideo format -> FFmpeg decoder

if TYPE_CHECKING:
    from mcap.records import Channel, Schema

    from pipeline.config import VendorConfig
    from pipeline.config.contract import TopicContract

VIDEO_SCHEMA = "foxglove.CompressedVideo"
#: Fields of a resampled record that are its time, not a value.
STAMP_KEYS = frozenset({transcoded.RESAMPLED_STAMP_KEY, transcoded.RESAMPLED_TIME_KEY})


#: ``(camera, picture)``: each camera's frames in grid order, the cameras interleaved. A picture is a frame as
#: its decoder made it (YUV, the encoder's input without a conversion to RGB and back); the same frame is
#: handed out again for each further grid frame that shows it.
Pictures = Callable[[], Iterator[tuple[str, av.VideoFrame]]]


@dataclass(frozen=True)
class EpisodeFrames:
    """An episode on its frame grid. Its pictures are not held: :attr:`pictures` decodes them as they are
    taken, so that an episode of any length exports in the memory of a few pictures per camera."""

    sizes: dict[str, tuple[int, int]]  # camera -> (height, width) of its pictures, in contract order
    pictures: Pictures  # every camera's ``length`` frames, read again from the log on each call
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
    names = {topic: name for name, topic in cameras.items()}
    fields = {t: stamp_fields.get(t) for t in cameras.values()}
    plans = _camera_plans(path, fields, truth, names)
    grid_stamps = plans[cameras[next(iter(cameras))]].ordered_stamps
    fps = _fps(path.name, grid_stamps)
    # frames before every state and action stream has begun have no value at or before them: left out
    begun = max(int(streams[t].stamps_ns[0]) for topics in roles.values() for t in topics)
    grid_ns = grid_stamps[grid_stamps >= begun]
    if len(grid_ns) < 2:
        raise InputError(
            ReasonCode.TOO_FEW_FRAMES.value,
            f"{path.name}: fewer than 2 camera frames from {begun} ns, where every state and action stream "
            "has begun",
        )
    for plan in plans.values():
        plan.pick(grid_ns)
    state, state_names = _on_grid([streams[t] for t in roles["state"]], grid_ns)
    action, action_names = _on_grid([streams[t] for t in roles["action"]], grid_ns)
    return EpisodeFrames(
        sizes={names[topic]: plans[topic].size for topic in cameras.values()},
        pictures=functools.partial(_pictures, path, fields, truth, {names[t]: p for t, p in plans.items()}),
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
    if not contract.cameras:
        raise StreamLayoutError(
            ReasonCode.MISSING_REQUIRED_TOPIC.value,
            f"{name}: the vendor's contract names no camera, and a LeRobot dataset's frames are a camera's: "
            "export a dataset of a vendor with cameras",
        )
    if missing or not found:
        topic = (missing or [c.topic for c in contract.cameras])[0]
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


class _CameraPlan:
    """One camera's messages, read once without decoding a picture (their stamps, the first picture a
    decoder can start at, the picture size), then which message each frame of the grid shows."""

    def __init__(self, file: str, camera: str, topic: str) -> None:
        self.where = f"{file} camera {camera} ({topic})"
        self.topic = topic
        self.format = ""
        self.stamps: list[int] = []  # of every message, in log order
        self.first_key: int | None = None  # the first message a decoder can start at
        self.size: tuple[int, int] = (0, 0)  # (height, width) of its pictures
        self.need = np.empty(0, dtype=np.int64)  # grid frame -> message index

    def add(self, data: bytes, stamp: int, video_format: str) -> None:
        index = len(self.stamps)
        self.stamps.append(stamp)
        if self.first_key is not None:
            return
        if video_format not in DECODERS:
            raise InputError(
                ReasonCode.UNSUPPORTED_ENCODING.value,
                f"{self.where}: video format {video_format!r}; the export decodes {', '.join(DECODERS)}",
            )
        try:
            key = unit_letter(video_format, data) in KEY_LETTERS
        except Exception as exc:  # a bitstream the parser cannot read: the decoder would not either
            raise InputError(ReasonCode.DECODE_ERROR.value, f"{self.where}: message {index}: {exc}") from None
        if key:  # the picture size, from the one picture decoded here
            decoder = _decoder(video_format)
            pictures = _decode(decoder, av.Packet(data), self.where) + _decode(decoder, None, self.where)
            if not pictures:
                raise InputError(
                    ReasonCode.DECODE_ERROR.value, f"{self.where}: keyframe {index} decodes to no picture"
                )
            self.first_key, self.format = index, video_format
            self.size = (pictures[0].height, pictures[0].width)

    def _reachable(self) -> tuple[np.ndarray, np.ndarray]:
        """Index and stamp of each message a decoder started at the first keyframe shows: from that
        keyframe on, less the pictures logged after it that show earlier (an open GOP's leading pictures,
        which predict from the anchor before it)."""
        first = self.first_key or 0
        stamps = np.asarray(self.stamps[first:], dtype=np.int64)
        shown = stamps >= self.stamps[first]
        return np.flatnonzero(shown) + first, stamps[shown]

    @property
    def ordered_stamps(self) -> np.ndarray:
        """The stamps of the messages a decoder reaches, ascending."""
        return np.sort(self._reachable()[1], kind="stable")

    def pick(self, grid_ns: np.ndarray) -> None:
        """Each grid instant's picture: the message nearest in time (the earlier one on a tie)."""
        index, stamps = self._reachable()
        order = np.argsort(stamps, kind="stable")
        ordered = stamps[order]
        nearest = np.clip(np.searchsorted(ordered, grid_ns), 0, len(ordered) - 1)
        earlier = np.clip(nearest - 1, 0, len(ordered) - 1)
        at = np.where(
            np.abs(ordered[earlier] - grid_ns) <= np.abs(ordered[nearest] - grid_ns), earlier, nearest
        )
        self.need = index[order[at]]


def _decoder(video_format: str) -> Any:
    return av.CodecContext.create(DECODERS[video_format], "r")


def _decode(decoder: Any, packet: av.Packet | None, where: str) -> list[av.VideoFrame]:
    try:
        return list(decoder.decode(packet))
    except av.FFmpegError as exc:
        raise InputError(ReasonCode.DECODE_ERROR.value, f"{where}: {exc}") from None


def _camera_messages(
    path: Path, stamp_fields: Mapping[str, str | None], truth: StampSource, where: Mapping[str, str]
) -> Iterator[tuple[str, Any, int]]:
    """``(topic, CompressedVideo, truth stamp)`` of every camera message in log order; a message's stamp is
    its truth stamp as the transcode takes it (:func:`~pipeline.transcode.source.truth_stamp`)."""
    from foxglove_schemas_protobuf.CompressedVideo_pb2 import CompressedVideo
    from google.protobuf.message import DecodeError as ProtobufDecodeError

    from pipeline.transcode.source import truth_stamp

    counts = dict.fromkeys(stamp_fields, 0)
    for _schema, channel, message in iter_messages(path, list(stamp_fields)):
        topic = channel.topic
        try:
            msg = CompressedVideo.FromString(message.data)
        except ProtobufDecodeError as exc:
            raise InputError(
                ReasonCode.DECODE_ERROR.value, f"{where[topic]}: message {counts[topic]}: {exc}"
            ) from None
        counts[topic] += 1
        yield topic, msg, truth_stamp(truth, stamp_fields[topic], msg, message, topic)


def _camera_plans(
    path: Path, stamp_fields: Mapping[str, str | None], truth: StampSource, names: Mapping[str, str]
) -> dict[str, _CameraPlan]:
    """Topic -> plan of every camera, in one pass over the log that decodes one picture per camera."""
    plans = {topic: _CameraPlan(path.name, names[topic], topic) for topic in stamp_fields}
    where = {topic: plan.where for topic, plan in plans.items()}
    for topic, msg, stamp in _camera_messages(path, stamp_fields, truth, where):
        plans[topic].add(msg.data, stamp, msg.format)
    for plan in plans.values():
        if plan.first_key is None:
            raise InputError(
                ReasonCode.TOO_FEW_FRAMES.value,
                f"{plan.where}: none of its {len(plan.stamps)} messages is a keyframe a decoder can start at",
            )
    return plans


def _pictures(
    path: Path, stamp_fields: Mapping[str, str | None], truth: StampSource, plans: Mapping[str, _CameraPlan]
) -> Iterator[tuple[str, av.VideoFrame]]:
    """Every camera's grid frames as ``(camera, decoded frame)``, each camera's in grid order, the
    cameras' interleaved as the log holds them: one pass over the log, decoding as it goes; a picture is
    held only until its grid frames are out (with B-frames the decoder hands pictures back in display
    order, by ``pts``: the message index)."""
    cameras = [_Emitter(camera, plan) for camera, plan in plans.items()]
    by_topic = {e.plan.topic: e for e in cameras}
    where = {e.plan.topic: e.plan.where for e in cameras}
    for topic, msg, _stamp in _camera_messages(path, stamp_fields, truth, where):
        emitter = by_topic[topic]
        yield from emitter.feed(msg.data)
        if all(e.done for e in cameras):
            break
    for emitter in cameras:
        yield from emitter.finish()


class _Emitter:
    """One camera's decoder in :func:`_pictures`: messages in, grid frames out in grid order."""

    def __init__(self, camera: str, plan: _CameraPlan) -> None:
        self.camera, self.plan = camera, plan
        self.decoder = _decoder(plan.format)
        self.index = 0  # of the next message
        self.next = 0  # the next grid frame to hand out
        self.last_use = {int(m): g for g, m in enumerate(plan.need)}  # message -> its last grid frame
        self.held: dict[int, av.VideoFrame] = {}

    @property
    def done(self) -> bool:
        return self.next == len(self.plan.need)

    def feed(self, data: bytes) -> Iterator[tuple[str, av.VideoFrame]]:
        index = self.index
        self.index += 1
        if index < (self.plan.first_key or 0) or self.done:
            return iter(())
        packet = av.Packet(data)
        packet.pts = index
        return self._take(_decode(self.decoder, packet, f"{self.plan.where} message {index}"))

    def finish(self) -> Iterator[tuple[str, av.VideoFrame]]:
        if not self.done:
            yield from self._take(_decode(self.decoder, None, self.plan.where))
        if not self.done:
            message = int(self.plan.need[self.next])
            raise InputError(
                ReasonCode.DECODE_ERROR.value,
                f"{self.plan.where}: message {message} (frame {self.next} of the export) decodes to no picture",
            )

    def _take(self, decoded: list[av.VideoFrame]) -> Iterator[tuple[str, av.VideoFrame]]:
        for frame in decoded:
            if frame.pts is None or frame.pts not in self.last_use:
                continue
            if (frame.height, frame.width) != self.plan.size:
                raise InputError(
                    ReasonCode.DECODE_ERROR.value,
                    f"{self.plan.where}: message {frame.pts} is {frame.width}x{frame.height}, the camera's "
                    f"first keyframe {self.plan.size[1]}x{self.plan.size[0]}",
                )
            self.held[frame.pts] = frame
        while not self.done and (message := int(self.plan.need[self.next])) in self.held:
            picture = self.held[message]
            if self.last_use[message] == self.next:
                del self.held[message]
            self.next += 1
            yield self.camera, picture


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
    """A raw log's state and action streams, read and decoded as the transcode reads them: their messages
    alone (the contract's cameras left out: the export decodes those itself)."""
    from pipeline.transcode.source import read_source

    assert vendor.topics is not None
    contract = vendor.topics.model_copy(update={"cameras": ()})
    episode = read_source(path, contract, vendor.timestamps.truth, native=False)
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
