"""The manifest files: schema, checks and byte-identical writes."""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

from pipeline.manifest import format as mf
from pipeline.manifest.errors import ManifestSchemaError

MakeTable = Callable[..., pa.Table]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _rechunk(table: pa.Table, cuts: list[int]) -> pa.Table:
    """The same rows split into chunks at ``cuts``, each chunk a slice of a larger array."""
    bounds = [0, *cuts, table.num_rows]
    pieces = [table.slice(a, b - a) for a, b in itertools.pairwise(bounds)]
    return pa.concat_tables(pieces)


def test_same_table_gives_identical_bytes_whatever_its_chunking(
    manifest_table: MakeTable, tmp_path: Path
) -> None:
    table = manifest_table(3000, extra=True)
    first = mf.write_manifest(table, tmp_path / "a")
    second = mf.write_manifest(table, tmp_path / "b")
    # same rows, other chunk boundaries, foreign schema metadata (as pandas would leave)
    other = _rechunk(table, [1, 999, 2047]).replace_schema_metadata({b"pandas": b"{}"})
    third = mf.write_manifest(other, tmp_path / "c")
    assert first.ipc_sha256 == second.ipc_sha256 == third.ipc_sha256
    assert first.parquet_sha256 == second.parquet_sha256 == third.parquet_sha256
    # the returned digests are the digests of what is on disk
    assert _sha256(third.ipc_path) == first.ipc_sha256
    assert _sha256(third.parquet_path) == first.parquet_sha256
    assert first.ipc_size_bytes == first.ipc_path.stat().st_size


def test_a_validity_bitmap_without_nulls_does_not_change_the_bytes(
    manifest_table: MakeTable, tmp_path: Path
) -> None:
    table = manifest_table(50)
    plain = pa.array([0.25] * 50, pa.float32())
    with_bitmap = pa.array([0.25] * 50 + [None], pa.float32()).slice(0, 50)
    assert with_bitmap.buffers()[0] is not None
    index = table.schema.get_field_index(mf.QUALITY_SYNC)
    a = mf.write_manifest(table.set_column(index, mf.QUALITY_SYNC, plain), tmp_path / "a")
    b = mf.write_manifest(table.set_column(index, mf.QUALITY_SYNC, with_bitmap), tmp_path / "b")
    assert a.ipc_sha256 == b.ipc_sha256
    assert a.parquet_sha256 == b.parquet_sha256


def test_different_rows_give_different_bytes(manifest_table: MakeTable, tmp_path: Path) -> None:
    a = mf.write_manifest(manifest_table(100, seed=1), tmp_path / "a")
    b = mf.write_manifest(manifest_table(100, seed=2), tmp_path / "b")
    assert a.ipc_sha256 != b.ipc_sha256
    assert a.parquet_sha256 != b.parquet_sha256


def test_both_files_hold_the_same_rows_in_manifest_form(manifest_table: MakeTable, tmp_path: Path) -> None:
    table = manifest_table(1000, extra=True)
    # required columns out of order: the writer puts them first, extras after in their given order
    table = table.select(["robot", *reversed(mf.REQUIRED_COLUMNS), "tags"])
    files = mf.write_manifest(table, tmp_path)
    with pa.memory_map(str(files.ipc_path)) as source:
        from_ipc = ipc.open_file(source).read_all()
    from_parquet = pq.read_table(files.parquet_path)
    assert from_ipc.column_names == [*mf.REQUIRED_COLUMNS, "robot", "tags"]
    assert from_ipc.schema.metadata == mf.SCHEMA_METADATA
    assert from_ipc.equals(from_parquet)
    assert from_ipc.select(table.column_names).to_pydict() == table.to_pydict()
    assert files.num_rows == 1000


def test_files_are_laid_out_in_fixed_batches_and_row_groups(
    manifest_table: MakeTable, tmp_path: Path
) -> None:
    rows = mf.IPC_BATCH_ROWS + 10
    files = mf.write_manifest(manifest_table(rows), tmp_path)
    reader = ipc.open_file(pa.memory_map(str(files.ipc_path)))
    assert [reader.get_batch(i).num_rows for i in range(reader.num_record_batches)] == [mf.IPC_BATCH_ROWS, 10]
    meta = pq.ParquetFile(files.parquet_path).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [mf.PARQUET_ROW_GROUP_ROWS, 10]
    assert meta.row_group(0).column(0).compression.lower() == mf.PARQUET_COMPRESSION


def test_publishing_leaves_no_temporary_files(manifest_table: MakeTable, tmp_path: Path) -> None:
    mf.write_manifest(manifest_table(10), tmp_path)
    mf.write_manifest(manifest_table(20), tmp_path)  # a rewrite replaces the files by rename
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        mf.IPC_FILE_NAME,
        mf.PARQUET_FILE_NAME,
        mf.SUMS_FILE_NAME,
    ]
    assert pq.read_metadata(tmp_path / mf.PARQUET_FILE_NAME).num_rows == 20


def test_empty_manifest_is_written(manifest_table: MakeTable, tmp_path: Path) -> None:
    files = mf.write_manifest(manifest_table(0), tmp_path)
    assert files.num_rows == 0
    assert ipc.open_file(pa.memory_map(str(files.ipc_path))).read_all().num_rows == 0
    assert pq.read_table(files.parquet_path).schema.names == list(mf.REQUIRED_COLUMNS)


def test_same_family_types_are_cast(manifest_table: MakeTable) -> None:
    table = manifest_table(20)
    table = table.set_column(0, mf.EPISODE_ID, table.column(mf.EPISODE_ID).cast(pa.large_string()))
    vendor_index = table.schema.get_field_index(mf.VENDOR)
    table = table.set_column(vendor_index, mf.VENDOR, pc.dictionary_encode(table.column(mf.VENDOR)))
    score_index = table.schema.get_field_index(mf.QUALITY_MOTION)
    table = table.set_column(
        score_index, mf.QUALITY_MOTION, table.column(mf.QUALITY_MOTION).cast(pa.float64())
    )
    conformed = mf.conform_table(table)
    assert conformed.schema.remove_metadata().equals(mf.MANIFEST_SCHEMA.remove_metadata())
    assert conformed.column(mf.VENDOR).to_pylist() == manifest_table(20).column(mf.VENDOR).to_pylist()


def test_every_problem_is_named_at_once(manifest_table: MakeTable) -> None:
    table = manifest_table(10)
    names = table.column_names

    def replace(t: pa.Table, name: str, values: pa.Array) -> pa.Table:
        return t.set_column(names.index(name), name, values)

    bad = replace(table, mf.SPLIT, pa.array(["train"] * 9 + ["holdout"]))
    bad = replace(bad, mf.END_NS, pa.array([0] * 10, pa.int64()))
    bad = replace(bad, mf.QUALITY_VISUAL, pa.array([1.5] + [0.5] * 9, pa.float32()))
    bad = replace(bad, mf.SOURCE_SHA256, pa.array(["ABC"] + ["0" * 64] * 9))
    bad = replace(bad, mf.DURATION_S, pa.array([-1.0] + [1.0] * 9))
    with pytest.raises(ManifestSchemaError) as caught:
        mf.conform_table(bad)
    message = str(caught.value)
    assert "'holdout'" in message and "allowed: eval, train, val" in message
    assert "10 row(s) end before they start (first at row 0)" in message
    assert f"{mf.QUALITY_VISUAL}: 1 value(s) outside [0, 1]" in message
    assert f"{mf.SOURCE_SHA256}: 1 value(s) are not 64 lowercase hex digits" in message
    assert f"{mf.DURATION_S}: 1 negative or NaN" in message
    assert len(caught.value.problems) == 5


def test_missing_columns_wrong_types_and_nulls_are_refused(manifest_table: MakeTable) -> None:
    table = manifest_table(10).drop_columns([mf.URI])
    index = table.schema.get_field_index(mf.START_NS)
    table = table.set_column(index, mf.START_NS, table.column(mf.START_NS).cast(pa.string()))
    with pytest.raises(ManifestSchemaError) as caught:
        mf.conform_table(table)
    assert dict(caught.value.problems) == {
        mf.URI: f"missing; required columns: {', '.join(mf.REQUIRED_COLUMNS)}",
        mf.START_NS: "type string cannot become int64",
    }
    with_null = manifest_table(10)
    with_null = with_null.set_column(1, mf.URI, pa.array([None] + ["u"] * 9, pa.string()))
    with pytest.raises(ManifestSchemaError, match=r"uri: 1 null value\(s\); this column may not be null"):
        mf.conform_table(with_null)


def test_integer_overflow_on_cast_is_refused(manifest_table: MakeTable) -> None:
    table = manifest_table(3)
    index = table.schema.get_field_index(mf.START_NS)
    table = table.set_column(index, mf.START_NS, pa.array([2**63, 0, 0], pa.uint64()))
    with pytest.raises(ManifestSchemaError, match="start_ns: cannot cast uint64 to int64"):
        mf.conform_table(table)


def test_validate_schema_checks_version_and_types() -> None:
    mf.validate_schema(mf.MANIFEST_SCHEMA, "ok")
    newer = mf.MANIFEST_SCHEMA.with_metadata({mf.FORMAT_VERSION_KEY: b"99"})
    with pytest.raises(ManifestSchemaError, match="format version b'99'"):
        mf.validate_schema(newer, "newer")
    wrong = mf.MANIFEST_SCHEMA.set(2, pa.field(mf.START_NS, pa.int32()))
    with pytest.raises(ManifestSchemaError, match="start_ns: type int32, expected int64"):
        mf.validate_schema(wrong, "wrong")
