"""The readers `sluice bench read` times against each other on the paper's access patterns: our
transcoded episodes (:class:`pipeline.reader.EpisodeReader`), LeRobot v3's video files read the way its
decoder reads them, and JPEG per frame. Every one reads its bytes through a
:class:`~pipeline.reader.throttle.ThrottledFile` (the store path, with or without the node-wide cap).

LeRobot v3 (lerobot 0.6.2, ``src/lerobot/datasets/video_utils.py`` and ``src/lerobot/configs/video.py``)
encodes each camera with PyAV as ``libsvtav1``, ``yuv420p``, ``g=2``, ``crf=30``, ``preset=12`` and
``svtav1-params fast-decode=0``; its default decoder (torchcodec's ``get_frames_at``, ``seek_mode
approximate``, one FFmpeg thread, a decoder cached per file) seeks to the keyframe before a requested frame
and decodes forward to it, without seeking when the next requested frame can be reached by decoding on.
:class:`LeRobotVideo` does the same with PyAV (torchcodec needs torch): the sorted distinct requests,
a seek only when a keyframe lies between the current position and the target, dav1d on one thread, one
reformatter per stream (torchcodec keeps its scaling context too).
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import IO, Any, cast

import av
import fsspec
import numpy as np
from av.video.reformatter import VideoReformatter
from av.video.stream import VideoStream
from PIL import Image

from pipeline.reader.counters import ReadCounters
from pipeline.reader.throttle import ThrottledFile, TokenBucket
from pipeline.rtguard import realtime_taken_back

#: lerobot 0.6.2's defaults (``VideoEncoderConfig``: vcodec, pix_fmt, g, crf, preset, fast_decode).
LEROBOT_V3_ENCODER = "libsvtav1"
LEROBOT_V3_OPTIONS = {"g": "2", "crf": "30", "preset": "12", "svtav1-params": "fast-decode=0"}
LEROBOT_V3_PIX_FMT = "yuv420p"


def open_throttled(url: str, bucket: TokenBucket | None) -> ThrottledFile:
    """``url`` opened through fsspec, its reads drawing from ``bucket``."""
    fs, path = fsspec.core.url_to_fs(url)
    return ThrottledFile(fs.open(path, "rb"), bucket, url)


def write_lerobot_video(path: Path, frames: Sequence[np.ndarray], rate: Fraction) -> None:
    """An MP4 of ``frames`` (yuv420p arrays) encoded as lerobot 0.6.2's ``encode_video_frames`` does.

    Run as root, SVT-AV1 makes this thread and its own real-time (:mod:`pipeline.rtguard`): they are put
    back to normal scheduling once the encoder is open and again at the end.
    """
    with (
        realtime_taken_back(f"LeRobot v3 encode of {path.name}") as guard,
        av.open(str(path), "w") as container,
    ):
        stream = cast(
            VideoStream, container.add_stream(LEROBOT_V3_ENCODER, rate, options=dict(LEROBOT_V3_OPTIONS))
        )
        stream.pix_fmt = LEROBOT_V3_PIX_FMT
        stream.height, stream.width = frames[0].shape[0] * 2 // 3, frames[0].shape[1]
        for k, frame in enumerate(frames):
            container.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="yuv420p")))
            if k == 0:  # the first frame opened the encoder, which started its threads
                guard.check()
        container.mux(stream.encode(None))


class LeRobotVideo:
    """One camera's LeRobot v3 video, kept open between requests (lerobot's decoder cache)."""

    def __init__(self, url: str, bucket: TokenBucket | None) -> None:
        self.file = open_throttled(url, bucket)
        self.container = av.open(self.file, "r")
        self.stream = self.container.streams.video[0]
        self.stream.thread_count = 1
        self.stream.codec_context.thread_count = 1
        self.rate = self.stream.average_rate
        packets = [
            (int(p.pts), p.is_keyframe) for p in self.container.demux(self.stream) if p.pts is not None
        ]
        packets.sort()
        self.pts = [pts for pts, _ in packets]
        self.keyframes = [k for k, (_, key) in enumerate(packets) if key]
        self._index = {pts: k for k, pts in enumerate(self.pts)}
        self._frames: Any = None
        self._at = -1  # display index of the last decoded frame (-1: must seek)
        self._reformatter = VideoReformatter()
        self.frames_decoded = 0

    def _keyframe_before(self, k: int) -> int:
        return max(kf for kf in self.keyframes if kf <= k)

    def get(self, indexes: Sequence[int]) -> dict[int, np.ndarray]:
        out: dict[int, np.ndarray] = {}
        for target in sorted(set(indexes)):
            if not (self._at < target and self._keyframe_before(target) <= self._at):
                self.container.seek(
                    self.pts[self._keyframe_before(target)],
                    backward=True,
                    any_frame=False,
                    stream=self.stream,
                )
                self._frames = self.container.decode(self.stream)
                self._at = -1
            for frame in self._frames:
                self.frames_decoded += 1
                self._at = self._index[int(frame.pts)]
                if self._at == target:
                    out[target] = self._reformatter.reformat(frame, format="rgb24").to_ndarray()
                    break
        return out

    def close(self) -> None:
        self.container.close()
        self.file.close()


class LeRobotEpisode:
    """An episode as LeRobot v3 stores it: one video per camera."""

    def __init__(self, urls: dict[str, str], bucket: TokenBucket | None) -> None:
        self.videos = {name: LeRobotVideo(url, bucket) for name, url in urls.items()}

    def read(self, requests: dict[str, list[int]]) -> ReadCounters:
        counters = ReadCounters(samples=1)
        for name, indexes in requests.items():
            video = self.videos[name]
            before, read_before = video.frames_decoded, video.file.bytes_read
            got = video.get(indexes)
            counters.frames_decoded += video.frames_decoded - before
            counters.bytes_read += video.file.bytes_read - read_before
            counters.frames_returned += sum(1 for k in indexes if k in got)
        return counters

    def close(self) -> None:
        for video in self.videos.values():
            video.close()


def write_jpeg_frames(path: Path, frames: Sequence[np.ndarray], quality: int) -> list[int]:
    """RGB frames as JPEGs (Pillow, 4:2:0) one after the other in one file; returns the offsets (one more
    than frames: the end), kept in a sidecar as a table of a columnar store would keep them."""
    offsets = [0]
    with open(path, "wb") as fh:
        for frame in frames:
            buf = io.BytesIO()
            Image.fromarray(frame).save(buf, format="JPEG", quality=quality, subsampling="4:2:0")
            fh.write(buf.getvalue())
            offsets.append(offsets[-1] + buf.tell())
    path.with_suffix(".json").write_text(json.dumps(offsets))
    return offsets


class JpegEpisode:
    """JPEG per frame: each request reads its frames' bytes (one range per run of adjacent frames)."""

    def __init__(self, urls: dict[str, str], bucket: TokenBucket | None) -> None:
        self.files = {name: open_throttled(url, bucket) for name, url in urls.items()}
        self.offsets = {
            name: json.loads(fsspec.open(url.removesuffix(".jpg") + ".json").open().read())
            for name, url in urls.items()
        }

    def read(self, requests: dict[str, list[int]]) -> ReadCounters:
        counters = ReadCounters(samples=1)
        for name, indexes in requests.items():
            fh, offsets = self.files[name], self.offsets[name]
            wanted = sorted(set(indexes))
            groups: list[list[int]] = []
            for k in wanted:
                if groups and groups[-1][-1] + 1 == k:
                    groups[-1].append(k)
                else:
                    groups.append([k])
            for group in groups:
                fh.seek(offsets[group[0]])
                blob = fh.read(offsets[group[-1] + 1] - offsets[group[0]])
                counters.bytes_read += len(blob)
                for k in group:
                    at = offsets[k] - offsets[group[0]]
                    with Image.open(io.BytesIO(blob[at : at + offsets[k + 1] - offsets[k]])) as image:
                        np.asarray(image.convert("RGB"))
                    counters.frames_decoded += 1
            counters.frames_returned += len(indexes)
        return counters

    def close(self) -> None:
        for fh in self.files.values():
            fh.close()


#: What one read request costs before its first byte on the bench's store path: a local file (the capped
#: path throttles the same local file, it adds no latency of its own).
READ_LATENCY_S = 1e-4


def coalesce_gap_bytes(bandwidth_bytes_per_s: float, latency_s: float = READ_LATENCY_S) -> int:
    """The gap worth reading rather than asking again: what the link streams in one request's latency (the
    reader's default, 256 KiB, is this rule for a local NVMe drive: ~0.1 ms at ~2.5 GB/s). Through the
    100 MiB/s cap the same latency is worth ~10 KiB: a larger gap would spend the cap on bytes no frame
    needs."""
    return int(bandwidth_bytes_per_s * latency_s)


class OurEpisode:
    """A transcoded episode read with :meth:`pipeline.reader.EpisodeReader.frames`; through the cap, byte
    ranges are coalesced only across gaps the capped link streams in one request's latency."""

    def __init__(self, url: str, bucket: TokenBucket | None) -> None:
        from pipeline.reader import EpisodeReader
        from pipeline.reader.sample import DEFAULT_COALESCE_GAP_BYTES

        self.file = open_throttled(url, bucket)
        gap = DEFAULT_COALESCE_GAP_BYTES if bucket is None else coalesce_gap_bytes(bucket.rate_bytes_per_s)
        self.reader = EpisodeReader(cast(IO[bytes], self.file), coalesce_gap_bytes=gap)

    def read(self, requests: dict[str, list[int]]) -> ReadCounters:
        before = self.file.bytes_read
        _, counters = self.reader.frames(requests)
        counters.bytes_read = self.file.bytes_read - before
        return counters

    def close(self) -> None:
        self.reader.close()
        self.file.close()
