"""The sample loader: reproducible draws, the asked batches and samples, prefetch that changes nothing but
timing, one reader per thread, clip rows refused or skipped, threads stopped on close."""

from __future__ import annotations

import hashlib
import logging
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import av
import psutil
import pyarrow as pa
import pytest
import zstandard
from reader_helpers import (
    assert_same_samples,
    batch_key,
    damage_frames,
    damage_state_chunk,
    loader_rows,
    without_cameras,
)

from pipeline.errors import SluiceError
from pipeline.manifest import format as mf
from pipeline.manifest import open_manifest
from pipeline.reader import (
    EpisodeIndexError,
    EpisodeReader,
    EpisodeRow,
    LoaderArgumentError,
    LoaderClosedError,
    SampleLoader,
    SampleReadError,
    UnsupportedRowsError,
)
from pipeline.reader.verify import EpisodeIntegrityError

NS = 1_000_000_000


def _manifest_table(rows: list[tuple[str, str, int, int]]) -> pa.Table:
    n = len(rows)
    columns = {
        mf.EPISODE_ID: [r[0] for r in rows],
        mf.URI: [r[1] for r in rows],
        mf.START_NS: [r[2] for r in rows],
        mf.END_NS: [r[3] for r in rows],
        mf.DURATION_S: [(r[3] - r[2]) / NS for r in rows],
        mf.VENDOR: ["acme"] * n,
        **{name: [None] * n for name in mf.QUALITY_SCORE_COLUMNS},
        mf.SPLIT: ["train"] * n,
        mf.SOURCE_SHA256: ["ab" * 32] * n,
    }
    return pa.table(columns)


def test_the_same_seed_draws_the_same_samples(path: Path, span: tuple[int, int]) -> None:
    def first(seed: int, batches: int = 3) -> list[list[tuple[int, int]]]:
        with SampleLoader(
            loader_rows(path, span), 4, workers=1, prefetch=0, seed=seed, decode=False
        ) as loader:
            got = [batch_key(batch) for _, batch in zip(range(batches), loader, strict=False)]
            # the rows drawn are those the seed gives, known without reading anything
            assert [[row for row, _ in batch] for batch in got] == [
                [row for row, _ in draws] for draws in loader.draws(batches)
            ]
            return got

    once, again, other = first(11), first(11), first(12)
    assert once == again
    assert once != other
    assert {row for batch in once for row, _ in batch} == {0, 1}  # both rows drawn in 12 samples


def test_batches_and_samples_are_the_size_asked(path: Path, span: tuple[int, int]) -> None:
    rows = loader_rows(path, span)
    window_s, frames, stride_s = 0.5, 3, 0.3  # the frames reach further back (0.6 s) than the window
    with SampleLoader(
        rows,
        5,
        workers=2,
        prefetch=1,
        seed=3,
        window_s=window_s,
        frames_per_camera=frames,
        frame_stride_s=stride_s,
    ) as loader:
        batches = [batch for _, batch in zip(range(3), loader, strict=False)]
    for batch in batches:
        assert len(batch) == 5
        for index, sample in zip(batch.rows, batch, strict=True):
            row = rows[index]
            lo = span[0] if row.start_ns is None else row.start_ns
            hi = span[1] if row.end_ns is None else row.end_ns
            assert lo + int(0.6 * NS) <= sample.t_ns <= hi  # room for the oldest frame inside the row
            assert set(sample.frames) == {"front", "wrist_left", "wrist_right"}
            for shown in sample.frames.values():
                assert len(shown) == frames
                assert all(f.image is not None and f.image.shape == (96, 128, 3) for f in shown)
                assert all(f.stamp_ns <= sample.t_ns for f in shown)
            for messages in sample.proprio.values():
                assert messages
                assert all(sample.t_ns - window_s * NS < m["stamp_ns"] <= sample.t_ns for m in messages)


def test_prefetching_on_threads_yields_what_the_synchronous_loader_does(
    path: Path, span: tuple[int, int]
) -> None:
    def read(workers: int, prefetch: int) -> list:
        with SampleLoader(loader_rows(path, span), 3, workers=workers, prefetch=prefetch, seed=5) as loader:
            return [batch for _, batch in zip(range(4), loader, strict=False)]

    synchronous, prefetched = read(1, 0), read(3, 3)
    assert [batch_key(b) for b in synchronous] == [batch_key(b) for b in prefetched]
    assert_same_samples(synchronous, prefetched)


def test_each_worker_thread_has_its_own_readers(path: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy" / "episode.mcap"
    copy.parent.mkdir()
    shutil.copy(path, copy)
    uris = [str(path), copy.as_uri()]  # a plain path and a file:// URI
    with SampleLoader(uris, 4, workers=2, prefetch=2, seed=1, decode=False) as loader:
        loader.open_readers()
        opened = loader.readers_by_thread()
        assert len(opened) == 2
        assert all(name.startswith(loader.thread_name_prefix) for name in opened)
        assert all(set(per_thread) == set(uris) for per_thread in opened.values())
        readers = [id(r) for per_thread in opened.values() for r in per_thread.values()]
        assert len(set(readers)) == 4  # no reader shared between threads
        for _, batch in zip(range(5), loader, strict=False):
            assert len(batch) == 4
        after = loader.readers_by_thread()
        # kept and reused (each thread's dict is in least-recently-used order, which sampling changes)
        assert {
            (name, uri, id(r)) for name, per_thread in after.items() for uri, r in per_thread.items()
        } == {(name, uri, id(r)) for name, per_thread in opened.items() for uri, r in per_thread.items()}
        assert loader.readers_closed == 0  # two files, the default limit: nothing closed
        assert 20 <= loader.totals().samples <= 20 + 2 * 4  # taken, and at most the prefetched batches


def test_clip_rows_are_refused_by_name(path: Path, span: tuple[int, int], tmp_path: Path) -> None:
    clip = "file:///store/derived/transcode/abc/ep-video/clip_001.mp4"
    files = mf.write_manifest(
        _manifest_table([("ep-robot", str(path), *span), ("ep-video", clip, 0, 2 * NS)]), tmp_path / "m"
    )
    manifest = open_manifest(files.ipc_path, rank=0, world_size=1, cache_dir=tmp_path / "cache")
    with pytest.raises(UnsupportedRowsError) as caught:
        SampleLoader(manifest, 2)
    assert isinstance(caught.value, SluiceError)
    assert caught.value.positions == [1]
    assert "row 1 (ep-video)" in str(caught.value) and clip in str(caught.value)
    assert "skip_unsupported=True" in str(caught.value)
    assert not [t for t in threading.enumerate() if t.name.startswith("sluice-loader")]  # nothing started


@pytest.mark.parametrize("processes", [False, True])
def test_a_ranks_errors_name_the_manifest_row_lineage_takes(
    processes: bool, path: Path, span: tuple[int, int], tmp_path: Path
) -> None:
    """Rank 1 of 2 holds manifest rows 3..5: a refused clip row and a file that cannot be read are named by
    their row in the whole manifest (what ``sluice lineage manifest:<ref>:<row>`` takes), not by their
    place in the rank's slice or the loader's rows."""
    clip = "file:///store/derived/transcode/abc/ep-video/clip_001.mp4"
    missing = tmp_path / "gone" / "episode.mcap"
    rows = [(f"ep-{k}", str(path), *span) for k in range(4)] + [
        ("ep-video", clip, 0, 2 * NS),
        ("ep-gone", str(missing), *span),
    ]
    files = mf.write_manifest(_manifest_table(rows), tmp_path / "m")
    rank1 = open_manifest(files.ipc_path, rank=1, world_size=2, cache_dir=tmp_path / "cache")
    assert (rank1.row_start, rank1.rows) == (3, 3)
    with pytest.raises(UnsupportedRowsError) as refused:
        SampleLoader(rank1, 2)
    assert refused.value.positions == [4]
    assert "manifest row 4 (ep-video)" in str(refused.value)
    with (
        SampleLoader(rank1, 2, workers=1, prefetch=0, skip_unsupported=True, processes=processes) as loader,
        pytest.raises(SampleReadError) as unread,
    ):
        assert [loader.source_row(i) for i in range(len(loader))] == [3, 5]
        loader.open_readers()
        for _ in zip(range(20), loader, strict=False):
            pass
    assert (unread.value.row, unread.value.uri) == (5, str(missing))
    assert f"manifest row 5 ({missing})" in str(unread.value)
    # a plain table is numbered from 0, and called rows
    with pytest.raises(UnsupportedRowsError, match=r"(?<!manifest )row 1 \(ep-video\)"):
        SampleLoader(_manifest_table([rows[0], rows[4]]), 2)


def test_a_rank_holding_clips_only_is_told_why_it_has_nothing_to_read(
    path: Path, span: tuple[int, int], tmp_path: Path
) -> None:
    clips = [(f"v{k}", f"file:///store/v/clip_{k:03d}.mp4", 0, NS) for k in range(2)]
    files = mf.write_manifest(_manifest_table([("r", str(path), *span), *clips]), tmp_path / "m")
    rank1 = open_manifest(files.ipc_path, rank=1, world_size=2, cache_dir=tmp_path / "cache")
    with pytest.raises(LoaderArgumentError) as caught:
        SampleLoader(rank1, 2, skip_unsupported=True)
    said = str(caught.value)
    assert "rank 1 of 2: manifest rows 2..3 of split train (1 rows)" in said, said
    assert "kind = 'mcap'" in said, said


def test_clip_rows_are_skipped_when_asked(
    path: Path, span: tuple[int, int], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clip = str(tmp_path / "clip_000.MP4")
    table = _manifest_table(
        [("v", clip, 0, NS), ("r", str(path), *span), ("v", clip.replace("0.", "1."), 0, NS)]
    )
    files = mf.write_manifest(table, tmp_path / "m")
    manifest = open_manifest(files.ipc_path, rank=0, world_size=1, cache_dir=tmp_path / "cache")
    with caplog.at_level(logging.WARNING, logger="pipeline.reader.loader"):
        loader = SampleLoader(manifest, 3, workers=1, prefetch=0, skip_unsupported=True, decode=False)
    with loader:
        assert "left out 2 of 3 rows" in caplog.text
        assert len(loader) == 1 and loader.rows == [EpisodeRow(str(path), "r", *span)]
        batch = next(iter(loader))
        assert batch.rows == [0, 0, 0] and len(batch) == 3


def test_close_stops_the_threads_and_closes_the_readers(path: Path) -> None:
    loader = SampleLoader([path], 2, workers=2, prefetch=3, seed=0, decode=False)
    batches = iter(loader)
    next(batches)  # leaves prefetched batches in flight
    readers = [r for per_thread in loader.readers_by_thread().values() for r in per_thread.values()]
    assert readers and any(t.name.startswith(loader.thread_name_prefix) for t in threading.enumerate())
    loader.close()
    assert not [t for t in threading.enumerate() if t.name.startswith(loader.thread_name_prefix)]
    for reader in readers:  # closed: its file can no longer be read
        with pytest.raises(ValueError, match="closed"):
            reader.sample(reader.end_ns, decode=False)
    assert loader.readers_by_thread() == {}
    with pytest.raises(LoaderClosedError):
        next(batches)
    with pytest.raises(LoaderClosedError):
        iter(loader).__next__()
    loader.close()  # idempotent


def test_an_unreadable_row_names_its_file(tmp_path: Path) -> None:
    missing = tmp_path / "gone" / "episode.mcap"
    with (
        SampleLoader([missing], 1, workers=1, prefetch=0) as loader,
        pytest.raises(SampleReadError) as caught,
    ):
        next(iter(loader))
    assert str(missing) in str(caught.value)


def _copies(path: Path, folder: Path, count: int) -> list[str]:
    uris = []
    for k in range(count):
        copy = folder / f"ep{k}" / "episode.mcap"
        copy.parent.mkdir(parents=True)
        shutil.copy(path, copy)
        uris.append(str(copy))
    return uris


def test_each_thread_keeps_at_most_max_open_readers(path: Path, tmp_path: Path) -> None:
    uris = _copies(path, tmp_path, 3)

    def open_episode_files() -> list[str]:
        return [f.path for f in psutil.Process().open_files() if f.path.startswith(str(tmp_path))]

    seen: dict[int, EpisodeReader] = {}
    with SampleLoader(uris, 4, workers=2, prefetch=0, seed=2, decode=False, max_open_readers=1) as loader:
        loader.open_readers()  # warms the first file only, on each thread
        warmed = loader.readers_by_thread()
        assert len(warmed) == 2 and all(list(per) == uris[:1] for per in warmed.values())
        for _, batch in zip(range(8), loader, strict=False):
            assert len(batch) == 4
            # prefetch 0: nothing is in flight between batches, so this is every file held open
            opened = loader.readers_by_thread()
            assert all(len(per_thread) <= 1 for per_thread in opened.values())
            assert len(open_episode_files()) <= 2
            for per_thread in opened.values():
                seen.update({id(r): r for r in per_thread.values()})
        current = {id(r) for per_thread in loader.readers_by_thread().values() for r in per_thread.values()}
        evicted = [r for key, r in seen.items() if key not in current]
        assert evicted and loader.readers_closed >= len(evicted)
        assert all(r.closed for r in evicted)
        assert loader.totals().samples == 32  # samples of evicted readers still counted
    assert not open_episode_files()


def test_max_open_readers_must_be_positive(path: Path) -> None:
    with pytest.raises(LoaderArgumentError, match="max_open_readers 0"):
        SampleLoader([path], 1, max_open_readers=0)


@pytest.mark.parametrize("damage", ["state chunk", "frames"])
def test_a_damaged_file_is_refused_before_its_first_sample(
    damage: str, path: Path, span: tuple[int, int], tmp_path: Path
) -> None:
    """Damage that decodes without an error (zeroed frames) or with one (a state chunk) is found by the
    file's CRCs when it is opened, and the error names the row and the file."""
    t_ns = span[0] + NS
    bad = tmp_path / "bad" / "episode.mcap"
    bad.parent.mkdir()
    (damage_state_chunk if damage == "state chunk" else lambda p, b: damage_frames(p, b, "front", t_ns))(
        path, bad
    )
    rows = [EpisodeRow(str(path), "good", t_ns, t_ns), EpisodeRow(str(bad), "bad", t_ns, t_ns)]
    with (
        SampleLoader(rows, 4, workers=2, prefetch=0, seed=0, frames_per_camera=1) as loader,
        pytest.raises(SampleReadError) as caught,
    ):
        for _ in zip(range(10), loader, strict=False):
            pass
    assert (caught.value.row, caught.value.uri) == (1, str(bad))
    assert isinstance(caught.value.__cause__, EpisodeIntegrityError)
    assert f"episode {bad}: data section CRC" in str(caught.value)


def test_a_row_digest_is_checked_when_the_rows_carry_one(
    path: Path, span: tuple[int, int], tmp_path: Path
) -> None:
    """A manifest row's uri_sha256 is the reference: a file rewritten whole, CRCs and all, is refused."""
    copy = tmp_path / "copy" / "episode.mcap"
    copy.parent.mkdir()
    copy.write_bytes(path.read_bytes())
    good = hashlib.sha256(copy.read_bytes()).hexdigest()
    rows = [EpisodeRow(str(copy), "e", uri_sha256=good)]
    with SampleLoader(rows, 2, workers=1, prefetch=0) as loader:
        assert len(next(iter(loader))) == 2
        assert loader.readers_by_thread()  # opened, and checked by sha256
        (reader,) = next(iter(loader.readers_by_thread().values())).values()
        assert reader.verified_by == "sha256"
    other = "0" * 64
    with (
        SampleLoader([EpisodeRow(str(copy), "e", uri_sha256=other)], 2, workers=1, prefetch=0) as loader,
        pytest.raises(SampleReadError, match=f"sha256 is {good}, the catalog records {other}"),
    ):
        next(iter(loader))


@pytest.mark.parametrize("damage", ["state chunk", "frames"])
def test_a_sample_that_fails_names_its_row_uri_and_time(
    damage: str, path: Path, span: tuple[int, int], tmp_path: Path
) -> None:
    """Without the check (verify=False), damage found while sampling names the row, uri and time."""
    t_ns = span[0] + NS
    bad = tmp_path / "bad" / "episode.mcap"
    bad.parent.mkdir()
    if damage == "state chunk":
        damage_state_chunk(path, bad)
        cause: type[Exception] = zstandard.ZstdError
    else:
        damage_frames(path, bad, "front", t_ns)
        cause = av.error.InvalidDataError
    # row 1 samples exactly at t_ns: its window is that one instant
    rows = [EpisodeRow(str(path), "good", t_ns, t_ns), EpisodeRow(str(bad), "bad", t_ns, t_ns)]
    with (
        SampleLoader(rows, 4, workers=2, prefetch=0, seed=0, frames_per_camera=1, verify=False) as loader,
        pytest.raises(SampleReadError) as caught,
    ):
        for _ in zip(range(10), loader, strict=False):
            pass
    error = caught.value
    assert (error.row, error.uri) == (1, str(bad))
    assert f"row 1 ({bad}): sample at {t_ns} ns" in str(error)
    assert isinstance(error.__cause__, cause)


def test_a_damaged_file_names_its_row_when_opened(path: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad" / "episode.mcap"
    bad.parent.mkdir()
    bad.write_bytes(path.read_bytes()[:5000])
    with (
        SampleLoader([path, bad], 1, workers=1, prefetch=0) as loader,
        pytest.raises(SampleReadError) as caught,
    ):
        loader.open_readers()
    assert (caught.value.row, caught.value.uri) == (1, str(bad))
    assert isinstance(caught.value.__cause__, EpisodeIndexError)
    assert "cannot open the episode" in str(caught.value)


def test_an_episode_without_cameras_is_sampled(path: Path, tmp_path: Path) -> None:
    reduced = without_cameras(path, tmp_path / "episode.mcap")
    with SampleLoader([reduced], 3, workers=1, prefetch=0, window_s=0.5) as loader:
        batch = next(iter(loader))
    assert len(batch) == 3
    for sample in batch:
        assert sample.frames == {}
        assert sample.proprio and all(sample.proprio.values())


@pytest.mark.parametrize("option", ["window_s", "frame_stride_s"])
@pytest.mark.parametrize("value", [float("inf"), float("nan"), -1.0, "2"])
def test_seconds_must_be_finite_and_not_negative(path: Path, option: str, value: object) -> None:
    """Refused when the loader is made, by name: an infinite window used to escape as an OverflowError from
    turning it into nanoseconds, a string as a TypeError from comparing it."""
    options: dict[str, Any] = {option: value}
    with pytest.raises(LoaderArgumentError, match=rf"{option} .* expected a finite number of seconds >= 0"):
        SampleLoader([path], 1, **options)


@pytest.mark.parametrize("option", ["topics", "cameras"])
def test_topics_or_cameras_as_one_string_are_refused_when_made(path: Path, option: str) -> None:
    """One string used to be read as one name per character: cameras failed on the first batch with
    KeyError('f'), topics gave every sample empty message lists."""
    options: dict[str, Any] = {option: "front"}
    with pytest.raises(LoaderArgumentError, match=rf"{option} 'front' .* a list of names"):
        SampleLoader([path], 1, **options)


def test_a_camera_the_episode_lacks_names_the_row_and_the_cameras(path: Path) -> None:
    with SampleLoader([path], 1, cameras=["nope"]) as loader, pytest.raises(SampleReadError) as caught:
        next(iter(loader))
    assert "camera 'nope' is not allowed; expected one of this episode's: front, wrist_left" in str(
        caught.value
    )


@pytest.mark.parametrize(
    ("source", "named"),
    [
        (lambda p: [{"uri": str(p)}, {"uri": str(p), "start_ns": "5"}], "row 1"),
        (lambda p: [{"uri": str(p), "end_ns": 2**70}], "row 0"),
        (
            lambda p: pa.table({"uri": [str(p)], "start_ns": [1.5]}),
            "source column 'start_ns' of type 'double'",
        ),
        (lambda p: pa.table({"uri": [str(p)], "end_ns": ["a"]}), "source column 'end_ns' of type 'string'"),
    ],
    ids=["string start", "end past int64", "fractional start column", "string end column"],
)
def test_row_times_that_are_not_int64_nanoseconds_are_refused_when_made(
    path: Path, source: Callable[[Path], object], named: str
) -> None:
    """They used to escape from Arrow's conversion as ArrowInvalid or OverflowError."""
    with pytest.raises(LoaderArgumentError, match=rf"{named} .* start_ns and end_ns as integer nanoseconds"):
        SampleLoader(source(path), 1)
