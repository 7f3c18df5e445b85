"""Clips with planted defects whose right score is known: built here, with PyAV and PIL, never committed.

Every clip is small (160x128 or 320x240, a second or less) so a scorer test costs a fraction of a second.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import av
import numpy as np

from pipeline.annotate import EpisodeSource
from pipeline.enums import SourceKind
from pipeline.media.x264 import X264_THREADS

FPS = 30


def textured(height: int, width: int, t: float, seed: int = 3) -> np.ndarray:
    """A smooth, moving scene (gradients and soft blobs): no block edges of its own, motion when t moves."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    img = 60 + 80 * (x / width) + 40 * np.sin((y + 3 * t) / 17.0)
    for _ in range(6):
        cy, cx, r = rng.uniform(0, height), rng.uniform(0, width), rng.uniform(8, 30)
        img += 50 * np.exp(-(((x - cx - 2 * t) ** 2 + (y - cy) ** 2) / (2 * r * r)))
    return np.clip(img, 16, 235).astype(np.uint8)


def weave(top: np.ndarray, bottom: np.ndarray) -> np.ndarray:
    """One interlaced frame: even rows from ``top``, odd rows from ``bottom`` (sampled later in time)."""
    out = top.copy()
    out[1::2] = bottom[1::2]
    return out


def write_gray(path: Path, frames: Sequence[np.ndarray], *, crf: float = 18, codec: str = "libx264") -> Path:
    """Encode luma frames (grey chroma) as an MP4; ``crf`` 51 gives the coarse blocks of a starved encode."""
    height, width = frames[0].shape[:2]
    with av.open(str(path), "w", format="mp4") as container:
        stream = container.add_stream(codec, rate=FPS)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.codec_context.thread_count = X264_THREADS
        stream.options = {"crf": str(crf), "preset": "veryfast"}
        for image in frames:
            rgb = image if image.ndim == 3 else np.repeat(image[:, :, None], 3, axis=2)
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")
            for packet in stream.encode(frame.reformat(format="yuv420p")):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return path


def video_source(path: Path) -> EpisodeSource:
    return EpisodeSource(episode_id=1, kind=SourceKind.VIDEO, path=path, sha256="0" * 64)
