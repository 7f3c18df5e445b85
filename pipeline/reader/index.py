"""The index a sample reader needs, built once per episode from standard MCAP records: the summary's
chunk indexes and channels, every chunk's message index records, and the ``sluice.frames`` metadata
(codec, frame types and presentation stamps of each camera, in decode order).

Works on any chunked, indexed MCAP that carries ``sluice.frames``: the transcoded layout and, for
comparison, the same messages as the stock writer lays them out. A native log that was never transcoded
(``foxglove.CompressedVideo`` channels in H.264 or H.265, no ``sluice.frames``) is indexed by reading its
camera messages once and parsing each access unit's headers (:func:`native_camera_tables`).
"""

from __future__ import annotations

import bisect
import json
import struct
from dataclasses import dataclass, field
from typing import IO, Any

from foxglove_schemas_protobuf.CompressedVideo_pb2 import CompressedVideo
from mcap.exceptions import McapError
from mcap.reader import make_reader
from mcap.records import Channel, ChunkIndex

from pipeline.enums import ReasonCode
from pipeline.errors import InputError
from pipeline.reader.decode import closure
from pipeline.transcode import layout
from pipeline.transcode.bitstream import unit_info
from pipeline.transcode.h264 import frame_letter

_MESSAGE_INDEX_OPCODE = 0x07
_RECORD_HEAD = struct.Struct("<BQ")
_INDEX_HEAD = struct.Struct("<HI")
_ENTRY = struct.Struct("<QQ")
#: The schema of camera channels in a native log.
COMPRESSED_VIDEO_SCHEMA = "foxglove.CompressedVideo"


class EpisodeIndexError(InputError):
    """The file is not a readable transcoded episode (no chunk index, no frame table...)."""

    def __init__(self, source: str, problem: str) -> None:
        self.source = source
        super().__init__(ReasonCode.CONTAINER_ERROR.value, f"{source}: {problem}")


@dataclass(frozen=True)
class ChunkInfo:
    start: int  # file offset of the chunk record
    length: int  # whole record, header included
    compression: str
    compressed_size: int
    uncompressed_size: int

    @property
    def records_offset(self) -> int:
        """File offset of the first byte of the chunk's (possibly compressed) records."""
        return self.start + self.length - self.compressed_size


@dataclass(frozen=True)
class MessageLoc:
    """Where one message is: chunk number, offset and length of its record in the uncompressed records."""

    chunk: int
    offset: int
    length: int
    log_time: int


@dataclass
class CameraTable:
    """One camera: frame letters and presentation stamps in decode order, and where each frame is."""

    name: str
    topic: str
    width: int
    height: int
    letters: str
    pts_ns: list[int]
    locations: list[MessageLoc]
    codec: str = "h264"
    display: list[int] = field(default_factory=list)  # decode positions in presentation order
    display_pts: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.display = sorted(range(len(self.pts_ns)), key=lambda i: self.pts_ns[i])
        self.display_pts = [self.pts_ns[i] for i in self.display]

    def frame_at(self, time_ns: int) -> int:
        """Decode position of the frame on screen at ``time_ns`` (the last one shown at or before it; the
        first frame before the stream starts)."""
        k = max(bisect.bisect_right(self.display_pts, time_ns) - 1, 0)
        return self.display[k]

    def dependencies(self, position: int) -> list[int]:
        """Decode positions needed to decode ``position`` (its dependency closure, decode order; see
        :func:`pipeline.reader.decode.closure`)."""
        return closure(self.letters, self.pts_ns, position)


@dataclass
class _TopicTimes:
    """One topic's messages ordered by log time: ``order[k]`` is the position in ``by_topic`` of the
    message with the k-th smallest log time ``log_times[k]``."""

    order: list[int]
    log_times: list[int]


@dataclass
class EpisodeIndex:
    """Where everything of one episode is. ``by_topic`` lists each topic's messages in file order; treat
    it as read-only (:meth:`window` searches a log-time ordering of a topic, made when first asked)."""

    source: str
    chunks: list[ChunkInfo]
    channels: dict[int, Channel]
    by_topic: dict[str, list[MessageLoc]]
    cameras: dict[str, CameraTable]
    metadata: dict[str, dict[str, str]]
    proprio_topics: list[str]
    _times: dict[str, _TopicTimes] = field(default_factory=dict, init=False, repr=False, compare=False)
    _span_ns: tuple[int, int] | None = field(default=None, init=False, repr=False, compare=False)

    def _topic_times(self, topic: str) -> _TopicTimes | None:
        """``topic``'s log-time ordering, made on first use: a sample windows only a few topics."""
        times = self._times.get(topic)
        if times is None and topic in self.by_topic:
            locations = self.by_topic[topic]
            order = sorted(range(len(locations)), key=lambda k: locations[k].log_time)
            times = self._times[topic] = _TopicTimes(order, [locations[k].log_time for k in order])
        return times

    @property
    def start_ns(self) -> int:
        """The first frame's presentation stamp; without camera frames, the first state/action message's
        log time (see :meth:`span_ns`)."""
        return self.span_ns()[0]

    @property
    def end_ns(self) -> int:
        """The last frame's presentation stamp; without camera frames, the last state/action message's."""
        return self.span_ns()[1]

    def span_ns(self) -> tuple[int, int]:
        """(first, last) time of the episode: the cameras' frames when it has any, else the messages of
        its state/action topics, else of any topic. Raises :class:`EpisodeIndexError` when it holds
        nothing with a time."""
        if self._span_ns is None:
            shown = [c.display_pts for c in self.cameras.values() if c.display_pts]
            if shown:
                self._span_ns = (min(p[0] for p in shown), max(p[-1] for p in shown))
            else:
                self._span_ns = self._message_span_ns()
        return self._span_ns

    def _message_span_ns(self) -> tuple[int, int]:
        for topics in (self.proprio_topics, list(self.by_topic)):
            times = [t.log_times for t in map(self._topic_times, topics) if t is not None and t.log_times]
            if times:
                return min(t[0] for t in times), max(t[-1] for t in times)
        raise EpisodeIndexError(
            self.source, "no camera frames and no messages: the episode has no time span to sample in"
        )

    def window(self, topic: str, start_ns: int, end_ns: int) -> list[MessageLoc]:
        """Messages of ``topic`` with ``start_ns < log_time <= end_ns`` (file order)."""
        times = self._topic_times(topic)
        if times is None:
            return []
        first = bisect.bisect_right(times.log_times, start_ns)
        last = bisect.bisect_right(times.log_times, end_ns)
        locations = self.by_topic[topic]
        return [locations[k] for k in sorted(times.order[first:last])]


def _message_indexes(fh: IO[bytes], index: ChunkIndex) -> list[tuple[int, int, int]]:
    """(channel id, log time, offset) of every message of a chunk, from its message index records."""
    if not index.message_index_offsets:
        return []
    start = min(index.message_index_offsets.values())
    fh.seek(start)
    data = fh.read(index.message_index_length)
    out = []
    pos = 0
    while pos + _RECORD_HEAD.size <= len(data):
        opcode, length = _RECORD_HEAD.unpack_from(data, pos)
        body = pos + _RECORD_HEAD.size
        if opcode == _MESSAGE_INDEX_OPCODE:
            channel_id, entries_length = _INDEX_HEAD.unpack_from(data, body)
            entries = body + _INDEX_HEAD.size
            for k in range(entries_length // _ENTRY.size):
                log_time, offset = _ENTRY.unpack_from(data, entries + k * _ENTRY.size)
                out.append((channel_id, log_time, offset))
        pos = body + length
    return out


#: What a damaged or foreign file makes the MCAP reader and the record parsing raise: the mcap library's
#: own errors, struct/index errors on short or garbled records, bad JSON or UTF-8 in the metadata
#: (ValueError), missing keys or wrong types in the frame tables.
_DAMAGE_ERRORS = (McapError, struct.error, EOFError, ValueError, KeyError, IndexError, TypeError)


def build_index(fh: IO[bytes], source: str) -> EpisodeIndex:
    """Read the summary, the message indexes and the metadata of an episode (one pass of small reads).

    Raises :class:`EpisodeIndexError` (reason ``container_error``) when ``fh`` is not a readable
    transcoded episode: damaged, truncated, not MCAP, or missing the chunk index or frame tables. Errors of
    the file object itself (``OSError``) are left as they are: the store, not the file, failed.
    """
    try:
        return _build_index(fh, source)
    except EpisodeIndexError:
        raise
    except _DAMAGE_ERRORS as exc:
        raise EpisodeIndexError(source, f"damaged or not an MCAP episode: {exc!r}") from exc


def _build_index(fh: IO[bytes], source: str) -> EpisodeIndex:
    reader = make_reader(fh)
    summary = reader.get_summary()
    if summary is None or not summary.chunk_indexes:
        raise EpisodeIndexError(source, "no summary with chunk indexes; not an indexed, chunked MCAP")
    metadata = {m.name: dict(m.metadata) for m in reader.iter_metadata()}
    video_channels = {
        cid: ch
        for cid, ch in summary.channels.items()
        if (schema := summary.schemas.get(ch.schema_id)) is not None
        and schema.name == COMPRESSED_VIDEO_SCHEMA
    }
    if layout.FRAMES_METADATA not in metadata and not video_channels:
        raise EpisodeIndexError(
            source, f"no {layout.FRAMES_METADATA!r} metadata record and no {COMPRESSED_VIDEO_SCHEMA} channel"
        )
    chunks: list[ChunkInfo] = []
    by_channel: dict[int, list[MessageLoc]] = {}
    for number, index in enumerate(sorted(summary.chunk_indexes, key=lambda i: i.chunk_start_offset)):
        chunks.append(
            ChunkInfo(
                start=index.chunk_start_offset,
                length=index.chunk_length,
                compression=index.compression,
                compressed_size=index.compressed_size,
                uncompressed_size=index.uncompressed_size,
            )
        )
        entries = _message_indexes(fh, index)
        # A record runs to the next record's offset; the last to the end of the chunk's records.
        offsets = sorted({offset for _, _, offset in entries})
        ends = dict(zip(offsets, [*offsets[1:], index.uncompressed_size], strict=True))
        for channel_id, log_time, offset in sorted(entries, key=lambda e: e[2]):
            by_channel.setdefault(channel_id, []).append(
                MessageLoc(number, offset, ends[offset] - offset, log_time)
            )
    by_topic: dict[str, list[MessageLoc]] = {}
    for channel_id, locations in by_channel.items():
        by_topic.setdefault(summary.channels[channel_id].topic, []).extend(locations)
    if layout.FRAMES_METADATA not in metadata:
        cameras = native_camera_tables(reader, video_channels, by_topic, source)
        return EpisodeIndex(source, chunks, dict(summary.channels), by_topic, cameras, metadata, [])
    cameras = {}
    for name, text in metadata[layout.FRAMES_METADATA].items():
        table = json.loads(text)
        locations = by_topic.get(table["topic"], [])
        if len(locations) != len(table["pts_ns"]):
            raise EpisodeIndexError(
                source,
                f"camera {name}: {len(locations)} messages on {table['topic']} but "
                f"{len(table['pts_ns'])} frames in the frame table",
            )
        cameras[name] = CameraTable(
            name,
            table["topic"],
            table["width"],
            table["height"],
            table["types"],
            table["pts_ns"],
            locations,
            table.get("codec", "h264"),  # written by every transcode since H.265 came; H.264 before
        )
    transcode = metadata.get(layout.TRANSCODE_METADATA, {})
    proprio = json.loads(transcode.get("proprio_topics", "[]"))
    return EpisodeIndex(source, chunks, dict(summary.channels), by_topic, cameras, metadata, proprio)


def native_camera_tables(
    reader: Any, channels: dict[int, Channel], by_topic: dict[str, list[MessageLoc]], source: str
) -> dict[str, CameraTable]:
    """Camera tables of a native log: every ``foxglove.CompressedVideo`` message read once (file order, as
    ``by_topic`` lists them), its codec from ``format``, its letter from its access unit's headers, its
    stamp from ``timestamp``. The camera is named after its topic. An HEVC stream with temporal sub-layers
    has every picture counted as a reference (a sub-layer non-reference picture may still be predicted
    from by a higher sub-layer)."""
    topics = {ch.topic for ch in channels.values()}
    letters: dict[str, list[str]] = {t: [] for t in topics}
    stamps: dict[str, list[int]] = {t: [] for t in topics}
    codecs: dict[str, str] = {}
    layered: set[str] = set()
    for _, channel, message in reader.iter_messages(topics=sorted(topics), log_time_order=False):
        video = CompressedVideo.FromString(message.data)
        codec = codecs.setdefault(channel.topic, video.format)
        if video.format != codec:
            raise EpisodeIndexError(source, f"{channel.topic}: format {video.format!r} after {codec!r}")
        info = unit_info(codec, video.data)
        if getattr(info, "temporal_id", 0) > 0:
            layered.add(channel.topic)
        letters[channel.topic].append(frame_letter(info))
        stamps[channel.topic].append(video.timestamp.ToNanoseconds())
    cameras = {}
    for topic in sorted(topics):
        kinds = "".join(letters[topic])
        if topic in layered:
            kinds = kinds.replace("b", "B")
        locations = by_topic.get(topic, [])
        if len(locations) != len(kinds):
            raise EpisodeIndexError(source, f"{topic}: {len(locations)} indexed messages, {len(kinds)} read")
        cameras[topic] = CameraTable(
            topic, topic, 0, 0, kinds, stamps[topic], locations, codecs.get(topic, "h264")
        )
    return cameras
