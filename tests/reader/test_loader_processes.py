"""The sample loader on worker processes: the samples the thread loader gives, frames handed back in shared
memory and freed (with the last array, or on close), a dead worker named, per-process readers bounded."""

from __future__ import annotations

import gc
import os
import shutil
import signal
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
from reader_helpers import NS, assert_same_samples, damage_frames, loader_rows

from pipeline.processes import WorkerCrashedError
from pipeline.reader import (
    EpisodeRow,
    LoaderWorkerDiedError,
    SampleLoader,
    SampleLoaderError,
    SampleReadError,
    open_episode,
    shared,
)

pytestmark = pytest.mark.skipif(not shared.SHM_DIR.is_dir(), reason="lists shared memory in /dev/shm")


def _segments(prefix: str) -> list[str]:
    """Shared-memory segments with a name (made by a worker, not taken yet) under ``prefix``."""
    return sorted(entry.name for entry in shared.SHM_DIR.iterdir() if entry.name.startswith(prefix))


def _mapped(prefix: str) -> int:
    """This process's mappings of segments under ``prefix`` (named or not)."""
    with open("/proc/self/maps") as maps:
        return sum(f"{shared.SHM_DIR}/{prefix}" in line for line in maps)


def _wait_for(count: int, prefix: str, timeout_s: float = 60.0) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while len(found := _segments(prefix)) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return found


def test_worker_processes_yield_what_the_thread_loader_does(path: Path, span: tuple[int, int]) -> None:
    """Batches of 5 on 2 processes are read as parts of 3 and 2 samples; the samples are the same as one
    thread reads in line: times, state and actions, frame stamps and pixels."""

    def read(processes: bool, workers: int, prefetch: int) -> tuple[list, SampleLoader]:
        with SampleLoader(
            loader_rows(path, span),
            5,
            workers=workers,
            prefetch=prefetch,
            seed=5,
            frames_per_camera=3,
            processes=processes,
        ) as loader:
            loader.open_readers()
            return [batch for _, batch in zip(range(4), loader, strict=False)], loader

    (in_line, _), (pooled, loader) = read(False, 1, 0), read(True, 2, 2)
    assert_same_samples(in_line, pooled)
    image = pooled[0][0].frames["front"][0].image
    assert image.flags.writeable and not image.flags.owndata  # a view of the shared memory
    # what the processes read reaches the training process's totals (the 4 taken, and what was in flight)
    totals = loader.totals()
    assert 20 <= totals.samples <= 20 + 2 * 5
    assert totals.frames_returned == totals.samples * 3 * len(in_line[0][0].frames)


def test_frames_come_in_shared_memory_and_are_freed(path: Path, span: tuple[int, int]) -> None:
    loader = SampleLoader(loader_rows(path, span), 4, workers=2, prefetch=2, seed=3, processes=True)
    prefix = loader.segment_prefix
    batches = iter(loader)
    batch = next(batches)
    image = batch[0].frames["front"][0].image
    kept = image.copy()
    # two batches prefetched, each read as two parts of two samples: one segment per part, not taken
    assert len(_wait_for(4, prefix)) == 4
    assert _mapped(prefix) == 2  # the taken batch's two parts: mapped here, their names already gone
    loader.close()
    assert _segments(prefix) == []  # what nobody took is freed on close
    assert np.array_equal(image, kept)  # what was taken stays as it was, the loader closed or not
    assert _mapped(prefix) == 2
    del batch, batches, image
    gc.collect()
    assert _mapped(prefix) == 0  # gone with the last array


def test_a_worker_process_that_dies_is_named(path: Path, span: tuple[int, int]) -> None:
    # parts of 32 samples: the batches in flight are still being read when the worker is killed
    loader = SampleLoader(loader_rows(path, span), 64, workers=2, prefetch=2, seed=1, processes=True)
    with loader:
        batches = iter(loader)
        next(batches)
        pids = loader.worker_pids()
        assert len(pids) == 2 and os.getpid() not in pids
        os.kill(pids[0], signal.SIGKILL)
        with pytest.raises(LoaderWorkerDiedError) as caught:
            for _ in range(3):
                next(batches)
        error = caught.value
        assert isinstance(error, SampleLoaderError) and isinstance(error.__cause__, WorkerCrashedError)
        assert f"pid {pids[0]} killed by SIGKILL" in str(error)
        assert len(error.rows) == 64 and set(error.uris) == {str(path)}
        assert str(path) in str(error)
        # a new iteration starts fresh workers
        assert len(next(iter(loader))) == 64
        assert pids[0] not in loader.worker_pids()
    assert _segments(loader.segment_prefix) == []


def test_a_sample_that_fails_in_a_worker_names_its_row(
    path: Path, span: tuple[int, int], tmp_path: Path
) -> None:
    t_ns = span[0] + NS
    bad = damage_frames(path, tmp_path / "episode.mcap", "front", t_ns)
    rows = [EpisodeRow(str(path), "good", t_ns, t_ns), EpisodeRow(str(bad), "bad", t_ns, t_ns)]
    loader = SampleLoader(
        rows, 4, workers=2, prefetch=1, seed=0, frames_per_camera=1, verify=False, processes=True
    )
    with loader, pytest.raises(SampleReadError) as caught:
        for _ in zip(range(10), loader, strict=False):
            pass
    assert (caught.value.row, caught.value.uri) == (1, str(bad))
    assert f"row 1 ({bad}): sample at {t_ns} ns" in str(caught.value)
    assert _segments(loader.segment_prefix) == []  # the parts read beside it were freed


def test_each_worker_process_keeps_at_most_max_open_readers(path: Path, tmp_path: Path) -> None:
    uris = []
    for k in range(3):
        copy = tmp_path / f"ep{k}" / "episode.mcap"
        copy.parent.mkdir()
        shutil.copy(path, copy)
        uris.append(str(copy))
    with SampleLoader(
        uris, 4, workers=2, prefetch=0, seed=2, decode=False, max_open_readers=1, processes=True
    ) as loader:
        loader.open_readers()
        for _, batch in zip(range(8), loader, strict=False):
            assert len(batch) == 4
            assert all(f.image is None for s in batch for fs in s.frames.values() for f in fs)
            for pid in loader.worker_pids():  # prefetch 0: nothing in flight between batches
                held = [f.path for f in psutil.Process(pid).open_files() if f.path.startswith(str(tmp_path))]
                assert len(held) <= 1
        assert loader.readers_closed > 0  # evicted in the workers, counted here
        assert loader.totals().samples == 32
        assert _segments(loader.segment_prefix) == []  # nothing decoded, nothing shared


def test_a_worker_process_names_an_unreadable_row(tmp_path: Path) -> None:
    missing = tmp_path / "gone" / "episode.mcap"
    with SampleLoader([missing], 1, workers=1, prefetch=0, processes=True) as loader:
        with pytest.raises(SampleReadError) as caught:
            loader.open_readers()
        assert str(missing) in str(caught.value)
        with pytest.raises(SampleReadError) as caught:
            next(iter(loader))
        assert caught.value.row == 0 and str(missing) in str(caught.value)


def test_exported_frames_come_back_identical_and_leftovers_are_swept(
    path: Path, span: tuple[int, int]
) -> None:
    prefix = f"sluice-test-{os.getpid()}-"
    with open_episode(path) as reader:
        sample = reader.sample(span[0] + NS)
        again = reader.sample(span[0] + NS)
    want = {camera: [f.image.copy() for f in frames] for camera, frames in sample.frames.items()}
    exported = shared.export_frames([sample], prefix)
    assert exported is not None and _segments(prefix) == [exported.name]
    assert all(f.image is None for frames in sample.frames.values() for f in frames)
    shared.import_frames([sample], exported)
    assert _segments(prefix) == []  # the name goes when the frames are taken
    for camera, images in want.items():
        for frame, image in zip(sample.frames[camera], images, strict=True):
            assert frame.image.shape == image.shape and np.array_equal(frame.image, image)
    left = shared.export_frames([again], prefix)  # never taken, as by a worker that died
    assert left is not None and shared.sweep(prefix) == [left.name]
    assert _segments(prefix) == []
    assert shared.export_frames([again], prefix) is None  # its images went with the segment
