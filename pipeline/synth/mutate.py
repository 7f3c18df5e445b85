"""Byte-level damage to finished files, reusable by tests that need a file cut or corrupted at a given place.

MCAP: a top-level record is ``opcode (u8) | length (u64 LE) | body``, after an 8-byte magic. The scanner
walks those headers only (no decompression), so it is cheap on large files and works on damaged ones up to
the damage. MP4/H.264: samples are located through PyAV's demuxer (each packet's byte position) and their
NAL units damaged in place.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from mcap.opcode import Opcode

from pipeline.errors import SluiceError

MCAP_MAGIC = b"\x89MCAP0\r\n"
RECORD_HEADER_BYTES = 9  # opcode u8 + length u64
# Offset of ``uncompressed_crc`` inside a Chunk record: header, then message_start_time,
# message_end_time and uncompressed_size (u64 each).
CHUNK_CRC_OFFSET = RECORD_HEADER_BYTES + 8 + 8 + 8


class MutationError(SluiceError, ValueError):
    """The file does not have what the mutation needs (e.g. no chunk to cut)."""


@dataclass(frozen=True)
class RecordSpan:
    """One top-level MCAP record: where it starts and how many bytes it takes, header included."""

    opcode: int
    offset: int
    length: int

    @property
    def end(self) -> int:
        return self.offset + self.length

    @property
    def name(self) -> str:
        try:
            return Opcode(self.opcode).name
        except ValueError:
            return f"UNKNOWN_{self.opcode:#04x}"


def scan_records(path: Path) -> list[RecordSpan]:
    """Top-level records of an MCAP file in file order, up to the footer or the first incomplete record."""
    size = path.stat().st_size
    spans: list[RecordSpan] = []
    with open(path, "rb") as fh:
        if fh.read(len(MCAP_MAGIC)) != MCAP_MAGIC:
            raise MutationError(f"{path} does not start with the MCAP magic {MCAP_MAGIC!r}")
        offset = len(MCAP_MAGIC)
        while offset + RECORD_HEADER_BYTES <= size:
            fh.seek(offset)
            opcode, length = struct.unpack("<BQ", fh.read(RECORD_HEADER_BYTES))
            total = RECORD_HEADER_BYTES + length
            if offset + total > size:
                break
            spans.append(RecordSpan(opcode, offset, total))
            offset += total
            if opcode == Opcode.FOOTER:
                break
    return spans


def chunk_spans(path: Path) -> list[RecordSpan]:
    """The Chunk records of an MCAP file."""
    return [s for s in scan_records(path) if s.opcode == Opcode.CHUNK]


def _pick(spans: list[RecordSpan], which: int | None, path: Path) -> RecordSpan:
    if not spans:
        raise MutationError(f"{path} has no chunk records; allowed only on chunked MCAP files")
    index = len(spans) // 2 if which is None else which
    if not -len(spans) <= index < len(spans):
        raise MutationError(f"chunk {index} out of range; {path} has chunks 0..{len(spans) - 1}")
    return spans[index]


def cut_points(path: Path) -> dict[str, int]:
    """Named byte offsets where a truncation test may cut a file (the size to truncate to).

    ``after_magic`` (the leading magic only), ``after_header`` (magic and header record), ``mid_chunk``
    (half-way through the middle chunk), ``record_boundary`` (right after the middle chunk and its message
    indexes: a clean record boundary with the summary and footer missing), ``before_footer`` and
    ``before_trailing_magic``.
    """
    spans = scan_records(path)
    chunk = _pick([s for s in spans if s.opcode == Opcode.CHUNK], None, path)
    after_chunk = chunk.end
    for span in spans:
        if span.offset >= chunk.end and span.opcode == Opcode.MESSAGE_INDEX:
            after_chunk = span.end
        elif span.offset >= chunk.end:
            break
    footer = next(s for s in spans if s.opcode == Opcode.FOOTER)
    return {
        "after_magic": len(MCAP_MAGIC),
        "after_header": spans[0].end,
        "mid_chunk": chunk.offset + chunk.length // 2,
        "record_boundary": after_chunk,
        "before_footer": footer.offset,
        "before_trailing_magic": path.stat().st_size - len(MCAP_MAGIC),
    }


def truncate(path: Path, size_bytes: int) -> None:
    """Cut ``path`` to its first ``size_bytes`` bytes, as a power loss would."""
    if not 0 <= size_bytes <= path.stat().st_size:
        raise MutationError(f"truncate size {size_bytes} out of range; allowed 0..{path.stat().st_size}")
    os.truncate(path, size_bytes)


def truncate_mid_chunk(path: Path, which: int | None = None) -> int:
    """Cut the file half-way through a chunk (default: the middle one). Returns the new size."""
    chunk = _pick(chunk_spans(path), which, path)
    size = chunk.offset + chunk.length // 2
    truncate(path, size)
    return size


def flip_bits(path: Path, offset: int, mask: int = 0x01) -> None:
    """XOR the byte at ``offset`` with ``mask`` in place."""
    if not 0 < mask <= 0xFF:
        raise MutationError(f"mask {mask:#x} out of range; allowed 0x01..0xff")
    with open(path, "r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)
        if not byte:
            raise MutationError(f"offset {offset} out of range; {path} has {path.stat().st_size} bytes")
        fh.seek(offset)
        fh.write(bytes([byte[0] ^ mask]))


def flip_chunk_crc(path: Path, which: int | None = None) -> int:
    """Invert every bit of a chunk's ``uncompressed_crc`` (default: the middle chunk). Returns its offset.

    Inverting all 32 bits guarantees a mismatch, and turns a CRC of 0 ("not computed") into a non-zero one
    that a validating reader must check.
    """
    chunk = _pick(chunk_spans(path), which, path)
    offset = chunk.offset + CHUNK_CRC_OFFSET
    with open(path, "r+b") as fh:
        fh.seek(offset)
        (crc,) = struct.unpack("<I", fh.read(4))
        fh.seek(offset)
        fh.write(struct.pack("<I", crc ^ 0xFFFFFFFF))
    return offset


def damage_h264_samples(path: Path, count: int = 3, seed: int = 0) -> list[int]:
    """Damage the NAL units of ``count`` non-key video samples in the middle of an MP4, in place.

    Each NAL unit of a chosen sample gets its forbidden_zero_bit set and its payload replaced by noise;
    the 4-byte length prefixes stay intact, so the container still parses and only the decoder fails.
    Returns the indices (decode order) of the damaged samples.
    """
    import av

    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        packets = [
            (p.pos, p.size, p.is_keyframe) for p in container.demux(stream) if p.size and p.pos is not None
        ]
    interior = [
        i
        for i, (_, _, key) in enumerate(packets)
        if not key and len(packets) // 4 <= i < 3 * len(packets) // 4
    ]
    if len(interior) < count:
        raise MutationError(f"{path} has {len(interior)} interior non-key samples; need at least {count}")
    rng = np.random.default_rng(seed)
    chosen = sorted(int(i) for i in rng.choice(interior, count, replace=False))
    with open(path, "r+b") as fh:
        for i in chosen:
            pos, size, _ = packets[i]
            fh.seek(pos)
            sample = bytearray(fh.read(size))
            at = 0
            while at + 4 < len(sample):
                nal_size = int.from_bytes(sample[at : at + 4], "big")
                start, end = at + 4, min(at + 4 + nal_size, len(sample))
                sample[start] |= 0x80
                if end - start > 2:
                    sample[start + 2 : end] = rng.integers(0, 256, end - start - 2, dtype=np.uint8).tobytes()
                at = end
            fh.seek(pos)
            fh.write(sample)
    return chosen
