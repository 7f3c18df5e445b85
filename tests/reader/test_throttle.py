"""The node-wide token bucket: processes that open the same bucket share its rate."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path
from typing import Any

from pipeline.reader.throttle import ThrottledFile, TokenBucket

RATE = 4 * 2**20


def _read_through(bucket: TokenBucket, path: str, together: Any, seconds: Any) -> None:
    """Wait until both processes are ready, then read the whole file through the bucket."""
    together.wait(timeout=120)
    started = time.monotonic()
    with ThrottledFile(open(path, "rb"), bucket) as fh:
        while fh.read(64 * 1024):
            pass
    seconds.put((fh.bytes_read, time.monotonic() - started))


def test_two_processes_share_one_cap(tmp_path: Path) -> None:
    data = tmp_path / "blob"
    size = 2 * 2**20
    data.write_bytes(bytes(size))
    bucket = TokenBucket(RATE, f"test-{time.monotonic_ns()}", burst_bytes=64 * 1024)
    bucket.reset()
    spawn = multiprocessing.get_context("spawn")
    together, seconds = spawn.Barrier(2), spawn.Queue()
    readers = [
        spawn.Process(target=_read_through, args=(bucket, str(data), together, seconds)) for _ in range(2)
    ]
    try:
        for reader in readers:
            reader.start()
        results = [seconds.get(timeout=180) for _ in readers]
        for reader in readers:
            reader.join(timeout=60)
    finally:
        bucket.reset()
    assert [got for got, _ in results] == [size, size]
    # 4 MiB at once through one 4 MiB/s bucket: each read takes about a second, not the half second a
    # private bucket each would give
    assert all(0.85 < elapsed < 5.0 for _, elapsed in results), results


def test_reads_are_counted_and_uncapped_without_a_bucket(tmp_path: Path) -> None:
    data = tmp_path / "blob"
    data.write_bytes(b"x" * 1000)
    with ThrottledFile(open(data, "rb"), None) as fh:
        fh.seek(100)
        assert fh.read(50) == b"x" * 50 and fh.tell() == 150
        assert (fh.bytes_read, fh.reads) == (50, 1)
