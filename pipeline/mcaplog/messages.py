"""``iter_messages``: messages for later steps, through the chunk index when the file has a usable one."""

from __future__ import annotations

import heapq
import logging
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import IO

from mcap.records import Channel, Chunk, ChunkIndex, Message, Schema

from pipeline.enums import ReasonCode
from pipeline.mcaplog.exceptions import McapInputError
from pipeline.mcaplog.framing import (
    RECORD_HEADER,
    RECORD_HEADER_BYTES,
    check_record_length,
    decompress_chunk,
    iter_chunk_records,
    open_source,
    parse_record,
    read_exact_at,
)
from pipeline.mcaplog.models import ReadLimits
from pipeline.mcaplog.probe import Summary, probe_file
from pipeline.mcaplog.scan import Scanner

logger = logging.getLogger(__name__)

MessageTuple = tuple[Schema | None, Channel, Message]


def iter_messages(
    source: str | Path | IO[bytes],
    topics: Collection[str] | None = None,
    start_ns: int | None = None,
    end_ns: int | None = None,
    *,
    limits: ReadLimits | None = None,
    log_time_order: bool = True,
) -> Iterator[MessageTuple]:
    """Yield ``(schema, channel, message)`` for the messages on ``topics`` with ``start_ns <= log_time <
    end_ns`` (each bound optional), in log-time order unless ``log_time_order`` is false.

    With a chunk index whose summary lists every indexed channel, only the chunks that can hold matching
    messages are read, each checked against its CRC. Otherwise the whole file is scanned with every check
    of :func:`read_log`; in that case a problem found after the last message (e.g. the data-section CRC)
    is raised after the messages were yielded, and log-time order costs holding the matching messages in
    memory. Use this on files that passed :func:`read_log`. Raises :class:`McapInputError` on bad bytes.
    """
    limits = limits or ReadLimits()
    wanted = None if topics is None else frozenset([topics] if isinstance(topics, str) else topics)
    if start_ns is not None and end_ns is not None and start_ns > end_ns:
        raise ValueError(f"start_ns {start_ns} is after end_ns {end_ns}")
    with open_source(source) as src:
        probe, summary = probe_file(src.file, src.size_bytes, limits)
        fatal = next((f for f in probe.findings if f.fatal), None)
        if fatal is not None:
            raise McapInputError(fatal.code, fatal.detail)  # the detail already names the offset
        if summary is not None and _index_usable(summary):
            yield from _indexed(src.file, summary, wanted, start_ns, end_ns, limits, log_time_order)
            return
        logger.debug("%s: no usable chunk index, scanning linearly", src.name)
        matching = _linear(src.file, src.size_bytes, limits, probe.tail_magic_ok, wanted, start_ns, end_ns)
        if log_time_order:
            yield from sorted(matching, key=lambda item: item[2].log_time)
        else:
            yield from matching


def _in_range(log_time: int, start_ns: int | None, end_ns: int | None) -> bool:
    return (start_ns is None or log_time >= start_ns) and (end_ns is None or log_time < end_ns)


def _index_usable(summary: Summary) -> bool:
    """Chunk indexes that name their channels, and summary copies of those channels and their schemas."""
    if not summary.chunk_indexes:
        return False
    for index in summary.chunk_indexes:
        if not index.message_index_offsets:
            return False
        for channel_id in index.message_index_offsets:
            channel = summary.channels.get(channel_id)
            if channel is None or (channel.schema_id != 0 and channel.schema_id not in summary.schemas):
                return False
    return True


def _linear(
    handle: IO[bytes],
    size: int,
    limits: ReadLimits,
    tail_magic_ok: bool,
    wanted: frozenset[str] | None,
    start_ns: int | None,
    end_ns: int | None,
) -> Iterator[MessageTuple]:
    scanner = Scanner(handle, size, limits, tail_magic_ok=tail_magic_ok)
    for item in scanner.items():
        message = item.record
        if not isinstance(message, Message):
            continue
        channel = scanner.channels[message.channel_id]
        if wanted is not None and channel.topic not in wanted:
            continue
        if _in_range(message.log_time, start_ns, end_ns):
            yield scanner.schemas.get(channel.schema_id), channel, message


def _indexed(
    handle: IO[bytes],
    summary: Summary,
    wanted: frozenset[str] | None,
    start_ns: int | None,
    end_ns: int | None,
    limits: ReadLimits,
    log_time_order: bool,
) -> Iterator[MessageTuple]:
    channels = summary.channels
    wanted_ids = None if wanted is None else {cid for cid, ch in channels.items() if ch.topic in wanted}
    selected = [
        index
        for index in summary.chunk_indexes
        if (wanted_ids is None or wanted_ids.intersection(index.message_index_offsets))
        and (start_ns is None or index.message_end_time >= start_ns)
        and (end_ns is None or index.message_start_time < end_ns)
    ]

    def matching(index: ChunkIndex) -> list[tuple[int, int, MessageTuple]]:
        found = []
        for position, record in iter_chunk_records(
            _read_chunk(handle, index, limits), index.chunk_start_offset, limits
        ):
            if not isinstance(record, Message):
                continue
            if wanted_ids is not None and record.channel_id not in wanted_ids:
                continue
            if not _in_range(record.log_time, start_ns, end_ns):
                continue
            channel = channels.get(record.channel_id)
            if channel is None:
                raise McapInputError(
                    ReasonCode.CONTAINER_ERROR,
                    f"message on channel {record.channel_id}, which the summary does not list",
                    offset=index.chunk_start_offset,
                )
            item = (summary.schemas.get(channel.schema_id), channel, record)
            found.append((record.log_time, position, item))
        return found

    if not log_time_order:
        for index in sorted(selected, key=lambda i: i.chunk_start_offset):
            for _, _, item in matching(index):
                yield item
        return
    # Merge chunks lazily: a chunk is opened when the earliest time it may hold comes up, so at most the
    # chunks overlapping the current time are in memory (topic-group layouts overlap by design).
    heap: list[tuple[int, int, int, int, object]] = []
    for index in selected:
        heap.append((index.message_start_time, 0, index.chunk_start_offset, 0, index))
    heapq.heapify(heap)
    while heap:
        _, kind, chunk_offset, _, payload = heapq.heappop(heap)
        if kind == 0:
            assert isinstance(payload, ChunkIndex)
            for log_time, pos, item in matching(payload):
                heapq.heappush(heap, (log_time, 1, chunk_offset, pos, item))
        else:
            yield payload  # type: ignore[misc]


def _read_chunk(handle: IO[bytes], index: ChunkIndex, limits: ReadLimits) -> bytes:
    offset = index.chunk_start_offset
    head = read_exact_at(handle, offset, RECORD_HEADER_BYTES)
    if len(head) < RECORD_HEADER_BYTES:
        raise McapInputError(ReasonCode.TRUNCATED, "chunk header cut short", offset=offset)
    opcode, length = RECORD_HEADER.unpack(head)
    check_record_length(opcode, length, limits, offset)
    if length != index.chunk_length - RECORD_HEADER_BYTES:
        raise McapInputError(
            ReasonCode.CONTAINER_ERROR,
            f"chunk index says {index.chunk_length} bytes, the record at its offset has {length + 9}",
            offset=offset,
        )
    body = read_exact_at(handle, offset + RECORD_HEADER_BYTES, length)
    if len(body) < length:
        raise McapInputError(ReasonCode.TRUNCATED, "chunk cut short", offset=offset)
    chunk = parse_record(opcode, body, offset)
    if not isinstance(chunk, Chunk):
        raise McapInputError(
            ReasonCode.CONTAINER_ERROR, "chunk index points at a non-chunk record", offset=offset
        )
    return decompress_chunk(chunk, offset, limits)


__all__ = ["MessageTuple", "iter_messages"]
