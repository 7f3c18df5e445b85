"""Fixtures for the video probe: one shared sandboxed prober and a factory of tiny real H.264 files."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from pipeline.videoprobe import VideoProbeLimits, VideoProber

# Small enough to encode in a few milliseconds, large enough for 8x8 transform blocks to keep bars sharp.
WIDTH, HEIGHT = 128, 96

Painter = Callable[[int, np.random.Generator], np.ndarray]


def noise(index: int, rng: np.random.Generator) -> np.ndarray:
    """Grainy content: far from blank, no black rows or columns."""
    return rng.integers(40, 255, (HEIGHT, WIDTH, 3), dtype=np.uint8)


def write_video(
    path: Path,
    *,
    frames: int = 12,
    paint: Painter = noise,
    width: int = WIDTH,
    height: int = HEIGHT,
    pts_ms: Sequence[int] | None = None,
    container: str | None = None,
    encoder_options: dict[str, str] | None = None,
) -> Path:
    """Encode ``frames`` frames of real H.264 (libx264) to ``path``; ``pts_ms`` gives explicit timestamps."""
    rng = np.random.default_rng(7)
    with av.open(str(path), "w", format=container or "mp4") as out:
        stream = out.add_stream("libx264", rate=30, options=encoder_options or {})
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        if pts_ms is not None:
            stream.codec_context.time_base = Fraction(1, 1000)
            stream.time_base = Fraction(1, 1000)
        for index in range(frames):
            frame = av.VideoFrame.from_ndarray(paint(index, rng), format="rgb24")
            if pts_ms is not None:
                frame.pts, frame.time_base = pts_ms[index], Fraction(1, 1000)
            out.mux(stream.encode(frame))
        out.mux(stream.encode())
    return path


@pytest.fixture(scope="session")
def prober() -> Iterator[VideoProber]:
    """One worker for the session: starting Python + PyAV per file would dominate these tests."""
    with VideoProber(VideoProbeLimits()) as shared:
        yield shared


@pytest.fixture(scope="session")
def make_video() -> Callable[..., Path]:
    """The :func:`write_video` factory, for tests that need a particular clip."""
    return write_video


@pytest.fixture
def clip(tmp_path: Path) -> Path:
    """A clean 12-frame clip."""
    return write_video(tmp_path / "clip.mp4")
