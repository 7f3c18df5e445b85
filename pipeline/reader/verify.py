"""Check an episode file before serving samples from it: by its recorded sha256, or by the CRCs it carries.

A flipped bit in a camera payload decodes into wrong pixels without a decoder error, and a sample reads only
the few records it needs, so nothing downstream would notice. A reader therefore checks each file once,
before its first sample, reading it end to end:

* with the sha256 the catalog records for it (a manifest row's ``uri_sha256``): the file's sha256 must
  match. This covers every byte.
* without one: the CRCs the MCAP file carries. The data section CRC (the transcode writes it) covers every
  byte from the magic to the data end record, the footer's summary CRC the summary section. A file without
  a data section CRC falls back to each chunk's CRC (which leaves the message index records between chunks
  unchecked); a file with no CRC at all cannot be checked and is refused.

A check is done once per process and file: the result is kept for the file's identity (device, inode,
size, modification and change time; for a remote object its size and version marks), so the loader's
threads, and a reader reopened after the least recently used one was closed, do not read it again. One
thread checks while the others wanting the same file wait for it.
"""

from __future__ import annotations

import hashlib
import os
import struct
import threading
import zlib
from collections.abc import Hashable
from typing import IO, Any

from pipeline.enums import ReasonCode
from pipeline.errors import InputError

#: Read in 8 MiB blocks: large enough that hashlib and zlib release the GIL for most of the work.
BLOCK_BYTES = 8 << 20
_MAGIC = b"\x89MCAP0\r\n"
_FOOTER = struct.Struct("<BQQQI")  # opcode, length, summary_start, summary_offset_start, summary_crc
_DATA_END = struct.Struct("<BQI")  # opcode, length, data_section_crc
_FOOTER_OPCODE, _DATA_END_OPCODE = 0x02, 0x0F


class EpisodeIntegrityError(InputError):
    """An episode file whose bytes are not the ones that were written (or cannot be shown to be)."""

    def __init__(self, source: str, detail: str) -> None:
        self.source = source
        super().__init__(ReasonCode.CRC_MISMATCH.value, f"episode {source}: {detail}")


_verified: dict[Hashable, str] = {}
_locks: dict[Hashable, threading.Lock] = {}
_guard = threading.Lock()


def verify_episode(
    fh: IO[bytes], source: str, *, expected_sha256: str | None = None, identity: Hashable | None = None
) -> str:
    """Check the episode open as ``fh`` (see the module docstring); returns how (``"sha256"``,
    ``"data_crc"``, ``"chunk_crcs"``). ``identity`` (see :func:`file_identity`) lets the result be reused
    in this process; None checks every time. Raises :class:`EpisodeIntegrityError`."""
    if identity is None:
        return _verify(fh, source, expected_sha256)
    key = (identity, expected_sha256)
    with _guard:
        if key in _verified:
            return _verified[key]
        lock = _locks.setdefault(key, threading.Lock())
    with lock:
        if key not in _verified:
            _verified[key] = _verify(fh, source, expected_sha256)
    return _verified[key]


def file_identity(fs: Any, path: str) -> Hashable | None:
    """What identifies one content of a file for :func:`verify_episode`'s memory, or None when the
    filesystem gives nothing that changes with the content."""
    from fsspec.implementations.local import LocalFileSystem

    if isinstance(fs, LocalFileSystem):
        st = os.stat(path)
        return ("local", st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    from pipeline.store import identifies_content, source_state

    state = source_state(fs, path)
    if not identifies_content(state):
        return None
    return (fs.unstrip_protocol(path), *sorted((k, str(v)) for k, v in state.items()))


def _verify(fh: IO[bytes], source: str, expected_sha256: str | None) -> str:
    fh.seek(0, os.SEEK_END)
    size = fh.tell()
    if expected_sha256 is not None:
        digest = hashlib.sha256()
        for block in _blocks(fh, 0, size):
            digest.update(block)
        if digest.hexdigest() != expected_sha256.lower():
            raise EpisodeIntegrityError(
                source, f"sha256 is {digest.hexdigest()}, the catalog records {expected_sha256}"
            )
        return "sha256"
    footer_at = size - len(_MAGIC) - _FOOTER.size
    if footer_at < len(_MAGIC) + _DATA_END.size:
        raise EpisodeIntegrityError(source, f"{size} bytes is too short for an MCAP file")
    fh.seek(0)
    head = fh.read(len(_MAGIC))
    fh.seek(footer_at)
    tail = fh.read(_FOOTER.size + len(_MAGIC))
    if head != _MAGIC or tail[-len(_MAGIC) :] != _MAGIC:
        raise EpisodeIntegrityError(source, "does not start and end with the MCAP magic")
    opcode, length, summary_start, _, summary_crc = _FOOTER.unpack(tail[: _FOOTER.size])
    if opcode != _FOOTER_OPCODE or length != _FOOTER.size - 9 or not 0 <= summary_start <= footer_at:
        raise EpisodeIntegrityError(source, "the footer is damaged")
    if summary_crc:
        crc = 0
        if summary_start:
            for block in _blocks(fh, summary_start, footer_at):
                crc = zlib.crc32(block, crc)
        crc = zlib.crc32(tail[: _FOOTER.size - 4], crc)
        if crc != summary_crc:
            raise EpisodeIntegrityError(
                source, f"summary CRC is {crc:08x}, the footer records {summary_crc:08x}"
            )
    data_end_at = (summary_start or footer_at) - _DATA_END.size
    fh.seek(data_end_at)
    opcode, length, data_crc = _DATA_END.unpack(fh.read(_DATA_END.size))
    if opcode != _DATA_END_OPCODE or length != 4:
        raise EpisodeIntegrityError(source, "no data end record where the summary starts")
    if data_crc:
        crc = 0
        for block in _blocks(fh, 0, data_end_at):
            crc = zlib.crc32(block, crc)
        if crc != data_crc:
            raise EpisodeIntegrityError(source, f"data section CRC is {crc:08x}, recorded {data_crc:08x}")
        return "data_crc"
    return _verify_chunks(fh, source)


def _verify_chunks(fh: IO[bytes], source: str) -> str:
    """Every chunk's CRC (a file written without a data section CRC)."""
    from mcap.exceptions import McapError
    from mcap.records import Chunk
    from mcap.stream_reader import CRCValidationError, StreamReader, get_chunk_data_stream

    fh.seek(0)
    chunks = checked = 0
    try:
        for record in StreamReader(fh, emit_chunks=True).records:
            if isinstance(record, Chunk):
                chunks += 1
                if record.uncompressed_crc:
                    get_chunk_data_stream(record, validate_crc=True)
                    checked += 1
    except (McapError, CRCValidationError) as exc:
        raise EpisodeIntegrityError(source, f"a chunk does not read back as written: {exc}") from exc
    except Exception as exc:  # a damaged length or opcode surfaces as whatever the parser hits
        raise EpisodeIntegrityError(source, f"cannot be read record by record: {exc!r}") from exc
    if chunks == 0 or checked < chunks:
        raise EpisodeIntegrityError(
            source,
            f"carries no data section CRC and {chunks - checked} of {chunks} chunks carry no CRC: it "
            "cannot be checked (give its sha256, or verify=False to trust it)",
        )
    return "chunk_crcs"


def _blocks(fh: IO[bytes], start: int, stop: int) -> Any:
    fh.seek(start)
    left = stop - start
    while left > 0:
        block = fh.read(min(BLOCK_BYTES, left))
        if not block:
            return
        left -= len(block)
        yield block
