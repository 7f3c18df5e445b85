"""Bounded record framing on top of ``mcap.records``.

Field layouts are parsed by the ``mcap`` library's record classes, except for the three records that carry
the bulk of a file's bytes and count (Message, Chunk, MessageIndex: see :func:`parse_message`), which are
unpacked in one step each for speed. This module adds what the stock reader lacks when the input may be
hostile:

* a record is parsed from its own bytes through a stream that refuses short reads, so an inner length
  (a string, a chunk's data) that runs past its record is an error instead of a silent truncation or an
  allocation of whatever size the length field claims;
* record and decompressed-chunk sizes are checked against :class:`ReadLimits` before anything is allocated;
* a chunk's compression is checked against the ones we can decode (the stock ``breakup_chunk`` treats an
  unknown compression as uncompressed); zstd output is bounded: one-shot only when the frame declares
  exactly the chunk's limit-checked size, streamed across frames otherwise (the stock call decodes only
  the first frame and allocates whatever its header claims); the CRC of the decompressed records is
  always checked when present.
"""

from __future__ import annotations

import io
import struct
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import lz4.frame
import zstandard
from mcap.data_stream import ReadDataStream
from mcap.exceptions import EndOfFile, McapError
from mcap.opcode import Opcode
from mcap.records import (
    Attachment,
    AttachmentIndex,
    Channel,
    Chunk,
    ChunkIndex,
    DataEnd,
    Footer,
    Header,
    McapRecord,
    Message,
    MessageIndex,
    Metadata,
    MetadataIndex,
    Schema,
    Statistics,
    SummaryOffset,
)

from pipeline.enums import ReasonCode
from pipeline.errors import StoreError
from pipeline.mcaplog.exceptions import McapInputError
from pipeline.mcaplog.models import ReadLimits

MAGIC = b"\x89MCAP0\r\n"
RECORD_HEADER = struct.Struct("<BQ")
RECORD_HEADER_BYTES = RECORD_HEADER.size
FOOTER_BODY_BYTES = 8 + 8 + 4
FOOTER_RECORD_BYTES = RECORD_HEADER_BYTES + FOOTER_BODY_BYTES
# The summary CRC covers the footer up to (not including) its own summary_crc field.
FOOTER_CRC_PREFIX_BYTES = FOOTER_RECORD_BYTES - 4
DATA_END_RECORD_BYTES = RECORD_HEADER_BYTES + 4
_MESSAGE_HEAD = struct.Struct("<HIQQ")  # channel_id, sequence, log_time, publish_time
_CHUNK_HEAD = struct.Struct("<QQQII")  # start, end, uncompressed size, uncompressed crc, compression length
_MESSAGE_INDEX_HEAD = struct.Struct("<HI")  # channel_id, byte length of the entries
_MESSAGE_INDEX_ENTRY = struct.Struct("<QQ")  # log_time, offset in the chunk
MESSAGE_FIXED_BYTES = _MESSAGE_HEAD.size
# magic + the smallest Header (two empty strings) + Footer + magic
MIN_FILE_BYTES = len(MAGIC) + RECORD_HEADER_BYTES + 8 + FOOTER_RECORD_BYTES + len(MAGIC)

SUPPORTED_COMPRESSIONS: tuple[str, ...] = ("", "lz4", "zstd")
# Opcodes 0x01-0x7F are reserved for the MCAP format itself, 0x80-0xFF for application extensions. An
# unknown reserved opcode is far more likely a corrupt length upstream than a future record type.
FIRST_EXTENSION_OPCODE = 0x80

_PARSERS: dict[int, Callable[[ReadDataStream], McapRecord]] = {
    Opcode.HEADER: Header.read,
    Opcode.FOOTER: Footer.read,
    Opcode.SCHEMA: Schema.read,
    Opcode.CHANNEL: Channel.read,
    Opcode.CHUNK_INDEX: ChunkIndex.read,
    Opcode.ATTACHMENT: Attachment.read,
    Opcode.ATTACHMENT_INDEX: AttachmentIndex.read,
    Opcode.STATISTICS: Statistics.read,
    Opcode.METADATA: Metadata.read,
    Opcode.METADATA_INDEX: MetadataIndex.read,
    Opcode.SUMMARY_OFFSET: SummaryOffset.read,
    Opcode.DATA_END: DataEnd.read,
}


_FAST_PARSED = frozenset({Opcode.MESSAGE, Opcode.CHUNK, Opcode.MESSAGE_INDEX})


def opcode_name(opcode: int) -> str:
    try:
        return Opcode(opcode).name
    except ValueError:
        return f"opcode 0x{opcode:02x}"


class _StrictStream(ReadDataStream):
    """A ``ReadDataStream`` over one record's bytes that fails instead of returning fewer bytes."""

    def __init__(self, body: bytes) -> None:
        super().__init__(io.BytesIO(body))
        self._size = len(body)

    def read(self, length: int) -> bytes:
        if length < 0 or length > self._size - self.count:
            raise EndOfFile()
        data = super().read(length)
        if len(data) != length:
            raise EndOfFile()
        return data


def parse_record(opcode: int, body: bytes, offset: int) -> McapRecord | None:
    """Parse one record body with the ``mcap`` record classes; ``None`` for an unknown opcode."""
    if opcode == Opcode.MESSAGE:
        return parse_message(memoryview(body), offset)
    if opcode == Opcode.CHUNK:
        return parse_chunk(memoryview(body), offset)
    if opcode == Opcode.MESSAGE_INDEX:
        return parse_message_index(memoryview(body), offset)
    stream = _StrictStream(body)
    try:
        parser = _PARSERS.get(opcode)
        if parser is None:
            return None
        return parser(stream)
    except (McapError, struct.error, UnicodeDecodeError, ValueError) as exc:
        raise McapInputError(
            ReasonCode.CONTAINER_ERROR,
            f"malformed {opcode_name(opcode)} record of {len(body)} bytes: a field runs past the record "
            f"or is not valid ({type(exc).__name__})",
            offset=offset,
        ) from None


def parse_chunk(body: memoryview, offset: int) -> Chunk:
    """A Chunk record whose ``data`` is a view into ``body`` (no copy of the compressed records).

    Parsed here for the same reason as messages: chunks carry nearly all the bytes of a file, and the
    library's parser copies them once more. Fields added after ``records`` by a later spec are ignored.
    """
    try:
        start, end, size, crc, name_len = _CHUNK_HEAD.unpack_from(body)
        name_end = _CHUNK_HEAD.size + name_len
        compression = str(body[_CHUNK_HEAD.size : name_end], "utf-8")
        (data_len,) = struct.unpack_from("<Q", body, name_end)
    except (struct.error, UnicodeDecodeError):
        data_len, name_end = -1, len(body)
    if data_len < 0 or name_end + 8 + data_len > len(body):
        raise McapInputError(
            ReasonCode.CONTAINER_ERROR,
            f"malformed Chunk record of {len(body)} bytes: a field runs past the record",
            offset=offset,
        )
    data = body[name_end + 8 : name_end + 8 + data_len]
    return Chunk(
        compression=compression,
        data=data,  # type: ignore[arg-type]  # a view: zstd, lz4 and crc32 take any buffer
        message_start_time=start,
        message_end_time=end,
        uncompressed_crc=crc,
        uncompressed_size=size,
    )


def parse_message_index(body: memoryview, offset: int) -> MessageIndex:
    """A MessageIndex record (one 16-byte entry per message: parsed in bulk, not field by field)."""
    if len(body) >= 6:
        channel_id, records_len = _MESSAGE_INDEX_HEAD.unpack_from(body)
        if records_len % 16 == 0 and 6 + records_len <= len(body):
            entries = list(_MESSAGE_INDEX_ENTRY.iter_unpack(body[6 : 6 + records_len]))
            return MessageIndex(channel_id=channel_id, records=entries)
    raise McapInputError(
        ReasonCode.CONTAINER_ERROR,
        f"malformed MessageIndex record of {len(body)} bytes: its entries run past the record",
        offset=offset,
    )


def parse_message(body: memoryview, offset: int) -> Message:
    """A Message record from its bytes, copying the payload once.

    The one record parsed here rather than by ``Message.read``: it is the hot path (every message of a
    log) and its layout is frozen by the spec ("Message records will not be extended"). Going through the
    library's stream costs five small reads and a second copy of every payload.
    """
    if len(body) < MESSAGE_FIXED_BYTES:
        raise McapInputError(
            ReasonCode.CONTAINER_ERROR,
            f"Message record of {len(body)} bytes, shorter than its {MESSAGE_FIXED_BYTES} fixed bytes",
            offset=offset,
        )
    channel_id, sequence, log_time, publish_time = _MESSAGE_HEAD.unpack_from(body)
    return Message(
        channel_id=channel_id,
        sequence=sequence,
        log_time=log_time,
        publish_time=publish_time,
        data=bytes(body[MESSAGE_FIXED_BYTES:]),
    )


def check_record_length(opcode: int, length: int, limits: ReadLimits, offset: int) -> None:
    if length > limits.max_record_bytes:
        raise McapInputError(
            ReasonCode.RECORD_TOO_LARGE,
            f"{opcode_name(opcode)} record claims {length} bytes; the limit is {limits.max_record_bytes}",
            offset=offset,
        )


def check_opcode(opcode: int, offset: int) -> None:
    if opcode not in _PARSERS and opcode not in _FAST_PARSED and opcode < FIRST_EXTENSION_OPCODE:
        raise McapInputError(
            ReasonCode.CONTAINER_ERROR,
            f"unknown reserved record opcode 0x{opcode:02x} (known: 0x01-0x0f, extensions: 0x80-0xff)",
            offset=offset,
        )


def attachment_crc(body: bytes, attachment: Attachment) -> tuple[int, int]:
    """(stored, computed) CRC of an attachment record; the stock parser skips this field."""
    end = (8 + 8 + 4 + len(attachment.name.encode()) + 4 + len(attachment.media_type.encode()) + 8) + len(
        attachment.data
    )
    (stored,) = struct.unpack_from("<I", body, end)
    return stored, zlib.crc32(memoryview(body)[:end])


def decompress_chunk(chunk: Chunk, offset: int, limits: ReadLimits) -> bytes:
    """The chunk's records, decompressed within limits and checked against its CRC when it has one."""
    if chunk.compression not in SUPPORTED_COMPRESSIONS:
        raise McapInputError(
            ReasonCode.UNKNOWN_COMPRESSION,
            f"chunk compression {chunk.compression!r}; "
            f"readable: {', '.join(map(repr, SUPPORTED_COMPRESSIONS))}",
            offset=offset,
        )
    size = chunk.uncompressed_size
    if size > limits.max_chunk_uncompressed_bytes:
        raise McapInputError(
            ReasonCode.RECORD_TOO_LARGE,
            f"chunk claims {size} uncompressed bytes; the limit is {limits.max_chunk_uncompressed_bytes}",
            offset=offset,
        )
    try:
        if chunk.compression == "zstd":
            data = _zstd_bounded(chunk.data, size + 1)
        elif chunk.compression == "lz4":
            data = _lz4_bounded(chunk.data, size + 1)
        else:
            data = chunk.data
    except (zstandard.ZstdError, RuntimeError, ValueError) as exc:
        raise McapInputError(
            ReasonCode.CONTAINER_ERROR, f"corrupt {chunk.compression} chunk data: {exc}", offset=offset
        ) from None
    if len(data) != size:
        raise McapInputError(
            ReasonCode.CONTAINER_ERROR,
            f"chunk decompresses to {len(data)}{'+' if len(data) > size else ''} bytes, "
            f"its header says {size}",
            offset=offset,
        )
    if chunk.uncompressed_crc != 0:
        actual = zlib.crc32(data)
        if actual != chunk.uncompressed_crc:
            raise McapInputError(
                ReasonCode.CRC_MISMATCH,
                f"chunk CRC mismatch: stored 0x{chunk.uncompressed_crc:08x}, computed 0x{actual:08x}",
                offset=offset,
            )
    return data


def _zstd_bounded(data: bytes, max_bytes: int) -> bytes:
    if zstandard.frame_content_size(data) == max_bytes - 1:
        # One frame that declares exactly the chunk's size (what every writer we know emits): the one-shot
        # call allocates that many bytes, already checked against the limit, and is ~10x the streaming path.
        return zstandard.ZstdDecompressor().decompress(data)
    reader = zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True)
    parts: list[bytes] = []
    got = 0
    while got < max_bytes:
        part = reader.read(max_bytes - got)
        if not part:
            break
        parts.append(part)
        got += len(part)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _lz4_bounded(data: bytes, max_bytes: int) -> bytes:
    parts: list[bytes] = []
    got = 0
    rest = data
    while rest and got < max_bytes:
        decompressor = lz4.frame.LZ4FrameDecompressor()
        part = decompressor.decompress(rest, max_length=max_bytes - got)
        parts.append(part)
        got += len(part)
        if not decompressor.eof:
            # Either the output bound was hit (the size check reports it) or the frame is cut short.
            if got < max_bytes:
                raise ValueError("lz4 frame ends before its end mark")
            break
        rest = decompressor.unused_data
    return b"".join(parts)


def iter_chunk_records(data: bytes, offset: int, limits: ReadLimits) -> Iterator[tuple[int, McapRecord]]:
    """(position in the decompressed records, record) for the Schema, Channel and Message records.

    Records of other types inside a chunk are skipped, as the spec allows only these three there.
    """
    view = memoryview(data)
    end = len(data)
    pos = 0
    while pos < end:
        if end - pos < RECORD_HEADER_BYTES:
            raise McapInputError(
                ReasonCode.CONTAINER_ERROR,
                f"chunk records end with {end - pos} stray bytes at chunk position {pos}",
                offset=offset,
            )
        opcode, length = RECORD_HEADER.unpack_from(view, pos)
        check_record_length(opcode, length, limits, offset)
        if length > end - pos - RECORD_HEADER_BYTES:
            raise McapInputError(
                ReasonCode.CONTAINER_ERROR,
                f"{opcode_name(opcode)} record at chunk position {pos} claims {length} bytes, "
                f"only {end - pos - RECORD_HEADER_BYTES} remain in the chunk",
                offset=offset,
            )
        check_opcode(opcode, offset)
        if opcode == Opcode.MESSAGE:
            yield (
                pos,
                parse_message(view[pos + RECORD_HEADER_BYTES : pos + RECORD_HEADER_BYTES + length], offset),
            )
        elif opcode in (Opcode.SCHEMA, Opcode.CHANNEL):
            body = bytes(view[pos + RECORD_HEADER_BYTES : pos + RECORD_HEADER_BYTES + length])
            record = parse_record(opcode, body, offset)
            assert record is not None
            yield pos, record
        pos += RECORD_HEADER_BYTES + length


@dataclass
class Source:
    """An open, seekable binary file and what we call it in messages."""

    file: IO[bytes]
    size_bytes: int
    name: str


@contextmanager
def open_source(source: str | Path | IO[bytes]) -> Iterator[Source]:
    """Open a path (or take a seekable binary file object, e.g. from fsspec) and measure its size.

    A file that cannot be opened or read is a platform fault (:class:`StoreError`), not bad input.
    """
    if isinstance(source, str | Path):
        path = Path(source)
        try:
            # 1 MiB buffer: unchunked files are many small records, each read as header + body.
            handle = open(path, "rb", buffering=2**20)  # noqa: SIM115 - closed below
        except OSError as exc:
            raise StoreError(f"cannot open MCAP {str(path)!r}: {exc}") from exc
        try:
            yield Source(handle, _size_of(handle, str(path)), str(path))
        finally:
            handle.close()
        return
    if not (hasattr(source, "read") and hasattr(source, "seek")):
        raise TypeError(f"expected a path or a seekable binary file, got {type(source).__name__}")
    name = str(getattr(source, "name", getattr(source, "path", repr(source))))
    start = source.tell()
    try:
        yield Source(source, _size_of(source, name), name)
    finally:
        source.seek(start)


def _size_of(handle: IO[Any], name: str) -> int:
    try:
        size = handle.seek(0, io.SEEK_END)
        handle.seek(0)
    except OSError as exc:
        raise StoreError(f"cannot seek in MCAP {name!r}: {exc}") from exc
    return int(size)


def read_exact_at(handle: IO[bytes], offset: int, length: int) -> bytes:
    """Up to ``length`` bytes at ``offset`` (fewer only at end of file)."""
    handle.seek(offset)
    return read_some(handle, length)


def read_some(handle: IO[bytes], length: int) -> bytes:
    """Read ``length`` bytes, looping over short reads; fewer only at end of file."""
    try:
        data = handle.read(length)
        if len(data) >= length or not data:
            return data
        parts = [data]
        got = len(data)
        while got < length:
            more = handle.read(length - got)
            if not more:
                break
            parts.append(more)
            got += len(more)
        return b"".join(parts)
    except OSError as exc:
        raise StoreError(f"cannot read MCAP bytes: {exc}") from exc
