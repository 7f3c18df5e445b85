"""One linear pass over an MCAP file that checks every CRC and every structural claim on the way.

:class:`Scanner` yields the records a consumer needs (schema and channel definitions, messages, metadata,
attachments) in file order and raises :class:`McapInputError` as soon as something is wrong. Some problems
can only show at the end — the data-section CRC sits after the last message, the summary CRC after the
summary, index cross-checks need the whole file — so a consumer must stage what it builds and keep it only
if :meth:`Scanner.items` finished without raising.

CRC definitions (checked against the spec and against the 208 conformance files byte for byte):

* chunk ``uncompressed_crc``: CRC-32 of the decompressed records;
* DataEnd ``data_section_crc``: CRC-32 of every byte from the start of the file (leading magic included)
  up to the first byte of the DataEnd record;
* Footer ``summary_crc``: CRC-32 from the first byte after the DataEnd record (the summary start) through
  the footer's ``summary_offset_start`` field, i.e. the footer's opcode, length and two offsets included;
* attachment ``crc``: CRC-32 of the attachment record's fields before the CRC.

A stored value of 0 means "not available" for all of them.
"""

from __future__ import annotations

import logging
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, NamedTuple

from mcap.opcode import Opcode
from mcap.records import (
    Attachment,
    Channel,
    Chunk,
    DataEnd,
    Footer,
    Header,
    McapRecord,
    Message,
    MessageIndex,
    Metadata,
    Schema,
)

from pipeline.enums import ReasonCode
from pipeline.mcaplog.crosscheck import ChunkSeen, DataSeen, MessageEntries, cross_check
from pipeline.mcaplog.exceptions import McapInputError
from pipeline.mcaplog.framing import (
    FOOTER_BODY_BYTES,
    MAGIC,
    RECORD_HEADER,
    RECORD_HEADER_BYTES,
    attachment_crc,
    check_opcode,
    check_record_length,
    decompress_chunk,
    iter_chunk_records,
    opcode_name,
    parse_record,
    read_some,
)
from pipeline.mcaplog.models import ReadLimits
from pipeline.mcaplog.probe import Summary

logger = logging.getLogger(__name__)

_DATA_OPCODES = frozenset(
    {
        Opcode.SCHEMA,
        Opcode.CHANNEL,
        Opcode.MESSAGE,
        Opcode.CHUNK,
        Opcode.MESSAGE_INDEX,
        Opcode.ATTACHMENT,
        Opcode.METADATA,
    }
)


class Item(NamedTuple):
    """One record handed to the consumer.

    ``offset`` is the file offset of the record, or of its chunk for records inside one; ``crc_checked``
    says, for an attachment, that it carried its own CRC and it matched.
    """

    offset: int
    record: McapRecord
    in_chunk: bool = False
    crc_checked: bool = False


@dataclass
class ScanFacts:
    """What the pass measured besides the records it yielded (valid once the pass finished)."""

    header: Header | None = None
    chunks_total: int = 0
    chunks_with_crc: int = 0
    compressions: Counter[str] = field(default_factory=Counter)
    messages: int = 0
    unchunked_messages: int = 0
    channel_message_counts: Counter[int] = field(default_factory=Counter)
    message_start_ns: int | None = None
    message_end_ns: int | None = None
    attachments_total: int = 0
    attachments_with_crc: int = 0
    metadata_total: int = 0
    data_end_offset: int | None = None
    data_section_crc: int | None = None
    footer: Footer | None = None
    summary: Summary | None = None
    bytes_read: int = 0


class Scanner:
    """A single pass over an open MCAP file (see the module docstring for what is checked).

    ``tail_magic_ok`` (from the probe) tells a record whose length runs past the end of a complete file
    (a corrupt length) from one in a file that is cut short. ``data_section_crc_expected=False`` (the probe
    found a DataEnd without CRC) skips computing a CRC nobody will compare; should the DataEnd met on the
    way carry one after all, the file is inconsistent and the pass fails.
    """

    def __init__(
        self,
        handle: IO[bytes],
        size: int,
        limits: ReadLimits,
        *,
        tail_magic_ok: bool = False,
        data_section_crc_expected: bool = True,
    ) -> None:
        self._f = handle
        self._data_crc_wanted = data_section_crc_expected
        self._size = size
        self._limits = limits
        self._tail_magic_ok = tail_magic_ok
        self.schemas: dict[int, Schema] = {}
        self.channels: dict[int, Channel] = {}
        self.facts = ScanFacts()
        self._seen = DataSeen()
        self._open_chunk: ChunkSeen | None = None

    def items(self) -> Iterator[Item]:
        """Yield records in file order; raise :class:`McapInputError` on the first problem."""
        f, size, facts = self._f, self._size, self.facts
        f.seek(0)
        magic = read_some(f, len(MAGIC))
        if magic != MAGIC:
            if len(magic) < len(MAGIC) and MAGIC.startswith(magic):
                raise McapInputError(ReasonCode.TRUNCATED, f"only {size} bytes, a prefix of the MCAP magic")
            raise McapInputError(ReasonCode.BAD_MAGIC, f"the file starts with {magic!r}", offset=0)
        data_crc = zlib.crc32(magic)
        summary_crc = 0
        summary: Summary | None = None
        pos = len(MAGIC)
        while True:
            head = read_some(f, RECORD_HEADER_BYTES)
            if len(head) < RECORD_HEADER_BYTES:
                where = "inside a record header" if head else "after a complete record"
                missing = "Footer" if summary is not None else "DataEnd and Footer"
                raise McapInputError(
                    ReasonCode.TRUNCATED,
                    f"the file ends {where} at byte {pos + len(head)}, before its {missing}",
                    offset=pos,
                )
            opcode, length = RECORD_HEADER.unpack(head)
            check_record_length(opcode, length, self._limits, pos)
            remaining = size - pos - RECORD_HEADER_BYTES
            if length > remaining:
                self._past_end(opcode, length, remaining, pos)
            check_opcode(opcode, pos)
            body = read_some(f, length)
            if len(body) < length:
                raise McapInputError(ReasonCode.TRUNCATED, "the file shrank while being read", offset=pos)
            if opcode == Opcode.FOOTER:
                self._footer(pos, head, body, summary, summary_crc)
                pos += RECORD_HEADER_BYTES + length
                break
            if summary is None:
                if opcode == Opcode.DATA_END:
                    self._data_end(pos, body, data_crc)
                    summary = Summary(start=pos + RECORD_HEADER_BYTES + length, end=0)
                    facts.summary = summary
                else:
                    if self._data_crc_wanted:
                        data_crc = zlib.crc32(body, zlib.crc32(head, data_crc))
                    yield from self._data_record(pos, opcode, body)
            else:
                summary_crc = zlib.crc32(body, zlib.crc32(head, summary_crc))
                yield from self._summary_record(summary, pos, opcode, length, body)
            pos += RECORD_HEADER_BYTES + length
        tail = read_some(f, len(MAGIC))
        if len(tail) < len(MAGIC):
            raise McapInputError(ReasonCode.TRUNCATED, "the file ends inside its closing magic", offset=pos)
        if tail != MAGIC:
            raise McapInputError(ReasonCode.BAD_MAGIC, f"closing magic is {tail!r}", offset=pos)
        pos += len(MAGIC)
        if pos != size or read_some(f, 1):
            raise McapInputError(
                ReasonCode.CONTAINER_ERROR, f"{size - pos} bytes follow the closing magic", offset=pos
            )
        facts.bytes_read = pos
        assert summary is not None
        cross_check(summary, facts, self._seen)

    # -- data section -------------------------------------------------------------------------------

    def _past_end(self, opcode: int, length: int, remaining: int, pos: int) -> None:
        if self._tail_magic_ok:
            raise McapInputError(
                ReasonCode.CONTAINER_ERROR,
                f"{opcode_name(opcode)} record claims {length} bytes but only {remaining} remain, although "
                "the file ends with the MCAP magic: its length field is corrupt",
                offset=pos,
            )
        raise McapInputError(
            ReasonCode.TRUNCATED,
            f"{opcode_name(opcode)} record claims {length} bytes, only {remaining} remain: "
            "the file is cut short",
            offset=pos,
        )

    def _data_record(self, pos: int, opcode: int, body: bytes) -> Iterator[Item]:
        facts = self.facts
        if opcode != Opcode.MESSAGE_INDEX:
            self._close_chunk()
        record = parse_record(opcode, body, pos)
        if pos == len(MAGIC):
            if not isinstance(record, Header):
                raise McapInputError(
                    ReasonCode.CONTAINER_ERROR,
                    f"the first record is {opcode_name(opcode)}, not Header",
                    offset=pos,
                )
            facts.header = record
            return
        if record is None:  # an application extension record: not ours to read
            return
        if opcode not in _DATA_OPCODES:
            raise McapInputError(
                ReasonCode.CONTAINER_ERROR, f"{opcode_name(opcode)} record in the data section", offset=pos
            )
        if isinstance(record, Message):
            facts.unchunked_messages += 1
            yield from self._message(pos, record, in_chunk=False)
        elif isinstance(record, Chunk):
            yield from self._chunk(pos, RECORD_HEADER_BYTES + len(body), record)
        elif isinstance(record, MessageIndex):
            self._message_index(pos, len(body), record)
        elif isinstance(record, Schema | Channel):
            yield from self._definition(pos, record, in_chunk=False)
        elif isinstance(record, Attachment):
            yield self._attachment(pos, body, record)
        elif isinstance(record, Metadata):
            facts.metadata_total += 1
            self._seen.metadata.add((pos, RECORD_HEADER_BYTES + len(body), record.name))
            yield Item(pos, record)

    def _definition(self, pos: int, record: Schema | Channel, *, in_chunk: bool) -> Iterator[Item]:
        if isinstance(record, Schema):
            if record.id == 0:  # "invalid and should be ignored by readers" (spec)
                return
            known_schema = self.schemas.get(record.id)
            if known_schema is None:
                self.schemas[record.id] = record
                yield Item(pos, record, in_chunk)
            elif known_schema != record:
                raise McapInputError(
                    ReasonCode.CONTAINER_ERROR,
                    f"schema id {record.id} redefined differently ({known_schema.name!r} vs {record.name!r})",
                    offset=pos,
                )
            return
        if record.schema_id != 0 and record.schema_id not in self.schemas:
            raise McapInputError(
                ReasonCode.CONTAINER_ERROR,
                f"channel {record.id} ({record.topic!r}) refers to schema {record.schema_id} "
                "before it is defined",
                offset=pos,
            )
        known_channel = self.channels.get(record.id)
        if known_channel is None:
            self.channels[record.id] = record
            yield Item(pos, record, in_chunk)
        elif known_channel != record:
            raise McapInputError(
                ReasonCode.CONTAINER_ERROR,
                f"channel id {record.id} redefined differently ({known_channel.topic!r} vs {record.topic!r})",
                offset=pos,
            )

    def _message(self, pos: int, message: Message, *, in_chunk: bool) -> Iterator[Item]:
        if message.channel_id not in self.channels:
            raise McapInputError(
                ReasonCode.CONTAINER_ERROR,
                f"message on channel {message.channel_id}, which is not defined before it",
                offset=pos,
            )
        facts = self.facts
        facts.messages += 1
        facts.channel_message_counts[message.channel_id] += 1
        log_time = message.log_time
        if facts.message_start_ns is None or log_time < facts.message_start_ns:
            facts.message_start_ns = log_time
        if facts.message_end_ns is None or log_time > facts.message_end_ns:
            facts.message_end_ns = log_time
        yield Item(pos, message, in_chunk)

    def _chunk(self, pos: int, length: int, chunk: Chunk) -> Iterator[Item]:
        facts = self.facts
        facts.chunks_total += 1
        facts.chunks_with_crc += chunk.uncompressed_crc != 0
        facts.compressions[chunk.compression] += 1
        data = decompress_chunk(chunk, pos, self._limits)
        seen = ChunkSeen(
            offset=pos,
            length=length,
            compression=chunk.compression,
            compressed_size=len(chunk.data),
            uncompressed_size=chunk.uncompressed_size,
            message_start_time=chunk.message_start_time,
            message_end_time=chunk.message_end_time,
        )
        first: int | None = None
        last: int | None = None
        for chunk_pos, record in iter_chunk_records(data, pos, self._limits):
            if isinstance(record, Message):
                entries = seen.messages.get(record.channel_id)
                if entries is None:
                    entries = seen.messages[record.channel_id] = MessageEntries()
                entries.add(record.log_time, chunk_pos)
                first = record.log_time if first is None else min(first, record.log_time)
                last = record.log_time if last is None else max(last, record.log_time)
                yield from self._message(pos, record, in_chunk=True)
            else:
                assert isinstance(record, Schema | Channel)
                yield from self._definition(pos, record, in_chunk=True)
        if (chunk.message_start_time, chunk.message_end_time) != (first or 0, last or 0):
            raise McapInputError(
                ReasonCode.CONTAINER_ERROR,
                f"chunk says its messages span {chunk.message_start_time}..{chunk.message_end_time}, "
                f"they span {first or 0}..{last or 0}",
                offset=pos,
            )
        self._seen.chunks.append(seen)
        self._open_chunk = seen

    def _message_index(self, pos: int, size: int, index: MessageIndex) -> None:
        chunk = self._open_chunk
        if chunk is None:
            raise McapInputError(
                ReasonCode.CONTAINER_ERROR, "MessageIndex record that does not follow a chunk", offset=pos
            )
        if index.channel_id in chunk.index_offsets:
            raise McapInputError(
                ReasonCode.CONTAINER_ERROR,
                f"second MessageIndex for channel {index.channel_id} after one chunk",
                offset=pos,
            )
        entries = chunk.messages.get(index.channel_id)
        if not (entries.matches(index.records) if entries is not None else not index.records):
            raise McapInputError(
                ReasonCode.CONTAINER_ERROR,
                f"MessageIndex of channel {index.channel_id} lists {len(index.records)} entries that do not "
                f"match the {len(entries or ())} messages of its chunk",
                offset=pos,
            )
        chunk.index_offsets[index.channel_id] = pos
        chunk.index_bytes += RECORD_HEADER_BYTES + size

    def _close_chunk(self) -> None:
        chunk, self._open_chunk = self._open_chunk, None
        if chunk is None:
            return
        # The chunk's message indexes are behind it: its messages are not needed any more (the cross-check
        # at the end compares chunk-level facts only).
        channels, chunk.messages = set(chunk.messages), {}
        if not chunk.index_offsets:
            return
        missing = sorted(channels - set(chunk.index_offsets))
        if missing:
            raise McapInputError(
                ReasonCode.CONTAINER_ERROR,
                f"chunk has message indexes but none for channel(s) {missing}",
                offset=chunk.offset,
            )

    def _attachment(self, pos: int, body: bytes, attachment: Attachment) -> Item:
        facts = self.facts
        stored, actual = attachment_crc(body, attachment)
        if stored != 0 and stored != actual:
            raise McapInputError(
                ReasonCode.CRC_MISMATCH,
                f"attachment {attachment.name!r} CRC mismatch: "
                f"stored 0x{stored:08x}, computed 0x{actual:08x}",
                offset=pos,
            )
        facts.attachments_total += 1
        facts.attachments_with_crc += stored != 0
        self._seen.attachments.add(
            (
                pos,
                RECORD_HEADER_BYTES + len(body),
                attachment.name,
                attachment.media_type,
                len(attachment.data),
                attachment.log_time,
                attachment.create_time,
            )
        )
        return Item(pos, attachment, crc_checked=stored != 0)

    def _data_end(self, pos: int, body: bytes, data_crc: int) -> None:
        self._close_chunk()
        record = parse_record(Opcode.DATA_END, body, pos)
        assert isinstance(record, DataEnd)
        self.facts.data_end_offset = pos
        self.facts.data_section_crc = record.data_section_crc
        if record.data_section_crc != 0 and not self._data_crc_wanted:
            raise McapInputError(
                ReasonCode.CONTAINER_ERROR,
                "this DataEnd carries a CRC, the DataEnd before the summary has none: two data-section ends",
                offset=pos,
            )
        if record.data_section_crc != 0 and record.data_section_crc != data_crc:
            raise McapInputError(
                ReasonCode.CRC_MISMATCH,
                f"data-section CRC mismatch: "
                f"stored 0x{record.data_section_crc:08x}, computed 0x{data_crc:08x}",
                offset=pos,
            )

    # -- summary and footer -------------------------------------------------------------------------

    def _summary_record(
        self, summary: Summary, pos: int, opcode: int, length: int, body: bytes
    ) -> Iterator[Item]:
        record = parse_record(opcode, body, pos)
        if summary.summary_offsets and opcode != Opcode.SUMMARY_OFFSET:
            raise McapInputError(
                ReasonCode.CONTAINER_ERROR,
                f"{opcode_name(opcode)} record after the summary offset section began",
                offset=pos,
            )
        summary.add(pos, opcode, RECORD_HEADER_BYTES + length, record)
        if isinstance(record, Schema | Channel):
            # Summary copies must match the data section; a channel defined only here (no messages) is kept.
            yield from self._definition(pos, record, in_chunk=False)

    def _footer(self, pos: int, head: bytes, body: bytes, summary: Summary | None, summary_crc: int) -> None:
        self._close_chunk()
        if summary is None:
            raise McapInputError(
                ReasonCode.CONTAINER_ERROR, "Footer reached without a DataEnd record before it", offset=pos
            )
        if len(body) != FOOTER_BODY_BYTES:
            raise McapInputError(
                ReasonCode.CONTAINER_ERROR,
                f"Footer of {len(body)} bytes, must be {FOOTER_BODY_BYTES}",
                offset=pos,
            )
        footer = parse_record(Opcode.FOOTER, body, pos)
        assert isinstance(footer, Footer)
        summary.end = pos
        self.facts.footer = footer
        if footer.summary_crc != 0:
            actual = zlib.crc32(body[: FOOTER_BODY_BYTES - 4], zlib.crc32(head, summary_crc))
            if actual != footer.summary_crc:
                raise McapInputError(
                    ReasonCode.CRC_MISMATCH,
                    f"summary CRC mismatch: stored 0x{footer.summary_crc:08x}, computed 0x{actual:08x}",
                    offset=pos,
                )
