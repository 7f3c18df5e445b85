"""Topic groups with the stock ``mcap`` writer: chunks that never mix groups, cut where the data says.

The stock writer cuts a chunk when its buffer passes ``chunk_size``; it is given a size it never reaches,
each group's messages are buffered here, and a group's buffer is written and ``flush()``-ed (which finishes
the chunk) when the group reaches its target at a unit boundary. A *unit* is what must stay in one chunk:
for cameras one GOP of every camera, so chunks are cut at GOP boundaries. A group's units are fed in time
order; feeding one group after the other (:meth:`GroupedWriter.close_group` between them) keeps each
group's chunks contiguous, feeding them interleaved by time interleaves the groups' chunks.

Two things the stock writer leaves out by default are asked of it: the data section's CRC (the DataEnd
record otherwise says 0, "not computed", and a reader cannot check the bytes between the chunks) and one
Schema record per distinct schema (three calibration topics of one type share a schema; registered per
topic, the schema would be stored three times).

Compression is per group (video does not compress, JSON state does). The stock writer takes one
compression for the whole file, so the group's compression is set on it before each flush.

A chunk's message records are put into the stock writer's open chunk in one go, with the message index
entries and statistics its ``add_message`` keeps (:meth:`GroupedWriter._put`): the stock call costs about
15 us of Python per message, which was most of the time the transcode took to write an episode (7,475
messages: 0.11 s of 0.125 s under the profiler). The bytes are the stock writer's (a test writes the same
messages through ``add_message`` and compares). The guard in :class:`GroupedWriter` fails loudly if a
future ``mcap`` release renames the attributes this relies on.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, Literal

from mcap.opcode import Opcode
from mcap.records import MessageIndex
from mcap.writer import CompressionType, Writer

log = logging.getLogger(__name__)

Compression = Literal["none", "lz4", "zstd"]
_COMPRESSION = {"none": CompressionType.NONE, "lz4": CompressionType.LZ4, "zstd": CompressionType.ZSTD}
#: A chunk size the stock writer never reaches: this module decides every cut.
NEVER_CUT_BYTES = 1 << 62
#: Bytes of a message record besides its payload (opcode, length, channel, sequence, two times).
MESSAGE_OVERHEAD_BYTES = 1 + 8 + 2 + 4 + 8 + 8
_COMPRESSION_ATTR = "_Writer__compression"
_CHUNK_BUILDER_ATTR = "_Writer__chunk_builder"
_STATISTICS_ATTR = "_Writer__statistics"
#: A message record's opcode, length and fixed fields (channel, sequence, log time, publish time).
_MESSAGE_HEAD = struct.Struct("<BQHIQQ")
_MESSAGE_FIELDS_BYTES = _MESSAGE_HEAD.size - 9


@dataclass(frozen=True)
class GroupSpec:
    """Chunking of one topic group: cut once the buffer holds ``target_bytes`` (uncompressed)."""

    target_bytes: int
    compression: Compression = "zstd"


@dataclass(frozen=True)
class OutMessage:
    channel_id: int
    log_time: int
    publish_time: int
    data: bytes
    sequence: int = 0


@dataclass
class _Buffer:
    messages: list[OutMessage] = field(default_factory=list)
    size_bytes: int = 0


@dataclass
class ChunkRecord:
    """What was cut: for tests and logs."""

    group: str
    messages: int
    size_bytes: int


class GroupedWriter:
    """An MCAP writer whose chunks each hold one topic group. Use: ``start``, register schemas/channels,
    ``add_metadata``, ``add`` units in time order, ``finish``."""

    def __init__(self, output: IO[bytes], groups: Mapping[str, GroupSpec], *, library: str) -> None:
        # A data section CRC as well as the chunks' own: it covers the message index records between chunks
        # too, so a reader can check every byte it will trust (pipeline.reader.verify).
        self._writer = Writer(
            output, chunk_size=NEVER_CUT_BYTES, compression=CompressionType.NONE, enable_data_crcs=True
        )
        builder = getattr(self._writer, _CHUNK_BUILDER_ATTR, None)
        if (
            not hasattr(self._writer, _COMPRESSION_ATTR)
            or not hasattr(self._writer, _STATISTICS_ATTR)
            or not all(
                hasattr(builder, a)
                for a in ("record_writer", "message_indices", "message_start_time", "message_end_time")
            )
        ):
            raise RuntimeError(
                "this mcap release keeps the chunk compression, chunk builder or statistics elsewhere; "
                "pipeline.transcode.groupwriter needs an update"
            )
        self._groups = dict(groups)
        self._buffers = {name: _Buffer() for name in groups}
        self._library = library
        self._schema_ids: dict[tuple[str, str, bytes], int] = {}
        self.chunks: list[ChunkRecord] = []

    @property
    def writer(self) -> Writer:
        """The stock writer, for schema/channel registration and metadata."""
        return self._writer

    def start(self, profile: str = "") -> None:
        self._writer.start(profile=profile, library=self._library)

    def register_schema(self, name: str, encoding: str, data: bytes) -> int:
        """The id of this schema in the file: registered on first use, the same id for the same schema."""
        key = (name, encoding, bytes(data))
        if key not in self._schema_ids:
            self._schema_ids[key] = self._writer.register_schema(name=name, encoding=encoding, data=data)
        return self._schema_ids[key]

    def register_channel(
        self, topic: str, message_encoding: str, schema_id: int, metadata: Mapping[str, str] | None = None
    ) -> int:
        return self._writer.register_channel(
            topic=topic, message_encoding=message_encoding, schema_id=schema_id, metadata=dict(metadata or {})
        )

    def add_metadata(self, name: str, data: Mapping[str, str]) -> None:
        self._writer.add_metadata(name, dict(data))

    def add(self, group: str, unit: Sequence[OutMessage]) -> None:
        """Add one unit (messages that must share a chunk) to ``group``; cut the group first if full."""
        if (
            self._buffers[group].messages
            and self._buffers[group].size_bytes >= self._groups[group].target_bytes
        ):
            self._cut(group)
        buffer = self._buffers[group]
        for message in unit:
            buffer.messages.append(message)
            buffer.size_bytes += len(message.data) + MESSAGE_OVERHEAD_BYTES

    def close_group(self, group: str) -> None:
        """Cut what ``group`` has buffered (its next chunk then starts with the next unit added)."""
        self._cut(group)

    def _cut(self, group: str) -> None:
        buffer = self._buffers[group]
        if not buffer.messages:
            return
        # Time-major inside the chunk; the stable sort keeps each channel's own order on equal times.
        ordered = sorted(buffer.messages, key=lambda m: m.log_time)
        self._put(ordered)
        setattr(self._writer, _COMPRESSION_ATTR, _COMPRESSION[self._groups[group].compression])
        self._writer.flush()
        self.chunks.append(ChunkRecord(group, len(ordered), buffer.size_bytes))
        self._buffers[group] = _Buffer()

    def _put(self, messages: Sequence[OutMessage]) -> None:
        """Put ``messages`` into the stock writer's open chunk, in order: the records, message index
        entries, chunk times and statistics that ``Writer.add_message`` would give them one by one."""
        if not messages:
            return
        builder: Any = getattr(self._writer, _CHUNK_BUILDER_ATTR)
        statistics: Any = getattr(self._writer, _STATISTICS_ATTR)
        indexes: dict[int, MessageIndex] = builder.message_indices
        counts = statistics.channel_message_counts
        offset = builder.record_writer.count  # the chunk may already hold channel and schema records
        parts: list[bytes] = []
        for m in messages:
            index = indexes.get(m.channel_id)
            if index is None:
                index = indexes[m.channel_id] = MessageIndex(channel_id=m.channel_id, records=[])
            index.records.append((m.log_time, offset))
            head = _MESSAGE_HEAD.pack(
                Opcode.MESSAGE,
                _MESSAGE_FIELDS_BYTES + len(m.data),
                m.channel_id,
                m.sequence,
                m.log_time,
                m.publish_time,
            )
            parts += (head, m.data)
            offset += len(head) + len(m.data)
            counts[m.channel_id] += 1
        builder.record_writer.write(b"".join(parts))
        first = min(m.log_time for m in messages)
        last = max(m.log_time for m in messages)
        if builder.num_messages == 0:
            builder.message_start_time = first
        builder.message_start_time = min(builder.message_start_time, first)
        builder.message_end_time = max(builder.message_end_time, last)
        builder.num_messages += len(messages)
        if statistics.message_count == 0:
            statistics.message_start_time = first
        statistics.message_start_time = min(statistics.message_start_time, first)
        statistics.message_end_time = max(statistics.message_end_time, last)
        statistics.message_count += len(messages)

    def finish(self) -> None:
        """Cut what is left (earliest group first) and write the summary."""
        left = [(b.messages[0].log_time, g) for g, b in self._buffers.items() if b.messages]
        for _, group in sorted(left):
            self._cut(group)
        self._writer.finish()
