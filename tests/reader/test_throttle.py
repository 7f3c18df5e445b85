"""The node-wide token bucket: processes that open the same bucket share its rate."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

from pipeline.reader.throttle import ThrottledFile, TokenBucket

RATE = 4 * 2**20


def _read_through(bucket: TokenBucket, path: str, start_at: float) -> tuple[int, float]:
    """Wait for the common start (CLOCK_MONOTONIC is one clock for the node), then read the file."""
    time.sleep(max(0.0, start_at - time.monotonic()))
    started = time.monotonic()
    with ThrottledFile(open(path, "rb"), bucket) as fh:
        got = 0
        while chunk := fh.read(64 * 1024):
            got += len(chunk)
    return got, time.monotonic() - started


def test_two_processes_share_one_cap(tmp_path: Path) -> None:
    data = tmp_path / "blob"
    size = 2 * 2**20
    data.write_bytes(bytes(size))
    bucket = TokenBucket(RATE, f"test-{time.monotonic_ns()}", burst_bytes=64 * 1024)
    bucket.reset()
    try:
        with multiprocessing.get_context("spawn").Pool(2) as pool:
            start_at = time.monotonic() + 5.0  # both processes spawned and imported by then
            results = pool.starmap(_read_through, [(bucket, str(data), start_at)] * 2)
    finally:
        bucket.reset()
    assert [got for got, _ in results] == [size, size]
    # 4 MiB at once through one 4 MiB/s bucket: each read takes about a second, not the half second a
    # private bucket each would give
    assert all(0.85 < seconds < 3.0 for _, seconds in results), results


def test_reads_are_counted_and_uncapped_without_a_bucket(tmp_path: Path) -> None:
    data = tmp_path / "blob"
    data.write_bytes(b"x" * 1000)
    with ThrottledFile(open(data, "rb"), None) as fh:
        fh.seek(100)
        assert fh.read(50) == b"x" * 50 and fh.tell() == 150
        assert (fh.bytes_read, fh.reads) == (50, 1)
