"""The export's statistics: exact per episode, and the dataset's quantiles those of all samples pooled."""

from __future__ import annotations

import dataclasses
import gc
import re
import weakref
from collections.abc import Iterator
from pathlib import Path

import av
import numpy as np
import pytest

from pipeline.export import ExportError
from pipeline.export.episode import EpisodeFrames
from pipeline.export.lerobot import write_lerobot
from pipeline.export.stats import (
    QUANTILE_KEYS,
    QUANTILES,
    DatasetStats,
    downsample,
    pixel_quantiles,
    sample_indices,
    value_quantiles,
)


def _with_pictures(frames: EpisodeFrames, images: np.ndarray) -> EpisodeFrames:
    """``frames`` whose camera ``front`` shows ``images`` (n, h, w, 3)."""
    return dataclasses.replace(frames, sizes={"front": images.shape[1:3]}, pictures=lambda: _frames(images))


def _frames(images: np.ndarray) -> Iterator[tuple[str, av.VideoFrame]]:
    """Camera ``front``'s pictures as a decoder hands them out (made as the reader is asked for them)."""
    for image in images:
        yield "front", av.VideoFrame.from_ndarray(image, format="rgb24")


def _episode(rng: np.random.Generator, n: int, centre: float, brightness: int) -> EpisodeFrames:
    state = (centre + rng.normal(0, 0.1, (n, 4))).astype(np.float32)
    image = rng.integers(0, 64, (n, 24, 32, 3), dtype=np.uint8) + np.uint8(brightness)
    return EpisodeFrames(
        sizes={"front": (24, 32)},
        pictures=lambda: _frames(image),
        state=state,
        action=state[:, :2] * 2,
        fps=30,
        state_names=[f"s{i}" for i in range(4)],
        action_names=["a0", "a1"],
    )


def _samples(frames: EpisodeFrames) -> np.ndarray:
    images = [picture.to_ndarray(format="rgb24") for _, picture in frames.pictures()]
    return np.stack([downsample(images[k]) for k in sample_indices(len(images))])


def _first_reaching(values: np.ndarray, q: float) -> np.ndarray:
    """The definition, column by column: the smallest sample with at least q * n samples at or below it."""
    out = []
    for col in values.T:
        ordered = np.sort(col)
        at_or_below = np.searchsorted(ordered, ordered, side="right")  # samples <= each sample
        out.append(ordered[np.argmax(at_or_below >= q * len(col))])
    return np.array(out)


@pytest.mark.parametrize("n", [1, 2, 7, 70, 100, 1000])
def test_quantiles_are_lerobots(n: int) -> None:
    rng = np.random.default_rng(n)
    # skewed, with ties and empty bins, per channel; n = 70 and 100 put q * n on float edges (0.1 * 70 > 7)
    pixels = np.stack(
        [rng.integers(0, 256, n), rng.integers(250, 256, n), rng.geometric(0.2, n).clip(0, 255)], 1
    )
    histogram = np.stack([np.bincount(pixels[:, c], minlength=256) for c in range(3)])
    from_histogram, from_values = pixel_quantiles(histogram), value_quantiles(pixels / 255.0)
    for key, q in zip(QUANTILE_KEYS, QUANTILES, strict=True):
        want = _first_reaching(pixels / 255.0, q)
        np.testing.assert_array_equal(from_values[key], want)
        np.testing.assert_allclose(from_histogram[key], want, rtol=0, atol=1e-12)
    values = rng.normal(size=(n, 2))
    for key, q in zip(QUANTILE_KEYS, QUANTILES, strict=True):
        np.testing.assert_array_equal(value_quantiles(values)[key], _first_reaching(values, q))


def test_dataset_quantiles_pool_the_episodes() -> None:
    # two episodes in different parts of the space: averaging their quantiles would give a narrow band
    rng = np.random.default_rng(0)
    episodes = [_episode(rng, 90, -1.0, 0), _episode(rng, 30, 1.0, 150)]
    stats = DatasetStats()
    samples = [_samples(e) for e in episodes]
    per_episode = [stats.add(e, {"front": s}) for e, s in zip(episodes, samples, strict=True)]
    result = stats.result()

    state = np.concatenate([e.state.astype(np.float64) for e in episodes])
    pixels = np.concatenate([s.reshape(-1, 3) for s in samples]) / 255.0
    for key, q in zip(QUANTILE_KEYS, QUANTILES, strict=True):
        np.testing.assert_array_equal(result["observation.state"][key], _first_reaching(state, q))
        np.testing.assert_allclose(
            np.ravel(result["observation.images.front"][key]), _first_reaching(pixels, q), atol=1e-12
        )
        np.testing.assert_allclose(
            per_episode[1]["observation.state"][key],
            _first_reaching(episodes[1].state.astype(np.float64), q),
        )
    share = np.mean(
        (state >= result["observation.state"]["q01"]) & (state <= result["observation.state"]["q99"])
    )
    assert share >= 0.95  # 2 of 120 samples fall below q01, 2 above q99
    # the moments aggregate exactly, the image count is of frames
    np.testing.assert_allclose(result["observation.state"]["mean"], state.mean(axis=0))
    np.testing.assert_allclose(result["observation.state"]["std"], state.std(axis=0))
    np.testing.assert_allclose(np.ravel(result["observation.images.front"]["std"]), pixels.std(axis=0))
    assert result["observation.images.front"]["count"] == [120]
    assert np.shape(result["observation.images.front"]["q01"]) == (3, 1, 1)
    frame_index = np.r_[0:90, 0:30].astype(np.float64)[:, None]
    assert result["frame_index"]["max"] == [89.0]
    assert result["frame_index"]["q50"] == _first_reaching(frame_index, 0.5).tolist()


def test_episodes_of_another_feature_set_are_refused_and_nothing_is_published(tmp_path: Path) -> None:
    """One LeRobot dataset has one feature set: an episode of another contract (a joint more, or the same
    fields in another order) would be a column of another meaning at the same index; pictures of another
    size do not fit the camera's video."""
    rng = np.random.default_rng(1)
    first, second = _episode(rng, 8, 0.0, 10), _episode(rng, 8, 1.0, 20)
    smaller = np.stack([p.to_ndarray(format="rgb24")[:20, :30] for _, p in second.pictures()])
    for other in (
        *(
            dataclasses.replace(second, state_names=n)
            for n in (["s0", "s1", "s2", "s4"], ["s1", "s0", "s2", "s3"])
        ),
        _with_pictures(second, smaller),
    ):
        out = tmp_path / "out"
        with pytest.raises(
            ExportError,
            match=re.escape("episode 2 cannot join the export: its ")
            + "(observation.state has other fields than episode 1's|camera front is 30x20, episode 1's 32x24)",
        ):
            write_lerobot([(1, "pick", first), (2, "pick", other)], out)
        assert not out.exists() and not list(tmp_path.iterdir())
    write_lerobot([(1, "pick", first), (2, "pick", second)], tmp_path / "same")
    assert (tmp_path / "same" / "meta" / "info.json").is_file()


def test_an_episode_s_pictures_are_let_go_before_the_next_is_read(tmp_path: Path) -> None:
    """The export consumes its episodes one at a time: when the third is asked for, nothing holds the first
    one's pictures any more (an export of a whole dataset held every frame of every camera at once)."""
    rng = np.random.default_rng(2)
    held: list[weakref.ref[np.ndarray]] = []
    alive_when_asked: list[int] = []

    def episodes() -> Iterator[tuple[int, str, EpisodeFrames]]:
        for i in range(4):
            gc.collect()
            alive_when_asked.append(sum(ref() is not None for ref in held))
            images = rng.integers(0, 64, (6, 24, 32, 3), dtype=np.uint8)
            held.append(weakref.ref(images))
            frames = _with_pictures(_episode(rng, 6, float(i), 10 * i), images)
            del images
            yield i, "pick", frames
            del frames

    report = write_lerobot(episodes(), tmp_path / "out")
    assert report.ok and report.episodes == 4
    # asked for episode k, no earlier episode's pictures are alive: not even the one just written
    assert alive_when_asked == [0, 0, 0, 0], alive_when_asked


@pytest.mark.parametrize(
    ("episodes", "splits", "said"),
    [
        (2, ["train"], "1 splits for more episodes than that"),
        (2, ["train", "val", "val"], "3 splits for 2 episodes"),
        (3, ["train", "val", "train"], "the episodes of split 'train' are not contiguous"),
    ],
)
def test_splits_that_do_not_fit_the_episodes_are_refused(
    tmp_path: Path, episodes: int, splits: list[str], said: str
) -> None:
    rng = np.random.default_rng(3)
    frames = [(i, "pick", _episode(rng, 5, float(i), 10)) for i in range(episodes)]
    with pytest.raises(ExportError, match=re.escape(said)):
        write_lerobot(frames, tmp_path / "out", splits=splits)
    assert not list(tmp_path.iterdir())
