"""The warehouse sandbox: no file access, no writes from queries, no way to unlock it; values are bound."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from sqlalchemy.engine import Engine
from synthetic_catalog import SyntheticCatalog

from pipeline.warehouse import QueryError, WarehouseMissingError, open_warehouse, run_query, sync
from pipeline.warehouse.connection import WarehouseLimits
from pipeline.warehouse.errors import QueryResourceError, QueryTimeoutError

pytestmark = pytest.mark.integration

INJECTION = "x'; DROP TABLE catalog.episodes; --"


@pytest.fixture
def synced(catalog: SyntheticCatalog, catalog_engine: Engine, warehouse_path: Path) -> Path:
    with catalog.session() as s:
        for i in range(3):
            catalog.episode(s, vendor="acme", session_id=f"s{i}")
    sync(catalog_engine, warehouse_path)
    return warehouse_path


def test_query_cannot_read_an_arbitrary_file(synced: Path) -> None:
    with pytest.raises(QueryError, match="disabled by configuration"):
        run_query(synced, "SELECT * FROM read_csv('/etc/passwd')")
    with pytest.raises(QueryError, match="disabled by configuration"):
        run_query(synced, "SELECT count(*) FROM glob('/etc/*')")


@pytest.mark.parametrize(
    "sql",
    [
        "CREATE TABLE catalog.stolen AS SELECT 1",
        "DROP TABLE catalog.episodes",
        "SELECT 1; DROP TABLE catalog.episodes",
        "COPY catalog.episodes TO '/tmp/episodes.csv'",
        "SET enable_external_access = true",
    ],
)
def test_query_refuses_anything_but_one_select(synced: Path, sql: str) -> None:
    with pytest.raises(QueryError):
        run_query(synced, sql)
    assert run_query(synced, "SELECT count(*) AS n FROM catalog.episodes").table.to_pylist() == [{"n": 3}]


def test_the_connection_itself_refuses_writes_files_and_unlocking(synced: Path, tmp_path: Path) -> None:
    """Below the statement check: SQL that reaches the read-only connection still cannot do harm."""
    target = tmp_path / "out.csv"
    con = open_warehouse(synced, read_only=True)
    try:
        with pytest.raises(duckdb.Error, match="read-only"):
            con.execute("INSERT INTO catalog.vendors (id, name) VALUES (99, 'x')")
        with pytest.raises(duckdb.Error, match="read-only"):
            con.execute("DELETE FROM catalog.episodes")
        with pytest.raises(duckdb.Error, match="disabled by configuration"):
            con.execute(f"COPY (SELECT 1) TO '{target}'")
        with pytest.raises(duckdb.Error, match="disabled by configuration"):
            con.execute(f"ATTACH '{tmp_path / 'other.duckdb'}' AS other")
        with pytest.raises(duckdb.Error, match="locked"):
            con.execute("SET enable_external_access = true")
        with pytest.raises(duckdb.Error, match="locked"):
            con.execute("SET memory_limit = '100GB'")
        with pytest.raises(duckdb.Error):
            con.execute("INSTALL httpfs")
    finally:
        con.close()
    assert not target.exists()


def test_the_sync_connection_is_sandboxed_too(synced: Path, tmp_path: Path) -> None:
    con = open_warehouse(synced, read_only=False)
    try:
        with pytest.raises(duckdb.Error, match="disabled by configuration"):
            con.execute("SELECT * FROM read_csv('/etc/passwd')")
        with pytest.raises(duckdb.Error, match="disabled by configuration"):
            con.execute(f"COPY (SELECT 1) TO '{tmp_path / 'out.csv'}'")
    finally:
        con.close()


def test_parameter_values_are_bound_not_executed(synced: Path) -> None:
    result = run_query(
        synced, "SELECT count(*) AS n FROM episode_view WHERE vendor = $vendor", {"vendor": INJECTION}
    )
    assert result.table.to_pylist() == [{"n": 0}]
    result = run_query(
        synced, "SELECT count(*) AS n FROM episode_view WHERE vendor = $vendor", {"vendor": "acme"}
    )
    assert result.table.to_pylist() == [{"n": 3}]


def test_results_are_capped(synced: Path) -> None:
    result = run_query(synced, "SELECT * FROM range(100000)", max_rows=1000)
    assert result.table.num_rows == 1000
    assert result.truncated
    assert not run_query(synced, "SELECT * FROM range(10)", max_rows=1000).truncated


def test_a_missing_warehouse_is_named(tmp_path: Path) -> None:
    with pytest.raises(WarehouseMissingError, match="no warehouse at"):
        run_query(tmp_path / "none.duckdb", "SELECT 1")
    assert not (tmp_path / "none.duckdb").exists()


# -- bounded queries -----------------------------------------------------------------------------------------

CROSS_JOIN = "SELECT count(*) AS n FROM range(100000000) a, range(100000000) b WHERE a.range + b.range = -1"
ENDLESS = "WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t) SELECT max(n) FROM t"


@pytest.mark.parametrize("sql", [CROSS_JOIN, ENDLESS])
def test_a_query_that_never_ends_is_stopped_at_its_time_limit(synced: Path, sql: str) -> None:
    import time

    started = time.monotonic()
    with pytest.raises(QueryTimeoutError, match=r"stopped after 1 s, the time limit"):
        run_query(synced, sql, limits=WarehouseLimits(timeout_s=1, memory_limit_bytes=256 << 20))
    assert time.monotonic() - started < 30
    # the interruption is the query's alone: the next one on a fresh connection runs
    assert run_query(synced, "SELECT 1 AS one").table.to_pylist() == [{"one": 1}]


def test_a_query_gets_a_memory_and_spill_limit_that_sql_cannot_raise(synced: Path) -> None:
    settings = run_query(
        synced,
        "SELECT current_setting('memory_limit') AS memory, current_setting('max_temp_directory_size') AS spill",
    ).table.to_pylist()
    assert settings == [{"memory": "2.0 GiB", "spill": "8.0 GiB"}]  # not DuckDB's 80% of RAM
    sort = (
        "SELECT x FROM (SELECT hash(range) AS x, repeat('x', 200) AS pad FROM range(5000000)) ORDER BY x, pad"
    )
    with pytest.raises(
        QueryResourceError, match=r"[Oo]ut of [Mm]emory.*67108864 bytes of memory, 0 bytes of spill"
    ):
        run_query(synced, sort, limits=WarehouseLimits(memory_limit_bytes=64 << 20, spill_limit_bytes=0))


def test_sluice_query_reports_the_time_limit_without_a_traceback(synced: Path) -> None:
    import subprocess
    import sys

    sluice = Path(sys.executable).with_name("sluice")
    done = subprocess.run(
        [str(sluice), "query", "--warehouse", str(synced), "--timeout-s", "1", ENDLESS],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "stopped after 1 s" in done.stderr and "Traceback" not in done.stderr


def test_duckdb_s_advice_to_raise_a_setting_is_not_passed_on(synced: Path) -> None:
    """DuckDB answers a deeply nested expression with 'Use "SET max_expression_depth TO x"', which the
    sandbox refuses: `sluice query` says what to write instead, without a traceback."""
    import subprocess
    import sys

    deep = "SELECT " + " + ".join(["1"] * 1500)  # a sum of 1,500 terms nests 1,499 deep
    sluice = Path(sys.executable).with_name("sluice")
    done = subprocess.run(
        [str(sluice), "query", "--warehouse", str(synced), deep], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, done.stderr
    said = " ".join(done.stderr.split())
    assert "Max expression depth limit of 1000 exceeded" in said, said
    assert "cannot SET max_expression_depth: write a long chain of OR, AND or + as" in said, said
    assert 'Use "SET' not in said and "Traceback" not in said
    # a query's own text that reads like that advice is left as it is
    with pytest.raises(QueryError) as refused:
        run_query(synced, """SELECT CAST('Use "SET x TO 1" to fix.' AS INTEGER)""")
    assert """Could not convert string 'Use "SET x TO 1" to fix.' to INT32""" in str(refused.value)
