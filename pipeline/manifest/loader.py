"""The training-side manifest loader: download once per node, memory-map, take this rank's rows.

Usage from a training job (no Airflow, Ray or DuckDB is imported)::

    from pipeline.manifest.loader import open_manifest

    manifest = open_manifest(uri, rank=rank, world_size=world_size, cache_dir="/local/nvme/manifests",
                             expected_sha256=sha_from_catalog)
    for batch in manifest.batches(1024):
        ...

With ``memory_map=True`` (the default) every rank maps the one cached file: the pages are shared page cache
that the kernel can evict, so a rank's private memory does not grow with the manifest. With
``shard_on_load=True`` each rank keeps only its contiguous 1/N of one split's rows (``split="train"`` by
default; ``None`` for every row), as a zero-copy slice.
``memory_map=False`` copies the kept rows into the process instead: the plain path for small manifests,
or for a cache on a filesystem that cannot be mapped.
"""

from __future__ import annotations

import bisect
import logging
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.enums import Split
from pipeline.manifest.cache import DEFAULT_LOCK_TIMEOUT_S, fetch, recorded_sha256
from pipeline.manifest.errors import ManifestArgumentError, ManifestSchemaError
from pipeline.manifest.format import IPC_BATCH_ROWS_KEY, SPLIT, validate_schema
from pipeline.manifest.splits import SPLIT_ROWS_KEY, decode_split_ranges, split_range

log = logging.getLogger(__name__)

_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def shard_range(total_rows: int, rank: int, world_size: int) -> tuple[int, int]:
    """Rows ``[start, stop)`` of ``rank``: contiguous, disjoint across ranks, covering every row once.

    The first ``total_rows % world_size`` ranks get one row more than the others; ranks past the last row
    get an empty range.
    """
    _check_rank(rank, world_size)
    if total_rows < 0:
        raise ManifestArgumentError("total_rows", total_rows, "a count >= 0")
    base, extra = divmod(total_rows, world_size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


@dataclass(frozen=True, eq=False)
class Manifest:
    """One rank's view of a manifest: its rows as an Arrow table and where they came from.

    ``row_start`` and ``total_rows`` count rows of the whole file (so ``row_start + i`` is the manifest row
    that ``sluice lineage manifest:<name>@<version>:<row>`` takes); ``split_start`` .. ``split_stop`` is
    the range of the kept split in the file (the whole file when ``split`` is None).
    """

    table: pa.Table
    uri: str
    path: Path  # the node-local cached IPC file
    sha256: str
    total_rows: int  # rows in the whole manifest
    row_start: int  # index of this table's first row in the whole manifest
    rank: int
    world_size: int
    memory_mapped: bool
    downloaded: bool  # True when this process fetched the file into the cache
    split: str | None = None  # the split kept, None = every row
    split_start: int = 0  # first row of the kept split in the whole manifest
    split_stop: int | None = None  # end of the kept split; None = total_rows
    _source: Any = field(default=None, repr=False)  # keeps the memory map open as long as the view lives

    @property
    def rows(self) -> int:
        """Number of rows this rank holds."""
        return int(self.table.num_rows)

    @property
    def row_stop(self) -> int:
        return self.row_start + self.rows

    @property
    def split_rows(self) -> int:
        """Rows of the kept split over all ranks (every row when ``split`` is None)."""
        stop = self.total_rows if self.split_stop is None else self.split_stop
        return stop - self.split_start

    def batches(self, batch_size: int) -> Iterator[pa.RecordBatch]:
        """This rank's rows in order, ``batch_size`` rows per batch (the last may be shorter).

        Batches inside one stored record batch are zero-copy views; a batch that spans two is concatenated.
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ManifestArgumentError("batch_size", batch_size, "an integer >= 1")
        for start in range(0, self.rows, batch_size):
            pieces = self.table.slice(start, batch_size).to_batches()
            yield pieces[0] if len(pieces) == 1 else pa.concat_batches(pieces)


def open_manifest(
    uri: str | Path,
    *,
    rank: int,
    world_size: int,
    cache_dir: str | Path,
    split: str | None = Split.TRAIN.value,
    shard_on_load: bool = True,
    memory_map: bool = True,
    expected_sha256: str | None = None,
    verify: bool = True,
    verify_cached: bool = False,
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
    storage_options: dict[str, Any] | None = None,
) -> Manifest:
    """Open the manifest IPC file at ``uri`` (a local path or any fsspec URL) for one training rank.

    The file is copied once per node into ``cache_dir`` (see :mod:`pipeline.manifest.cache`) and verified
    against ``expected_sha256`` (the catalog's), or by default against the sums file written beside it
    (:data:`~pipeline.manifest.format.SUMS_FILE_NAME`); a mismatch is a :class:`ManifestIntegrityError`
    naming the file, a manifest with neither a :class:`ManifestUnverifiableError`. ``verify=False`` trusts
    the bytes as they are (and checks nothing). ``split`` (``train`` by default; ``val``, ``eval``, or None for
    every row) chooses the rows a rank may get: ``shard_on_load`` keeps rows :func:`shard_range` of this
    rank *within that split*, otherwise the whole split. A split's rows must be one contiguous range of the
    file (the dataset builder writes them so); a split with no rows gives every rank an empty table.
    ``memory_map`` maps the cached file (zero-copy, shared pages); ``False`` reads the kept rows' batches
    into this process instead. ``verify_cached`` re-hashes a cached copy before trusting it.
    """
    _check_rank(rank, world_size)
    allowed = [s.value for s in Split]
    if split is not None and split not in allowed:
        raise ManifestArgumentError("split", split, f"one of {', '.join(allowed)}, or None for every row")
    if not isinstance(cache_dir, str | os.PathLike):
        raise ManifestArgumentError("cache_dir", cache_dir, "a path to a node-local folder")
    if expected_sha256 is not None:
        if not isinstance(expected_sha256, str):
            raise ManifestArgumentError("expected_sha256", expected_sha256, "64 hex digits as a str, or None")
        expected_sha256 = expected_sha256.lower()
        if not _SHA256.match(expected_sha256):
            raise ManifestArgumentError("expected_sha256", expected_sha256, "64 hex digits or None")
    elif verify:
        expected_sha256 = recorded_sha256(str(uri), storage_options)
    cached = fetch(
        str(uri),
        cache_dir,
        expected_sha256=expected_sha256,
        verify_cached=verify_cached,
        lock_timeout_s=lock_timeout_s,
        storage_options=storage_options,
    )
    source = pa.memory_map(str(cached.path), "r") if memory_map else pa.OSFile(str(cached.path), "rb")
    try:
        reader = pa.ipc.open_file(source)
    except (pa.ArrowInvalid, OSError) as exc:
        raise ManifestSchemaError(cached.uri, [("", f"not an Arrow IPC file: {exc}")]) from exc
    validate_schema(reader.schema, cached.uri)
    rows = _FileRows(reader, cached.uri)
    # without shard-on-load a rank reads as the only rank of a world of one: every row of the split
    part, parts = (rank, world_size) if shard_on_load else (0, 1)
    trust_recorded = True
    while True:  # at most three passes: a batch layout found to lie, recorded split ranges found to lie
        try:
            if split is None:
                lo, hi, recorded = 0, rows.total, False
            else:
                lo, hi, recorded = _split_range(rows, split, cached.uri, trust_recorded)
            start, stop = shard_range(hi - lo, part, parts)
            start, stop = lo + start, lo + stop
            table = rows.take(start, stop)
            contradicted = split is not None and recorded and not _holds_exactly(rows, table, split, lo, hi)
        except _LayoutChanged:
            continue  # the row count was wrong: start over, now from every batch's own row count
        if contradicted:
            log.warning(
                "%s: its recorded split ranges put %r at rows %d..%d, which its split column contradicts; "
                "scanning the split column instead",
                cached.uri, split, lo, hi,
            )  # fmt: skip
            trust_recorded = False
            continue
        break
    if not memory_map:
        source.close()
    log.debug(
        "rank %d/%d holds rows %d..%d of %d (split %s: rows %d..%d) from %s",
        rank, world_size, start, stop, rows.total, split, lo, hi, cached.path,
    )  # fmt: skip
    return Manifest(
        table=table,
        uri=cached.uri,
        path=cached.path,
        sha256=cached.sha256,
        total_rows=rows.total,
        row_start=start,
        rank=rank,
        world_size=world_size,
        memory_mapped=memory_map,
        downloaded=cached.downloaded,
        split=split,
        split_start=lo,
        split_stop=hi,
        _source=source if memory_map else None,
    )


class _FileRows:
    """Rows of an IPC file by index, reading only the record batches that hold them.

    On a memory map, reading a batch parses its metadata and touches no row data; on a plain file it reads
    the batch into memory. When the file declares its batch size (our writer does), the row count and a
    range's batches are found by arithmetic and no other batch is looked at; otherwise (or when the file
    does not hold the batches it declares) every batch's metadata is read once.
    """

    def __init__(self, reader: pa.ipc.RecordBatchFileReader, uri: str) -> None:
        self.reader = reader
        self.uri = uri
        self.count = reader.num_record_batches
        self.batch_rows = _declared_batch_rows(reader.schema)
        self._offsets: list[int] | None = None  # start row of every batch, then the total
        self._last: pa.RecordBatch | None = None
        if self.batch_rows is not None and self.count > 0:
            self._last = reader.get_batch(self.count - 1)
            if 0 < self._last.num_rows <= self.batch_rows:
                self.total = (self.count - 1) * self.batch_rows + self._last.num_rows
                return
            self._warn_layout()
        self.batch_rows = None
        self.total = self._read_offsets()[-1]

    def _distrust(self) -> None:
        """The file does not hold the batches it declares: count rows batch by batch from now on."""
        self._warn_layout()
        self.batch_rows = None
        total = self._read_offsets()[-1]
        if total != self.total:
            self.total = total
            raise _LayoutChanged

    def _warn_layout(self) -> None:
        log.warning(
            "%s does not hold the %d-row batches it declares; reading every batch's metadata",
            self.uri,
            self.batch_rows,
        )

    def _read_offsets(self) -> list[int]:
        if self._offsets is None:
            offsets = [0]
            for i in range(self.count):
                offsets.append(offsets[-1] + self.reader.get_batch(i).num_rows)
            self._offsets = offsets
        return self._offsets

    def batch(self, index: int) -> pa.RecordBatch:
        if index == self.count - 1 and self._last is not None:
            return self._last
        return self.reader.get_batch(index)

    def take(self, start: int, stop: int) -> pa.Table:
        """Rows ``[start, stop)`` as a table sliced from the batches that hold them (zero-copy)."""
        schema = self.reader.schema
        if start >= stop:
            return schema.empty_table()
        if self.batch_rows is not None:
            first, last = start // self.batch_rows, (stop - 1) // self.batch_rows
            batches = [self.batch(i) for i in range(first, last + 1)]
            if all(b.num_rows == self.batch_rows for b in batches if b is not self._last):
                table = pa.Table.from_batches(batches, schema=schema)
                return table.slice(start - first * self.batch_rows, stop - start)
            self._distrust()
        offsets = self._read_offsets()
        first = bisect.bisect_right(offsets, start) - 1
        last = bisect.bisect_left(offsets, stop) - 1
        batches = [self.batch(i) for i in range(first, last + 1)]
        return pa.Table.from_batches(batches, schema=schema).slice(start - offsets[first], stop - start)

    def split_chunks(self) -> Iterator[pa.Array]:
        """The ``split`` column, batch by batch in file order (checking the declared layout on the way)."""
        index = self.reader.schema.get_field_index(SPLIT)
        for i in range(self.count):
            batch = self.batch(i)
            if self.batch_rows is not None and i < self.count - 1 and batch.num_rows != self.batch_rows:
                self._distrust()
            yield batch.column(index)


class _LayoutChanged(Exception):
    """Raised inside the loader when a file's declared batch size proved wrong and its row count changed."""


def _split_range(rows: _FileRows, split: str, uri: str, trust_recorded: bool) -> tuple[int, int, bool]:
    """Rows ``[start, stop)`` of ``split`` in the file, and whether they come from the recorded ranges
    (else from a scan of the split column)."""
    recorded = (rows.reader.schema.metadata or {}).get(SPLIT_ROWS_KEY) if trust_recorded else None
    if recorded is not None:
        ranges = decode_split_ranges(recorded, rows.total)
        if ranges is not None:
            return (*ranges.get(split, (0, 0)), True)
        log.warning("%s: unreadable split ranges %r; scanning the split column", uri, recorded[:200])
    found = split_range(rows.split_chunks(), split)
    if found is None:
        raise ManifestSchemaError(
            uri,
            [
                (
                    SPLIT,
                    f"the rows of split {split!r} are not one contiguous range (rows are not ordered by "
                    "split); open it with split=None and filter the split column",
                )
            ],
        )
    return (*found, False)


def _holds_exactly(rows: _FileRows, table: pa.Table, split: str, lo: int, hi: int) -> bool:
    """A sanity check of recorded ranges against the values: this rank's rows and the first and last row of
    ``[lo, hi)`` are ``split``, the rows just outside it are not. Touches the split column of the rank's
    rows and of four more rows only, so it cannot see a lie confined to other ranks' rows; the file's
    sha256 is what vouches for the whole."""
    # Run-length encoded, a rank's rows of one split are one run per chunk. (Not split_range, nor pc.equal
    # with the split as a scalar: both turn Arrow strings into Python ones through pandas, whose import
    # costs a second or more before the first batch.)
    for chunk in table.column(SPLIT).chunks:
        runs = pc.run_end_encode(chunk).values
        if len(runs) > 1 or (len(runs) == 1 and runs[0].as_py() != split):
            return False
    if hi == lo:
        return True
    inside = [lo, hi - 1]
    outside = [i for i in (lo - 1, hi) if 0 <= i < rows.total]
    return all(_split_at(rows, i) == split for i in inside) and all(
        _split_at(rows, i) != split for i in outside
    )


def _split_at(rows: _FileRows, index: int) -> str | None:
    return rows.take(index, index + 1).column(SPLIT)[0].as_py()


def _declared_batch_rows(schema: pa.Schema) -> int | None:
    value = (schema.metadata or {}).get(IPC_BATCH_ROWS_KEY, b"")
    return int(value) if value.isdigit() and int(value) > 0 else None


def _check_rank(rank: int, world_size: int) -> None:
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ManifestArgumentError("world_size", world_size, "an integer >= 1")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ManifestArgumentError(
            "rank", rank, f"an integer in 0..{world_size - 1} for world_size {world_size}"
        )
