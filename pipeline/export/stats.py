"""Feature statistics of a LeRobot export: what lerobot stores per episode and for the dataset, and reads to
normalize (MEAN_STD: mean/std; MIN_MAX: min/max; QUANTILES: q01/q99; QUANTILE10: q10/q90).

Episode statistics are computed as lerobot's ``compute_episode_stats`` does (frames subsampled, images per
channel in [0, 1] shaped (3, 1, 1)). Its quantile ``q`` of ``n`` samples is where the cumulative count of a
5,000-bin histogram reaches ``q * n``: up to a bin, the smallest sample with at least ``q * n`` samples at or
below it (numpy's ``inverted_cdf``), computed here exactly. numpy's default, linear interpolation between
neighbours, differs from it by up to one sample spacing (for a 60-frame episode's q99 in the export test,
1.8 % of the range where lerobot's bins are 0.02 %).

The dataset's quantiles are the quantiles of all the episodes' samples pooled, not lerobot's
``aggregate_stats`` (a count-weighted mean of the episodes' quantiles): that mean is only a quantile when
every episode spans the same range. For episodes that move through different parts of the joint space it is
far too narrow (two such episodes put 36 % of the state inside their averaged q01..q99, where the pooled
q01..q99 holds 98 %), and QUANTILES normalization would then send most inputs far outside [-1, 1]. The
moments, min and max aggregate exactly either way, as lerobot aggregates them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from pipeline.export import layout
from pipeline.export.episode import EpisodeFrames

#: The quantiles lerobot computes per feature (``lerobot.datasets.compute_stats.DEFAULT_QUANTILES``) and
#: reads for its QUANTILES (q01, q99) and QUANTILE10 (q10, q90) normalization modes.
QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)
QUANTILE_KEYS = tuple(f"q{round(q * 100):02d}" for q in QUANTILES)
#: Frames of 300 px and more are subsampled to about 150 px for their statistics, as lerobot does.
IMAGE_STATS_MAX_PX = 300
IMAGE_STATS_TARGET_PX = 150
#: At most this many frames of an episode enter its image statistics (lerobot's ``sample_indices``).
IMAGE_STATS_MAX_FRAMES = 100

Stats = dict[str, Any]


def feature_stats(values: np.ndarray) -> Stats:
    """lerobot's statistics of ``values`` (rows = samples): min, max, mean, std, count and the quantiles."""
    return _moments(values) | value_quantiles(values)


def value_quantiles(values: np.ndarray) -> Stats:
    """The quantiles of ``values`` per column, as lerobot defines them (module doc)."""
    ordered = np.sort(values, axis=0)
    ranks = np.arange(1, len(values) + 1)
    # the first sample whose rank reaches q * n (the float product lerobot compares its counts with)
    return {
        key: ordered[np.searchsorted(ranks, q * len(values))]
        for key, q in zip(QUANTILE_KEYS, QUANTILES, strict=True)
    }


def pixel_quantiles(histogram: np.ndarray) -> Stats:
    """The quantiles (in [0, 1], as lerobot defines them: module doc) of 8-bit pixel values counted per
    channel in ``histogram`` (channels x 256): exact, and the histograms of episodes add up."""
    cumulative = histogram.cumsum(axis=1)
    n = cumulative[:, -1]
    out: Stats = {}
    for key, q in zip(QUANTILE_KEYS, QUANTILES, strict=True):
        # the first value whose cumulative count reaches q * n, as lerobot's histogram search finds it
        out[key] = (
            np.array([np.searchsorted(c, q * total) for c, total in zip(cumulative, n, strict=True)]) / 255.0
        )
    return out


def sample_indices(n: int) -> np.ndarray:
    """The frames of an ``n``-frame episode that lerobot's image statistics use: up to 100, evenly spread."""
    return np.unique(np.linspace(0, n - 1, min(n, IMAGE_STATS_MAX_FRAMES)).round().astype(int))


def downsample(picture: np.ndarray) -> np.ndarray:
    """An (h, w, 3) picture as lerobot's image statistics see it: about 150 px when 300 px or larger."""
    h, w = picture.shape[:2]
    if max(h, w) >= IMAGE_STATS_MAX_PX:  # lerobot's auto_downsample_height_width
        step = int(w / IMAGE_STATS_TARGET_PX) if w > h else int(h / IMAGE_STATS_TARGET_PX)
        return picture[::step, ::step]
    return picture


class DatasetStats:
    """Episode statistics as episodes are added, and the dataset's statistics from all of them."""

    def __init__(self) -> None:
        self._episodes: list[Stats] = []
        # pooled samples for the dataset's quantiles: the values of vector features (float64, a few per
        # frame), and 256-bin pixel counts per channel for cameras: no picture is held
        self._values: dict[str, list[np.ndarray]] = {}
        self._pixels: dict[str, np.ndarray] = {}

    def add(self, frames: EpisodeFrames, samples: Mapping[str, np.ndarray]) -> dict[str, Stats]:
        """Statistics of one episode, per feature (as lerobot writes them under ``stats/<feature>/``);
        ``samples``: each camera's pictures at :func:`sample_indices`, each through :func:`downsample`."""
        k = np.arange(frames.length, dtype=np.float64)
        vectors = {
            layout.STATE_KEY: frames.state.astype(np.float64),
            layout.ACTION_KEY: frames.action.astype(np.float64),
            "timestamp": (k / frames.fps)[:, None],
            "frame_index": k[:, None],
        }
        stats: dict[str, Stats] = {}
        for key, values in vectors.items():
            stats[key] = feature_stats(values)
            self._values.setdefault(key, []).append(values)
        for cam, picks in samples.items():
            key = layout.IMAGE_PREFIX + cam
            pixels = picks.reshape(-1, 3)
            histogram = np.stack([np.bincount(pixels[:, c], minlength=256) for c in range(3)])
            self._pixels[key] = self._pixels.get(key, 0) + histogram
            per = _moments(pixels.astype(np.float64) / 255.0) | pixel_quantiles(histogram)
            # per channel, shaped (3, 1, 1); the count is of frames, as lerobot counts images
            stats[key] = {s: v[:, None, None] for s, v in per.items() if s != "count"}
            stats[key]["count"] = np.array([len(picks)])
        self._episodes.append(stats)
        return stats

    def result(self) -> dict[str, dict[str, list[Any]]]:
        """The dataset's statistics (``meta/stats.json``): count-weighted mean, pooled variance, min of mins
        and max of maxes, as lerobot's ``aggregate_stats``; quantiles of the pooled samples (module doc)."""
        out: dict[str, dict[str, list[Any]]] = {}
        for key in self._episodes[0]:
            parts = [e[key] for e in self._episodes]
            counts = np.array([p["count"][0] for p in parts], dtype=np.float64)
            means = np.stack([p["mean"] for p in parts])
            weights = counts.reshape((-1,) + (1,) * (means.ndim - 1))
            mean = (means * weights).sum(axis=0) / counts.sum()
            var = ((np.stack([p["std"] for p in parts]) ** 2 + (means - mean) ** 2) * weights).sum(
                axis=0
            ) / counts.sum()
            if key in self._pixels:
                quantiles = {q: v[:, None, None] for q, v in pixel_quantiles(self._pixels[key]).items()}
            else:
                quantiles = value_quantiles(np.concatenate(self._values[key]))
            out[key] = {
                "min": np.min(np.stack([p["min"] for p in parts]), axis=0).tolist(),
                "max": np.max(np.stack([p["max"] for p in parts]), axis=0).tolist(),
                "mean": mean.tolist(),
                "std": np.sqrt(var).tolist(),
                "count": [int(counts.sum())],
            } | {q: v.tolist() for q, v in quantiles.items()}
        return out


def _moments(values: np.ndarray) -> Stats:
    return {
        "min": values.min(axis=0),
        "max": values.max(axis=0),
        "mean": values.mean(axis=0),
        "std": values.std(axis=0),
        "count": np.array([len(values)]),
    }
