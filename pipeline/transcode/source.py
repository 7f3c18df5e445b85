"""Read a source robot log into what the transcode needs: each camera's pictures with their stamps, the
state and action streams as series, every other message as it is, and the log's metadata records.

Any message family of :mod:`pipeline.families` is read, decoded with the schema in the file: cameras as
video access units, still images or raw pictures; state and actions as records of numeric fields.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
from mcap.reader import make_reader
from mcap.records import Channel, Message, Schema

from pipeline.config import CameraSpec, SeriesSpec, StampSource, TopicContract
from pipeline.enums import ReasonCode
from pipeline.families import (
    CAMERA_FAMILIES,
    CameraFamily,
    CameraFrames,
    FrameKind,
    FramePayload,
    MessageFamilyError,
    RawLayout,
    SeriesReader,
    camera_family,
    read_payload,
)
from pipeline.families.spool import SpoolWriter
from pipeline.mcaplog import iter_messages
from pipeline.mcaplog.decode import decoder_for, stamp_ns
from pipeline.mcaplog.exceptions import DecodeError, McapInputError
from pipeline.transcode.errors import TranscodeInputError
from pipeline.transcode.profiles import frame_rate
from pipeline.transcode.resample import Series

log = logging.getLogger(__name__)


@dataclass
class SourceCamera:
    """One camera: its pictures in decode order and the truth stamp of each."""

    name: str
    topic: str
    rate: Fraction
    frames: CameraFrames
    family: str = ""
    stamps_ns: list[int] = field(default_factory=list)

    @property
    def frame_count(self) -> int:
        return self.frames.count


@dataclass(frozen=True)
class PlannedCamera:
    """A camera that the log's summary lists with messages, and the kind of pictures its family carries."""

    name: str
    topic: str
    rate: Fraction
    kind: FrameKind


class NotStreamableError(Exception):
    """The cameras' pictures cannot go to the encoders while the log is read (see
    :meth:`SourceReader.cameras`): read the log first, then encode. Never leaves the transcode."""


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
    names: dict[str, list[str]] = field(default_factory=dict)  # series topic -> its vectors' entry names


def truth_stamp(
    truth: StampSource, stamp_field: str | None, decoded: Any, message: Message, topic: str
) -> int:
    """The message's stamp on the episode's clock: the payload's stamp under ``hardware`` truth (its log
    time when the type has no stamp field), or the MCAP log or publish time."""
    if truth is StampSource.LOG_TIME or (truth is StampSource.HARDWARE and stamp_field is None):
        return message.log_time
    if truth is StampSource.PUBLISH_TIME:
        return message.publish_time
    assert stamp_field is not None
    value = stamp_ns(decoded, stamp_field)
    if value is None:
        raise TranscodeInputError(
            ReasonCode.CONTAINER_ERROR,
            f"{topic}: message at log time {message.log_time} has no stamp at {stamp_field!r}",
        )
    return value


class _Decoders:
    """One payload decoder per channel, from the schema in the file."""

    def __init__(self) -> None:
        self._by_channel: dict[int, Callable[[bytes], Any]] = {}

    def decode(self, schema: Schema | None, channel: Channel, message: Message) -> Any:
        decoder = self._by_channel.get(channel.id)
        if decoder is None:
            try:
                found = decoder_for(schema, channel.message_encoding)
            except DecodeError as exc:
                raise TranscodeInputError(ReasonCode.DECODE_ERROR, f"{channel.topic}: {exc}") from None
            if found is None:
                raise TranscodeInputError(
                    ReasonCode.UNSUPPORTED_ENCODING,
                    f"{channel.topic}: no decoder for message encoding {channel.message_encoding!r} with "
                    f"schema encoding {schema.encoding if schema else None!r}",
                )
            decoder = self._by_channel[channel.id] = found
        try:
            return decoder(message.data)
        except DecodeError as exc:
            raise TranscodeInputError(
                ReasonCode.DECODE_ERROR, f"{channel.topic}: message at log time {message.log_time}: {exc}"
            ) from None


class _CameraReader:
    """Collects one camera's pictures and stamps while the log is read (the pictures into ``spool`` when
    it has one)."""

    def __init__(self, spec: CameraSpec, path: Path) -> None:
        self.spec = spec
        self.path = path
        self.family: CameraFamily | None = None
        self.stamps: list[int] = []
        self.payloads: list[FramePayload] = []
        self.raw: RawLayout | None = None
        self.format: str | None = None
        self.spool: SpoolWriter | None = None

    def add(self, schema: Schema | None, decoded: Any, stamp: int) -> None:
        assert self.family is not None
        index = len(self.stamps)
        payload = read_payload(self.family, decoded, frame=index, what=self.spec.topic)
        if self.format is None:
            self.format = payload.format
        elif payload.format != self.format:
            raise TranscodeInputError(
                ReasonCode.UNSUPPORTED_ENCODING,
                f"{self.spec.topic}: frame {index} is {payload.format}, the stream started as {self.format}",
            )
        if self.spool is not None:
            self._spool(payload, stamp, index)
            self.stamps.append(stamp)
            return
        self.stamps.append(stamp)
        if payload.raw is None:
            self.payloads.append(payload)
            return
        if self.raw is None:
            self.raw = payload.raw
        elif (payload.raw.width, payload.raw.height) != (self.raw.width, self.raw.height):
            raise TranscodeInputError(
                ReasonCode.RESOLUTION_OUT_OF_BOUNDS,
                f"{self.spec.topic}: frame {index} is {payload.raw.width}x{payload.raw.height}, the stream "
                f"started at {self.raw.width}x{self.raw.height}; a size change mid-stream is not supported",
            )

    def _spool(self, payload: FramePayload, stamp: int, index: int) -> None:
        """Hand the picture to the encoder now: only possible while it is also the next in stamp order
        (still images are encoded in stamp order, video access units in the order logged)."""
        assert self.spool is not None and self.family is not None
        if payload.raw is not None:
            raise NotStreamableError(f"{self.spec.topic} carries raw pixels")
        if self.family.kind is FrameKind.IMAGE and self.stamps and stamp <= self.stamps[-1]:
            raise NotStreamableError(
                f"{self.spec.topic}: picture {index}'s stamp is not after picture {index - 1}'s"
            )
        try:
            self.spool.add(payload)
        except OSError as exc:  # a full temp folder: the pictures are held in memory instead
            raise NotStreamableError(
                f"{self.spec.topic}: picture {index} cannot be spooled ({exc})"
            ) from None

    def camera(self) -> SourceCamera:
        assert self.family is not None and self.format is not None
        kind = self.family.kind
        stamps = self.stamps
        if self.spool is not None:  # in stamp order, each stamp once (checked while spooled)
            frames = CameraFrames(kind, self.format, len(stamps), spool=str(self.spool.path))
        elif kind is FrameKind.IMAGE:
            # still images stand alone: put them in stamp order, a repeated stamp kept once
            order = sorted(range(len(stamps)), key=stamps.__getitem__)
            keep = [i for k, i in enumerate(order) if k == 0 or stamps[i] != stamps[order[k - 1]]]
            if len(keep) < len(stamps):
                log.info(
                    "%s: %d pictures repeat a stamp, kept once", self.spec.topic, len(stamps) - len(keep)
                )
            stamps = [stamps[i] for i in keep]
            frames = CameraFrames(kind, self.format, len(keep), tuple(self.payloads[i] for i in keep))
        elif kind is FrameKind.RAW:
            backward = next((k for k in range(1, len(stamps)) if stamps[k] <= stamps[k - 1]), None)
            if backward is not None:  # raw pictures are streamed in the order read: it must be theirs
                raise TranscodeInputError(
                    ReasonCode.NON_MONOTONIC_TIME,
                    f"{self.spec.topic}: frame {backward}'s stamp {stamps[backward]} is not after frame "
                    f"{backward - 1}'s ({stamps[backward - 1]})",
                )
            frames = CameraFrames(
                kind, self.format, len(stamps), streamed_from=(str(self.path), self.spec.topic)
            )
        else:
            frames = CameraFrames(kind, self.format, len(stamps), tuple(self.payloads))
        return SourceCamera(
            self.spec.name, self.spec.topic, frame_rate(self.spec.rate_hz), frames, self.family.name, stamps
        )


def _camera_family(schema: Schema | None, topic: str) -> CameraFamily:
    family = camera_family(schema.name if schema is not None else None)
    if family is None:
        known = sorted({n for f in CAMERA_FAMILIES for n in f.schema_names if "/msg/" in n or "." in n})
        raise TranscodeInputError(
            ReasonCode.UNSUPPORTED_ENCODING,
            f"{topic}: schema {schema.name if schema else None!r} is not a camera type; known: "
            + ", ".join(known),
        )
    return family


def read_source(
    path: Path, contract: TopicContract, truth: StampSource, *, native: bool = True
) -> SourceEpisode:
    """Read ``path`` (through the shared MCAP reader) into a :class:`SourceEpisode`.

    ``native=False`` reads the contract's topics alone and keeps no native copy of any message: the
    episode's cameras, state and actions, for a reader that writes no transcode (the export).

    Raises :class:`TranscodeInputError` for content the transcode cannot use (a picture or vector that a
    message family refuses included) and :class:`~pipeline.mcaplog.McapInputError` for bad bytes (both
    are recorded rejections).
    """
    reader = SourceReader(path, contract, truth, native=native)
    reader.cameras()
    return reader.episode()


class SourceReader:
    """Reads a source log in two steps: the file once, decoding only the cameras' messages
    (:meth:`cameras`), then every other message, held from that pass (:meth:`episode`), so that the
    cameras can encode while the state, actions and native streams are decoded.

    Errors are those of :func:`read_source`; a required state or action stream that is missing, or a
    series message a family refuses, is found by :meth:`episode`.
    """

    def __init__(
        self, path: Path, contract: TopicContract, truth: StampSource, *, native: bool = True
    ) -> None:
        self._reader = _Reader(path, contract, truth, native)
        self._cameras: list[SourceCamera] | None = None
        self._episode: SourceEpisode | None = None

    def plan(self) -> list[PlannedCamera] | None:
        """The contract's cameras that the log's summary lists with messages, in contract order, with the
        kind of pictures each carries: what :meth:`cameras` will find, known before the log is read, so
        that the encodes can start at once. None when the summary does not say (no statistics or chunk
        index, or it does not read), a camera topic has more than one channel or a type that is no camera
        family (reading the log reports that), or a camera carries raw pixels (an encoder reads those
        from the log itself)."""
        return self._reader.plan()

    def cameras(self, spools: Mapping[str, SpoolWriter] | None = None) -> list[SourceCamera]:
        """Every camera the log has, its pictures and stamps (read once).

        ``spools`` (topic -> spool): those cameras' pictures are appended to their spool as they are read
        instead of being held, and each spool is ended after the pass (an encoder process may read it
        meanwhile). Raises :class:`NotStreamableError` when such a camera's pictures turn out not to be
        in the order they must be encoded in (still images out of stamp order, or raw pixels); its spool
        then holds only some of them.
        """
        if self._cameras is None:
            try:
                self._cameras = self._reader.read_cameras(spools or {})
            except MessageFamilyError as exc:  # one error type for the transcode's callers
                raise TranscodeInputError(exc.code, exc.detail) from None
        return self._cameras

    def episode(self) -> SourceEpisode:
        """The whole episode: the cameras of :meth:`cameras` and every other stream (decoded once)."""
        if self._episode is None:
            cameras = self.cameras()
            try:
                self._episode = self._reader.read_rest(cameras)
            except MessageFamilyError as exc:
                raise TranscodeInputError(exc.code, exc.detail) from None
        return self._episode


class _Reader:
    def __init__(self, path: Path, contract: TopicContract, truth: StampSource, native: bool) -> None:
        self.path = path
        self.keep_native = native
        self.contract = contract
        self.truth = truth
        self.cameras = {c.topic: _CameraReader(c, path) for c in contract.cameras}
        self.series_specs: dict[str, SeriesSpec] = {s.topic: s for s in (*contract.state, *contract.actions)}
        self.readers: dict[str, SeriesReader] = {}
        self.series_data: dict[str, tuple[list[int], list[dict]]] = {t: ([], []) for t in self.series_specs}
        self.native: list[NativeMessage] = []
        self.schemas: dict[str, Schema | None] = {}
        self.channels: dict[str, Channel] = {}
        self.held: list[tuple[Schema | None, Channel, Message]] = []  # read, not yet decoded
        self.decoders = _Decoders()
        # a topic the contract does not require may be absent: the episode is transcoded without it
        self.required = {spec.topic for spec in contract.all_topics() if spec.required}

    def plan(self) -> list[PlannedCamera] | None:
        try:
            with open(self.path, "rb") as fh:
                summary = make_reader(fh).get_summary()
        except Exception:  # the stock reader raises bare struct/EOF errors: reading the log reports them
            return None
        if summary is None:
            return None
        if summary.statistics is not None:
            logged = {cid for cid, n in summary.statistics.channel_message_counts.items() if n > 0}
        elif summary.chunk_indexes:
            logged = {cid for index in summary.chunk_indexes for cid in index.message_index_offsets}
        else:
            return None
        planned = []
        for camera in self.cameras.values():
            spec = camera.spec
            channels = [c for c in summary.channels.values() if c.topic == spec.topic]
            if not any(c.id in logged for c in channels):
                continue
            if len(channels) > 1:
                return None
            schema = summary.schemas.get(channels[0].schema_id)
            family = camera_family(schema.name if schema is not None else None)
            if family is None or family.kind is FrameKind.RAW:
                return None
            planned.append(PlannedCamera(spec.name, spec.topic, frame_rate(spec.rate_hz), family.kind))
        return planned

    def read_cameras(self, spools: Mapping[str, SpoolWriter]) -> list[SourceCamera]:
        """One pass over the log: the cameras' messages decoded (their pictures into ``spools``, where a
        camera has one), every other message held for :meth:`read_rest` (a small share of the bytes:
        payloads of the streams beside the cameras)."""
        for topic, spool in spools.items():
            self.cameras[topic].spool = spool
        topics = None if self.keep_native else [*self.cameras, *self.series_specs]
        for schema, channel, message in iter_messages(self.path, topics):
            self.channels.setdefault(channel.topic, channel)
            if channel.topic in self.cameras:
                self._camera(schema, channel, message)
            else:
                self.held.append((schema, channel, message))
        missing = [t for t, c in self.cameras.items() if not c.stamps and t in self.required]
        if missing:
            raise TranscodeInputError(
                ReasonCode.MISSING_REQUIRED_TOPIC, f"no messages on {', '.join(missing)}"
            )
        found = [c.camera() for c in self.cameras.values() if c.stamps]
        for c in self.cameras.values():
            if c.spool is not None and c.stamps:
                c.spool.end()
        return found

    def read_rest(self, cameras: list[SourceCamera]) -> SourceEpisode:
        """The messages held by :meth:`read_cameras` decoded: series read, native streams copied."""
        held, self.held = self.held, []
        for schema, channel, message in held:
            self._other(schema, channel, message)
        missing = [t for t, (s, _) in self.series_data.items() if not s and t in self.required]
        if missing:
            raise TranscodeInputError(
                ReasonCode.MISSING_REQUIRED_TOPIC, f"no messages on {', '.join(missing)}"
            )
        return SourceEpisode(
            cameras=cameras,
            state=self._series(self.contract.state),
            actions=self._series(self.contract.actions),
            native=self.native,
            schemas=self.schemas,
            channels=self.channels,
            metadata=read_metadata(self.path),
            names={t: list(r.names) for t, r in self.readers.items() if r.names},
        )

    def _camera(self, schema: Schema | None, channel: Channel, message: Message) -> None:
        camera = self.cameras[channel.topic]
        if camera.family is None:
            camera.family = _camera_family(schema, channel.topic)
        decoded = self.decoders.decode(schema, channel, message)
        stamp = truth_stamp(self.truth, camera.spec.stamp_field, decoded, message, channel.topic)
        camera.add(schema, decoded, stamp)

    def _other(self, schema: Schema | None, channel: Channel, message: Message) -> None:
        topic = channel.topic
        self.schemas.setdefault(topic, schema)
        if self.keep_native:
            self.native.append(
                NativeMessage(topic, message.log_time, message.publish_time, message.sequence, message.data)
            )
        spec = self.series_specs.get(topic)
        if spec is None:
            return
        reader = self.readers.get(topic)
        if reader is None:
            reader = self.readers[topic] = SeriesReader(
                topic,
                schema.name if schema is not None else None,
                channel.message_encoding,
                fields=spec.fields,
                stamp_field=spec.stamp_field,
            )
        decoded = self.decoders.decode(schema, channel, message)
        stamps, records = self.series_data[topic]
        records.append(reader.record(decoded, len(records)))
        stamps.append(truth_stamp(self.truth, spec.stamp_field, decoded, message, topic))

    def _series(self, specs: Sequence[SeriesSpec]) -> list[Series]:
        out = []
        for spec in specs:
            stamps, records = self.series_data[spec.topic]
            if not stamps:
                continue  # an optional stream the episode does not have
            # the stamp field is replaced by the grid time only where it is a field of the record
            field_name = spec.stamp_field if records and spec.stamp_field in records[0] else None
            out.append(Series(spec.topic, np.asarray(stamps, dtype=np.int64), records, field_name))
        return out


def read_metadata(path: Path) -> dict[str, dict[str, str]]:
    """The log's metadata records by name (the last one wins when a name repeats)."""
    try:
        with open(path, "rb") as fh:
            return {m.name: dict(m.metadata) for m in make_reader(fh).iter_metadata()}
    except Exception as exc:  # the stock reader raises bare struct/EOF errors on damage
        raise McapInputError(ReasonCode.CONTAINER_ERROR, f"metadata unreadable: {exc}") from None
