"""Cheap whole-file structure checks of still images, run on every frame (a full decode is sampled).

A JPEG is walked marker by marker (ITU-T T.81, B.1): SOI, length-prefixed segments, a frame header, a scan
whose entropy-coded data runs to the next marker, then EOI. A frame cut short (the commonest damage: a
dropped USB packet, a writer killed mid-frame) ends inside the scan without EOI. JPEG carries no checksum,
so bytes flipped inside the entropy-coded data are invisible to any reader; a decode may or may not trip
over them.

A PNG carries a CRC-32 on every chunk (ISO/IEC 15948, 5.3): every chunk's CRC is checked, which catches
any damage, then IHDR must come first and IEND last.
"""

from __future__ import annotations

import re
import struct
import zlib

from pipeline.enums import ReasonCode
from pipeline.families.errors import MessageFamilyError
from pipeline.families.table import IMAGE_MAGIC

# A marker inside entropy-coded data: 0xFF followed by neither a stuffed zero nor a restart marker.
_MARKER_IN_SCAN = re.compile(rb"\xff[^\x00\xd0-\xd7]")
_STANDALONE = frozenset({0x01, *range(0xD0, 0xD8)})  # TEM, RST0-7: no length field
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # frame headers (not DHT, JPG, DAC)
_SOI, _EOI, _SOS = 0xD8, 0xD9, 0xDA


def jpeg_problem(data: bytes) -> tuple[int, str] | None:
    """``(byte offset, what is wrong)`` for a JPEG that is not whole, or None."""
    if not data.startswith(b"\xff\xd8"):
        return 0, f"does not start with the JPEG SOI marker (starts {data[:4].hex()})"
    pos = 2
    frame_header = scanned = False
    size = len(data)
    while True:
        if pos >= size:
            return size, f"ends at byte {size} without an EOI marker"
        if data[pos] != 0xFF:
            return pos, f"byte {pos} is {data[pos]:#04x} where a marker must start"
        while pos < size and data[pos] == 0xFF:  # fill bytes before a marker are allowed
            pos += 1
        if pos >= size:
            return size, f"ends at byte {size} inside a marker"
        marker = data[pos]
        start = pos - 1
        pos += 1
        if marker == _EOI:
            if not (frame_header and scanned):
                return start, f"EOI at byte {start} before any {'scan' if frame_header else 'frame header'}"
            return None
        if marker == _SOI:
            return start, f"a second SOI marker at byte {start}"
        if marker in _STANDALONE:
            continue
        if pos + 2 > size:
            return size, f"ends at byte {size} inside the length of the segment at byte {start}"
        (length,) = struct.unpack_from(">H", data, pos)
        if length < 2 or pos + length > size:
            return start, (
                f"segment {marker:#04x} at byte {start} claims {length} bytes, {size - pos} are left"
            )
        pos += length
        frame_header |= marker in _SOF
        if marker == _SOS:
            if not frame_header:
                return start, f"a scan at byte {start} before any frame header"
            found = _MARKER_IN_SCAN.search(data, pos)
            if found is None:
                return size, f"ends at byte {size} inside the entropy-coded data of the scan at byte {start}"
            scanned = True
            pos = found.start()


def png_problem(data: bytes) -> tuple[int, str] | None:
    """``(byte offset, what is wrong)`` for a PNG that is not whole (every chunk's CRC checked), or None."""
    signature = IMAGE_MAGIC["png"]
    if not data.startswith(signature):
        return 0, f"does not start with the PNG signature (starts {data[:8].hex()})"
    pos = len(signature)
    size = len(data)
    first = True
    while pos < size:
        if pos + 12 > size:
            return pos, f"ends at byte {size} inside the chunk header at byte {pos}"
        length, kind = struct.unpack_from(">I4s", data, pos)
        end = pos + 12 + length
        if end > size:
            return pos, f"chunk {kind!r} at byte {pos} claims {length} bytes, {size - pos - 12} are left"
        (stored,) = struct.unpack_from(">I", data, end - 4)
        if zlib.crc32(data[pos + 4 : end - 4]) != stored:
            return pos, f"chunk {kind.decode('latin-1')} at byte {pos}: CRC mismatch"
        if first and kind != b"IHDR":
            return pos, f"the first chunk is {kind!r}, not IHDR"
        first = False
        if kind == b"IEND":
            return None
        pos = end
    return size, f"ends at byte {size} without an IEND chunk"


def image_problem(fmt: str, data: bytes) -> tuple[int, str] | None:
    """:func:`jpeg_problem` or :func:`png_problem` by format (no check for other formats)."""
    if fmt == "jpeg":
        return jpeg_problem(data)
    if fmt == "png":
        return png_problem(data)
    return None


def check_image(what: str, index: int, fmt: str, data: bytes) -> None:
    """Raise a ``decode_error`` :class:`MessageFamilyError` naming frame ``index`` of ``what`` (a topic or
    camera) and the byte offset when :func:`image_problem` finds the still image not whole."""
    problem = image_problem(fmt, data)
    if problem is not None:
        offset, why = problem
        raise MessageFamilyError(
            ReasonCode.DECODE_ERROR, f"{what}: frame {index}: {fmt} {why}", frame=index, offset=offset
        )


def image_size(fmt: str, data: bytes) -> tuple[int, int] | None:
    """``(width, height)`` from a still image's header (JPEG frame header, PNG IHDR), or None."""
    if fmt == "png" and len(data) >= 24 and data[12:16] == b"IHDR":
        width, height = struct.unpack_from(">II", data, 16)
        return width, height
    if fmt != "jpeg":
        return None
    pos = 2
    while pos + 4 <= len(data) and data[pos] == 0xFF:
        marker = data[pos + 1]
        if marker == 0xFF:
            pos += 1
            continue
        if marker in _STANDALONE or marker == _SOI:
            pos += 2
            continue
        (length,) = struct.unpack_from(">H", data, pos + 2)
        if marker in _SOF:
            if pos + 9 > len(data):
                return None
            height, width = struct.unpack_from(">HH", data, pos + 5)
            return width, height
        if marker == _SOS:
            return None
        pos += 2 + length
    return None


def sniff_image(data: bytes) -> str | None:
    """The still-image format the payload's leading bytes say, or None."""
    return next((fmt for fmt, magic in IMAGE_MAGIC.items() if data.startswith(magic)), None)
