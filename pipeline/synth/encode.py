"""H.264 encoding for synthetic media: libx264 through PyAV, configured to be deterministic.

The same seed and options give byte-identical files on any machine with the same libx264 build: one
encoder thread and no macroblock tree with B-frames (:mod:`pipeline.media.x264` says why).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Literal, cast

import av
import numpy as np
from av.video.codeccontext import VideoCodecContext

from pipeline.media.x264 import X264_DETERMINISTIC_PARAMS, X264_THREADS

X264Preset = Literal[
    "ultrafast", "superfast", "veryfast", "faster", "fast", "medium", "slow", "slower", "veryslow"
]


@dataclass(frozen=True)
class H264Settings:
    """Encoder settings. ``bframes=0`` is what robot logs need (Foxglove cannot play B-frames)."""

    preset: X264Preset = "ultrafast"
    crf: int = 23
    gop_frames: int = 30
    bframes: int = 0
    zero_latency: bool = False
    interlaced: bool = False
    #: SPS and PPS in front of every keyframe as well as in the container's header, as a camera streaming
    #: Annex B writes them (a decoder then takes in parameter sets that change mid-stream).
    repeat_headers: bool = False

    def x264_options(self) -> dict[str, str]:
        """The ``options`` dict for PyAV's libx264 encoder."""
        params = [
            f"keyint={self.gop_frames}",
            f"min-keyint={self.gop_frames}",
            # Fixed GOPs: a keyframe every gop_frames, not wherever x264 sees a cut.
            "scenecut=0",
            f"bframes={self.bframes}",
            *X264_DETERMINISTIC_PARAMS,
        ]
        if self.interlaced:
            params += ["interlaced=1", "tff=1"]
        if self.repeat_headers:
            params.append("repeat-headers=1")
        options = {"preset": self.preset, "crf": str(self.crf), "x264-params": ":".join(params)}
        if self.zero_latency:
            options["tune"] = "zerolatency"
        return options


@dataclass(frozen=True)
class EncodedFrame:
    """One access unit: ``pts`` in frames, ``data`` in Annex B (start codes, SPS/PPS before keyframes)."""

    pts: int
    data: bytes
    keyframe: bool


def _yuv420p_context(codec: str, width: int, height: int, fps: Fraction) -> av.VideoCodecContext:
    """An encoder context for yuv420p frames at ``fps`` (time base one frame)."""
    # A video codec's name gives a video context (PyAV's stubs only know that for literal names).
    ctx = cast("av.VideoCodecContext", av.CodecContext.create(codec, "w"))
    ctx.width = width
    ctx.height = height
    ctx.pix_fmt = "yuv420p"
    ctx.time_base = 1 / fps
    ctx.framerate = fps
    return ctx


class AnnexBEncoder:
    """Encodes yuv420p frames to raw Annex B access units, one per frame, without a container.

    Without a container's global header, x264 repeats SPS and PPS in front of every keyframe, which is what
    ``foxglove.CompressedVideo`` asks of an H.264 message.
    """

    def __init__(self, width: int, height: int, fps: Fraction, settings: H264Settings) -> None:
        ctx = _yuv420p_context("libx264", width, height, fps)
        ctx.thread_count = X264_THREADS
        ctx.options = settings.x264_options()
        self._ctx = ctx

    def encode(self, yuv: np.ndarray, pts: int) -> list[EncodedFrame]:
        """Encode one ``(H*3/2, W)`` yuv420p frame; returns the access units that came out (maybe none)."""
        frame = av.VideoFrame.from_ndarray(yuv, format="yuv420p")
        frame.pts = pts
        return self._wrap(self._ctx.encode(frame))

    def flush(self) -> list[EncodedFrame]:
        """Drain the encoder at the end of the stream."""
        return self._wrap(self._ctx.encode(None))

    @staticmethod
    def _wrap(packets: list[av.Packet]) -> list[EncodedFrame]:
        return [EncodedFrame(int(p.pts or 0), bytes(p), bool(p.is_keyframe)) for p in packets]


class HevcAnnexBEncoder(AnnexBEncoder):
    """H.265 (libx265) counterpart of :class:`AnnexBEncoder`: raw Annex B access units, VPS/SPS/PPS
    repeated before every keyframe (``repeat-headers``), no B-frames, one thread (x265's frame and
    worker-pool threads would make the bytes depend on the machine)."""

    def __init__(self, width: int, height: int, fps: Fraction, settings: H264Settings) -> None:
        ctx = _yuv420p_context("libx265", width, height, fps)
        params = (
            f"keyint={settings.gop_frames}:min-keyint={settings.gop_frames}:scenecut=0:bframes=0:"
            "repeat-headers=1:annexb=1:frame-threads=1:pools=none:log-level=error"
        )
        ctx.options = {"preset": settings.preset, "crf": str(settings.crf), "x265-params": params}
        self._ctx = ctx


#: FFmpeg's JPEG quantiser scale for synthetic JPEG cameras: 3 is about libjpeg's quality 90, what
#: robot camera drivers default to.
JPEG_QSCALE = 3


class StillEncoder:
    """Encodes yuv420p frames into one still image each: ``jpeg`` (FFmpeg's mjpeg, full-range yuvj420p,
    as a camera's JPEG engine writes) or ``png`` (rgb24). Deterministic: neither encoder has state
    between pictures or depends on the machine."""

    def __init__(self, width: int, height: int, fmt: str) -> None:
        if fmt not in ("jpeg", "png"):
            raise ValueError(f"still image format {fmt!r}; allowed: jpeg, png")
        codec, self._pix_fmt = ("mjpeg", "yuvj420p") if fmt == "jpeg" else ("png", "rgb24")
        ctx = cast(VideoCodecContext, av.CodecContext.create(codec, "w"))
        ctx.width = width
        ctx.height = height
        ctx.pix_fmt = self._pix_fmt
        ctx.time_base = Fraction(1, 30)
        if fmt == "jpeg":
            ctx.qmin = ctx.qmax = JPEG_QSCALE
        self._ctx = ctx

    def encode(self, yuv: np.ndarray) -> bytes:
        frame = av.VideoFrame.from_ndarray(yuv, format="yuv420p").reformat(format=self._pix_fmt)
        packets = self._ctx.encode(frame)
        if len(packets) != 1:
            raise RuntimeError(f"a still image encoder gave {len(packets)} packets for one picture")
        return bytes(packets[0])


#: Raw pixel encodings the synthetic raw cameras can write (ROS names) and the FFmpeg format each is made
#: from; bayer mosaics are sampled from rgb24 here (swscale reads bayer, it does not write it).
RAW_ENCODINGS: dict[str, str] = {
    "rgb8": "rgb24",
    "bgr8": "bgr24",
    "rgba8": "rgba",
    "bgra8": "bgra",
    "mono8": "gray",
    "mono16": "gray16le",
    "rgb16": "rgb48le",
    "yuv422": "yuyv422",  # made as YUYV, bytes swapped per pair into UYVY (PyAV cannot export uyvy422)
    "uyvy": "yuyv422",
    "yuyv": "yuyv422",
    **{f"bayer_{p}8": "rgb24" for p in ("rggb", "bggr", "gbrg", "grbg")},
    **{f"bayer_{p}16": "rgb48le" for p in ("rggb", "bggr", "gbrg", "grbg")},
}
#: Row alignment of synthetic raw pictures: drivers pad rows (to 64 bytes here), so ``step`` > a row.
RAW_ROW_ALIGN_BYTES = 64


def raw_picture(yuv: np.ndarray, encoding: str, width: int, height: int) -> tuple[bytes, int]:
    """``(data, step)`` of a yuv420p frame as a raw picture in ``encoding``, rows padded to
    :data:`RAW_ROW_ALIGN_BYTES` (at least 16 bytes of padding, so that ``step`` always matters)."""
    if encoding not in RAW_ENCODINGS:
        raise ValueError(f"raw encoding {encoding!r}; allowed: {', '.join(RAW_ENCODINGS)}")
    frame = av.VideoFrame.from_ndarray(yuv, format="yuv420p").reformat(format=RAW_ENCODINGS[encoding])
    pixels = frame.to_ndarray()
    if encoding.startswith("bayer_"):
        pixels = _mosaic(pixels, encoding.removeprefix("bayer_")[:4])
    if encoding in ("yuv422", "uyvy"):  # Y0 U Y1 V -> U Y0 V Y1
        pixels = np.ascontiguousarray(pixels).reshape(height, -1).view(np.uint16).byteswap()
    rows = np.ascontiguousarray(pixels).reshape(height, -1).view(np.uint8).reshape(height, -1)
    row = rows.shape[1]
    step = -(-(row + 16) // RAW_ROW_ALIGN_BYTES) * RAW_ROW_ALIGN_BYTES
    out = np.zeros((height, step), np.uint8)
    out[:, :row] = rows
    return out.tobytes(), step


def _mosaic(rgb: np.ndarray, pattern: str) -> np.ndarray:
    """One colour sample per pixel, as a bayer sensor sees an RGB picture (``rggb``: R G on even rows,
    G B on odd rows)."""
    channel = {"r": 0, "g": 1, "b": 2}
    out = np.empty(rgb.shape[:2], rgb.dtype)
    for k, letter in enumerate(pattern):
        dy, dx = divmod(k, 2)
        out[dy::2, dx::2] = rgb[dy::2, dx::2, channel[letter]]
    return out
