"""Robot-log transcode: one source MCAP in, one training-shaped MCAP out (see :mod:`.layout`).

Cameras are decoded and re-encoded per profile (in encoder processes when an executor is given), state and
actions are resampled once onto a fixed-rate grid, everything is written in topic groups, time-major, to a
staging file that is read back and checked before it is published under its final name. The output
depends only on the source bytes, the config and the code: same input and config, same bytes.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from foxglove_schemas_protobuf.CompressedVideo_pb2 import CompressedVideo
from google.protobuf.timestamp_pb2 import Timestamp
from mcap.reader import make_reader
from mcap_protobuf.schema import build_file_descriptor_set

from pipeline.config import StampSource, TopicContract, TranscodeOptions, VendorConfig
from pipeline.enums import SourceKind
from pipeline.errors import UnknownChoiceError
from pipeline.gcpause import cyclic_gc_paused
from pipeline.transcode import layout
from pipeline.transcode.cameras import EncodedCamera
from pipeline.transcode.encodes import encode_episode
from pipeline.transcode.errors import OutputVerifyError
from pipeline.transcode.groupwriter import GroupedWriter, GroupSpec, OutMessage
from pipeline.transcode.h264 import KEY_LETTERS
from pipeline.transcode.profiles import FOXGLOVE_FORMATS, EncoderSettings
from pipeline.transcode.publish import publish, staged, verified_digest
from pipeline.transcode.resample import NS_PER_S, Resampled
from pipeline.transcode.source import SourceCamera, SourceEpisode

log = logging.getLogger(__name__)

_GROUP_ORDER = {name: i for i, name in enumerate(layout.FILE_ORDER)}


@dataclass(frozen=True)
class RobotTranscodeConfig:
    """What the robot transcode reads of a vendor config: the profile, the topic contract, the truth stamp."""

    options: TranscodeOptions
    contract: TopicContract
    truth: StampSource

    @classmethod
    def from_vendor(cls, vendor: VendorConfig) -> RobotTranscodeConfig:
        if vendor.kind is not SourceKind.MCAP or vendor.topics is None:
            raise UnknownChoiceError("vendor kind for a robot-log transcode", vendor.kind.value, ["mcap"])
        return cls(vendor.transcode, vendor.topics, vendor.timestamps.truth)


@dataclass(frozen=True)
class Provenance:
    """Where an output came from; written into its ``sluice.transcode`` metadata record."""

    source_sha256: str
    config_hash: str
    code_version: str
    calibration_id: str | None = None


@dataclass(frozen=True)
class CameraSummary:
    name: str
    topic: str
    source_frames: int
    frames: int
    width: int
    height: int
    size_bytes: int


@dataclass(frozen=True)
class TranscodeResult:
    path: Path
    sha256: str
    size_bytes: int
    cameras: tuple[CameraSummary, ...]
    resampled_messages: dict[str, int]
    chunks: dict[str, int]
    seconds: float


# the episode's objects are acyclic and freed by reference counting; a full collection of the process's
# heap would find next to nothing and cost up to 0.1 s (pipeline.gcpause)
@cyclic_gc_paused()
def transcode_episode(
    source: Path,
    out: Path,
    config: RobotTranscodeConfig,
    provenance: Provenance,
    *,
    executor: Executor | None = None,
    executor_workers: int | None = None,
    staging_dir: Path | None = None,
) -> TranscodeResult:
    """Transcode the robot log ``source`` into ``out`` (published atomically; see the module docstring).

    ``executor``: where camera encodes run (a process pool sized by the step's CPUs); ``None`` encodes in
    this process, one camera after the other. ``executor_workers``: the pool's process count (unset: one
    task per camera); with more cameras than processes, the cameras are dealt over the processes and each
    process encodes its cameras at once in threads, so that no core idles while the last camera encodes
    alone (three cameras on two processes: 1.5 camera-times instead of 2). The encodes start before the
    log has been read when its summary lists its cameras: the pictures reach them through spool files in
    the temp folder (:mod:`pipeline.transcode.encodes`). Bad input raises
    :class:`TranscodeInputError` or :class:`~pipeline.mcaplog.McapInputError`; a staging file that does not read back raises
    :class:`OutputVerifyError`.
    """
    started = time.perf_counter()
    settings = EncoderSettings.from_options(config.options)
    episode, encoded, resampled = encode_episode(
        source, config, settings, executor=executor, executor_workers=executor_workers
    )
    with staged(out, staging_dir) as staging:
        counts, chunks = _write(staging, episode, encoded, resampled, config, provenance)
        sha256, size = verified_digest(staging, lambda path: verify_written(path, counts))
        publish(staging, out)
    cameras = tuple(
        CameraSummary(
            name=cam.name,
            topic=src.topic,
            source_frames=src.frame_count,
            frames=len(cam.units),
            width=cam.width,
            height=cam.height,
            size_bytes=sum(len(u.data) for u in cam.units),
        )
        for src, cam in zip(episode.cameras, encoded, strict=True)
    )
    seconds = time.perf_counter() - started
    log.info("transcoded %s -> %s in %.2f s (%s)", source, out, seconds, settings.profile.value)
    return TranscodeResult(
        path=out,
        sha256=sha256,
        size_bytes=size,
        cameras=cameras,
        resampled_messages={r.topic: len(r.records) for r in resampled},
        chunks=chunks,
        seconds=seconds,
    )


def decode_times(presentation_ns: Sequence[int]) -> list[int]:
    """Log times for access units in decode order: rising, and never after the unit's own presentation
    stamp (a decode time stamp). Equal to the presentation stamps when there are no B-frames."""
    ordered = sorted(presentation_ns)
    suffix_min = list(presentation_ns)
    for i in range(len(suffix_min) - 2, -1, -1):
        suffix_min[i] = min(suffix_min[i], suffix_min[i + 1])
    return [min(a, b) for a, b in zip(ordered, suffix_min, strict=True)]


def _timestamp(stamp_ns: int) -> Timestamp:
    ts = Timestamp()
    ts.FromNanoseconds(stamp_ns)
    return ts


def _camera_units(
    src: SourceCamera, cam: EncodedCamera, channel_id: int, settings: EncoderSettings
) -> dict[int, list[OutMessage]]:
    """The camera's messages in decode order, cut into units at every keyframe: a closed GOP is one unit,
    so its messages all belong in one chunk; in random_access's open GOPs a unit is an intra anchor and
    the B-frames decoded after it (those of the interval it closes). The sample reader relies on the file
    holding a camera's messages in decode order."""
    video_format = FOXGLOVE_FORMATS[settings.codec]
    presentation = [src.stamps_ns[u.source_index] for u in cam.units]
    by_unit: dict[int, list[OutMessage]] = {}
    key = -1
    for unit, stamp, log_time in zip(cam.units, presentation, decode_times(presentation), strict=True):
        if unit.letter in KEY_LETTERS or key < 0:
            key += 1
        payload = CompressedVideo(
            timestamp=_timestamp(stamp), frame_id=cam.name, data=unit.data, format=video_format
        ).SerializeToString()
        by_unit.setdefault(key, []).append(
            OutMessage(channel_id, log_time=log_time, publish_time=stamp, data=payload)
        )
    return by_unit


def frame_table(src: SourceCamera, cam: EncodedCamera, codec: str = "h264") -> dict[str, Any]:
    """The ``sluice.frames`` entry of a camera: its codec, frame letters and presentation stamps in decode
    order."""
    return {
        "topic": src.topic,
        "codec": codec,
        "width": cam.width,
        "height": cam.height,
        "types": "".join(u.letter for u in cam.units),
        "pts_ns": [src.stamps_ns[u.source_index] for u in cam.units],
    }


def _json_bytes(record: dict[str, Any]) -> bytes:
    return json.dumps(record, separators=(",", ":")).encode()


class _Unit(NamedTuple):
    """Messages written together: one camera's GOP, one resampled record or one native message."""

    group_order: int
    time_ns: int
    seq: int  # the order units were added in: equal times keep it
    group: str
    messages: list[OutMessage]


class _Units:
    """The episode's units in write order: group by group in :data:`layout.FILE_ORDER` (each group's chunks
    contiguous), time-major inside a group."""

    def __init__(self) -> None:
        self._items: list[_Unit] = []

    def add(self, time_ns: int, group: str, messages: list[OutMessage]) -> None:
        self._items.append(_Unit(_GROUP_ORDER[group], time_ns, len(self._items), group, messages))

    def in_write_order(self) -> list[_Unit]:
        return sorted(self._items, key=lambda u: (u.group_order, u.time_ns, u.seq))


def _write(
    path: Path,
    episode: SourceEpisode,
    encoded: Sequence[EncodedCamera],
    resampled: Sequence[Resampled],
    config: RobotTranscodeConfig,
    provenance: Provenance,
) -> tuple[dict[str, int], dict[str, int]]:
    """Write the episode to ``path``; returns the message count per topic and the chunk count per group."""
    options = config.options
    targets = options.chunk_target_bytes
    groups = {
        layout.GROUP_CAMERAS: GroupSpec(int(targets.cameras), options.compression.cameras),
        layout.GROUP_PROPRIO: GroupSpec(int(targets.proprio), options.compression.proprio),
        # Native streams are archive copies: chunked and compressed like the proprio group.
        layout.GROUP_NATIVE: GroupSpec(int(targets.proprio), options.compression.proprio),
    }
    counts: dict[str, int] = {}
    units = _Units()
    with open(path, "wb") as fh:
        writer = GroupedWriter(fh, groups, library=layout.LIBRARY)
        writer.start()
        _write_metadata(writer, episode, encoded, resampled, config, provenance)
        _add_cameras(writer, episode, encoded, EncoderSettings.from_options(options), units, counts)
        schema_ids = {
            topic: 0 if schema is None else writer.register_schema(schema.name, schema.encoding, schema.data)
            for topic, schema in episode.schemas.items()
        }
        _add_resampled(writer, episode, resampled, schema_ids, options.resample_rate_hz, units, counts)
        _add_native(writer, episode, schema_ids, units, counts)
        previous = None
        for u in units.in_write_order():
            if previous is not None and u.group != previous:
                writer.close_group(previous)
            writer.add(u.group, u.messages)
            previous = u.group
        writer.finish()
    chunks: dict[str, int] = {}
    for chunk in writer.chunks:
        chunks[chunk.group] = chunks.get(chunk.group, 0) + 1
    return counts, chunks


def _add_cameras(
    writer: GroupedWriter,
    episode: SourceEpisode,
    encoded: Sequence[EncodedCamera],
    settings: EncoderSettings,
    units: _Units,
    counts: dict[str, int],
) -> None:
    """A ``foxglove.CompressedVideo`` channel per camera; a unit per camera per GOP."""
    video_schema = writer.register_schema(
        CompressedVideo.DESCRIPTOR.full_name,
        "protobuf",
        build_file_descriptor_set(CompressedVideo).SerializeToString(),
    )
    for src, cam in zip(episode.cameras, encoded, strict=True):
        channel = writer.register_channel(
            src.topic,
            "protobuf",
            video_schema,
            {layout.GROUP_KEY: layout.GROUP_CAMERAS, layout.SOURCE_TOPIC_KEY: src.topic},
        )
        counts[src.topic] = len(cam.units)
        for _, messages in sorted(_camera_units(src, cam, channel, settings).items()):
            units.add(min(m.log_time for m in messages), layout.GROUP_CAMERAS, messages)


def _add_resampled(
    writer: GroupedWriter,
    episode: SourceEpisode,
    resampled: Sequence[Resampled],
    schema_ids: dict[str, int],
    rate_hz: float | None,
    units: _Units,
    counts: dict[str, int],
) -> None:
    """A JSON channel per resampled stream (rate, interpolation and entry names in its metadata); a unit
    per record.

    A JSON source keeps its schema; any other source (CDR, protobuf) gets a JSON schema of the record.
    Every record carries its grid instant exactly for JSON readers whose numbers are doubles (see
    :data:`layout.RESAMPLED_TIME_KEY`), and ``stamp_ns`` when the source record had no stamp field.
    """
    for r in resampled:
        source_channel = episode.channels[r.topic]
        topic = layout.resampled_topic(r.topic)
        stamp_field = _stamp_field(episode, r.topic)
        records = [
            _timed(record, stamp, stamp_field)
            for stamp, record in zip(r.stamps_ns.tolist(), r.records, strict=True)
        ]
        if source_channel.message_encoding == "json":
            schema_id = schema_ids[r.topic]
        else:
            source_schema = episode.schemas.get(r.topic)
            name = f"{layout.RESAMPLED_SCHEMA_PREFIX}{source_schema.name if source_schema else r.topic}"
            schema_id = writer.register_schema(name, "jsonschema", _json_schema(name, records))
        metadata = {
            layout.GROUP_KEY: layout.GROUP_PROPRIO,
            layout.SOURCE_TOPIC_KEY: r.topic,
            layout.RESAMPLE_RATE_KEY: repr(rate_hz),  # round-trips exactly
            layout.INTERPOLATION_KEY: json.dumps(r.methods, sort_keys=True),
        }
        if r.topic in episode.names:
            metadata[layout.NAMES_KEY] = json.dumps(episode.names[r.topic])
        channel = writer.register_channel(topic, "json", schema_id, metadata)
        counts[topic] = len(records)
        for seq, (stamp, record) in enumerate(zip(r.stamps_ns.tolist(), records, strict=True)):
            message = OutMessage(channel, stamp, stamp, _json_bytes(record), seq)
            units.add(stamp, layout.GROUP_PROPRIO, [message])


def _stamp_field(episode: SourceEpisode, topic: str) -> str | None:
    series = next(s for s in (*episode.state, *episode.actions) if s.topic == topic)
    return series.stamp_field


def _timed(record: dict[str, Any], stamp_ns: int, stamp_field: str | None) -> dict[str, Any]:
    out = dict(record)
    if stamp_field is None:
        out[layout.RESAMPLED_STAMP_KEY] = stamp_ns
    sec, nsec = divmod(stamp_ns, NS_PER_S)
    out[layout.RESAMPLED_TIME_KEY] = {"sec": sec, "nsec": nsec}
    return out


def _json_schema(title: str, records: Sequence[dict[str, Any]]) -> bytes:
    """A JSON schema of resampled records (numbers, vectors of numbers, the exact time object)."""
    properties: dict[str, Any] = {}
    for name, value in (records[0] if records else {}).items():
        if name == layout.RESAMPLED_TIME_KEY:
            properties[name] = {
                "type": "object",
                "description": "the record's time, exactly: sec + nsec / 1e9 since the epoch",
                "properties": {"sec": {"type": "integer"}, "nsec": {"type": "integer"}},
            }
        elif isinstance(value, list):
            properties[name] = {"type": "array", "items": {"type": "number"}}
        elif isinstance(value, bool):
            properties[name] = {"type": "boolean"}
        elif isinstance(value, int):
            properties[name] = {"type": "integer"}
        elif isinstance(value, float):
            properties[name] = {"type": "number"}
        else:
            properties[name] = {}
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": title,
        "type": "object",
        "properties": properties,
    }
    return json.dumps(schema, sort_keys=True, separators=(",", ":")).encode()


def _add_native(
    writer: GroupedWriter,
    episode: SourceEpisode,
    schema_ids: dict[str, int],
    units: _Units,
    counts: dict[str, int],
) -> None:
    """Every source stream but the cameras, copied as it is (channel metadata kept); a unit per message."""
    camera_topics = {c.topic for c in episode.cameras}
    native_ids = {
        topic: writer.register_channel(
            topic,
            source_channel.message_encoding,
            schema_ids.get(topic, 0),
            {**source_channel.metadata, layout.GROUP_KEY: layout.GROUP_NATIVE},
        )
        for topic, source_channel in episode.channels.items()
        if topic not in camera_topics
    }
    for m in episode.native:
        counts[m.topic] = counts.get(m.topic, 0) + 1
        message = OutMessage(native_ids[m.topic], m.log_time, m.publish_time, m.data, m.sequence)
        units.add(m.log_time, layout.GROUP_NATIVE, [message])


def _write_metadata(
    writer: GroupedWriter,
    episode: SourceEpisode,
    encoded: Sequence[EncodedCamera],
    resampled: Sequence[Resampled],
    config: RobotTranscodeConfig,
    provenance: Provenance,
) -> None:
    if layout.EPISODE_METADATA in episode.metadata:
        writer.add_metadata(layout.EPISODE_METADATA, episode.metadata[layout.EPISODE_METADATA])
    settings = EncoderSettings.from_options(config.options)
    record = {
        "source_sha256": provenance.source_sha256,
        "config_hash": provenance.config_hash,
        "code_version": provenance.code_version,
        "calibration_id": provenance.calibration_id or "",
        "truth": config.truth.value,
        **settings.describe(),
        "max_pixels": str(config.options.max_pixels),
        "resample_rate_hz": ""
        if config.options.resample_rate_hz is None
        else repr(config.options.resample_rate_hz),
        "interpolation": json.dumps(
            {layout.resampled_topic(r.topic): r.methods for r in resampled}, sort_keys=True
        ),
        "cameras": json.dumps(
            {
                cam.name: {
                    "topic": src.topic,
                    "width": cam.width,
                    "height": cam.height,
                    "source_width": cam.source_width,
                    "source_height": cam.source_height,
                    "frames": len(cam.units),
                    "source_frames": src.frame_count,
                    "source_family": src.family,
                    "source_format": src.frames.format,
                }
                for src, cam in zip(episode.cameras, encoded, strict=True)
            },
            sort_keys=True,
        ),
        "proprio_topics": json.dumps([layout.resampled_topic(r.topic) for r in resampled]),
        "groups": json.dumps(list(layout.GROUPS)),
    }
    writer.add_metadata(layout.TRANSCODE_METADATA, record)
    frames = {
        cam.name: json.dumps(frame_table(src, cam, settings.codec), separators=(",", ":"))
        for src, cam in zip(episode.cameras, encoded, strict=True)
    }
    writer.add_metadata(layout.FRAMES_METADATA, frames)


def verify_written(path: Path, expected_counts: dict[str, int]) -> None:
    """Read a written episode back (CRCs checked) and compare message counts per topic; check that no
    chunk mixes topic groups."""
    try:
        with open(path, "rb") as fh:
            reader = make_reader(fh, validate_crcs=True)
            summary = reader.get_summary()
            counts: dict[str, int] = {}
            for _, channel, _ in reader.iter_messages(log_time_order=False):
                counts[channel.topic] = counts.get(channel.topic, 0) + 1
    except Exception as exc:  # the stock reader raises bare struct, EOF and CRC errors
        raise OutputVerifyError(str(path), f"{type(exc).__name__}: {exc}") from exc
    if counts != expected_counts:
        diff = {t: (counts.get(t, 0), n) for t, n in expected_counts.items() if counts.get(t, 0) != n}
        raise OutputVerifyError(str(path), f"message counts (read, written) differ: {diff}")
    assert summary is not None
    for index in summary.chunk_indexes:
        groups = {summary.channels[c].metadata.get(layout.GROUP_KEY) for c in index.message_index_offsets}
        if len(groups) != 1:
            raise OutputVerifyError(
                str(path),
                f"chunk at {index.chunk_start_offset} mixes topic groups {sorted(map(str, groups))}",
            )
