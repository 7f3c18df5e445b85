"""The training-side loader: one download per node, memory-mapped zero-copy shards, refusal of bad bytes."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import fsspec
import pyarrow as pa
import pytest
from filelock import FileLock
from hypothesis import given
from hypothesis import strategies as st
from manifest_helpers import record_sums

from pipeline.manifest import cache as manifest_cache
from pipeline.manifest import format as mf
from pipeline.manifest.errors import (
    CacheLockTimeoutError,
    ManifestArgumentError,
    ManifestFetchError,
    ManifestIntegrityError,
    ManifestSchemaError,
    ManifestUnverifiableError,
)
from pipeline.manifest.loader import Manifest, open_manifest, shard_range

REPO = Path(__file__).resolve().parents[2]
MakeTable = Callable[..., pa.Table]

# One rank of a training job: opens the manifest and reports what it holds.
RANK_SCRIPT = r"""
import json, sys
from pipeline.manifest.loader import open_manifest
uri, rank, world_size, cache_dir = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
m = open_manifest(uri, split=None, rank=rank, world_size=world_size, cache_dir=cache_dir)
print(json.dumps({"rank": rank, "row_start": m.row_start, "total_rows": m.total_rows,
                  "downloaded": m.downloaded, "sha256": m.sha256,
                  "episode_ids": m.table.column("episode_id").to_pylist()}))
"""


def _run_ranks(uri: str, world_size: int, cache_dir: Path) -> list[dict[str, object]]:
    """Start every rank at once in its own interpreter, so they race for the cache."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RANK_SCRIPT, uri, str(rank), str(world_size), str(cache_dir)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(world_size)
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def _open_whole(uri: str | Path, cache_dir: Path, **options: Any) -> Manifest:
    """The whole manifest (every split, no sharding across ranks): ``open_manifest`` as the only rank."""
    return open_manifest(uri, split=None, rank=0, world_size=1, cache_dir=cache_dir, **options)


@pytest.fixture
def written(manifest_table: MakeTable, tmp_path: Path) -> tuple[mf.ManifestFiles, pa.Table]:
    table = manifest_table(1000)
    return mf.write_manifest(table, tmp_path / "store"), table


def test_ranks_in_separate_processes_split_the_rows_exactly_once(
    written: tuple[mf.ManifestFiles, pa.Table], tmp_path: Path
) -> None:
    files, table = written
    results = _run_ranks(str(files.ipc_path), 7, tmp_path / "node-cache")  # 1000 rows do not divide by 7
    all_ids = table.column(mf.EPISODE_ID).to_pylist()
    by_rank = sorted(results, key=lambda r: r["rank"])
    assert [id_ for r in by_rank for id_ in r["episode_ids"]] == all_ids  # disjoint, contiguous, complete
    assert [len(r["episode_ids"]) for r in by_rank] == [143] * 6 + [142]
    assert all(r["episode_ids"] == all_ids[r["row_start"] : r["row_start"] + 143] for r in by_rank)
    assert sum(bool(r["downloaded"]) for r in results) == 1
    assert {r["sha256"] for r in results} == {files.ipc_sha256}


def test_only_one_process_per_node_downloads_from_a_remote_store(
    written: tuple[mf.ManifestFiles, pa.Table], tmp_path: Path, http_store: HttpStore
) -> None:
    files, _ = written
    http_store.serve(files.ipc_path)
    results = _run_ranks(http_store.url, 4, tmp_path / "node-cache")
    assert sum(bool(r["downloaded"]) for r in results) == 1
    # the server saw the file's bytes exactly once, however the ranks raced
    assert sum(n for _, n in http_store.served) == files.ipc_size_bytes
    assert sorted(len(r["episode_ids"]) for r in results) == [250] * 4


def test_remote_download_uses_ranged_parts_and_verifies_them(
    written: tuple[mf.ManifestFiles, pa.Table],
    tmp_path: Path,
    http_store: HttpStore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    files, table = written
    monkeypatch.setattr(manifest_cache, "PART_BYTES", 4096)  # many parts from a small file
    http_store.serve(files.ipc_path)
    m = _open_whole(http_store.url, tmp_path / "c", expected_sha256=files.ipc_sha256)
    ranges = [r for r, _ in http_store.served]
    assert len(ranges) == -(-files.ipc_size_bytes // 4096)
    assert all(r is not None for r in ranges)
    assert m.path.read_bytes() == files.ipc_path.read_bytes()
    assert m.table.column(mf.EPISODE_ID).equals(table.column(mf.EPISODE_ID))
    served_before = len(http_store.served)
    again = _open_whole(http_store.url, tmp_path / "c")
    assert not again.downloaded and len(http_store.served) == served_before


def test_a_server_that_ignores_ranges_is_refused(
    written: tuple[mf.ManifestFiles, pa.Table],
    tmp_path: Path,
    http_store: HttpStore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    files, _ = written
    monkeypatch.setattr(manifest_cache, "PART_BYTES", 4096)
    http_store.serve(files.ipc_path, honour_ranges=False)
    with pytest.raises(ManifestFetchError, match=r"bytes 0-4096 returned \d+ bytes, expected 4096"):
        _open_whole(http_store.url, tmp_path / "c")
    assert not list((tmp_path / "c").glob("*.arrow"))


def test_world_size_larger_than_rows_gives_empty_slices(manifest_table: MakeTable, tmp_path: Path) -> None:
    files = mf.write_manifest(manifest_table(3), tmp_path / "store")
    views = [
        open_manifest(files.ipc_path, split=None, rank=r, world_size=5, cache_dir=tmp_path / "c")
        for r in range(5)
    ]
    assert [v.rows for v in views] == [1, 1, 1, 0, 0]
    assert [v.row_start for v in views] == [0, 1, 2, 3, 3]
    assert views[4].table.schema.names == list(mf.REQUIRED_COLUMNS)
    assert list(views[4].batches(10)) == []


def test_shard_on_load_off_returns_every_row(
    written: tuple[mf.ManifestFiles, pa.Table], tmp_path: Path
) -> None:
    files, table = written
    m = open_manifest(
        files.ipc_path, split=None, rank=3, world_size=4, cache_dir=tmp_path / "c", shard_on_load=False
    )
    assert (m.rows, m.row_start, m.total_rows) == (1000, 0, 1000)
    assert m.table.to_pydict() == mf.conform_table(table).to_pydict()


@pytest.mark.parametrize("shard_on_load", [True, False])
def test_in_memory_switch_gives_the_same_rows(
    written: tuple[mf.ManifestFiles, pa.Table], tmp_path: Path, shard_on_load: bool
) -> None:
    files, _ = written
    for rank in range(3):
        common = {"rank": rank, "world_size": 3, "cache_dir": tmp_path / "c", "shard_on_load": shard_on_load}
        mapped = open_manifest(files.ipc_path, split=None, memory_map=True, **common)  # type: ignore[arg-type]
        in_memory = open_manifest(files.ipc_path, split=None, memory_map=False, **common)  # type: ignore[arg-type]
        assert mapped.memory_mapped and not in_memory.memory_mapped
        assert mapped.table.equals(in_memory.table)
        assert mapped.row_start == in_memory.row_start


def test_memory_mapped_rows_are_not_copied_into_the_process(
    manifest_table: MakeTable, tmp_path: Path
) -> None:
    files = mf.write_manifest(manifest_table(20_000), tmp_path / "store")
    _open_whole(files.ipc_path, tmp_path / "c")  # fill the cache first
    before = pa.total_allocated_bytes()
    mapped = _open_whole(files.ipc_path, tmp_path / "c")
    mapped_bytes = pa.total_allocated_bytes() - before
    in_memory = _open_whole(files.ipc_path, tmp_path / "c", memory_map=False)
    in_memory_bytes = pa.total_allocated_bytes() - before - mapped_bytes
    assert mapped.rows == in_memory.rows == 20_000
    assert mapped_bytes < 64 * 1024  # metadata only: the rows stay in the shared mapped pages
    assert in_memory_bytes >= files.ipc_size_bytes * 0.9


def test_batches_cover_the_slice_in_order_across_stored_batches(
    manifest_table: MakeTable, tmp_path: Path
) -> None:
    rows = mf.IPC_BATCH_ROWS + 700  # two stored record batches
    files = mf.write_manifest(manifest_table(rows), tmp_path / "store")
    m = _open_whole(files.ipc_path, tmp_path / "c")
    batches = list(m.batches(1000))
    assert [b.num_rows for b in batches] == [1000] * (rows // 1000) + [rows % 1000]
    assert pa.Table.from_batches(batches).equals(m.table.combine_chunks())
    with pytest.raises(ManifestArgumentError, match="batch_size 0 is not allowed; expected an integer >= 1"):
        next(m.batches(0))


@pytest.mark.parametrize(
    ("declared", "batch_sizes"),
    [
        (b"100", [100] * 10 + [37]),  # the writer's layout: batches found by arithmetic
        (None, [1, 250, 99, 400, 0, 287]),  # a foreign writer: every batch's metadata is read
        (b"64", [100] * 10 + [37]),  # a file that lies about its layout is read the slow, right way
        (b"64", [64] * 10 + [90]),  # ... also when only its last batch gives the lie away
    ],
)
def test_slices_are_right_whatever_the_stored_batch_layout(
    manifest_table: MakeTable,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    declared: bytes | None,
    batch_sizes: list[int],
) -> None:
    table = mf.conform_table(manifest_table(sum(batch_sizes)))
    metadata = {mf.FORMAT_VERSION_KEY: b"1"} | ({mf.IPC_BATCH_ROWS_KEY: declared} if declared else {})
    table = table.replace_schema_metadata(metadata)
    path = tmp_path / "hand-written.arrow"
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        offset = 0
        for size in batch_sizes:
            writer.write_batch(
                pa.RecordBatch.from_pylist(table.slice(offset, size).to_pylist(), table.schema)
            )
            offset += size
    record_sums(path)
    ids = table.column(mf.EPISODE_ID).to_pylist()
    for world_size in (1, 3, 7):
        got: list[str] = []
        for rank in range(world_size):
            m = open_manifest(path, split=None, rank=rank, world_size=world_size, cache_dir=tmp_path / "c")
            assert m.total_rows == len(ids) and m.row_start == len(got)
            got += m.table.column(mf.EPISODE_ID).to_pylist()
        assert got == ids
    lied = any("does not hold the 64-row batches it declares" in r.message for r in caplog.records)
    assert lied == (declared == b"64")


def test_wrong_expected_sha256_is_refused_and_nothing_is_cached(
    written: tuple[mf.ManifestFiles, pa.Table], tmp_path: Path
) -> None:
    files, _ = written
    wrong = "0" * 64
    with pytest.raises(ManifestIntegrityError) as caught:
        _open_whole(files.ipc_path, tmp_path / "c", expected_sha256=wrong)
    assert caught.value.actual_sha256 == files.ipc_sha256 and wrong in str(caught.value)
    assert sorted(p.suffix for p in (tmp_path / "c").iterdir()) == [".lock"]
    m = _open_whole(files.ipc_path, tmp_path / "c", expected_sha256=files.ipc_sha256.upper())
    assert m.downloaded and m.sha256 == files.ipc_sha256


def test_a_truncated_cached_copy_is_downloaded_again(
    written: tuple[mf.ManifestFiles, pa.Table], tmp_path: Path
) -> None:
    files, table = written
    first = _open_whole(files.ipc_path, tmp_path / "c")
    with open(first.path, "r+b") as f:
        f.truncate(files.ipc_size_bytes // 2)
    again = _open_whole(files.ipc_path, tmp_path / "c")
    assert again.downloaded
    assert again.path.read_bytes() == files.ipc_path.read_bytes()
    assert again.table.column(mf.EPISODE_ID).equals(table.column(mf.EPISODE_ID))


def test_silent_corruption_is_caught_when_asked_to_verify(
    written: tuple[mf.ManifestFiles, pa.Table], tmp_path: Path
) -> None:
    files, _ = written
    first = _open_whole(files.ipc_path, tmp_path / "c")
    stat = first.path.stat()
    with open(first.path, "r+b") as f:  # flip bytes in place, same size ...
        f.seek(stat.st_size // 2)
        f.write(b"\xff" * 16)
    os.utime(first.path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # ... and the same mtime, like bit rot
    verified = _open_whole(files.ipc_path, tmp_path / "c", verify_cached=True)
    assert verified.downloaded
    assert verified.path.read_bytes() == files.ipc_path.read_bytes()


def test_a_new_version_at_the_same_uri_is_fetched_when_its_sha256_is_expected(
    manifest_table: MakeTable, tmp_path: Path
) -> None:
    old = mf.write_manifest(manifest_table(10, seed=1), tmp_path / "store")
    _open_whole(old.ipc_path, tmp_path / "c")
    new = mf.write_manifest(manifest_table(12, seed=2), tmp_path / "store")
    m = _open_whole(new.ipc_path, tmp_path / "c", expected_sha256=new.ipc_sha256)
    assert m.downloaded and m.total_rows == 12 and m.sha256 == new.ipc_sha256


def test_a_file_that_is_not_a_manifest_is_refused(
    written: tuple[mf.ManifestFiles, pa.Table], tmp_path: Path
) -> None:
    files, _ = written
    with pytest.raises(ManifestSchemaError, match="not an Arrow IPC file"):
        _open_whole(files.parquet_path, tmp_path / "c")  # the sums file vouches for its bytes, not its kind
    other = tmp_path / "other.arrow"
    with pa.OSFile(str(other), "wb") as sink, pa.ipc.new_file(sink, pa.schema([("x", pa.int8())])) as w:
        w.write_table(pa.table({"x": pa.array([1], pa.int8())}))
    record_sums(other)
    with pytest.raises(ManifestSchemaError, match="episode_id: missing"):
        _open_whole(other, tmp_path / "c")


def test_a_missing_manifest_is_a_store_error(tmp_path: Path) -> None:
    with pytest.raises(ManifestFetchError, match="cannot read manifest"):
        _open_whole(tmp_path / "nope.arrow", tmp_path / "c", verify=False)
    # verified against its sums file (the default): a wrong path is said as one, not as unverifiable
    with pytest.raises(ManifestFetchError, match=r"manifest '.*nope\.arrow' does not exist"):
        _open_whole(tmp_path / "nope.arrow", tmp_path / "c")
    there = tmp_path / "unsummed.arrow"
    there.write_bytes(b"x")
    with pytest.raises(ManifestUnverifiableError, match=r"unsummed\.arrow.*manifest\.sha256' does not exist"):
        _open_whole(there, tmp_path / "c")


def test_a_changed_manifest_is_refused_by_default_with_its_name(
    written: tuple[mf.ManifestFiles, pa.Table], tmp_path: Path
) -> None:
    """Opened as the demo opens it (no expected_sha256): the sums file beside it is the reference, so a
    manifest whose row URI was changed in the store is refused, and nothing reaches the cache."""
    files, table = written
    data = files.ipc_path.read_bytes()
    uri = table.column(mf.URI)[3].as_py().encode()
    at = data.index(uri)
    files.ipc_path.write_bytes(data[:at] + uri.replace(b"derived", b"DERIVED") + data[at + len(uri) :])
    with pytest.raises(ManifestIntegrityError, match=rf"manifest 'file://{files.ipc_path}' has sha256"):
        _open_whole(files.ipc_path, tmp_path / "c")
    assert not any(p.suffix == ".arrow" for p in (tmp_path / "c").iterdir())
    forged = _open_whole(files.ipc_path, tmp_path / "c2", verify=False)  # trusting the bytes, knowingly
    assert forged.table.column(mf.URI)[3].as_py() != table.column(mf.URI)[3].as_py()


def test_bad_ranks_and_digests_are_named(written: tuple[mf.ManifestFiles, pa.Table], tmp_path: Path) -> None:
    files, _ = written
    with pytest.raises(ManifestArgumentError, match=r"rank 8 is not allowed; expected an integer in 0\.\.7"):
        open_manifest(files.ipc_path, split=None, rank=8, world_size=8, cache_dir=tmp_path)
    with pytest.raises(ManifestArgumentError, match="world_size 0 is not allowed"):
        open_manifest(files.ipc_path, split=None, rank=0, world_size=0, cache_dir=tmp_path)
    with pytest.raises(ManifestArgumentError, match="expected_sha256 'abc' is not allowed"):
        _open_whole(files.ipc_path, tmp_path, expected_sha256="abc")


def test_arguments_of_the_wrong_type_are_named(
    written: tuple[mf.ManifestFiles, pa.Table], tmp_path: Path
) -> None:
    """They used to escape as AttributeError ('bytes' has no 'lower'), TypeError from re, Path or range."""
    files, _ = written
    digest = bytes.fromhex(files.ipc_sha256)
    with pytest.raises(ManifestArgumentError, match=r"expected_sha256 b'.*' is not allowed; expected 64 hex"):
        _open_whole(files.ipc_path, tmp_path, expected_sha256=digest)
    with pytest.raises(ManifestArgumentError, match="cache_dir None is not allowed"):
        _open_whole(files.ipc_path, None)  # type: ignore[arg-type]
    manifest = _open_whole(files.ipc_path, tmp_path)
    for size in (2.5, None):
        with pytest.raises(ManifestArgumentError, match=f"batch_size {size} is not allowed"):
            next(manifest.batches(size))  # type: ignore[arg-type]


@pytest.mark.parametrize("timeout_s", [-1, float("nan"), "60"])
def test_a_lock_timeout_that_is_not_seconds_is_refused_before_waiting(
    written: tuple[mf.ManifestFiles, pa.Table], tmp_path: Path, timeout_s: object
) -> None:
    """filelock waits forever on a negative timeout (a job would hang on a lock left by a stuck rank) and
    raises its own ValueError on NaN; both are now refused by name, before the lock or the download."""
    files, _ = written
    with pytest.raises(ManifestArgumentError, match=r"lock_timeout_s .* expected seconds >= 0"):
        _open_whole(files.ipc_path, tmp_path / "c", lock_timeout_s=timeout_s)
    assert not (tmp_path / "c").exists()


def test_a_held_lock_times_out_with_a_clear_error(
    written: tuple[mf.ManifestFiles, pa.Table], tmp_path: Path
) -> None:
    files, _ = written
    fs, path = fsspec.core.url_to_fs(str(files.ipc_path))
    cache_dir = tmp_path / "c"
    cache_dir.mkdir()
    lock_path = cache_dir / f"{manifest_cache.cache_key(fs.unstrip_protocol(path))}.lock"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time, filelock; l = filelock.FileLock(sys.argv[1]); l.acquire();"
            " print('held', flush=True); time.sleep(60)",
            str(lock_path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(CacheLockTimeoutError, match=r"waited 0\.3 s for the manifest cache lock"):
            _open_whole(files.ipc_path, cache_dir, lock_timeout_s=0.3)
    finally:
        holder.kill()
        holder.wait()
    assert _open_whole(files.ipc_path, cache_dir).downloaded
    assert FileLock(str(lock_path)).acquire(timeout=1)


@given(total=st.integers(0, 5000), world_size=st.integers(1, 300))
def test_shard_ranges_are_contiguous_balanced_and_complete(total: int, world_size: int) -> None:
    ranges = [shard_range(total, rank, world_size) for rank in range(world_size)]
    assert ranges[0][0] == 0 and ranges[-1][1] == total
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
    sizes = [stop - start for start, stop in ranges]
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)


def test_loader_imports_no_airflow_ray_or_duckdb() -> None:
    code = (
        "import sys, pipeline.manifest.loader; "
        "print(','.join(sorted(m for m in ('airflow', 'ray', 'duckdb') if m in sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == ""


def test_manifest_view_is_usable_without_a_file(manifest_table: MakeTable) -> None:
    """``batches`` works over any chunking of the table it holds."""
    table = pa.concat_tables([manifest_table(5), manifest_table(7, seed=1)])
    m = Manifest(table, "memory", Path("."), "0" * 64, 12, 0, 0, 1, False, False)
    assert [b.num_rows for b in m.batches(4)] == [4, 4, 4]
    assert pa.Table.from_batches(list(m.batches(4))).equals(table.combine_chunks())


# -- a loopback HTTP store that honours Range requests and counts what it serves -----------------------------


class HttpStore:
    def __init__(self) -> None:
        self.served: list[tuple[str | None, int]] = []  # (Range header, bytes sent) per GET
        self.url = ""
        self._server: object = None

    def serve(self, path: Path, *, honour_ranges: bool = True) -> None:
        """Serve ``path`` (its GETs are counted in ``served``) and the other files of its folder (its sums
        file), as an object store serves a prefix."""
        import http.server
        import threading

        store = self
        folder = path.parent

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as object stores serve

            def log_message(self, format: str, *args: object) -> None:  # keep pytest output clean
                pass

            def _file(self) -> bytes | None:
                asked = folder / self.path.lstrip("/")
                if asked.parent != folder or not asked.is_file():
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return None
                return asked.read_bytes()

            def do_HEAD(self) -> None:
                data = self._file()
                if data is None:
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Accept-Ranges", "bytes")
                self.end_headers()

            def do_GET(self) -> None:
                data = self._file()
                if data is None:
                    return
                header = self.headers.get("Range")
                body, status = data, 200
                if header and honour_ranges:
                    first, last = header.removeprefix("bytes=").split("-")
                    body, status = data[int(first) : int(last) + 1], 206
                if self.path.lstrip("/") == path.name:
                    store.served.append((header, len(body)))
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                if status == 206:
                    self.send_header(
                        "Content-Range", f"bytes {first}-{int(first) + len(body) - 1}/{len(data)}"
                    )
                self.end_headers()
                self.wfile.write(body)

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self._server = server
        self.url = f"http://127.0.0.1:{server.server_address[1]}/{path.name}"

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()  # type: ignore[attr-defined]
            self._server.server_close()  # type: ignore[attr-defined]


@pytest.fixture
def http_store() -> Iterator[HttpStore]:
    store = HttpStore()
    yield store
    store.close()
