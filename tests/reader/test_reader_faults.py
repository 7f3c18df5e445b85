"""The sample reader on files that are not (whole) episodes: damaged files refused with a reason code and
no handle left open, damaged frames raised and recovered from, an episode without cameras still spanned,
and windows found by bisection equal to a scan."""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Callable
from pathlib import Path

import av
import psutil
import pytest
from reader_helpers import damage_frames, without_cameras

from pipeline.enums import ReasonCode
from pipeline.errors import InputError, SluiceError
from pipeline.reader import EpisodeIndex, EpisodeIndexError, EpisodeReader, SampleArgumentError, open_episode
from pipeline.reader.verify import EpisodeIntegrityError

NS = 1_000_000_000
PROFILE = "random_access"
Episode = Callable[[str], tuple[Path, Path]]


def _open_paths() -> set[str]:
    return {f.path for f in psutil.Process().open_files()}


def _truncated(data: bytes) -> bytes:
    return data[: len(data) // 2]


def _garbage(data: bytes) -> bytes:
    return bytes(range(256)) * 64


def _middle_zeroed(data: bytes) -> bytes:
    """Magic and footer intact, everything between (chunks, summary) zeroed."""
    return data[:8] + bytes(len(data) - 8 - 4096) + data[-4096:]


@pytest.mark.parametrize("damage", [_truncated, _garbage, _middle_zeroed])
def test_a_damaged_file_is_refused_and_left_closed(
    damage: Callable[[bytes], bytes], episode: Episode, tmp_path: Path
) -> None:
    bad = tmp_path / "episode.mcap"
    bad.write_bytes(damage(episode(PROFILE)[1].read_bytes()))
    before = _open_paths()
    with pytest.raises(EpisodeIndexError) as caught:
        EpisodeReader(bad)
    # checked while the error (and its traceback, which holds the half-made reader) is alive
    assert str(bad) not in _open_paths() - before
    error = caught.value
    assert isinstance(error, InputError) and isinstance(error, SluiceError)
    assert error.reason == ReasonCode.CONTAINER_ERROR.value
    assert str(bad) in str(error)
    assert error.__cause__ is not None  # the MCAP library's own error kept as the cause


def test_a_damaged_stream_passed_in_stays_open_for_its_owner(episode: Episode) -> None:
    data = _truncated(episode(PROFILE)[1].read_bytes())
    stream = io.BytesIO(data)
    with pytest.raises(EpisodeIndexError):
        EpisodeReader(stream)
    assert not stream.closed


def test_a_frame_that_does_not_decode_is_refused_at_open_or_raises_and_the_next_sample_decodes(
    episode: Episode, tmp_path: Path
) -> None:
    path = episode(PROFILE)[1]
    with open_episode(path) as reader:
        t_ns = reader.start_ns + NS
        later = reader.start_ns + 2 * NS
        good = reader.sample(later, frames_per_camera=1, cameras=["front"], topics=[])
    damaged = damage_frames(path, tmp_path / "episode.mcap", "front", t_ns)
    with pytest.raises(EpisodeIntegrityError, match=rf"{damaged}: data section CRC is"):
        open_episode(damaged)  # by default the damage is found before any sample
    with open_episode(damaged, verify=False) as reader:
        with pytest.raises(av.error.InvalidDataError):
            reader.sample(t_ns, frames_per_camera=1, cameras=["front"], topics=[])
        again = reader.sample(later, frames_per_camera=1, cameras=["front"], topics=[])
    assert again.frames["front"][0].stamp_ns == good.frames["front"][0].stamp_ns
    assert (again.frames["front"][0].image == good.frames["front"][0].image).all()


def test_an_episode_without_cameras_spans_its_state_and_actions(episode: Episode, tmp_path: Path) -> None:
    path = episode(PROFILE)[1]
    reduced = without_cameras(path, tmp_path / "episode.mcap")
    with open_episode(reduced) as reader:
        assert reader.cameras == []
        times = [loc.log_time for topic in reader.proprio_topics for loc in reader.index.by_topic[topic]]
        assert times
        assert (reader.start_ns, reader.end_ns) == (min(times), max(times))
        sample = reader.sample(reader.end_ns, window_s=0.5)
        assert sample.frames == {}
        assert all(sample.proprio[topic] for topic in reader.proprio_topics)


def test_an_index_with_nothing_timed_names_its_source() -> None:
    empty = EpisodeIndex("s3://bucket/empty/episode.mcap", [], {}, {}, {}, {}, [])
    with pytest.raises(
        EpisodeIndexError, match=r"s3://bucket/empty/episode\.mcap: no camera frames.*no time span"
    ):
        _ = empty.start_ns


def test_window_by_bisection_equals_a_scan(episode: Episode) -> None:
    with open_episode(episode(PROFILE)[1]) as reader:
        index = reader.index
        for topic in ["/robot/joint_states", *reader.proprio_topics, "/cam/front/h264", "/nowhere"]:
            every = index.by_topic.get(topic, [])
            stamps = sorted({loc.log_time for loc in every})
            # boundaries on message times, one either side of them, and outside the episode
            edges = [reader.start_ns - NS, reader.end_ns + NS]
            for s in stamps[:: max(len(stamps) // 7, 1)]:
                edges += [s - 1, s, s + 1]
            for lo in edges:
                for hi in edges:
                    scanned = [loc for loc in every if lo < loc.log_time <= hi]
                    assert index.window(topic, lo, hi) == scanned


def test_window_returns_file_order_when_the_file_is_not_in_log_time_order(episode: Episode) -> None:
    # our writer puts every topic in log-time order; another writer need not: reverse one topic's list
    with open_episode(episode(PROFILE)[1]) as reader:
        index = reader.index
        topic = reader.proprio_topics[0]
        shuffled = dataclasses.replace(index, by_topic={topic: index.by_topic[topic][::-1]})
        every = shuffled.by_topic[topic]
        times = sorted(loc.log_time for loc in every)
        lo, hi = times[len(times) // 4], times[3 * len(times) // 4]
        got = shuffled.window(topic, lo, hi)
        assert got == [loc for loc in every if lo < loc.log_time <= hi]
        assert len(got) > 2 and [loc.log_time for loc in got] == sorted(
            (loc.log_time for loc in got), reverse=True
        )


@pytest.mark.parametrize("digest", ["abc", "sha256:" + "ab" * 32, 5])
def test_a_malformed_expected_sha256_is_refused_before_the_file_is_read(
    episode: Episode, digest: object
) -> None:
    """It used to be hashed against the whole file and reported as a crc_mismatch ('the catalog records
    abc'), or to escape as AttributeError when not a string."""
    _, path = episode(PROFILE)
    with pytest.raises(SampleArgumentError, match=r"expected_sha256 .* expected 64 hex digits or None"):
        open_episode(path, expected_sha256=digest)
    assert str(path) not in _open_paths()
