"""The sample reader: state/action window and K frames per camera at a time t, decoding only what the
requested frames depend on.

A sample is planned before anything is read: the window's messages and, per camera, the requested frames'
dependencies (keyframe, reference frames, the frame) are looked up in the index; the message records they
occupy become byte ranges (a whole chunk when the chunk is compressed, only the records when it is not);
ranges closer than ``coalesce_gap_bytes`` are fetched as one read. The decoder then gets exactly the
needed access units in decode order: a random-access episode decodes two anchors and the frame.
"""

from __future__ import annotations

import bisect
import json
import json.scanner
import math
import numbers
import re
import struct
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import fsspec
import lz4.frame
import numpy as np
import zstandard
from foxglove_schemas_protobuf.CompressedVideo_pb2 import CompressedVideo

from pipeline.enums import ReasonCode
from pipeline.errors import InputError, SluiceError
from pipeline.reader.counters import ReadCounters
from pipeline.reader.decode import SparseDecoder, plan_runs
from pipeline.reader.index import CameraTable, ChunkInfo, EpisodeIndex, MessageLoc, build_index
from pipeline.reader.verify import file_identity, verify_episode

NS_PER_S = 1_000_000_000
#: Ranges this close are fetched as one read (the gap is read too). 256 KiB is what a local NVMe drive
#: streams in one random-read latency (~0.1 ms at ~2.5 GB/s), and far less than an object store's
#: time to first byte buys: a second request is never cheaper than reading the gap. Between two ranges of
#: one sample lie message index records (two adjacent proprio chunks) or the rest of a GOP (two frames on
#: either side of a keyframe).
DEFAULT_COALESCE_GAP_BYTES = 256 * 1024
_SHA256 = re.compile(r"[0-9a-fA-F]{64}")
_MESSAGE_HEAD = struct.Struct("<BQHIQQ")  # opcode, record length, channel, sequence, log time, publish time
#: The scanner ``json.loads`` runs once it has found the text's encoding and skipped its whitespace (C, and
#: stateless between calls). A 2 s window is 200 small records, and ``json.loads``'s Python around the scan
#: was about 40% of their decoding.
_scan_json = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]  # typeshed: any context


class FrameDecodeError(InputError):
    """A requested frame did not come out of the decoder (its access units are damaged)."""

    def __init__(self, source: str, camera: str, position: int, stamp_ns: int) -> None:
        super().__init__(
            ReasonCode.DECODE_ERROR.value,
            f"{source}: camera {camera}: frame {position} (pts {stamp_ns} ns) did not decode from its "
            "keyframe and reference frames",
        )


class SampleArgumentError(SluiceError, ValueError):
    """A sample request the episode or the reader cannot serve: a camera or topic the episode does not
    have, or an option outside what is allowed."""

    def __init__(self, what: str, value: object, allowed: str, source: str | None = None) -> None:
        self.value = value
        where = f"{source}: " if source else ""
        super().__init__(f"{where}{what} {value!r} is not allowed; expected {allowed}")


@dataclass(frozen=True)
class CameraFrame:
    stamp_ns: int  # presentation (capture) stamp
    image: np.ndarray | None  # (H, W, 3) for rgb24; None when the sample was read without decoding


@dataclass
class Sample:
    """One training sample: decoded state/action messages per topic and frames per camera."""

    t_ns: int
    proprio: dict[str, list[dict[str, Any]]]
    frames: dict[str, list[CameraFrame]]
    counters: ReadCounters = field(default_factory=ReadCounters)

    def array(self, topic: str, name: str) -> np.ndarray:
        """One field of a topic's window as an array (rows = messages)."""
        return np.asarray([r[name] for r in self.proprio[topic]], dtype=np.float64)


class EpisodeReader:
    """Opens a transcoded episode once and serves samples from it.

    ``source``: a local path, an fsspec URL or an open binary file. Counters of every sample are summed in
    :attr:`totals`. Not thread-safe: one reader per dataloader worker.

    The file is checked before anything is read from it (:mod:`pipeline.reader.verify`): against
    ``expected_sha256`` (the catalog's) when given, else against the CRCs it carries; a damaged file
    raises :class:`~pipeline.reader.verify.EpisodeIntegrityError` naming it. The check reads the whole
    file once per process (a path's result is remembered); ``verify=False`` skips it.
    """

    def __init__(
        self,
        source: str | Path | IO[bytes],
        *,
        storage_options: dict[str, Any] | None = None,
        coalesce_gap_bytes: int = DEFAULT_COALESCE_GAP_BYTES,
        pixel_format: str | None = "rgb24",
        expected_sha256: str | None = None,
        verify: bool = True,
    ) -> None:
        if expected_sha256 is not None and not (
            isinstance(expected_sha256, str) and _SHA256.fullmatch(expected_sha256)
        ):  # checked before the file is read end to end, which would only report a mismatch
            raise SampleArgumentError("expected_sha256", expected_sha256, "64 hex digits or None")
        identity = None
        if isinstance(source, str | Path):
            fs, path = fsspec.core.url_to_fs(str(source), **(storage_options or {}))
            self._fh: IO[bytes] = fs.open(path, "rb")
            self._owns = True
            name = str(source)
        else:
            self._fh, self._owns, name = source, False, getattr(source, "name", "<stream>")
        self._decoders: dict[str, SparseDecoder] = {}
        try:
            self.index: EpisodeIndex = build_index(self._fh, name)
            # after the index: a file that is no episode at all is a container_error, as it always was
            self.verified_by = None
            if verify:
                if self._owns:
                    identity = file_identity(fs, path)
                self.verified_by = verify_episode(
                    self._fh, name, expected_sha256=expected_sha256, identity=identity
                )
        except BaseException:
            self.close()  # a file that is not an episode must not leave its handle open
            raise
        self.coalesce_gap_bytes = coalesce_gap_bytes
        self.pixel_format = pixel_format
        self.totals = ReadCounters()
        self._zstd = zstandard.ZstdDecompressor()
        # what sample() can decode: JSON messages (state, actions), not the cameras' or calibrations' protobuf
        self._json_topics = frozenset(
            c.topic for c in self.index.channels.values() if c.message_encoding == "json"
        )

    # -- lifecycle ------------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the file if the reader opened it (a file object passed in stays open). Idempotent."""
        if self._owns:
            self._fh.close()
        self._decoders.clear()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (or, for a passed-in file object, the object is closed)."""
        return bool(self._fh.closed)

    def __enter__(self) -> EpisodeReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- what the episode holds -----------------------------------------------------------------------

    @property
    def cameras(self) -> list[str]:
        return list(self.index.cameras)

    @property
    def proprio_topics(self) -> list[str]:
        return list(self.index.proprio_topics)

    @property
    def start_ns(self) -> int:
        return self.index.start_ns

    @property
    def end_ns(self) -> int:
        return self.index.end_ns

    # -- sampling -------------------------------------------------------------------------------------

    def sample(
        self,
        t_ns: int,
        *,
        window_s: float = 2.0,
        frames_per_camera: int = 2,
        frame_stride_s: float = 0.1,
        topics: Sequence[str] | None = None,
        cameras: Sequence[str] | None = None,
        decode: bool = True,
    ) -> Sample:
        """The sample at ``t_ns``: messages of ``topics`` (default: the resampled state and actions) with
        ``t - window < stamp <= t``, and per camera the frames on screen at ``t - (K-1-k) * stride`` for
        ``k`` in ``0..K-1`` (K = ``frames_per_camera``). ``decode=False`` reads everything the frames need
        but returns them undecoded (``image`` None): for measuring I/O alone."""
        _check_count("frames_per_camera", frames_per_camera, 1)
        _check_seconds("window_s", window_s)
        _check_seconds("frame_stride_s", frame_stride_s)
        counters = ReadCounters(samples=1)
        topics = self.proprio_topics if topics is None else self._known("topic", topics, self._json_topics)
        cameras = self.cameras if cameras is None else self._known("camera", cameras, self.index.cameras)
        window_ns = int(window_s * NS_PER_S)
        wanted: list[tuple[str, MessageLoc]] = []
        for topic in topics:
            wanted += [(topic, loc) for loc in self.index.window(topic, t_ns - window_ns, t_ns)]
        requested: dict[str, list[int]] = {}
        for name in cameras:
            table = self.index.cameras[name]
            times = [
                t_ns - int((frames_per_camera - 1 - k) * frame_stride_s * NS_PER_S)
                for k in range(frames_per_camera)
            ]
            requested[name] = [table.frame_at(time) for time in times]
        proprio, frames = self._read(wanted, topics, requested, counters, decode)
        self.totals.add(counters)
        return Sample(t_ns, proprio, frames, counters)

    def _known(self, what: str, names: Sequence[str], allowed: Collection[str]) -> list[str]:
        """``names`` as a list, each one of ``allowed`` (a typo must not read as an empty stream)."""
        if isinstance(names, str | bytes):
            raise SampleArgumentError(f"{what}s", names, f"a list of {what} names, not one string")
        names = list(names)
        for name in names:
            if name not in allowed:
                raise SampleArgumentError(
                    what, name, f"one of this episode's: {', '.join(sorted(allowed))}", self.index.source
                )
        return names

    def frames(
        self, requests: Mapping[str, Sequence[int]], *, decode: bool = True
    ) -> tuple[dict[str, list[CameraFrame]], ReadCounters]:
        """Frames by display index (0 = the camera's first frame shown) per camera, in the order asked
        (duplicates and any order allowed), and what reading them cost. Each camera's requests are decoded
        in one call: their dependency closures merged, a shared anchor decoded once."""
        counters = ReadCounters(samples=1)
        positions = {}
        self._known("camera", list(requests), self.index.cameras)
        for name, indexes in requests.items():
            table = self.index.cameras[name]
            shown = len(table.display)
            for k in indexes:  # a negative index would silently count from the end
                if isinstance(k, bool) or not isinstance(k, numbers.Integral) or not 0 <= k < shown:
                    raise SampleArgumentError(
                        f"camera {name}: display index", k, f"an integer in 0..{shown - 1}", self.index.source
                    )
            positions[name] = [table.display[k] for k in indexes]
        _, frames = self._read([], [], positions, counters, decode)
        self.totals.add(counters)
        return frames, counters

    def _read(
        self,
        wanted: list[tuple[str, MessageLoc]],
        topics: Sequence[str],
        requested: dict[str, list[int]],
        counters: ReadCounters,
        decode: bool,
    ) -> tuple[dict[str, list[dict[str, Any]]], dict[str, list[CameraFrame]]]:
        """Fetch ``wanted`` proprio messages and the requested frames' closures in one plan; decode."""
        runs: dict[str, list[list[int]]] = {}
        for name, positions in requested.items():
            table = self.index.cameras[name]
            runs[name] = plan_runs(table.letters, table.pts_ns, positions, split_gaps=table.codec == "h264")
            wanted = wanted + [(name, table.locations[p]) for run in runs[name] for p in run]
        records = self._fetch([loc for _, loc in wanted], counters)
        proprio: dict[str, list[dict[str, Any]]] = {topic: [] for topic in topics}
        for key, loc in wanted:
            if key in proprio:
                proprio[key].append(_json_record(records[(loc.chunk, loc.offset)]))
        frames: dict[str, list[CameraFrame]] = {}
        for name, positions in requested.items():
            table = self.index.cameras[name]
            if not decode:
                frames[name] = [CameraFrame(table.pts_ns[p], None) for p in positions]
                continue
            units = {
                p: CompressedVideo.FromString(
                    records[(table.locations[p].chunk, table.locations[p].offset)]
                ).data
                for run in runs[name]
                for p in run
            }
            frames[name] = self._decode(table, runs[name], units, positions, counters)
        return proprio, frames

    # -- reading --------------------------------------------------------------------------------------

    def _plan(self, locations: Sequence[MessageLoc]) -> list[list[int]]:
        """The reads ``locations`` need, as [start, end) file offsets: a compressed chunk whole, each needed
        record of an uncompressed chunk on its own, then ranges no more than ``coalesce_gap_bytes`` apart
        merged into one read (the gap read with them). Per record, not per chunk: a sparse request's frames
        lie between B-frames it does not need, which a chunk-wide span would read."""
        chunks = self.index.chunks
        ranges: list[tuple[int, int]] = []
        whole: set[int] = set()
        for loc in locations:
            chunk = chunks[loc.chunk]
            if chunk.compression:
                if loc.chunk not in whole:
                    whole.add(loc.chunk)
                    ranges.append((chunk.start, chunk.start + chunk.length))
                continue
            start = chunk.start + chunk.length - chunk.compressed_size + loc.offset  # records_offset + offset
            ranges.append((start, start + loc.length))
        ranges.sort()
        gap = self.coalesce_gap_bytes
        reads: list[list[int]] = []
        for start, end in ranges:
            if reads and start - reads[-1][1] <= gap:
                if end > reads[-1][1]:
                    reads[-1][1] = end
            else:
                reads.append([start, end])
        return reads

    def _fetch(self, locations: Sequence[MessageLoc], counters: ReadCounters) -> dict[tuple[int, int], bytes]:
        """Read what ``locations`` need; return each message's payload by (chunk, offset)."""
        starts: list[int] = []
        blobs: list[memoryview] = []
        for start, end in self._plan(locations):
            self._fh.seek(start)
            data = self._fh.read(end - start)
            counters.reads += 1
            counters.bytes_read += len(data)
            starts.append(start)
            blobs.append(memoryview(data))

        def located(offset: int) -> tuple[memoryview, int]:
            """The fetched read holding file offset ``offset``, and the offset's place in it."""
            number = bisect.bisect_right(starts, offset) - 1
            return blobs[number], offset - starts[number]

        chunks = self.index.chunks
        unpacked: dict[int, bytes] = {}  # compressed chunk -> its records
        out: dict[tuple[int, int], bytes] = {}
        for loc in locations:
            chunk = chunks[loc.chunk]
            records: bytes | memoryview  # the records of the chunk, or the read holding this one
            if chunk.compression:
                cached = unpacked.get(loc.chunk)
                if cached is None:
                    blob, pos = located(chunk.start)
                    compressed = blob[pos + chunk.length - chunk.compressed_size : pos + chunk.length]
                    cached = unpacked[loc.chunk] = self._decompress(chunk, compressed)
                    counters.bytes_decompressed += len(cached)
                records, pos = cached, loc.offset
            else:
                records, pos = located(chunk.start + chunk.length - chunk.compressed_size + loc.offset)
                counters.bytes_decompressed += loc.length
            _, length, _, _, _, _ = _MESSAGE_HEAD.unpack_from(records, pos)
            counters.bytes_used += 9 + length
            out[(loc.chunk, loc.offset)] = bytes(records[pos + _MESSAGE_HEAD.size : pos + 9 + length])
        return out

    def _decompress(self, chunk: ChunkInfo, data: bytes | memoryview) -> bytes:
        if chunk.compression == "zstd":
            return self._zstd.decompress(data, max_output_size=chunk.uncompressed_size)
        if chunk.compression == "lz4":
            return lz4.frame.decompress(data)
        raise ValueError(f"chunk compression {chunk.compression!r}; allowed: none, lz4, zstd")

    # -- decoding -------------------------------------------------------------------------------------

    def _decoder(self, table: CameraTable) -> SparseDecoder:
        decoder = self._decoders.get(table.name)
        if decoder is None:
            decoder = self._decoders[table.name] = SparseDecoder(table.codec, self.pixel_format)
        return decoder

    def _decode(
        self,
        table: CameraTable,
        runs: list[list[int]],
        units: dict[int, bytes],
        requested: list[int],
        counters: ReadCounters,
    ) -> list[CameraFrame]:
        decoder = self._decoder(table)
        before = decoder.frames_decoded
        pictures = decoder.decode(runs, units.__getitem__, requested)
        counters.frames_decoded += decoder.frames_decoded - before
        out = []
        for position in requested:  # a duplicate request gets the same array
            image = pictures.get(position)
            if image is None:
                raise FrameDecodeError(self.index.source, table.name, position, table.pts_ns[position])
            out.append(CameraFrame(table.pts_ns[position], image))
            counters.frames_returned += 1
        return out


def _check_count(what: str, value: int, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
        raise SampleArgumentError(what, value, f"an integer >= {least}")


#: What :func:`is_seconds` accepts, as an argument error says it.
SECONDS = "a finite number of seconds >= 0"


def is_seconds(value: object) -> bool:
    """A finite real number >= 0 (an infinite or NaN one cannot become nanoseconds; a bool is no number)."""
    return not isinstance(value, bool) and isinstance(value, numbers.Real) and 0 <= float(value) < math.inf


def _check_seconds(what: str, value: float) -> None:
    if not is_seconds(value):
        raise SampleArgumentError(what, value, SECONDS)


def _json_record(record: bytes) -> Any:
    """``json.loads(record)``, sooner for a record that is one JSON value from its first byte to its last
    in UTF-8 (what the transcode writes): the scanner gives exactly what ``json.loads`` would. Anything
    else (a byte-order mark, another encoding, whitespace around the value, damage) goes to ``json.loads``
    itself, which returns or raises what it always did."""
    try:
        text = record.decode()
        value, end = _scan_json(text, 0)
    except (ValueError, StopIteration, RecursionError):
        return json.loads(record)
    return value if end == len(text) else json.loads(record)


def open_episode(source: str | Path | IO[bytes], **options: Any) -> EpisodeReader:
    """Open a transcoded episode for sampling (see :class:`EpisodeReader`)."""
    return EpisodeReader(source, **options)
