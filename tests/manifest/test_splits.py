"""Shard on load within one split: every rank gets a near-equal, contiguous share of that split only."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from manifest_helpers import record_sums

from pipeline.enums import Split
from pipeline.manifest import format as mf
from pipeline.manifest.errors import ManifestArgumentError, ManifestSchemaError
from pipeline.manifest.loader import open_manifest
from pipeline.manifest.splits import SPLIT_ROWS_KEY, decode_split_ranges, split_ranges

MakeTable = Callable[..., pa.Table]
SPLITS = [s.value for s in Split]
REPO = Path(__file__).resolve().parents[2]


def ordered(table: pa.Table, keep: tuple[str, ...] = tuple(SPLITS)) -> pa.Table:
    """The rows of ``table`` in the builder's order (train, val, eval), only the splits in ``keep``."""
    split = table.column(mf.SPLIT).to_pylist()
    order = [i for name in SPLITS if name in keep for i, s in enumerate(split) if s == name]
    return table.take(pa.array(order, pa.int64()))


def hand_written(table: pa.Table, path: Path, batch_rows: int) -> Path:
    """``table`` as an IPC file of ``batch_rows``-row batches with only the v1 metadata: a manifest written
    before split ranges were recorded."""
    table = mf.conform_table(table).replace_schema_metadata(
        {mf.FORMAT_VERSION_KEY: b"1", mf.IPC_BATCH_ROWS_KEY: str(batch_rows).encode()}
    )
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        for batch in mf.canonical_batches(table, batch_rows):
            writer.write_batch(batch)
    return record_sums(path)


def assert_ranks_share_each_split(
    path: Path, table: pa.Table, cache: Path, *, memory_map: bool = True
) -> None:
    ids = table.column(mf.EPISODE_ID).to_pylist()
    split_of = dict(zip(ids, table.column(mf.SPLIT).to_pylist(), strict=True))
    for split in SPLITS:
        expected = [i for i in ids if split_of[i] == split]
        for world_size in range(1, 9):
            shares = [
                open_manifest(
                    path,
                    rank=rank,
                    world_size=world_size,
                    cache_dir=cache,
                    split=split,
                    memory_map=memory_map,
                )
                for rank in range(world_size)
            ]
            got = [m.table.column(mf.EPISODE_ID).to_pylist() for m in shares]
            flat = [i for share in got for i in share]
            assert flat == expected, (split, world_size)  # disjoint, in order, covering the split exactly
            sizes = [len(share) for share in got]
            assert max(sizes) - min(sizes) <= 1
            assert all(split_of[i] == split for i in flat)  # never another split's rows
            for m in shares:
                assert m.split == split and m.split_rows == len(expected) and m.total_rows == len(ids)
                # row_start is the row in the whole file, so lineage by row number still works
                assert ids[m.row_start : m.row_stop] == m.table.column(mf.EPISODE_ID).to_pylist()


def test_writer_records_each_split_range(manifest_table: MakeTable, tmp_path: Path) -> None:
    table = ordered(manifest_table(500))
    files = mf.write_manifest(table, tmp_path / "store")
    counts = {s: table.column(mf.SPLIT).to_pylist().count(s) for s in SPLITS}
    assert counts == {"train": 300, "val": 100, "eval": 100}
    schema = pa.ipc.open_file(str(files.ipc_path)).schema
    recorded = json.loads(schema.metadata[SPLIT_ROWS_KEY])
    assert recorded == {"train": [0, 300], "val": [300, 400], "eval": [400, 500]}
    # the Parquet copy carries the same ranges, for readers of row groups
    assert (
        pa.parquet.read_schema(files.parquet_path).metadata[SPLIT_ROWS_KEY] == schema.metadata[SPLIT_ROWS_KEY]
    )


def test_ranks_share_each_split_with_recorded_ranges(manifest_table: MakeTable, tmp_path: Path) -> None:
    table = ordered(manifest_table(203))  # 122 train, 41 val, 40 eval: none divides evenly by most sizes
    files = mf.write_manifest(table, tmp_path / "store")
    assert_ranks_share_each_split(files.ipc_path, table, tmp_path / "c")


@pytest.mark.parametrize("memory_map", [True, False])
def test_ranks_share_each_split_of_a_manifest_without_ranges(
    manifest_table: MakeTable, tmp_path: Path, memory_map: bool
) -> None:
    """An older manifest (no recorded ranges) opens too: its split column is scanned, and ranks still read
    only the stored batches (here 16 rows each) that hold their rows."""
    table = ordered(manifest_table(203))
    path = hand_written(table, tmp_path / "old.arrow", batch_rows=16)
    assert SPLIT_ROWS_KEY not in pa.ipc.open_file(str(path)).schema.metadata
    assert_ranks_share_each_split(path, table, tmp_path / "c", memory_map=memory_map)


def test_an_empty_split_gives_every_rank_an_empty_table(manifest_table: MakeTable, tmp_path: Path) -> None:
    table = ordered(manifest_table(50), keep=("train", "eval"))
    files = mf.write_manifest(table, tmp_path / "store")
    recorded = json.loads(pa.ipc.open_file(str(files.ipc_path)).schema.metadata[SPLIT_ROWS_KEY])
    assert recorded["val"] == [30, 30]
    for world_size in (1, 3):
        for rank in range(world_size):
            m = open_manifest(
                files.ipc_path, rank=rank, world_size=world_size, cache_dir=tmp_path / "c", split="val"
            )
            assert m.rows == 0 and m.split_rows == 0
            assert m.table.schema.names == files_schema_names(files)
            assert list(m.batches(8)) == []
    eval_rows = sum(
        open_manifest(files.ipc_path, rank=r, world_size=4, cache_dir=tmp_path / "c", split="eval").rows
        for r in range(4)
    )
    assert eval_rows == 10


def files_schema_names(files: mf.ManifestFiles) -> list[str]:
    return pa.ipc.open_file(str(files.ipc_path)).schema.names


def test_train_is_the_default_split(manifest_table: MakeTable, tmp_path: Path) -> None:
    table = ordered(manifest_table(100))
    files = mf.write_manifest(table, tmp_path / "store")
    views = [open_manifest(files.ipc_path, rank=r, world_size=2, cache_dir=tmp_path / "c") for r in range(2)]
    assert [v.split for v in views] == ["train", "train"]
    assert [v.rows for v in views] == [30, 30]
    assert set(pc.unique(views[1].table.column(mf.SPLIT)).to_pylist()) == {"train"}
    whole = open_manifest(files.ipc_path, rank=1, world_size=2, cache_dir=tmp_path / "c", split=None)
    assert (whole.row_start, whole.rows, whole.split_rows) == (50, 50, 100)
    unsharded = open_manifest(
        files.ipc_path, rank=1, world_size=2, cache_dir=tmp_path / "c", split="val", shard_on_load=False
    )
    assert (unsharded.row_start, unsharded.rows) == (60, 20)


def test_split_rows_stay_in_the_shared_mapped_pages(manifest_table: MakeTable, tmp_path: Path) -> None:
    files = mf.write_manifest(ordered(manifest_table(20_000)), tmp_path / "store")
    open_manifest(files.ipc_path, rank=0, world_size=1, cache_dir=tmp_path / "c")  # fill the cache first
    before = pa.total_allocated_bytes()
    m = open_manifest(files.ipc_path, rank=1, world_size=3, cache_dir=tmp_path / "c", split="train")
    assert m.rows == 4000
    assert pa.total_allocated_bytes() - before < 64 * 1024  # metadata only, no copied rows


def test_a_manifest_with_interleaved_splits_is_refused_by_split_and_opens_whole(
    manifest_table: MakeTable, tmp_path: Path
) -> None:
    table = manifest_table(40)  # train, train, train, val, eval, train, ...
    files = mf.write_manifest(table, tmp_path / "store")
    assert SPLIT_ROWS_KEY not in pa.ipc.open_file(str(files.ipc_path)).schema.metadata
    with pytest.raises(ManifestSchemaError, match="the rows of split 'train' are not one contiguous range"):
        open_manifest(files.ipc_path, rank=0, world_size=2, cache_dir=tmp_path / "c")
    whole = open_manifest(files.ipc_path, rank=0, world_size=2, cache_dir=tmp_path / "c", split=None)
    assert whole.rows == 20


def test_unknown_split_is_named(manifest_table: MakeTable, tmp_path: Path) -> None:
    files = mf.write_manifest(ordered(manifest_table(10)), tmp_path / "store")
    with pytest.raises(
        ManifestArgumentError, match=r"split 'test' is not allowed; expected one of train, val, eval"
    ):
        open_manifest(files.ipc_path, rank=0, world_size=1, cache_dir=tmp_path / "c", split="test")


def test_recorded_ranges_that_lie_are_not_trusted(
    manifest_table: MakeTable, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    table = ordered(manifest_table(100))  # train 0..60, val 60..80, eval 80..100
    conformed = mf.conform_table(table)
    lie = json.dumps({"train": [0, 40], "val": [40, 80], "eval": [80, 100]}).encode()
    conformed = conformed.replace_schema_metadata({**conformed.schema.metadata, SPLIT_ROWS_KEY: lie})
    path = tmp_path / "lying.arrow"
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, conformed.schema) as writer:
        writer.write_table(conformed)
    record_sums(path)
    m = open_manifest(path, rank=1, world_size=2, cache_dir=tmp_path / "c", split="val")
    assert set(m.table.column(mf.SPLIT).to_pylist()) == {"val"}
    assert (m.split_start, m.split_stop, m.row_start, m.rows) == (60, 80, 70, 10)
    assert any("scanning" in r.message for r in caplog.records)


def test_split_ranges_of_column_chunks() -> None:
    chunks = [
        pa.array(["train", "train"]),
        pa.array(["train", "val"]),
        pa.array([], pa.string()),
        pa.array(["eval"]),
    ]
    assert split_ranges(chunks) == {"train": (0, 3), "val": (3, 4), "eval": (4, 5)}
    assert split_ranges([pa.array(["train", "eval"])]) == {"train": (0, 1), "val": (1, 1), "eval": (1, 2)}
    assert split_ranges([pa.array(["train", "val"]), pa.array(["train"])]) is None  # train in two places
    assert split_ranges([pa.array(["train", "val"] * 1000)]) is None  # many runs: stops early


@pytest.mark.parametrize(
    "value",
    [
        b"not json",
        b"[]",
        b'{"train": [0, 5]}',
        b'{"train": [0, 6], "val": [5, 10]}',
        b'{"train": [0, 11]}',
        b'{"train": [0, "10"]}',
    ],
)
def test_impossible_recorded_ranges_are_refused(value: bytes) -> None:
    assert decode_split_ranges(value, 10) is None
    assert decode_split_ranges(b'{"train": [0, 6], "val": [6, 10], "eval": [10, 10]}', 10) is not None


def test_opening_a_split_does_not_import_pandas(manifest_table: MakeTable, tmp_path: Path) -> None:
    """Turning a Python value into Arrow imports pandas (a second or more): the loader must not do it."""
    files = mf.write_manifest(ordered(manifest_table(100)), tmp_path / "store")
    code = (
        "import sys; from pipeline.manifest.loader import open_manifest; "
        f"m = open_manifest({str(files.ipc_path)!r}, rank=1, world_size=2, cache_dir={str(tmp_path / 'c')!r}); "
        "next(m.batches(8)); print(m.rows, 'pandas' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.split() == ["30", "False"]


def test_a_contiguous_split_opens_when_the_other_splits_are_in_pieces(
    manifest_table: MakeTable, tmp_path: Path
) -> None:
    """train first and whole, then val and eval interleaved: train opens by split, val is refused."""
    table = ordered(manifest_table(60), keep=("train",))
    tail = ordered(manifest_table(60), keep=("val", "eval"))
    tail = tail.take(pc.sort_indices(tail, sort_keys=[("episode_id", "ascending")]))  # val, eval, val, ...
    mixed = pa.concat_tables([table, tail.cast(table.schema)])
    path = hand_written(mixed, tmp_path / "mixed.arrow", batch_rows=16)
    shares = [
        open_manifest(path, rank=r, world_size=3, cache_dir=tmp_path / "c", split="train") for r in range(3)
    ]
    assert sum(s.rows for s in shares) == table.num_rows
    assert {v for s in shares for v in s.table.column(mf.SPLIT).to_pylist()} == {"train"}
    with pytest.raises(ManifestSchemaError, match="split 'val' are not one contiguous range"):
        open_manifest(path, rank=0, world_size=1, cache_dir=tmp_path / "c", split="val")


def test_a_file_whose_batches_and_recorded_ranges_both_lie_is_read_right(
    manifest_table: MakeTable, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # It declares 16-row batches but holds 16/16/4/16, and its recorded ranges fit the 64 rows the declared
    # layout implies: the recorded-ranges check itself runs into the wrong layout (it used to escape as a
    # private exception) and the loader must start over from every batch's own row count.
    table = manifest_table(52)
    split_column = pa.array(["train"] * 16 + ["val"] * 16 + ["eval"] * 20)
    table = table.set_column(table.schema.get_field_index(mf.SPLIT), mf.SPLIT, split_column)
    conformed = mf.conform_table(table)
    # val's recorded rows (16..32) are right, so only the check of the row just after them (32, in the
    # 4-row batch) finds the layout out
    lie = json.dumps({"train": [0, 16], "val": [16, 32], "eval": [32, 64]}).encode()
    conformed = conformed.replace_schema_metadata(
        {mf.FORMAT_VERSION_KEY: b"1", mf.IPC_BATCH_ROWS_KEY: b"16", SPLIT_ROWS_KEY: lie}
    )
    path = tmp_path / "lying-twice.arrow"
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, conformed.schema) as writer:
        offset = 0
        for size in (16, 16, 4, 16):
            writer.write_batch(conformed.slice(offset, size).to_batches()[0])
            offset += size
    record_sums(path)
    splits = conformed.column(mf.SPLIT).to_pylist()
    for split in SPLITS:
        m = open_manifest(path, rank=0, world_size=1, cache_dir=tmp_path / "c", split=split)
        assert (m.split_start, m.split_stop) == (splits.index(split), len(splits) - splits[::-1].index(split))
        assert set(m.table.column(mf.SPLIT).to_pylist()) == {split}
