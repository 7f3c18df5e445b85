"""Read a source robot log into what the transcode needs: camera access units with their stamps, the
state and action streams as series, every other message as it is, and the log's metadata records."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import numpy as np
from foxglove_schemas_protobuf.CompressedVideo_pb2 import CompressedVideo
from google.protobuf.message import DecodeError as ProtobufDecodeError
from mcap.reader import make_reader
from mcap.records import Channel, Message, Schema

from pipeline.config import StampSource, TopicContract
from pipeline.enums import ReasonCode
from pipeline.mcaplog import iter_messages
from pipeline.mcaplog.exceptions import McapInputError
from pipeline.transcode.errors import TranscodeInputError
from pipeline.transcode.profiles import frame_rate
from pipeline.transcode.resample import Series

log = logging.getLogger(__name__)

VIDEO_SCHEMA = "foxglove.CompressedVideo"
H264_FORMAT = "h264"


@dataclass
class SourceCamera:
    """One camera: access units in file (decode) order and the truth stamp of each."""

    name: str
    topic: str
    rate: Fraction
    stamps_ns: list[int] = field(default_factory=list)
    units: list[bytes] = field(default_factory=list)


@dataclass(frozen=True)
class NativeMessage:
    """A source message copied unchanged into the ``native`` group."""

    topic: str
    log_time: int
    publish_time: int
    sequence: int
    data: bytes


@dataclass
class SourceEpisode:
    cameras: list[SourceCamera]
    state: list[Series]
    actions: list[Series]
    native: list[NativeMessage]
    schemas: dict[str, Schema | None]  # topic -> schema of the native channels
    channels: dict[str, Channel]  # topic -> channel of every source channel
    metadata: dict[str, dict[str, str]]


def _truth_stamp(truth: StampSource, decoded_stamp: int | None, message: Message, topic: str) -> int:
    if truth is StampSource.LOG_TIME:
        return message.log_time
    if truth is StampSource.PUBLISH_TIME:
        return message.publish_time
    if decoded_stamp is None:
        raise TranscodeInputError(
            ReasonCode.CONTAINER_ERROR, f"{topic}: message at log time {message.log_time} has no stamp"
        )
    return decoded_stamp


def read_source(path: Path, contract: TopicContract, truth: StampSource) -> SourceEpisode:
    """Read ``path`` once (through the shared MCAP reader) into a :class:`SourceEpisode`.

    Raises :class:`TranscodeInputError` for content the transcode cannot use and
    :class:`~pipeline.mcaplog.McapInputError` for bad bytes (both are recorded rejections).
    """
    cameras = {c.topic: SourceCamera(c.name, c.topic, frame_rate(c.rate_hz)) for c in contract.cameras}
    stamp_fields = {c.topic: c.stamp_field for c in contract.cameras}
    series_specs = {s.topic: s for s in (*contract.state, *contract.actions)}
    series_data: dict[str, tuple[list[int], list[dict]]] = {t: ([], []) for t in series_specs}
    native: list[NativeMessage] = []
    schemas: dict[str, Schema | None] = {}
    channels: dict[str, Channel] = {}
    for schema, channel, message in iter_messages(path):
        topic = channel.topic
        channels.setdefault(topic, channel)
        if topic in cameras:
            camera = cameras[topic]
            if schema is None or schema.name != VIDEO_SCHEMA or channel.message_encoding != "protobuf":
                raise TranscodeInputError(
                    ReasonCode.UNSUPPORTED_ENCODING,
                    f"{topic}: schema {schema.name if schema else None!r} / {channel.message_encoding!r}; "
                    f"allowed: {VIDEO_SCHEMA} / protobuf",
                )
            try:
                video = CompressedVideo.FromString(message.data)
            except ProtobufDecodeError as exc:
                raise TranscodeInputError(ReasonCode.DECODE_ERROR, f"{topic}: {exc}") from None
            if video.format != H264_FORMAT:
                raise TranscodeInputError(
                    ReasonCode.UNSUPPORTED_ENCODING, f"{topic}: format {video.format!r}; allowed: h264"
                )
            stamp = (
                video.timestamp.ToNanoseconds()
                if stamp_fields[topic] and video.HasField("timestamp")
                else None
            )
            camera.stamps_ns.append(_truth_stamp(truth, stamp, message, topic))
            camera.units.append(video.data)
            continue
        schemas.setdefault(topic, schema)
        native.append(
            NativeMessage(topic, message.log_time, message.publish_time, message.sequence, message.data)
        )
        if topic in series_specs:
            spec = series_specs[topic]
            if channel.message_encoding != "json":
                raise TranscodeInputError(
                    ReasonCode.UNSUPPORTED_ENCODING,
                    f"{topic}: message encoding {channel.message_encoding!r}; resampling reads json",
                )
            try:
                record = json.loads(message.data)
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise TranscodeInputError(ReasonCode.DECODE_ERROR, f"{topic}: {exc}") from None
            if not isinstance(record, dict):
                raise TranscodeInputError(
                    ReasonCode.DECODE_ERROR,
                    f"{topic}: the message at log time {message.log_time} is a JSON "
                    f"{type(record).__name__}, not an object of fields",
                )
            value = record.get(spec.stamp_field) if spec.stamp_field else None
            decoded = value if isinstance(value, int) and not isinstance(value, bool) else None
            stamps, records = series_data[topic]
            stamps.append(_truth_stamp(truth, decoded, message, topic))
            records.append(record)
    missing = [t for t, c in cameras.items() if not c.units] + [
        t for t, (s, _) in series_data.items() if not s
    ]
    if missing:
        raise TranscodeInputError(ReasonCode.MISSING_REQUIRED_TOPIC, f"no messages on {', '.join(missing)}")

    def series(specs: Mapping[str, object]) -> list[Series]:
        out = []
        for topic in specs:
            stamps, records = series_data[topic]
            field_name = series_specs[topic].stamp_field
            out.append(Series(topic, np.asarray(stamps, dtype=np.int64), records, field_name))
        return out

    return SourceEpisode(
        cameras=list(cameras.values()),
        state=series({s.topic: s for s in contract.state}),
        actions=series({s.topic: s for s in contract.actions}),
        native=native,
        schemas=schemas,
        channels=channels,
        metadata=read_metadata(path),
    )


def read_metadata(path: Path) -> dict[str, dict[str, str]]:
    """The log's metadata records by name (the last one wins when a name repeats)."""
    try:
        with open(path, "rb") as fh:
            return {m.name: dict(m.metadata) for m in make_reader(fh).iter_metadata()}
    except Exception as exc:  # the stock reader raises bare struct/EOF errors on damage
        raise McapInputError(ReasonCode.CONTAINER_ERROR, f"metadata unreadable: {exc}") from None
