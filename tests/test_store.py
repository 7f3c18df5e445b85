"""The content-addressed raw store: verified, write-once, atomic, scrubbable."""

from __future__ import annotations

import hashlib
import mmap
import os
import stat
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import fsspec
import google_crc32c
import pytest
from fsspec.implementations.memory import MemoryFileSystem

from pipeline import staging
from pipeline.errors import StoreError
from pipeline.staging import BLOCK_BYTES, VERIFY_PIECE_BYTES, Copied, _verify_pieces
from pipeline.store import Store

LOCAL = fsspec.filesystem("file")


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
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
    assert (before.st_mtime_ns, before.st_size, before.st_ino) == (
        after.st_mtime_ns,
        after.st_size,
        after.st_ino,
    )


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
        f.sha256: f.problem for f in store.scrub([(x.sha256, x.size_bytes) for x in (good, bad, gone)])
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


def test_concurrent_landers_of_different_bytes_keep_their_buffers_apart(tmp_path: Path) -> None:
    """Landers share a pool of reused buffers: each must hash and store only its own bytes."""
    blobs = [os.urandom(BLOCK_BYTES + 4096 * i + i) for i in range(6)]
    sources = [_write(tmp_path / f"s{i}.bin", blob) for i, blob in enumerate(blobs)]
    store = Store(tmp_path / "store")
    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(lambda p: store.land(LOCAL, str(p)), sources))
    for blob, landed in zip(blobs, results, strict=True):
        assert landed.sha256 == hashlib.sha256(blob).hexdigest()
        assert store.local_raw_path(landed.sha256).read_bytes() == blob


@pytest.mark.parametrize("verify", ["sample", "full"])
def test_both_verify_modes_land_the_same_object(
    tmp_path: Path, verify: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = os.urandom(40 * VERIFY_PIECE_BYTES + 17)
    reread: list[list[int]] = []
    real = staging._verify_pieces

    def recording(path: str, copied: staging.Copied, direct: bool, buf: object) -> None:
        reread.append(sorted(copied.pieces))
        real(path, copied, direct, buf)  # type: ignore[arg-type]

    monkeypatch.setattr(staging, "_verify_pieces", recording)
    store = Store(tmp_path / "store", verify=verify)  # type: ignore[arg-type]
    landed = store.land(LOCAL, str(_write(tmp_path / "src.bin", data)))
    assert store.local_raw_path(landed.sha256).read_bytes() == data
    every = [k * VERIFY_PIECE_BYTES for k in range(41)]
    if verify == "full":
        assert reread == [every]
    else:  # the first and the last MiB always, about 1 in 16 of the others (39 of them: none to 12 here)
        (pieces,) = reread
        assert {0, every[-2], every[-1]} <= set(pieces) and len(pieces) < len(every) - 20


def test_unknown_verify_mode_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match=r"'quick'.*sample, full"):
        Store(tmp_path / "store", verify="quick")  # type: ignore[arg-type]


#: A source to grow once the copy has started: a vendor still writing the file we land.
_GROW: list[Path] = []


def _grow_when_staging_opens(event: str, args: tuple[Any, ...]) -> None:
    # The staging file (``<store>/tmp/<32 hex lineage>.<32 hex>``) is opened after the source was opened and its
    # state taken.
    if event == "open" and _GROW and isinstance(args[0], str):
        folder, name = os.path.split(args[0])
        if folder.endswith(f"{os.sep}store{os.sep}tmp") and len(name) == 65 and name[32] == ".":
            with open(_GROW.pop(), "ab") as f:
                f.write(b"late bytes")


#: Audit hooks of single tests (a hook cannot be removed once added, so one dispatcher runs them).
_HOOKS: list[Any] = [_grow_when_staging_opens]
sys.addaudithook(lambda event, args: [hook(event, args) for hook in list(_HOOKS)])


def test_a_local_source_that_changes_while_landing_is_not_published(tmp_path: Path) -> None:
    src = _write(tmp_path / "src.bin", os.urandom(BLOCK_BYTES + 3))
    store = Store(tmp_path / "store")
    _GROW.append(src)
    try:
        with pytest.raises(StoreError, match="changed while it was landed"):
            store.land(LOCAL, str(src))
    finally:
        _GROW.clear()
    for area in ("raw", "tmp"):
        assert list(Path(store.path(area)).iterdir()) == [], f"{area}/ is not empty"


class _GrowsWhenOpened(MemoryFileSystem):
    """An object store whose objects grow as they are opened: a vendor still uploading the one we land."""

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        if mode == "rb":
            stored = self.store[self._strip_protocol(path)]
            stored.seek(0, os.SEEK_END)
            stored.write(b"late bytes")
        return super()._open(path, mode, **kwargs)


@pytest.mark.parametrize("store_url", ["local", "memory://sluice-test-changed-source"])
def test_a_remote_source_that_changes_while_landing_is_not_published(tmp_path: Path, store_url: str) -> None:
    source = _GrowsWhenOpened()
    source.pipe("/drop/src.bin", os.urandom(BLOCK_BYTES + 3))
    store = Store(tmp_path / "store" if store_url == "local" else store_url)
    with pytest.raises(StoreError, match="changed while it was landed"):
        store.land(source, "/drop/src.bin")
    for area in ("raw", "tmp"):
        path = store.path(area)
        assert not store.fs.exists(path) or store.fs.ls(path) == [], f"{area}/ is not empty"


def test_verify_refuses_a_staged_copy_that_reads_back_differently(tmp_path: Path) -> None:
    data = os.urandom(2 * VERIFY_PIECE_BYTES + 100)
    staged = _write(tmp_path / "staged", data)
    pieces = {
        offset: (
            len(data[offset : offset + VERIFY_PIECE_BYTES]),
            google_crc32c.value(data[offset : offset + VERIFY_PIECE_BYTES]),
        )
        for offset in range(0, len(data), VERIFY_PIECE_BYTES)
    }
    copied = Copied(size_bytes=len(data), pieces=pieces)
    buf = mmap.mmap(-1, VERIFY_PIECE_BYTES)
    _verify_pieces(str(staged), copied, direct=True, buf=buf)  # as written: passes
    flipped = bytearray(data)
    flipped[VERIFY_PIECE_BYTES + 5] ^= 0x10
    staged.write_bytes(bytes(flipped))
    with pytest.raises(StoreError, match=f"at byte {VERIFY_PIECE_BYTES}:"):
        _verify_pieces(str(staged), copied, direct=True, buf=buf)
    staged.write_bytes(data[:-1])
    with pytest.raises(StoreError, match=r"bytes, .* were written"):
        _verify_pieces(str(staged), copied, direct=False, buf=buf)


def test_sweep_staging_removes_only_old_abandoned_files(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    landed = store.land(LOCAL, str(_write(tmp_path / "src.bin", b"kept")))
    old = _write(tmp_path / "store" / "tmp" / "killed-lander", b"half a copy")
    fresh = _write(tmp_path / "store" / "tmp" / "live-lander", b"a copy in progress")
    two_hours_ago = time.time() - 7200
    os.utime(old, (two_hours_ago, two_hours_ago))
    removed = store.sweep_staging(older_than_s=3600)
    assert [Path(p).name for p in removed] == ["killed-lander"]
    assert not old.exists() and fresh.exists()
    assert store.local_raw_path(landed.sha256).read_bytes() == b"kept"
    with pytest.raises(StoreError, match="older_than_s=-1"):
        store.sweep_staging(older_than_s=-1)


def test_the_sampled_verify_always_reads_the_first_and_last_mib() -> None:
    import random

    from pipeline.staging import verify_offsets

    mib = VERIFY_PIECE_BYTES
    size = 10 * mib + 1  # the piece holding the last byte is one byte long
    never = random.Random(0)
    never.random = lambda: 1.0  # type: ignore[method-assign]  # a draw that samples nothing
    assert verify_offsets(size, "sample", never) == {0, 9 * mib, 10 * mib}
    assert verify_offsets(size, "full") == {k * mib for k in range(11)}
    assert verify_offsets(1, "sample") == {0}
    sampled = [len(verify_offsets(1024 * mib, "sample", random.Random(seed))) for seed in range(20)]
    assert 40 < sum(sampled) / len(sampled) < 90  # ~1/16 of 1,021 middle pieces, plus the three


def test_a_forked_child_starts_with_its_own_landing_buffers(tmp_path: Path) -> None:
    """The pool's rings are private memory and a forked child forgets them: two processes never fill one."""
    import os

    import fsspec

    from pipeline.staging import _BUFFERS

    source = tmp_path / "src.bin"
    source.write_bytes(os.urandom(3 * VERIFY_PIECE_BYTES))
    Store(tmp_path / "store").land(fsspec.filesystem("file"), str(source))
    assert _BUFFERS._free  # the parent keeps its rings for the next landing
    ring, _ = _BUFFERS._free[0]
    ring[0][:4] = b"PARE"
    pid = os.fork()
    if pid == 0:  # the child: no inherited rings, and its writes stay its own
        ring[0][:4] = b"CHLD"
        os._exit(0 if not _BUFFERS._free else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert ring[0][:4] == b"PARE"


# -- landing opens what discovery checked, never through a link -------------------------------------------


def _drop_with_secret(tmp_path: Path) -> tuple[Path, Path]:
    """A vendor drop holding ``cam/a.mcap``, and a secret outside it."""
    drop = tmp_path / "drop"
    _write(drop / "cam" / "a.mcap", b"vendor bytes")
    secret = _write(tmp_path / "secret", b"root:$6$not-for-the-store")
    return drop, secret


def _assert_nothing_landed(store: Store) -> None:
    for area in ("raw", "tmp"):
        assert list(Path(store.path(area)).iterdir()) == [], f"{area}/ is not empty"


def test_a_symlink_swapped_in_after_discovery_is_refused(tmp_path: Path) -> None:
    from pipeline.beneath import SourceRefusedError
    from pipeline.discover import discover

    drop, secret = _drop_with_secret(tmp_path)
    store = Store(tmp_path / "store")
    (candidate,) = discover(LOCAL, str(drop), settle_s=0).candidates
    target = drop / "cam" / "a.mcap"
    target.unlink()
    target.symlink_to(secret)  # swapped between discovery and landing
    with pytest.raises(SourceRefusedError, match="outside") as refused:
        store.land(LOCAL, candidate.full_path, root=str(drop))
    assert refused.value.why == "outside_root"
    _assert_nothing_landed(store)


def test_a_folder_swapped_for_a_link_while_landing_opens_is_refused(tmp_path: Path) -> None:
    """The race the path check alone loses: the folder becomes a link after it was resolved. The walk opens
    each component without following links, so the link is met and refused, not followed."""
    from pipeline.beneath import SourceRefusedError

    drop, secret = _drop_with_secret(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    _write(elsewhere / "a.mcap", secret.read_bytes())
    store = Store(tmp_path / "store")
    swapped: list[bool] = []

    def swap_when_the_root_opens(event: str, args: tuple[Any, ...]) -> None:
        if event == "open" and args[0] == str(drop) and not swapped:
            swapped.append(True)
            (drop / "cam").rename(tmp_path / "cam-moved")
            (drop / "cam").symlink_to(elsewhere)

    _HOOKS.append(swap_when_the_root_opens)
    try:
        with pytest.raises(SourceRefusedError, match="became a link") as refused:
            store.land(LOCAL, str(drop / "cam" / "a.mcap"), root=str(drop))
    finally:
        _HOOKS.remove(swap_when_the_root_opens)
    assert swapped and refused.value.why == "link"
    _assert_nothing_landed(store)


def test_hard_links_and_fifos_are_refused_by_discovery_and_by_landing(tmp_path: Path) -> None:
    from pipeline.beneath import SourceRefusedError
    from pipeline.discover import discover

    drop, secret = _drop_with_secret(tmp_path)
    os.link(secret, drop / "cam" / "linked.mcap")
    os.mkfifo(drop / "cam" / "pipe.mcap")
    store = Store(tmp_path / "store")
    found = discover(LOCAL, str(drop), settle_s=0)
    assert [c.path for c in found.candidates] == ["cam/a.mcap"]
    assert {p.path: p.why for p in found.passed_over} == {
        "cam/linked.mcap": "hard_link",
        "cam/pipe.mcap": "not_regular",
    }
    for name, why in (("linked.mcap", "hard_link"), ("pipe.mcap", "not_regular")):
        with pytest.raises(SourceRefusedError) as refused:
            store.land(LOCAL, str(drop / "cam" / name), root=str(drop))  # a FIFO does not hang the open
        assert refused.value.why == why
    _assert_nothing_landed(store)
    assert store.land(LOCAL, str(drop / "cam" / "a.mcap"), root=str(drop)).size_bytes == len(b"vendor bytes")


def test_a_link_inside_the_drop_to_a_file_inside_it_is_landed(tmp_path: Path) -> None:
    drop, _ = _drop_with_secret(tmp_path)
    (drop / "latest.mcap").symlink_to(drop / "cam" / "a.mcap")
    landed = Store(tmp_path / "store").land(LOCAL, str(drop / "latest.mcap"), root=str(drop))
    assert landed.sha256 == hashlib.sha256(b"vendor bytes").hexdigest()
    assert landed.source_state["ino"] == (drop / "cam" / "a.mcap").stat().st_ino


def test_an_object_store_landing_removes_the_staging_copies_earlier_landings_of_its_source_left() -> None:
    """An outage longer than the client's retries makes a failed landing's clean-up fail too (see
    tests/cluster/test_s3_faults.py): its retry removes the copy. Another source's copy is not touched."""
    from pipeline.store import staging_lineage

    memory = fsspec.filesystem("memory")
    memory.pipe_file("/sluice-test-lineage-src/a.bin", b"payload a")
    store = Store("memory://sluice-test-lineage-store")
    mine = store.path(f"tmp/{staging_lineage(memory, '/sluice-test-lineage-src/a.bin')}.{'0' * 32}")
    other = store.path(f"tmp/{staging_lineage(memory, '/sluice-test-lineage-src/b.bin')}.{'0' * 32}")
    for leftover in (mine, other):
        store.fs.pipe_file(leftover, b"half a copy")
    landed = store.land(memory, "/sluice-test-lineage-src/a.bin")
    assert landed.sha256 == hashlib.sha256(b"payload a").hexdigest()
    assert sorted(store.fs.ls(store.path("tmp"), detail=False)) == [other]
