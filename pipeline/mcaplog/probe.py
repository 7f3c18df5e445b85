"""Structural probe: what the two ends of an MCAP file and its summary say, in a few bounded reads."""

from __future__ import annotations

import logging
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from mcap.opcode import Opcode
from mcap.records import (
    AttachmentIndex,
    Channel,
    ChunkIndex,
    DataEnd,
    Footer,
    Header,
    McapRecord,
    MetadataIndex,
    Schema,
    Statistics,
    SummaryOffset,
)

from pipeline.enums import ReasonCode
from pipeline.mcaplog.exceptions import McapInputError
from pipeline.mcaplog.framing import (
    DATA_END_RECORD_BYTES,
    FOOTER_CRC_PREFIX_BYTES,
    FOOTER_RECORD_BYTES,
    MAGIC,
    MIN_FILE_BYTES,
    RECORD_HEADER,
    RECORD_HEADER_BYTES,
    check_opcode,
    check_record_length,
    opcode_name,
    open_source,
    parse_record,
    read_exact_at,
)
from pipeline.mcaplog.models import Finding, ReadLimits, StatisticsInfo, StructureProbe

logger = logging.getLogger(__name__)

# Reading every chunk's header costs one seek each (one range request on object storage), so the probe
# samples this many, spread over the file; the full read checks all of them.
CHUNK_CRC_SAMPLES = 16
# Chunk header: opcode, length, message_start_time, message_end_time, uncompressed_size, uncompressed_crc.
_CHUNK_HEAD = struct.Struct("<BQQQQI")

SUMMARY_OPCODES = frozenset(
    {
        Opcode.SCHEMA,
        Opcode.CHANNEL,
        Opcode.CHUNK_INDEX,
        Opcode.ATTACHMENT_INDEX,
        Opcode.STATISTICS,
        Opcode.METADATA_INDEX,
        Opcode.SUMMARY_OFFSET,
    }
)


@dataclass
class Summary:
    """The parsed summary section (plus summary offsets), in file order."""

    start: int
    end: int
    records: list[tuple[int, int, int]] = field(default_factory=list)  # (offset, opcode, total bytes)
    schemas: dict[int, Schema] = field(default_factory=dict)
    channels: dict[int, Channel] = field(default_factory=dict)
    statistics: Statistics | None = None
    chunk_indexes: list[ChunkIndex] = field(default_factory=list)
    attachment_indexes: list[AttachmentIndex] = field(default_factory=list)
    metadata_indexes: list[MetadataIndex] = field(default_factory=list)
    summary_offsets: list[SummaryOffset] = field(default_factory=list)

    def add(self, offset: int, opcode: int, total: int, record: McapRecord | None) -> None:
        """Keep one summary record; raises on a record type that has no place in the summary."""
        self.records.append((offset, opcode, total))
        if record is None:
            return
        if isinstance(record, Schema):
            if record.id != 0:
                self.schemas[record.id] = record
        elif isinstance(record, Channel):
            self.channels[record.id] = record
        elif isinstance(record, Statistics):
            if self.statistics is not None:
                raise McapInputError(
                    ReasonCode.CONTAINER_ERROR,
                    "more than one Statistics record in the summary",
                    offset=offset,
                )
            self.statistics = record
        elif isinstance(record, ChunkIndex):
            self.chunk_indexes.append(record)
        elif isinstance(record, AttachmentIndex):
            self.attachment_indexes.append(record)
        elif isinstance(record, MetadataIndex):
            self.metadata_indexes.append(record)
        elif isinstance(record, SummaryOffset):
            self.summary_offsets.append(record)
        else:
            raise McapInputError(
                ReasonCode.CONTAINER_ERROR,
                f"{opcode_name(opcode)} record in the summary section (allowed there: "
                f"{', '.join(sorted(opcode_name(o) for o in SUMMARY_OPCODES))})",
                offset=offset,
            )


def probe_structure(source: str | Path | IO[bytes], *, limits: ReadLimits | None = None) -> StructureProbe:
    """Check an MCAP file's structure from its two ends and its summary, without reading the data section.

    Reports magic at both ends, header, footer, the DataEnd record and its data-section CRC, the summary
    and what it indexes, the chunk compressions, which CRCs exist (the summary CRC is checked here), and
    whether the summary's offsets and sizes are sane. Bad input yields findings, never an exception; an
    unreadable file raises :class:`~pipeline.errors.StoreError`.
    """
    with open_source(source) as src:
        probe, _ = probe_file(src.file, src.size_bytes, limits or ReadLimits())
        return probe


def probe_file(handle: IO[bytes], size: int, limits: ReadLimits) -> tuple[StructureProbe, Summary | None]:
    """The probe and, when the file has one, its parsed summary (used by the indexed message reader)."""
    facts: dict[str, object] = {"size_bytes": size}
    summary: Summary | None = None
    try:
        summary = _probe(handle, size, limits, facts)
    except McapInputError as exc:
        facts["findings"] = (*_findings(facts), _fatal(exc))
        summary = None
    return StructureProbe.model_validate(facts), summary


def _findings(facts: dict[str, object]) -> tuple[Finding, ...]:
    found = facts.get("findings", ())
    assert isinstance(found, tuple)
    return found


def _fatal(exc: McapInputError) -> Finding:
    return Finding(code=exc.code, detail=exc.detail, fatal=True, offset=exc.offset)


def _probe(handle: IO[bytes], size: int, limits: ReadLimits, facts: dict[str, object]) -> Summary | None:
    if size == 0:
        raise McapInputError(ReasonCode.ZERO_BYTES, "the file is empty")
    head = read_exact_at(handle, 0, len(MAGIC))
    if head != MAGIC:
        if len(head) < len(MAGIC) and MAGIC.startswith(head):
            raise McapInputError(ReasonCode.TRUNCATED, f"only {size} bytes, a prefix of the MCAP magic")
        raise McapInputError(
            ReasonCode.BAD_MAGIC, f"the file starts with {head[:8]!r}, not the MCAP magic {MAGIC!r}", offset=0
        )
    facts["head_magic_ok"] = True
    if size < MIN_FILE_BYTES:
        raise McapInputError(
            ReasonCode.TRUNCATED, f"only {size} bytes; the smallest MCAP file has {MIN_FILE_BYTES}"
        )
    header = _read_record_at(handle, len(MAGIC), size, limits)
    if not isinstance(header, Header):
        raise McapInputError(
            ReasonCode.CONTAINER_ERROR, "the first record is not a Header", offset=len(MAGIC)
        )
    facts["header_profile"] = header.profile
    facts["header_library"] = header.library

    tail = read_exact_at(handle, size - len(MAGIC), len(MAGIC))
    if tail != MAGIC:
        raise McapInputError(
            ReasonCode.TRUNCATED,
            "no MCAP magic at the end of the file: it is cut short (or has bytes appended)",
            offset=size - len(MAGIC),
        )
    facts["tail_magic_ok"] = True
    footer_offset = size - len(MAGIC) - FOOTER_RECORD_BYTES
    footer_bytes = read_exact_at(handle, footer_offset, FOOTER_RECORD_BYTES)
    opcode, length = RECORD_HEADER.unpack_from(footer_bytes)
    if opcode != Opcode.FOOTER or length != FOOTER_RECORD_BYTES - RECORD_HEADER_BYTES:
        raise McapInputError(
            ReasonCode.CONTAINER_ERROR, "no Footer record before the closing magic", offset=footer_offset
        )
    footer = parse_record(opcode, footer_bytes[RECORD_HEADER_BYTES:], footer_offset)
    assert isinstance(footer, Footer)
    facts.update(
        footer_ok=True,
        summary_start=footer.summary_start,
        summary_offset_start=footer.summary_offset_start,
        summary_crc=footer.summary_crc,
        summary_present=footer.summary_start != 0,
    )

    data_end_limit = footer_offset
    summary: Summary | None = None
    if footer.summary_start != 0:
        summary = _read_summary(handle, footer, footer_offset, limits)
        data_end_limit = footer.summary_start
    else:
        _check_crc_only_footer(handle, footer, footer_offset, facts)
    if summary is not None:
        facts["summary_crc_ok"] = None if footer.summary_crc == 0 else True
        _summary_facts(summary, facts)

    data_end = _locate_data_end(handle, data_end_limit)
    if data_end is not None:
        facts["data_end_offset"], facts["data_section_crc"] = data_end
    if summary is not None:
        _check_summary_offsets(summary, footer, data_end_limit, size, limits, facts)
        facts["chunk_crcs_present"] = _sample_chunk_crcs(handle, summary.chunk_indexes)
    return summary


def _read_record_at(handle: IO[bytes], offset: int, size: int, limits: ReadLimits) -> McapRecord | None:
    head = read_exact_at(handle, offset, RECORD_HEADER_BYTES)
    if len(head) < RECORD_HEADER_BYTES:
        raise McapInputError(ReasonCode.TRUNCATED, "record header cut short", offset=offset)
    opcode, length = RECORD_HEADER.unpack(head)
    check_record_length(opcode, length, limits, offset)
    if length > size - offset - RECORD_HEADER_BYTES:
        raise McapInputError(
            ReasonCode.TRUNCATED, f"{opcode_name(opcode)} record runs past the end of the file", offset=offset
        )
    return parse_record(opcode, read_exact_at(handle, offset + RECORD_HEADER_BYTES, length), offset)


def _check_crc_only_footer(
    handle: IO[bytes], footer: Footer, footer_offset: int, facts: dict[str, object]
) -> None:
    """Without a summary the summary CRC still covers the footer's own leading fields."""
    if footer.summary_crc == 0:
        return
    prefix = read_exact_at(handle, footer_offset, FOOTER_CRC_PREFIX_BYTES)
    actual = zlib.crc32(prefix)
    if actual != footer.summary_crc:
        raise McapInputError(
            ReasonCode.CRC_MISMATCH,
            f"summary CRC mismatch: stored 0x{footer.summary_crc:08x}, computed 0x{actual:08x}",
            offset=footer_offset,
        )
    facts["summary_crc_ok"] = True


def _read_summary(handle: IO[bytes], footer: Footer, footer_offset: int, limits: ReadLimits) -> Summary:
    start = footer.summary_start
    if not len(MAGIC) < start <= footer_offset:
        raise McapInputError(
            ReasonCode.CONTAINER_ERROR,
            f"footer's summary_start {start} is outside the file's records (8..{footer_offset})",
            offset=footer_offset,
        )
    span = footer_offset - start
    if span > limits.max_summary_bytes:
        raise McapInputError(
            ReasonCode.RECORD_TOO_LARGE,
            f"summary section of {span} bytes; the limit is {limits.max_summary_bytes}",
            offset=start,
        )
    # The summary CRC runs from summary_start through the footer's summary_offset_start field.
    region = read_exact_at(handle, start, span + FOOTER_CRC_PREFIX_BYTES)
    if footer.summary_crc != 0:
        actual = zlib.crc32(region)
        if actual != footer.summary_crc:
            raise McapInputError(
                ReasonCode.CRC_MISMATCH,
                f"summary CRC mismatch: stored 0x{footer.summary_crc:08x}, computed 0x{actual:08x}",
                offset=start,
            )
    summary = Summary(start=start, end=footer_offset)
    view = memoryview(region)[:span]
    pos = 0
    while pos < span:
        offset = start + pos
        if span - pos < RECORD_HEADER_BYTES:
            raise McapInputError(
                ReasonCode.CONTAINER_ERROR, "summary ends inside a record header", offset=offset
            )
        opcode, length = RECORD_HEADER.unpack_from(view, pos)
        check_record_length(opcode, length, limits, offset)
        if length > span - pos - RECORD_HEADER_BYTES:
            raise McapInputError(
                ReasonCode.CONTAINER_ERROR,
                f"{opcode_name(opcode)} record in the summary runs past the footer",
                offset=offset,
            )
        check_opcode(opcode, offset)
        body = bytes(view[pos + RECORD_HEADER_BYTES : pos + RECORD_HEADER_BYTES + length])
        summary.add(offset, opcode, RECORD_HEADER_BYTES + length, parse_record(opcode, body, offset))
        pos += RECORD_HEADER_BYTES + length
    return summary


def _summary_facts(summary: Summary, facts: dict[str, object]) -> None:
    stats = summary.statistics
    if stats is not None:
        facts["statistics"] = StatisticsInfo(
            message_count=stats.message_count,
            schema_count=stats.schema_count,
            channel_count=stats.channel_count,
            attachment_count=stats.attachment_count,
            metadata_count=stats.metadata_count,
            chunk_count=stats.chunk_count,
            message_start_ns=stats.message_start_time,
            message_end_ns=stats.message_end_time,
            channel_message_counts=dict(stats.channel_message_counts),
        )
    facts.update(
        chunk_index_count=len(summary.chunk_indexes),
        message_index_present=any(ci.message_index_offsets for ci in summary.chunk_indexes),
        attachment_index_count=len(summary.attachment_indexes),
        metadata_index_count=len(summary.metadata_indexes),
        summary_offset_count=len(summary.summary_offsets),
        summary_schema_count=len(summary.schemas),
        summary_channel_count=len(summary.channels),
        chunk_compressions=tuple(sorted({ci.compression for ci in summary.chunk_indexes})),
    )


def _locate_data_end(handle: IO[bytes], end: int) -> tuple[int, int] | None:
    """(offset, data_section_crc) of a DataEnd record ending right at ``end``, where writers put it."""
    offset = end - DATA_END_RECORD_BYTES
    if offset < len(MAGIC):
        return None
    raw = read_exact_at(handle, offset, DATA_END_RECORD_BYTES)
    opcode, length = RECORD_HEADER.unpack_from(raw)
    if opcode != Opcode.DATA_END or length != 4:
        return None
    record = parse_record(opcode, raw[RECORD_HEADER_BYTES:], offset)
    assert isinstance(record, DataEnd)
    return offset, record.data_section_crc


def _check_summary_offsets(
    summary: Summary, footer: Footer, data_end: int, size: int, limits: ReadLimits, facts: dict[str, object]
) -> None:
    """Offsets and sizes the summary claims must point inside the data section and within limits."""
    for ci in summary.chunk_indexes:
        if ci.chunk_length - RECORD_HEADER_BYTES > limits.max_record_bytes:
            raise McapInputError(
                ReasonCode.RECORD_TOO_LARGE,
                f"chunk index claims a {ci.chunk_length}-byte chunk; the limit is {limits.max_record_bytes}",
                offset=ci.chunk_start_offset,
            )
        if ci.uncompressed_size > limits.max_chunk_uncompressed_bytes:
            raise McapInputError(
                ReasonCode.RECORD_TOO_LARGE,
                f"chunk index claims {ci.uncompressed_size} uncompressed bytes; "
                f"the limit is {limits.max_chunk_uncompressed_bytes}",
                offset=ci.chunk_start_offset,
            )
        _within(ci.chunk_start_offset, ci.chunk_length, data_end, "chunk index")
        for channel_id, mi_offset in ci.message_index_offsets.items():
            _within(mi_offset, RECORD_HEADER_BYTES, data_end, f"message index of channel {channel_id}")
    for ai in summary.attachment_indexes:
        _within(ai.offset, ai.length, data_end, f"attachment index {ai.name!r}")
    for mi in summary.metadata_indexes:
        _within(mi.offset, mi.length, data_end, f"metadata index {mi.name!r}")
    for so in summary.summary_offsets:
        _within(
            so.group_start, so.group_length, summary.end, f"summary offset of {opcode_name(so.group_opcode)}"
        )
    if footer.summary_offset_start and not summary.start <= footer.summary_offset_start < summary.end:
        raise McapInputError(
            ReasonCode.CONTAINER_ERROR,
            f"footer's summary_offset_start {footer.summary_offset_start} is outside the summary "
            f"({summary.start}..{summary.end})",
        )
    stats = summary.statistics
    if stats is not None:
        if stats.message_count and stats.message_start_time > stats.message_end_time:
            raise McapInputError(
                ReasonCode.CONTAINER_ERROR,
                f"statistics: message_start_time {stats.message_start_time} after "
                f"message_end_time {stats.message_end_time}",
            )
        if summary.chunk_indexes and stats.chunk_count != len(summary.chunk_indexes):
            raise McapInputError(
                ReasonCode.CONTAINER_ERROR,
                f"statistics count {stats.chunk_count} chunks, "
                f"the summary indexes {len(summary.chunk_indexes)}",
            )


def _within(offset: int, length: int, end: int, what: str) -> None:
    if offset < len(MAGIC) or offset + length > end:
        raise McapInputError(
            ReasonCode.CONTAINER_ERROR,
            f"{what} points at bytes {offset}..{offset + length}, outside the section that ends at {end}",
        )


def _sample_chunk_crcs(handle: IO[bytes], chunk_indexes: list[ChunkIndex]) -> bool | None:
    if not chunk_indexes:
        return None
    step = max(1, len(chunk_indexes) // CHUNK_CRC_SAMPLES)
    sample = chunk_indexes[::step][:CHUNK_CRC_SAMPLES]
    if chunk_indexes[-1] not in sample:
        sample.append(chunk_indexes[-1])
    for ci in sample:
        raw = read_exact_at(handle, ci.chunk_start_offset, _CHUNK_HEAD.size)
        if len(raw) < _CHUNK_HEAD.size:
            raise McapInputError(ReasonCode.TRUNCATED, "chunk header cut short", offset=ci.chunk_start_offset)
        opcode, length, _start, _end, _size, crc = _CHUNK_HEAD.unpack(raw)
        if opcode != Opcode.CHUNK or length != ci.chunk_length - RECORD_HEADER_BYTES:
            raise McapInputError(
                ReasonCode.CONTAINER_ERROR,
                f"chunk index points at a {opcode_name(opcode)} record of {length} bytes, "
                f"not a Chunk of {ci.chunk_length - RECORD_HEADER_BYTES}",
                offset=ci.chunk_start_offset,
            )
        if crc == 0:
            return False
    return True
