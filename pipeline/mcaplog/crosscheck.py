"""End-of-pass checks: what the footer and the summary claim, against what the data section held.

Indexed readers (ours, Foxglove, the stock ``mcap`` reader) trust these claims to seek; a wrong one makes
them read the wrong bytes, so a mismatch fails the read even when every message is intact.
"""

from __future__ import annotations

import logging
from array import array
from dataclasses import dataclass, field
from operator import itemgetter
from typing import TYPE_CHECKING

from mcap.opcode import Opcode

from pipeline.enums import ReasonCode
from pipeline.mcaplog.exceptions import McapInputError
from pipeline.mcaplog.framing import opcode_name
from pipeline.mcaplog.probe import SUMMARY_OPCODES, Summary

if TYPE_CHECKING:
    from pipeline.mcaplog.scan import ScanFacts

logger = logging.getLogger(__name__)


class MessageEntries:
    """One channel's messages in one chunk: log times and chunk positions, 16 bytes a message."""

    __slots__ = ("log_times", "positions")

    def __init__(self) -> None:
        self.log_times = array("Q")
        self.positions = array("Q")

    def add(self, log_time: int, position: int) -> None:
        self.log_times.append(log_time)
        self.positions.append(position)

    def __len__(self) -> int:
        return len(self.positions)

    def matches(self, records: list[tuple[int, int]]) -> bool:
        """Whether a MessageIndex's (log time, position) entries are exactly these messages. Positions are
        unique and increasing here, so the entries sorted by position must repeat them one for one."""
        if len(records) != len(self.positions):
            return False
        ordered = sorted(records, key=itemgetter(1))
        return (
            array("Q", (p for _, p in ordered)) == self.positions
            and array("Q", (t for t, _ in ordered)) == self.log_times
        )


@dataclass
class ChunkSeen:
    """A chunk as the pass found it, with the message index records that followed it."""

    offset: int
    length: int
    compression: str
    compressed_size: int
    uncompressed_size: int
    message_start_time: int
    message_end_time: int
    #: channel -> its messages' log times and positions in the chunk, in chunk order, held only until the
    #: message indexes after the chunk are checked (:meth:`release`): kept for every chunk of a file, as
    #: lists of tuples, they cost ~150 bytes a message (6M tiny messages: 1.09 GB at the peak).
    messages: dict[int, MessageEntries] = field(default_factory=dict)
    index_offsets: dict[int, int] = field(default_factory=dict)  # channel -> MessageIndex file offset
    index_bytes: int = 0


@dataclass
class DataSeen:
    """The records of the data section that the summary indexes, as found by the pass."""

    chunks: list[ChunkSeen] = field(default_factory=list)
    # (offset, record length, name, media type, data size, log time, create time)
    attachments: set[tuple[int, int, str, str, int, int, int]] = field(default_factory=set)
    metadata: set[tuple[int, int, str]] = field(default_factory=set)  # (offset, record length, name)


def cross_check(summary: Summary, facts: ScanFacts, seen: DataSeen) -> None:
    """Every claim of the footer and the summary must match what the data section holds.

    Raises :class:`McapInputError` (``CONTAINER_ERROR``) on the first claim that does not hold.
    """
    footer = facts.footer
    assert footer is not None
    _expect(
        footer.summary_start == (summary.start if summary.records else 0),
        f"footer's summary_start is {footer.summary_start}, the summary "
        + (f"starts at {summary.start}" if summary.records else "is empty"),
    )
    first_offset = next((o for o, op, _ in summary.records if op == Opcode.SUMMARY_OFFSET), 0)
    _expect(
        footer.summary_offset_start == first_offset,
        f"footer's summary_offset_start is {footer.summary_offset_start}, "
        f"the summary offsets start at {first_offset or 'nowhere'}",
    )
    _check_summary_groups(summary)
    _check_chunk_indexes(summary, seen.chunks)
    if summary.attachment_indexes:
        claimed = {
            (a.offset, a.length, a.name, a.media_type, a.data_size, a.log_time, a.create_time)
            for a in summary.attachment_indexes
        }
        _expect(
            claimed == seen.attachments and len(summary.attachment_indexes) == len(seen.attachments),
            "attachment indexes do not match the attachments in the data section",
        )
    if summary.metadata_indexes:
        claimed_md = {(m.offset, m.length, m.name) for m in summary.metadata_indexes}
        _expect(
            claimed_md == seen.metadata and len(summary.metadata_indexes) == len(seen.metadata),
            "metadata indexes do not match the metadata records in the data section",
        )
    stats = summary.statistics
    if stats is not None:
        for what, claimed_n, seen_n in (
            ("messages", stats.message_count, facts.messages),
            ("chunks", stats.chunk_count, facts.chunks_total),
            ("attachments", stats.attachment_count, facts.attachments_total),
            ("metadata records", stats.metadata_count, facts.metadata_total),
        ):
            _expect(claimed_n == seen_n, f"statistics count {claimed_n} {what}, the file holds {seen_n}")
        claimed_counts = {k: v for k, v in stats.channel_message_counts.items() if v}
        _expect(
            not claimed_counts or claimed_counts == dict(facts.channel_message_counts),
            "statistics' per-channel message counts do not match the messages in the file",
        )
        span = (stats.message_start_time, stats.message_end_time)
        if facts.messages and span != (facts.message_start_ns, facts.message_end_ns):
            # Not fatal: a released writer (mcap go) drops a first log time of 0 from its statistics, and
            # nothing we do relies on this range.
            logger.info(
                "statistics say messages span %d..%d, they span %s..%s",
                *span,
                facts.message_start_ns,
                facts.message_end_ns,
            )


def _check_summary_groups(summary: Summary) -> None:
    by_offset = {offset: (opcode, total) for offset, opcode, total in summary.records}
    for group in summary.summary_offsets:
        pos, end = group.group_start, group.group_start + group.group_length
        while pos < end:
            entry = by_offset.get(pos)
            _expect(
                entry is not None and entry[0] == group.group_opcode,
                f"summary offset group of {opcode_name(group.group_opcode)} at {group.group_start} "
                f"(+{group.group_length}) does not cover whole records of that type",
            )
            assert entry is not None
            pos += entry[1]
        _expect(pos == end, f"summary offset group at {group.group_start} ends inside a record")
    for offset, opcode, _ in summary.records:
        _expect(
            opcode in SUMMARY_OPCODES or opcode >= 0x80,
            f"{opcode_name(opcode)} record at {offset} in the summary section",
        )


def _check_chunk_indexes(summary: Summary, chunks: list[ChunkSeen]) -> None:
    if not summary.chunk_indexes:
        return
    seen = {c.offset: c for c in chunks}
    _expect(
        len(summary.chunk_indexes) == len(chunks),
        f"{len(summary.chunk_indexes)} chunk indexes for {len(chunks)} chunks",
    )
    for index in summary.chunk_indexes:
        chunk = seen.pop(index.chunk_start_offset, None)
        _expect(chunk is not None, f"chunk index points at {index.chunk_start_offset}, where no chunk starts")
        assert chunk is not None
        claimed = (
            index.chunk_length,
            index.compression,
            index.compressed_size,
            index.uncompressed_size,
            index.message_start_time,
            index.message_end_time,
        )
        actual = (
            chunk.length,
            chunk.compression,
            chunk.compressed_size,
            chunk.uncompressed_size,
            chunk.message_start_time,
            chunk.message_end_time,
        )
        _expect(
            claimed == actual,
            f"chunk index for the chunk at {chunk.offset} says {claimed}, chunk has {actual}",
        )
        _expect(
            not index.message_index_offsets
            or (
                dict(index.message_index_offsets) == chunk.index_offsets
                and index.message_index_length == chunk.index_bytes
            ),
            f"chunk index for the chunk at {chunk.offset} points at message indexes that are not there",
        )


def _expect(condition: bool, detail: str) -> None:
    if not condition:
        raise McapInputError(ReasonCode.CONTAINER_ERROR, detail)
