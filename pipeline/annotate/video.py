"""Built-in annotators over decoded frames: motion energy, image statistics, scene statistics, pHash.

All of them read :meth:`EpisodeSource.frames` (shared, decoded once per episode) and need no model.
"""

from __future__ import annotations

import itertools
from typing import Any, ClassVar

import numpy as np
from pydantic import Field

from pipeline.annotate.base import Annotator, AnnotatorInput
from pipeline.annotate.imageops import area_resize, laplacian_variance, luma_histogram, phash
from pipeline.annotate.source import EpisodeSource
from pipeline.config.types import FrozenModel

#: Motion is measured on 64x48 luma: grain and compression noise average out, object motion does not.
MOTION_SIZE = (48, 64)


def _shrink(luma: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    h, w = min(size[0], luma.shape[1]), min(size[1], luma.shape[2])
    return np.stack([area_resize(f, h, w) for f in luma])


class MotionParams(FrozenModel):
    # A mean absolute difference below 1.5 grey levels per frame on 64x48 luma is sensor noise, not motion.
    still_threshold: float = Field(default=1.5, ge=0, description="Mean |Δluma| below this is a still frame.")


class MotionEnergy(Annotator):
    """Mean absolute luma difference between consecutive kept frames (per frame of the original rate)."""

    name = "motion_energy"
    inputs = frozenset({AnnotatorInput.VIDEO})
    Params: ClassVar[type[FrozenModel]] = MotionParams

    def annotate(self, source: EpisodeSource) -> dict[str, Any]:
        frames = source.frames()
        small = _shrink(frames.luma, MOTION_SIZE)
        if len(small) < 2:
            energy = np.zeros(1)
        else:
            # Kept frames may be decimated: divide by the index gap to report energy per source frame.
            gaps = np.diff(frames.indices).astype(np.float64)
            energy = np.abs(np.diff(small, axis=0)).mean(axis=(1, 2)) / gaps
        return {
            "motion_energy.mean": round(float(energy.mean()), 4),
            "motion_energy.p95": round(float(np.percentile(energy, 95)), 4),
            "motion_energy.still_fraction": round(float((energy < self.params.still_threshold).mean()), 4),
            "motion_energy.frames": int(frames.total),
        }


class ImageStatsParams(FrozenModel):
    # Limited-range video: 16 is black and 235 white; pixels at or beyond them carry no detail.
    dark_level: int = Field(default=20, ge=0, le=255, description="Luma at or below this is underexposed.")
    bright_level: int = Field(default=235, ge=0, le=255, description="Luma at or above this is blown out.")
    # Laplacian variance of a sharp 320-wide frame of textured content is in the hundreds; a defocused one
    # is in the tens.
    sharp_laplacian_var: float = Field(
        default=100.0, gt=0, description="Laplacian variance counted as sharp."
    )


class ImageStats(Annotator):
    """Brightness, contrast, exposure (clipped pixels) and sharpness; ``quality_visual`` in [0, 1]."""

    name = "image_stats"
    inputs = frozenset({AnnotatorInput.VIDEO})
    Params: ClassVar[type[FrozenModel]] = ImageStatsParams

    def annotate(self, source: EpisodeSource) -> dict[str, Any]:
        p = self.params
        luma = source.frames().luma
        brightness = luma.mean(axis=(1, 2))
        contrast = luma.reshape(len(luma), -1).std(axis=1)
        dark = (luma <= p.dark_level).mean(axis=(1, 2))
        bright = (luma >= p.bright_level).mean(axis=(1, 2))
        sharpness = np.array([laplacian_variance(f) for f in luma])
        exposure_ok = np.clip(1.0 - dark - bright, 0.0, 1.0)
        sharp_ok = np.clip(sharpness / p.sharp_laplacian_var, 0.0, 1.0)
        return {
            "image_stats.brightness_mean": round(float(brightness.mean()), 3),
            "image_stats.contrast_mean": round(float(contrast.mean()), 3),
            "image_stats.underexposed_fraction": round(float(dark.mean()), 4),
            "image_stats.overexposed_fraction": round(float(bright.mean()), 4),
            "image_stats.blur_laplacian_var_median": round(float(np.median(sharpness)), 3),
            "quality_visual": round(float(np.median(exposure_ok * sharp_ok)), 4),
        }


class SceneParams(FrozenModel):
    # A fifth of the histogram mass moving between consecutive frames is a hard cut; pans, grain and
    # lighting drift move far less (measured on the synthetic scenes: < 0.07 within a scene, > 0.3 across).
    cut_threshold: float = Field(default=0.2, gt=0, le=1, description="Histogram distance that is a cut.")


class SceneStats(Annotator):
    """Hard cuts (histogram distance between consecutive frames) and scene lengths."""

    name = "scene_stats"
    inputs = frozenset({AnnotatorInput.VIDEO})
    Params: ClassVar[type[FrozenModel]] = SceneParams

    def annotate(self, source: EpisodeSource) -> dict[str, Any]:
        frames = source.frames()
        hists = np.stack([luma_histogram(f) for f in frames.luma])
        distance = 0.5 * np.abs(np.diff(hists, axis=0)).sum(axis=1) if len(hists) > 1 else np.zeros(0)
        cut_at = [int(frames.indices[i + 1]) for i in np.flatnonzero(distance > self.params.cut_threshold)]
        bounds = [0, *cut_at, frames.total]
        lengths_s = [(b - a) / frames.fps for a, b in itertools.pairwise(bounds) if b > a]
        return {
            "scene_stats.cut_count": len(cut_at),
            "scene_stats.cut_frames": cut_at,
            "scene_stats.scene_count": len(lengths_s),
            "scene_stats.mean_scene_s": round(float(np.mean(lengths_s)), 3) if lengths_s else 0.0,
            "scene_stats.max_hist_distance": round(float(distance.max()), 4) if len(distance) else 0.0,
        }


class PhashParams(FrozenModel):
    # One hash per ~second at 30 fps: dense enough to match clips cut differently, small enough to store.
    every_n_frames: int = Field(default=30, ge=1, description="Hash one frame in this many.")
    max_hashes: int = Field(default=256, ge=1, description="Most hashes stored per episode.")


class VideoPhash(Annotator):
    """64-bit DCT perceptual hashes of evenly spaced frames (hex strings) for near-duplicate grouping."""

    name = "video_phash"
    inputs = frozenset({AnnotatorInput.VIDEO})
    Params: ClassVar[type[FrozenModel]] = PhashParams

    def annotate(self, source: EpisodeSource) -> dict[str, Any]:
        frames = source.frames()
        wanted = max(self.params.every_n_frames, frames.stride)
        picks = [i for i, index in enumerate(frames.indices.tolist()) if index % wanted == 0]
        if len(picks) > self.params.max_hashes:
            step = -(-len(picks) // self.params.max_hashes)
            picks = picks[::step]
        return {
            "video_phash.hashes": [f"{phash(frames.luma[i]):016x}" for i in picks],
            "video_phash.frame_indices": [int(frames.indices[i]) for i in picks],
            "video_phash.camera": frames.camera,
        }
