"""The content-addressed raw store: verified, write-once, atomic, scrubbable."""

from __future__ import annotations

import hashlib
import os
import stat
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import fsspec
import pytest

from pipeline.store import BLOCK_BYTES, Store

LOCAL = fsspec.filesystem("file")


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("size", [0, 1, BLOCK_BYTES - 1, BLOCK_BYTES, 2 * BLOCK_BYTES + 17])
def test_land_hashes_while_copying_and_publishes_read_only(tmp_path: Path, size: int) -> None:
    data = os.urandom(size)
    src = _write(tmp_path / "src.bin", data)
    store = Store(tmp_path / "store")
    landed = store.land(LOCAL, str(src))
    assert landed.sha256 == hashlib.sha256(data).hexdigest()
    assert landed.size_bytes == size
    assert landed.created
    stored = store.local_raw_path(landed.sha256)
    assert stored.read_bytes() == data
    assert stored.name == landed.sha256 and stored.parent.name == "raw"
    assert not stat.S_IMODE(stored.stat().st_mode) & 0o222, "raw objects are read-only"
    assert list((tmp_path / "store" / "tmp").iterdir()) == [], "staging left behind"


def test_same_bytes_twice_land_once(tmp_path: Path) -> None:
    a = _write(tmp_path / "a.bin", b"same bytes")
    b = _write(tmp_path / "b.bin", b"same bytes")
    store = Store(tmp_path / "store")
    first, second = store.land(LOCAL, str(a)), store.land(LOCAL, str(b))
    assert first.sha256 == second.sha256
    assert (first.created, second.created) == (True, False)
    assert len(list((tmp_path / "store" / "raw").iterdir())) == 1


def test_concurrent_landers_of_the_same_bytes_create_it_once(tmp_path: Path) -> None:
    data = os.urandom(3 * BLOCK_BYTES)
    sources = [_write(tmp_path / f"s{i}.bin", data) for i in range(8)]
    store = Store(tmp_path / "store")
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda p: store.land(LOCAL, str(p)), sources))
    assert sum(r.created for r in results) == 1
    assert {r.sha256 for r in results} == {hashlib.sha256(data).hexdigest()}


def test_source_is_never_modified(tmp_path: Path) -> None:
    data = os.urandom(BLOCK_BYTES + 5)
    src = _write(tmp_path / "src.bin", data)
    before = src.stat()
    Store(tmp_path / "store").land(LOCAL, str(src))
    after = src.stat()
    assert src.read_bytes() == data
    assert (before.st_mtime_ns, before.st_size, before.st_ino) == (after.st_mtime_ns, after.st_size, after.st_ino)


def test_scrub_reports_a_flipped_bit_and_a_missing_object(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    good = store.land(LOCAL, str(_write(tmp_path / "g", os.urandom(1000))))
    bad = store.land(LOCAL, str(_write(tmp_path / "b", os.urandom(1000))))
    gone = store.land(LOCAL, str(_write(tmp_path / "m", os.urandom(10))))
    path = store.local_raw_path(bad.sha256)
    path.chmod(0o644)
    raw = bytearray(path.read_bytes())
    raw[500] ^= 0x01
    path.write_bytes(bytes(raw))
    store.local_raw_path(gone.sha256).unlink()
    findings = {
        f.sha256: f.problem
        for f in store.scrub([(x.sha256, x.size_bytes) for x in (good, bad, gone)])
    }
    assert findings == {bad.sha256: "hash", gone.sha256: "missing"}


def test_memory_store_lands_through_fsspec(tmp_path: Path) -> None:
    """A non-local fsspec store (memory://) goes through the same code path as s3:// would."""
    src = _write(tmp_path / "src.bin", b"abc" * 1000)
    store = Store("memory://sluice-test-store")
    landed = store.land(LOCAL, str(src))
    assert landed.uri.startswith("memory://")
    with store.open_raw(landed.sha256) as f:
        assert f.read() == b"abc" * 1000
    assert store.land(LOCAL, str(src)).created is False
