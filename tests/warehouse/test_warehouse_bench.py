"""``sluice bench warehouse`` at a tiny size: the generated table is as wide as the view, a prefix of it is
the same data at any size, and both engines give the same answers (the run checks, then reports)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pyarrow as pa
import pytest

from pipeline.bench import warehouse as bench
from pipeline.settings import Settings


def test_generated_table_has_the_views_columns_and_stable_prefixes() -> None:
    schema = bench.episode_view_schema()
    assert len(schema) >= 50  # the wide view, not a toy
    short = pa.Table.from_batches(list(bench.chunks(schema, 1_500)))
    longer = pa.Table.from_batches(list(bench.chunks(schema, 3_000)))
    assert short.column_names == [name for name, _ in schema]
    assert longer.slice(0, 1_500).equals(short)
    assert short.column("episode_id").to_pylist() == list(range(1_500))


def test_sizes_parse() -> None:
    assert bench.parse_size("default") == bench.SIZES["default"]
    assert bench.parse_size("20m:2m") == (20_000_000, 2_000_000)
    with pytest.raises(ValueError, match="postgres rows <= duckdb rows"):
        bench.parse_size("1m:2m")
    with pytest.raises(ValueError, match="warehouse bench size"):
        bench.parse_size("huge")


@pytest.mark.integration
@pytest.mark.slow
def test_tiny_run_reports_both_queries() -> None:
    # Not under pytest's private tmp folder: as root, the Postgres server user must reach its data folder.
    home = Path(tempfile.mkdtemp(prefix="sluice-test-bench-"))
    home.chmod(0o755)
    try:
        results = bench.run("tiny", Settings(home=home))
    finally:
        shutil.rmtree(home, ignore_errors=True)
    assert {"duckdb_speedup", "duckdb_speedup_filter", "duckdb_speedup_aggregate"} <= results.keys()
    assert results["duckdb_speedup"] == min(
        results["duckdb_speedup_filter"], results["duckdb_speedup_aggregate"]
    )
    same_rows = results["detail"]["same_rows"]
    assert same_rows["filter"]["postgres"]["rows"] == same_rows["filter"]["duckdb"]["rows"] > 0
    assert same_rows["aggregate"]["postgres"]["rows"] == 80  # 20 vendors x 4 states
    assert results["duckdb_speedup_filter_vs_btree"] > 0
