"""The training manifest on disk: its schema as named constants and a deterministic writer.

A manifest version is one table written twice, with the same rows in the same order:

* :data:`IPC_FILE_NAME`: an *uncompressed* Arrow IPC file. Training ranks memory-map it and take zero-copy
  slices; the mapped pages are shared page cache, not private memory of each rank.
* :data:`PARQUET_FILE_NAME`: a zstd Parquet file for the warehouse, analytics tools and small readers.

One row is one training item: a time window (``start_ns`` .. ``end_ns``) of one episode's transcoded
artifact (``uri``), with its vendor, five quality scores, its split and the sha256 of the raw source it was
made from. The required columns come first in :data:`REQUIRED_COLUMNS` order; extra columns (robot, session,
annotations ...) are kept after them in the order the caller gave.

Writing is deterministic: the same table gives byte-identical files, whatever its chunking, because the
writer re-chunks rows into fixed batches and row groups, fixes every writer option that changes bytes, and
replaces the schema metadata with its own (no pandas metadata, no timestamps). Parquet's footer names the
writing library's version, so byte identity holds across runs of the same pyarrow version.
"""

from __future__ import annotations

import hashlib
import logging
import os
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.enums import Split
from pipeline.errors import StoreError
from pipeline.manifest.errors import ManifestSchemaError
from pipeline.manifest.splits import SPLIT_ROWS_KEY, encode_split_ranges, split_ranges
from pipeline.store import fsync_path

log = logging.getLogger(__name__)

#: Bumped when a reader of an older version could misread the files.
FORMAT_VERSION = "1"
FORMAT_VERSION_KEY = b"sluice.manifest.format_version"

IPC_FILE_NAME = "manifest.arrow"
PARQUET_FILE_NAME = "manifest.parquet"
#: Beside the two files: their sha256 digests, in ``sha256sum`` format (``sha256sum -c`` checks them), so
#: that a reader without the catalog can tell the bytes it fetched are the bytes that were written.
SUMS_FILE_NAME = "manifest.sha256"

EPISODE_ID = "episode_id"
URI = "uri"
START_NS = "start_ns"
END_NS = "end_ns"
DURATION_S = "duration_s"
VENDOR = "vendor"
SPLIT = "split"
SOURCE_SHA256 = "source_sha256"
#: Optional (the builder always writes it): the sha256 of the file ``uri`` names, which the sample loader
#: checks each episode file against before it reads from it.
URI_SHA256 = "uri_sha256"

# Quality scores in [0, 1], higher is better; null when the check did not run on that episode.
QUALITY_SYNC = "quality_sync"  # timestamp alignment across streams (skew, jitter, gaps)
QUALITY_COMPLETENESS = "quality_completeness"  # share of expected messages and frames present
QUALITY_VISUAL = "quality_visual"  # image quality: blur, exposure, blank frames
QUALITY_MOTION = "quality_motion"  # the robot does something (not idle)
QUALITY_TRANSCODE = "quality_transcode"  # fidelity of the transcoded episode to its source (PSNR based)
QUALITY_SCORE_COLUMNS = (
    QUALITY_SYNC,
    QUALITY_COMPLETENESS,
    QUALITY_VISUAL,
    QUALITY_MOTION,
    QUALITY_TRANSCODE,
)

REQUIRED_FIELDS: tuple[pa.Field, ...] = (
    pa.field(EPISODE_ID, pa.string(), nullable=False),
    pa.field(URI, pa.string(), nullable=False),
    pa.field(START_NS, pa.int64(), nullable=False),
    pa.field(END_NS, pa.int64(), nullable=False),
    pa.field(DURATION_S, pa.float64(), nullable=False),
    pa.field(VENDOR, pa.string(), nullable=False),
    *(pa.field(name, pa.float32(), nullable=True) for name in QUALITY_SCORE_COLUMNS),
    pa.field(SPLIT, pa.string(), nullable=False),
    pa.field(SOURCE_SHA256, pa.string(), nullable=False),
)
REQUIRED_COLUMNS: tuple[str, ...] = tuple(f.name for f in REQUIRED_FIELDS)

#: Rows per IPC record batch (each batch but the last holds exactly this many). Ranks slice inside
#: batches, so the size only sets how many batches there are (10M rows = 77) and keeps each batch's string
#: offsets far below 2 GiB.
IPC_BATCH_ROWS = 131_072
#: Written into the schema so that a loader can find a rank's batches by arithmetic, touching the metadata
#: of only those batches and the last one, instead of every batch's (scattered pages of a large file).
IPC_BATCH_ROWS_KEY = b"sluice.manifest.ipc_batch_rows"
SCHEMA_METADATA = {
    FORMAT_VERSION_KEY: FORMAT_VERSION.encode(),
    IPC_BATCH_ROWS_KEY: str(IPC_BATCH_ROWS).encode(),
}
#: The schema of a manifest without extra columns.
MANIFEST_SCHEMA = pa.schema(REQUIRED_FIELDS, metadata=SCHEMA_METADATA)

#: Rows per Parquet row group. A rank that reads only its own row groups reads at most two groups beyond
#: its slice: about 20% extra at 10M rows over 8 ranks.
PARQUET_ROW_GROUP_ROWS = 131_072
#: zstd at a fixed level: the Parquet copy is for scans; level 3 is zstd's default speed/size balance.
PARQUET_COMPRESSION = "zstd"
PARQUET_COMPRESSION_LEVEL = 3

_SHA256_PATTERN = "^[0-9a-f]{64}$"


@dataclass(frozen=True)
class ManifestFiles:
    """The published files of one manifest and what a catalog records about them."""

    ipc_path: Path
    parquet_path: Path
    ipc_sha256: str
    parquet_sha256: str
    ipc_size_bytes: int
    parquet_size_bytes: int
    num_rows: int


def format_sums(digests: dict[str, str]) -> str:
    """``sha256sum`` lines for ``{file name: sha256}``."""
    return "".join(f"{sha}  {name}\n" for name, sha in sorted(digests.items()))


def parse_sums(text: str, source: str) -> dict[str, str]:
    """``{file name: sha256}`` from ``sha256sum`` lines; a malformed line is a :class:`ManifestSchemaError`."""
    out = {}
    for number, line in enumerate(text.splitlines(), 1):
        sha, sep, name = line.partition("  ")
        if not sep or len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha) or not name:
            raise ManifestSchemaError(
                source, [("", f"line {number} is not '<sha256>  <file name>': {line!r}")]
            )
        out[name.lstrip("*")] = sha
    return out


def manifest_schema(extra_fields: Sequence[pa.Field] = ()) -> pa.Schema:
    """The manifest schema: the required fields, then ``extra_fields``, with the format metadata."""
    return pa.schema([*REQUIRED_FIELDS, *extra_fields], metadata=SCHEMA_METADATA)


def validate_schema(schema: pa.Schema, source: str) -> None:
    """Check a file's schema: required columns with their exact types, and a known format version."""
    problems: list[tuple[str, str]] = []
    version = (schema.metadata or {}).get(FORMAT_VERSION_KEY)
    if version is not None and version.decode(errors="replace") != FORMAT_VERSION:
        problems.append(("", f"format version {version!r}; this reader knows {FORMAT_VERSION!r}"))
    for field in REQUIRED_FIELDS:
        index = schema.get_field_index(field.name)
        if index < 0:
            problems.append((field.name, f"missing; required columns: {', '.join(REQUIRED_COLUMNS)}"))
        elif not schema.field(index).type.equals(field.type):
            problems.append((field.name, f"type {schema.field(index).type}, expected {field.type}"))
    if problems:
        raise ManifestSchemaError(source, problems)


def conform_table(table: pa.Table, source: str = "manifest table") -> pa.Table:
    """Return ``table`` in manifest form, or raise :class:`ManifestSchemaError` listing every problem.

    Required columns are cast to their declared type when the input type is of the same family (any string
    or dictionary-of-string type to ``string``, any integer to ``int64``, any float to the declared float,
    the null type to anything; an overflowing integer is an error) and moved to the front; extra columns
    follow in their given order. Values are checked: no nulls where the schema forbids them, ``split``
    among :class:`Split`, ``end_ns >= start_ns``, ``duration_s >= 0``, quality scores in [0, 1],
    ``source_sha256`` as 64 lowercase hex digits. Schema and field metadata are replaced by the manifest's
    own.
    """
    problems: list[tuple[str, str]] = []
    names = table.column_names
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ManifestSchemaError(source, [(n, "column name appears more than once") for n in duplicates])
    if any(n == "" for n in names):
        problems.append(("", "a column has an empty name"))

    columns: dict[str, pa.ChunkedArray] = {}
    for field in REQUIRED_FIELDS:
        if field.name not in names:
            problems.append((field.name, f"missing; required columns: {', '.join(REQUIRED_COLUMNS)}"))
            continue
        column = table.column(field.name)
        cast = _cast_same_family(column, field.type)
        if cast is None:
            problems.append((field.name, f"type {column.type} cannot become {field.type}"))
            continue
        if isinstance(cast, str):
            problems.append((field.name, cast))
            continue
        columns[field.name] = cast
    if problems:
        raise ManifestSchemaError(source, problems)

    problems += _value_problems(columns)
    if problems:
        raise ManifestSchemaError(source, problems)

    extras = [table.schema.field(n).remove_metadata() for n in names if n not in columns]
    schema = manifest_schema(extras)
    arrays = [columns[f.name] for f in REQUIRED_FIELDS] + [table.column(f.name) for f in extras]
    return pa.Table.from_arrays(arrays, schema=schema)


def write_manifest(table: pa.Table, out_dir: str | Path) -> ManifestFiles:
    """Write ``table`` as :data:`IPC_FILE_NAME` and :data:`PARQUET_FILE_NAME` under ``out_dir``, and their
    digests as :data:`SUMS_FILE_NAME`.

    The table is first passed through :func:`conform_table`. Each file is written under a temporary name in
    ``out_dir``, fsynced, hashed and published by an atomic rename, so a reader never sees a partial file.
    Row order is kept as given: the dataset builder decides it. When each split's rows are one contiguous
    range (the builder's order), the ranges go into the schema metadata under
    :data:`~pipeline.manifest.splits.SPLIT_ROWS_KEY`, so a rank finds its split's rows by arithmetic.
    """
    conformed = with_split_ranges(conform_table(table))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ipc_path, ipc_sha, ipc_size = publish_file(out / IPC_FILE_NAME, lambda tmp: _write_ipc(conformed, tmp))
    pq_path, pq_sha, pq_size = publish_file(
        out / PARQUET_FILE_NAME, lambda tmp: _write_parquet(conformed, tmp)
    )
    sums = format_sums({IPC_FILE_NAME: ipc_sha, PARQUET_FILE_NAME: pq_sha})
    publish_file(out / SUMS_FILE_NAME, lambda tmp: _write_text(sums, tmp))
    log.info("wrote manifest of %d rows to %s (ipc sha256 %s)", conformed.num_rows, out, ipc_sha)
    return ManifestFiles(
        ipc_path=ipc_path,
        parquet_path=pq_path,
        ipc_sha256=ipc_sha,
        parquet_sha256=pq_sha,
        ipc_size_bytes=ipc_size,
        parquet_size_bytes=pq_size,
        num_rows=conformed.num_rows,
    )


def with_split_ranges(table: pa.Table) -> pa.Table:
    """``table`` with its split ranges added to the schema metadata, when every split is contiguous."""
    ranges = split_ranges(table.column(SPLIT).chunks)
    if ranges is None:
        log.info("the rows of some split are not contiguous: no split ranges recorded")
        return table
    metadata = {**(table.schema.metadata or {}), SPLIT_ROWS_KEY: encode_split_ranges(ranges)}
    return table.replace_schema_metadata(metadata)


def canonical_batches(table: pa.Table, rows_per_batch: int) -> Iterator[pa.RecordBatch]:
    """The rows of ``table`` as freshly allocated record batches of ``rows_per_batch`` rows (the last may be
    short).

    Each batch is a copy with exactly sized buffers: the IPC writer writes an array's buffers whole, so a
    slice of a larger array (or a buffer with spare room) would otherwise change the bytes of the file
    without changing a single value. Chunk boundaries of the input do not show in the output either.
    """
    positions = pa.array(range(rows_per_batch), pa.int64())
    for start in range(0, table.num_rows, rows_per_batch):
        pieces = table.slice(start, rows_per_batch).to_batches()
        piece = pieces[0] if len(pieces) == 1 else pa.concat_batches(pieces)
        yield piece.take(positions.slice(0, piece.num_rows))


# -- internals ----------------------------------------------------------------------------------------------


def _family(dtype: pa.DataType) -> str:
    if pa.types.is_dictionary(dtype):
        return _family(dtype.value_type)
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype) or pa.types.is_string_view(dtype):
        return "string"
    if pa.types.is_integer(dtype):
        return "integer"
    if pa.types.is_floating(dtype):
        return "floating"
    return str(dtype)


def _cast_same_family(column: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray | str | None:
    """The column as ``target``; None when the families differ, a message when a value does not fit."""
    if column.type.equals(target):
        return column
    # a column of only nulls (e.g. built from an empty list) has the null type and fits any type; the value
    # checks then refuse its nulls where the schema forbids them
    if _family(column.type) != _family(target) and not pa.types.is_null(column.type):
        return None
    try:
        return column.cast(target, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        return f"cannot cast {column.type} to {target}: {exc}"


def _first_true(mask: pa.ChunkedArray) -> int:
    return int(pc.index(mask, True).as_py())


def _value_problems(columns: dict[str, pa.ChunkedArray]) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    for field in REQUIRED_FIELDS:
        nulls = columns[field.name].null_count
        if not field.nullable and nulls:
            problems.append((field.name, f"{nulls} null value(s); this column may not be null"))
    if problems:
        return problems

    allowed = sorted(s.value for s in Split)
    found = pc.unique(columns[SPLIT]).to_pylist()
    bad = sorted(v for v in found if v not in allowed)
    if bad:
        problems.append((SPLIT, f"values {bad} not allowed; allowed: {', '.join(allowed)}"))

    backwards = pc.less(columns[END_NS], columns[START_NS])
    count = pc.sum(backwards).as_py() or 0
    if count:
        problems.append(
            (END_NS, f"{count} row(s) end before they start (first at row {_first_true(backwards)})")
        )

    duration = columns[DURATION_S]
    bad_duration = pc.or_kleene(pc.is_nan(duration), pc.less(duration, 0.0))
    count = pc.sum(bad_duration).as_py() or 0
    if count:
        problems.append(
            (DURATION_S, f"{count} negative or NaN value(s) (first at row {_first_true(bad_duration)})")
        )

    for name in QUALITY_SCORE_COLUMNS:
        score = columns[name]
        outside = pc.or_kleene(pc.is_nan(score), pc.or_kleene(pc.less(score, 0.0), pc.greater(score, 1.0)))
        outside = pc.fill_null(outside, False)
        count = pc.sum(outside).as_py() or 0
        if count:
            problems.append(
                (name, f"{count} value(s) outside [0, 1] or NaN (first at row {_first_true(outside)})")
            )

    not_hex = pc.invert(pc.match_substring_regex(columns[SOURCE_SHA256], _SHA256_PATTERN))
    count = pc.sum(not_hex).as_py() or 0
    if count:
        problems.append(
            (
                SOURCE_SHA256,
                f"{count} value(s) are not 64 lowercase hex digits (first at row {_first_true(not_hex)})",
            )
        )
    return problems


def _write_ipc(table: pa.Table, path: Path) -> None:
    # No compression: a compressed buffer would have to be decompressed into private memory, which is
    # exactly what memory mapping avoids. One thread and unified dictionaries keep the bytes reproducible.
    options = pa.ipc.IpcWriteOptions(
        metadata_version=pa.ipc.MetadataVersion.V5,
        compression=None,
        use_threads=False,
        unify_dictionaries=True,
    )
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema, options=options) as writer:
        for batch in canonical_batches(table, IPC_BATCH_ROWS):
            writer.write_batch(batch)


def _write_text(text: str, path: Path) -> None:
    path.write_text(text)


def _write_parquet(table: pa.Table, path: Path) -> None:
    with pq.ParquetWriter(
        str(path),
        table.schema,
        version="2.6",
        compression=PARQUET_COMPRESSION,
        compression_level=PARQUET_COMPRESSION_LEVEL,
        use_dictionary=True,
        write_statistics=True,
        data_page_version="1.0",
        store_schema=True,
        write_page_index=False,
    ) as writer:
        for batch in canonical_batches(table, PARQUET_ROW_GROUP_ROWS):
            # one call per batch => one row group per batch, whatever the input's chunking was
            writer.write_batch(batch, row_group_size=PARQUET_ROW_GROUP_ROWS)


def publish_file(final: Path, write: Callable[[Path], object]) -> tuple[Path, str, int]:
    """Write through ``write(tmp_path)``, fsync, hash, rename onto ``final``; return path, sha256, size."""
    tmp = final.with_name(f".{final.name}.tmp-{uuid.uuid4().hex}")
    try:
        write(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
            digest = hashlib.file_digest(f, "sha256").hexdigest()
        size = tmp.stat().st_size
        os.replace(tmp, final)
        fsync_path(final.parent)
    except OSError as exc:
        raise StoreError(f"cannot write manifest file {final}: {exc}") from exc
    finally:
        tmp.unlink(missing_ok=True)
    return final, digest, size
