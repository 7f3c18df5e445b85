"""The training-side manifest loader: download once per node, memory-map, take this rank's rows.

Usage from a training job (no Airflow, Ray or DuckDB is imported)::

    from pipeline.manifest.loader import open_manifest

    manifest = open_manifest(uri, rank=rank, world_size=world_size, cache_dir="/local/nvme/manifests",
                             expected_sha256=sha_from_catalog)
    for batch in manifest.batches(1024):
        ...

With ``memory_map=True`` (the default) every rank maps the one cached file: the pages are shared page cache
that the kernel can evict, so a rank's private memory does not grow with the manifest. With
``shard_on_load=True`` each rank keeps only its contiguous 1/N of the rows, as a zero-copy slice.
``memory_map=False`` copies the kept rows into the process instead: the plain path for small manifests,
or for a cache on a filesystem that cannot be mapped.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from pipeline.manifest.cache import DEFAULT_LOCK_TIMEOUT_S, fetch
from pipeline.manifest.errors import ManifestArgumentError, ManifestSchemaError
from pipeline.manifest.format import IPC_BATCH_ROWS_KEY, validate_schema

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
    """One rank's view of a manifest: its rows as an Arrow table and where they came from."""

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
    _source: Any = field(default=None, repr=False)  # keeps the memory map open as long as the view lives

    @property
    def rows(self) -> int:
        """Number of rows this rank holds."""
        return int(self.table.num_rows)

    @property
    def row_stop(self) -> int:
        return self.row_start + self.rows

    def batches(self, batch_size: int) -> Iterator[pa.RecordBatch]:
        """This rank's rows in order, ``batch_size`` rows per batch (the last may be shorter).

        Batches inside one stored record batch are zero-copy views; a batch that spans two is concatenated.
        """
        if batch_size < 1:
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
    shard_on_load: bool = True,
    memory_map: bool = True,
    expected_sha256: str | None = None,
    verify_cached: bool = False,
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
    storage_options: dict[str, Any] | None = None,
) -> Manifest:
    """Open the manifest IPC file at ``uri`` (a local path or any fsspec URL) for one training rank.

    The file is copied once per node into ``cache_dir`` (see :mod:`pipeline.manifest.cache`) and verified
    against ``expected_sha256`` when given. ``shard_on_load`` keeps rows :func:`shard_range` of this rank,
    otherwise every row. ``memory_map`` maps the cached file (zero-copy, shared pages); ``False`` reads the
    kept rows' batches into this process instead. ``verify_cached`` re-hashes a cached copy before trusting
    it.
    """
    _check_rank(rank, world_size)
    if expected_sha256 is not None:
        expected_sha256 = expected_sha256.lower()
        if not _SHA256.match(expected_sha256):
            raise ManifestArgumentError("expected_sha256", expected_sha256, "64 hex digits or None")
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
    # without shard-on-load a rank reads as the only rank of a world of one: every row
    part, parts = (rank, world_size) if shard_on_load else (0, 1)
    table, start, total_rows = _read_rows(reader, part, parts, cached.uri)
    stop = start + table.num_rows
    if not memory_map:
        source.close()
    log.debug(
        "rank %d/%d holds rows %d..%d of %d from %s", rank, world_size, start, stop, total_rows, cached.path
    )
    return Manifest(
        table=table,
        uri=cached.uri,
        path=cached.path,
        sha256=cached.sha256,
        total_rows=total_rows,
        row_start=start,
        rank=rank,
        world_size=world_size,
        memory_mapped=memory_map,
        downloaded=cached.downloaded,
        _source=source if memory_map else None,
    )


def _read_rows(
    reader: pa.ipc.RecordBatchFileReader, part: int, parts: int, uri: str
) -> tuple[pa.Table, int, int]:
    """Rows :func:`shard_range` ``(total, part, parts)`` of the file, their first index and its row count.

    Only the batches that hold those rows are read: on a memory map that parses their metadata and touches
    no row data; on a plain file it reads them into memory. When the file declares its batch size (our
    writer does), the batches are found by arithmetic and no other batch is looked at.
    """
    count = reader.num_record_batches
    batch_rows = _declared_batch_rows(reader.schema)
    if batch_rows is not None and count > 0:
        last = reader.get_batch(count - 1)
        if 0 < last.num_rows <= batch_rows:
            total = (count - 1) * batch_rows + last.num_rows
            start, stop = shard_range(total, part, parts)
            if start == stop:
                return reader.schema.empty_table(), start, total
            first_index, last_index = start // batch_rows, (stop - 1) // batch_rows
            batches = [
                last if i == count - 1 else reader.get_batch(i) for i in range(first_index, last_index + 1)
            ]
            if all(b.num_rows == batch_rows for b in batches if b is not last):
                table = pa.Table.from_batches(batches, schema=reader.schema)
                return table.slice(start - first_index * batch_rows, stop - start), start, total
        log.warning(
            "%s does not hold the %d-row batches it declares; reading every batch's metadata", uri, batch_rows
        )
    batches = [reader.get_batch(i) for i in range(count)]
    total = sum(b.num_rows for b in batches)
    start, stop = shard_range(total, part, parts)
    kept: list[pa.RecordBatch] = []
    offset = first_offset = 0
    for batch in batches:
        end = offset + batch.num_rows
        if end > start and offset < stop:
            first_offset = offset if not kept else first_offset
            kept.append(batch)
        offset = end
    if not kept:
        return reader.schema.empty_table(), start, total
    return (
        pa.Table.from_batches(kept, schema=reader.schema).slice(start - first_offset, stop - start),
        start,
        total,
    )


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
