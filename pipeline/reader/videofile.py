"""Sparse frame reads from a native video file (MP4, MKV...: H.264 or H.265, never transcoded).

Opening demuxes the file once for its packet table (file offset, size, presentation stamp, decode order)
and parses each packet's NAL unit headers for its frame letter; reading a set of frames then fetches only
their dependency closures' packets by byte range and decodes them with :class:`SparseDecoder`, the same
way :class:`~pipeline.reader.EpisodeReader` reads a transcoded episode. Frames are addressed by display
index (0 = the first frame shown).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import av
import fsspec
import numpy as np

from pipeline.reader.counters import ReadCounters
from pipeline.reader.decode import SparseDecoder, plan_runs
from pipeline.transcode.bitstream import unit_info
from pipeline.transcode.h264 import frame_letter

#: FFmpeg codec names -> the stream codec names of :mod:`pipeline.reader.decode`.
_CODECS = {"h264": "h264", "hevc": "h265"}


class VideoFileError(ValueError):
    """The file has no H.264 or H.265 video stream, or its packets cannot be indexed."""


@dataclass(frozen=True)
class _Packet:
    offset: int
    size: int
    pts: int


def _annex_b(sample: bytes, length_size: int) -> bytes:
    """Length-prefixed NAL units (MP4) as Annex B, for header parsing."""
    out, pos = [], 0
    while pos + length_size <= len(sample):
        size = int.from_bytes(sample[pos : pos + length_size], "big")
        out.append(b"\x00\x00\x01" + sample[pos + length_size : pos + length_size + size])
        pos += length_size + size
    return b"".join(out)


class VideoFileReader:
    """Sparse frame reads from the first video stream of ``source`` (a path, an fsspec URL or an open
    binary file). Not thread-safe. :attr:`totals` sums what every call cost."""

    def __init__(self, source: str | Path | IO[bytes], *, pixel_format: str | None = "rgb24") -> None:
        if isinstance(source, str | Path):
            self._fh: IO[bytes] = fsspec.open(str(source), "rb").open()
            self._owns, name = True, str(source)
        else:
            self._fh, self._owns, name = source, False, getattr(source, "name", "<stream>")
        self.source = name
        try:
            self._index()
        except BaseException:
            self.close()
            raise
        self.decoder = SparseDecoder(self.codec, pixel_format, self.extradata)
        self.totals = ReadCounters()

    def _index(self) -> None:
        self._fh.seek(0)
        with av.open(self._fh, "r") as container:
            if not container.streams.video:
                raise VideoFileError(f"{self.source}: no video stream")
            stream = container.streams.video[0]
            codec = _CODECS.get(stream.codec_context.name)
            if codec is None:
                raise VideoFileError(
                    f"{self.source}: codec {stream.codec_context.name!r}; allowed: h264, hevc"
                )
            self.codec = codec
            self.extradata = bytes(stream.codec_context.extradata or b"")
            # avcC keeps the NAL length size in byte 4, hvcC in byte 21 (both: the low two bits, minus one)
            at = 4 if codec == "h264" else 21
            length_size = (self.extradata[at] & 0x3) + 1 if len(self.extradata) > at else 4
            packets: list[_Packet] = []
            letters: list[str] = []
            for packet in container.demux(stream):
                if packet.size == 0 or packet.pos is None or packet.pts is None:
                    continue
                data = bytes(packet)
                try:
                    letters.append(frame_letter(unit_info(codec, _annex_b(data, length_size))))
                except ValueError as exc:
                    raise VideoFileError(f"{self.source}: packet at byte {packet.pos}: {exc}") from exc
                packets.append(_Packet(int(packet.pos), packet.size, int(packet.pts)))
        self._packets = packets
        self.letters = "".join(letters)
        self.pts = [p.pts for p in packets]
        self.display = sorted(range(len(packets)), key=self.pts.__getitem__)

    def __len__(self) -> int:
        return len(self._packets)

    def close(self) -> None:
        if self._owns:
            self._fh.close()

    def __enter__(self) -> VideoFileReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def frames(self, indexes: Sequence[int]) -> tuple[list[np.ndarray], ReadCounters]:
        """The frames at display ``indexes`` (any order, duplicates allowed) and what they cost: one read
        per run of adjacent packets, each packet of the merged closures decoded once."""
        counters = ReadCounters(samples=1)
        positions = [self.display[k] for k in indexes]
        runs = plan_runs(self.letters, self.pts, positions, split_gaps=self.codec == "h264")
        data: dict[int, bytes] = {}
        for run in runs:
            for group in _adjacent(self._packets, run):
                first, last = self._packets[group[0]], self._packets[group[-1]]
                self._fh.seek(first.offset)
                blob = self._fh.read(last.offset + last.size - first.offset)
                counters.reads += 1
                counters.bytes_read += len(blob)
                for p in group:
                    packet = self._packets[p]
                    data[p] = blob[packet.offset - first.offset : packet.offset - first.offset + packet.size]
                    counters.bytes_used += packet.size
        before = self.decoder.frames_decoded
        pictures = self.decoder.decode(runs, data.__getitem__, positions)
        counters.frames_decoded = self.decoder.frames_decoded - before
        missing = [k for k, p in zip(indexes, positions, strict=True) if p not in pictures]
        if missing:
            raise VideoFileError(f"{self.source}: frames {missing} did not decode from their closures")
        counters.frames_returned = len(positions)
        self.totals.add(counters)
        return [pictures[p] for p in positions], counters


def _adjacent(packets: Sequence[_Packet], run: Sequence[int]) -> list[list[int]]:
    """``run``'s positions grouped where their packets follow each other in the file."""
    groups: list[list[int]] = []
    for p in run:
        if groups and packets[groups[-1][-1]].offset + packets[groups[-1][-1]].size == packets[p].offset:
            groups[-1].append(p)
        else:
            groups.append([p])
    return groups


def full_decode(source: str | Path, pixel_format: str = "rgb24") -> dict[int, np.ndarray]:
    """Every frame of the first video stream that a decode from its first packet to its last outputs, by
    presentation stamp: the reference sparse reads are held to."""
    with av.open(str(source)) as container:
        stream = container.streams.video[0]
        stream.thread_count = 1
        return {
            int(f.pts): f.to_ndarray(format=pixel_format)
            for f in container.decode(stream)
            if f.pts is not None
        }
