"""The sample reader: the right window and frames, sparse decoding, honest counters, no heavy imports."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest
from reader_helpers import source_stamps

from pipeline.bench.read import rewrite_default_layout
from pipeline.media.framecode import read_frame_index
from pipeline.reader import EpisodeReader, ReadCounters, SampleArgumentError, open_episode

NS = 1_000_000_000
Episode = Callable[[str], tuple[Path, Path]]


def _times(reader: EpisodeReader, count: int, seed: int = 3) -> list[int]:
    rng = np.random.default_rng(seed)
    return [int(t) for t in rng.integers(reader.start_ns + NS // 2, reader.end_ns, count)]


@pytest.mark.parametrize("profile", ["vla", "random_access"])
def test_sample_returns_the_window_and_the_frames_on_screen(profile: str, episode: Episode) -> None:
    source, path = episode(profile)
    stamps = source_stamps(source, profile)
    with open_episode(path) as reader:
        assert reader.cameras == ["front", "wrist_left", "wrist_right"]
        for t in _times(reader, 10):
            sample = reader.sample(t, window_s=1.0, frames_per_camera=2, frame_stride_s=0.1)
            for topic in reader.proprio_topics:
                got = [r["stamp_ns"] for r in sample.proprio[topic]]
                every = [loc.log_time for loc in reader.index.by_topic[topic]]
                assert got == [
                    s for s in every if t - NS < s <= t
                ]  # every grid instant of the window, in order
                if t - NS >= every[0]:
                    assert len(got) == 50  # a whole second at 50 Hz
            assert sample.array("/robot/joint_states/resampled", "position").shape[1] == 7
            for camera, frames in sample.frames.items():
                assert len(frames) == 2
                for frame, at in zip(frames, (t - NS // 10, t), strict=True):
                    index = read_frame_index(frame.image)
                    assert frame.stamp_ns == stamps[camera][index]  # the decoded picture is the stamped one
                    shown = max(s for s in stamps[camera] if s <= max(at, stamps[camera][0]))
                    assert frame.stamp_ns == shown  # and it is the frame on screen at that time


def test_random_access_decodes_at_most_three_frames_per_requested_frame(episode: Episode) -> None:
    _, path = episode("random_access")
    with open_episode(path) as reader:
        for t in _times(reader, 40):
            counters = reader.sample(t, frames_per_camera=1).counters
            assert counters.frames_decoded <= 3 * counters.frames_returned
        assert reader.totals.decoded_per_frame <= 3.0
    _, vla = episode("vla")
    with open_episode(vla) as reader:
        for t in _times(reader, 40):
            reader.sample(t, frames_per_camera=1)
        assert reader.totals.decoded_per_frame > 3.0  # a P-chain decodes from its keyframe


@pytest.mark.parametrize("profile", ["vla", "random_access"])
def test_sparse_decoding_gives_the_pictures_of_a_full_decode(profile: str, episode: Episode) -> None:
    _, path = episode(profile)
    with open_episode(path, pixel_format="gray") as reader:
        table = reader.index.cameras["front"]
        # full sequential decode of the camera for reference
        units = []
        with open(path, "rb") as fh:
            for loc in table.locations:
                chunk = reader.index.chunks[loc.chunk]
                assert chunk.compression == ""  # the camera group is stored uncompressed
                fh.seek(chunk.records_offset + loc.offset)
                units.append(fh.read(loc.length))
        from foxglove_schemas_protobuf.CompressedVideo_pb2 import CompressedVideo

        decoder = av.CodecContext.create("h264", "r")
        full = {}
        for position, record in enumerate(units):
            packet = av.Packet(CompressedVideo.FromString(record[31:]).data)
            packet.pts = position
            full.update({f.pts: f.to_ndarray(format="gray") for f in decoder.decode(packet)})
        full.update({f.pts: f.to_ndarray(format="gray") for f in decoder.decode(None)})
        for t in _times(reader, 15, seed=9):
            frame = reader.sample(t, frames_per_camera=1, cameras=["front"]).frames["front"][0]
            position = table.frame_at(t)
            assert np.array_equal(frame.image, full[position])


def test_our_layout_reads_fewer_bytes_than_the_default_layout(episode: Episode, tmp_path: Path) -> None:
    _, path = episode("vla")
    baseline = tmp_path / "default.mcap"
    rewrite_default_layout(path, baseline)
    totals: dict[str, ReadCounters] = {}
    for name, file in (("ours", path), ("default", baseline)):
        with open_episode(file) as reader:
            for t in _times(reader, 30):
                sample = reader.sample(t)
                assert sample.counters.reads >= 1 and sample.counters.bytes_used > 0
            totals[name] = reader.totals
    ours, default = totals["ours"], totals["default"]
    assert ours.bytes_used == default.bytes_used  # same messages, same plan
    assert ours.frames_decoded == default.frames_decoded
    assert ours.read_amplification < default.read_amplification
    assert ours.decompress_amplification < default.decompress_amplification
    assert ours.reads_per_sample <= 2.0  # one read per topic group a sample touches


def test_the_reader_imports_without_airflow_or_ray() -> None:
    code = "import sys, pipeline.reader; bad = {'airflow', 'ray'} & set(sys.modules); assert not bad, bad"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_sparse_request_reads_only_the_records_it_needs(episode: Episode) -> None:
    """Frames far apart in an uncompressed video chunk: with no gap worth reading, the reads are the
    records the frames depend on and nothing between them (not the chunk's span from first to last); with
    the default gap, nearby records are fetched in fewer reads, never fewer bytes."""
    _, path = episode("random_access")
    totals = {}
    for gap in (0, 256 * 1024):
        with open_episode(path, coalesce_gap_bytes=gap) as reader:
            table = reader.index.cameras["front"]
            chunks = {table.locations[p].chunk for p in table.display}
            assert not any(reader.index.chunks[c].compression for c in chunks)  # the case under test
            last = len(table.display) - 1
            _, counters = reader.frames({"front": [3, last // 2, last - 3]}, decode=False)
            totals[gap] = counters
    exact, coalesced = totals[0], totals[256 * 1024]
    assert exact.bytes_read == exact.bytes_used
    assert exact.reads > coalesced.reads >= 1
    assert coalesced.bytes_read > exact.bytes_read


def test_a_camera_or_topic_the_episode_lacks_is_refused_by_name(episode: Episode) -> None:
    """A misspelt camera used to escape as a bare KeyError, and a misspelt topic (or a topic given as one
    string, read as one topic per character) came back as an empty list of messages, like a quiet window."""
    _, path = episode("random_access")
    with open_episode(path) as reader:
        t_ns = reader.start_ns + NS
        with pytest.raises(
            SampleArgumentError, match=r"camera 'nope' .* one of this episode's: front, wrist"
        ):
            reader.sample(t_ns, cameras=["nope"])
        with pytest.raises(SampleArgumentError, match=r"topic '/robot/joint_state' .* /robot/action, "):
            reader.sample(t_ns, topics=["/robot/joint_state"])
        with pytest.raises(SampleArgumentError, match="topic '/cam/front/h264'"):  # protobuf, not JSON
            reader.sample(t_ns, topics=["/cam/front/h264"])
        with pytest.raises(SampleArgumentError, match=r"topics '/robot/action' .* not one string"):
            reader.sample(t_ns, topics="/robot/action")
        with pytest.raises(SampleArgumentError, match="camera 'nope'"):
            reader.frames({"nope": [0]})
        assert reader.sample(t_ns, topics=["/robot/action"], cameras=["front"]).proprio["/robot/action"]


def test_sample_options_and_frame_indexes_out_of_range_are_refused(episode: Episode) -> None:
    """An infinite or NaN window or stride used to escape as OverflowError/ValueError from turning it into
    nanoseconds, frames_per_camera 0 or less gave every camera an empty list of frames, a negative stride
    frames from after t, and a negative display index silently counted from the last frame."""
    _, path = episode("random_access")
    with open_episode(path) as reader:
        t_ns = reader.start_ns + NS
        cases: list[tuple[dict[str, Any], str]] = [
            ({"window_s": float("inf")}, "window_s inf"),
            ({"window_s": float("nan")}, "window_s nan"),
            ({"frame_stride_s": float("inf")}, "frame_stride_s inf"),
            ({"frame_stride_s": -0.1}, "frame_stride_s -0.1"),
            ({"frames_per_camera": 0}, "frames_per_camera 0"),
            ({"frames_per_camera": -1}, "frames_per_camera -1"),
        ]
        for options, named in cases:
            with pytest.raises(SampleArgumentError, match=f"{named} is not allowed"):
                reader.sample(t_ns, **options)
        last = len(reader.index.cameras["front"].display) - 1
        for k in (-1, last + 1):
            with pytest.raises(SampleArgumentError, match=rf"camera front: display index {k} .* 0\.\.{last}"):
                reader.frames({"front": [k]})
        frames, _ = reader.frames({"front": [0, last]})
        shown = reader.index.cameras["front"].display_pts
        assert [f.stamp_ns for f in frames["front"]] == [shown[0], shown[-1]]
