"""H.264 encoding for synthetic media: libx264 through PyAV, configured to be deterministic.

The same seed and options give byte-identical files on any machine with the same libx264 build: one
encoder thread and no macroblock tree with B-frames (:mod:`pipeline.media.x264` says why).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

import av
import numpy as np

from pipeline.media.x264 import X264_THREADS, deterministic_params

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

    def x264_options(self) -> dict[str, str]:
        """The ``options`` dict for PyAV's libx264 encoder."""
        params = [
            f"keyint={self.gop_frames}",
            f"min-keyint={self.gop_frames}",
            # Fixed GOPs: a keyframe every gop_frames, not wherever x264 sees a cut.
            "scenecut=0",
            f"bframes={self.bframes}",
            *deterministic_params(self.bframes),
        ]
        if self.interlaced:
            params += ["interlaced=1", "tff=1"]
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


class AnnexBEncoder:
    """Encodes yuv420p frames to raw Annex B access units, one per frame, without a container.

    Without a container's global header, x264 repeats SPS and PPS in front of every keyframe, which is what
    ``foxglove.CompressedVideo`` asks of an H.264 message.
    """

    def __init__(self, width: int, height: int, fps: Fraction, settings: H264Settings) -> None:
        ctx = av.CodecContext.create("libx264", "w")
        ctx.width = width
        ctx.height = height
        ctx.pix_fmt = "yuv420p"
        ctx.time_base = 1 / fps
        ctx.framerate = fps
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
