"""``sluice bench warehouse``: curation queries in DuckDB against the same queries and data in Postgres.

A table as wide as the warehouse's ``episode_view`` (same column names and types, read from the view
itself, so the width follows the view) is generated in fixed 100k-row chunks from a seeded generator, so any
prefix of it is the same data whichever engine loads it:

* DuckDB, through the product's sandboxed connection, holds ``duckdb_rows`` rows (10M by default, the
  issue's 50M with ``--size large``). The file is kept under ``<home>/bench/warehouse/`` for later runs.
* Postgres (a :class:`~pipeline.pgserver.LocalPostgres` started under ``<home>/bench/``, tuned for the
  machine, removed afterwards) holds the first ``postgres_rows`` rows (1M by default, 5M with ``large``:
  the largest sizes whose load and queries fit in a few minutes, resp. a quarter of an hour, on 2 cores).
  The same prefix is also loaded in a second DuckDB file, so the headline compares the two engines on
  identical data.

Two queries, with the same SQL text in both engines:

* ``filter``: three-column filter (vendor, state, gap rate), four columns out, a deterministic 10% hash
  sample (``md5`` exists in both), ordered;
* ``aggregate``: per vendor and state, counts, sums, a mean and a max.

Postgres runs each query on a plain heap (parallel sequential scan), as a curation query over any of the
view's columns meets it and as the issue's reference figures were measured; ``duckdb_speedup`` is the
smaller of the two queries' speedups against that. The filter then runs again with a btree index built for
exactly its three columns, Postgres' best case, reported beside as ``duckdb_speedup_filter_vs_btree``.
The two engines alternate run by run (so both meet the same load on a shared machine), :data:`REPEATS`
runs each after a warm-up run (warm caches on both sides); a speedup is the median of the paired ratios.
The answers of both engines are compared (row counts and checksums) before any time is reported.
"""

from __future__ import annotations

import logging
import shutil
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.errors import SluiceError, UnknownChoiceError
from pipeline.settings import Settings

log = logging.getLogger(__name__)

#: (DuckDB rows, Postgres rows) per named size.
#: (DuckDB rows, Postgres rows) per named size. ``default`` is what fits in a few minutes on 2 cores (about
#: 10 CPU-seconds per million generated rows, most of it DuckDB compressing the text columns; loading
#: Postgres costs about as much again); ``large`` is the issue's 50M-row table against Postgres at 5M.
SIZES = {"default": (10_000_000, 1_000_000), "large": (50_000_000, 5_000_000), "small": (2_000_000, 200_000),
         "tiny": (20_000, 20_000)}  # fmt: skip
TABLE = "episodes_wide"
#: Rows per generated chunk: the unit of determinism (chunk k is the same data in every run), small enough
#: that tiny sizes stay cheap, large enough that per-chunk overhead vanishes at 50M rows.
CHUNK_ROWS = 100_000
#: Timed runs per query and engine (after a warm-up run); the engines alternate run by run.
REPEATS = 5
#: Bump when the generated data changes, so an old cached DuckDB file is not reused.
GENERATOR_VERSION = 2
SEED = 20_240_101
_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
#: Byte value -> its two hex digits, as one 2-byte cell (so a hex string is one gather).
_HEX_PAIRS = (
    np.stack([_HEX[np.arange(256) >> 4], _HEX[np.arange(256) & 15]], axis=1).copy().view(np.uint16)[:, 0]
)
_VENDORS = [f"vendor_{i:02d}" for i in range(20)]
_STATES = ["accepted", "accepted_with_flags", "quarantined", "duplicate"]
_STATE_P = [0.70, 0.15, 0.10, 0.05]
_TASKS = ["pick_place", "stack", "pour", "wipe", "open_drawer", "fold", "insert", "handover"]
_TOPICS = ["/cam/front", "/cam/wrist", "/cam/left", "/joint_states", "/gripper", "/tf"]
_EPOCH_NS = 1_704_067_200 * 10**9  # 2024-01-01T00:00:00Z

QUERIES = {
    "filter": f"""
        SELECT episode_id, transcoded_uri, start_time_ns, duration_s
        FROM {TABLE}
        WHERE vendor = 'vendor_07' AND state IN ('accepted', 'accepted_with_flags') AND gap_rate_max < 0.05
          AND left(md5(CAST(episode_id AS VARCHAR)), 2) < '1a'
        ORDER BY episode_id""",
    "aggregate": f"""
        SELECT vendor, state, count(*) AS episodes, sum(duration_s) AS duration_s,
               avg(gap_rate_max) AS gap_rate_mean, max(skew_abs_max_ns) AS skew_abs_max_ns,
               CAST(sum(message_count) AS DOUBLE PRECISION) AS messages
        FROM {TABLE}
        GROUP BY vendor, state
        ORDER BY vendor, state""",
}

_PG_TYPES = {
    "BIGINT": "bigint", "INTEGER": "integer", "DOUBLE": "double precision", "FLOAT": "real",
    "VARCHAR": "text", "BOOLEAN": "boolean", "TIMESTAMP": "timestamp", "TIMESTAMP WITH TIME ZONE": "timestamptz",
    "VARCHAR[]": "text[]", "BIGINT[]": "bigint[]", "JSON": "jsonb",
}  # fmt: skip

#: Postgres settings for a 2-core, 20+ GB machine: the table fits in shared buffers, sorts and hashes in
#: work_mem, one parallel worker per core.
_PG_TUNING = {
    "shared_buffers": "4GB",
    "work_mem": "256MB",
    "effective_cache_size": "12GB",
    "max_parallel_workers_per_gather": "2",
    "random_page_cost": "1.1",  # SSD-backed VM disk
}


def parse_size(size: str) -> tuple[int, int]:
    """``default``/``large``/``small``/``tiny``, or ``<duckdb rows>:<postgres rows>`` with k/m suffixes."""
    if size in SIZES:
        return SIZES[size]
    try:
        duck, _, pg = size.lower().partition(":")
        rows = tuple(_count(part) for part in (duck, pg or duck))
    except ValueError:
        raise UnknownChoiceError("warehouse bench size", size, [*SIZES, "<rows>:<rows>", "20m:2m"]) from None
    if rows[1] > rows[0]:
        raise UnknownChoiceError("warehouse bench size", size, ["postgres rows <= duckdb rows"])
    return rows[0], rows[1]


def _count(text: str) -> int:
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1:], 1)
    value = int(text[:-1] if scale > 1 else text) * scale
    if value < 1:
        raise ValueError(text)
    return value


def run(size: str, settings: Settings) -> dict[str, Any]:
    """Run the benchmark (see the module doc); returns the results with ``duckdb_speedup`` on top."""
    from pipeline.warehouse.connection import open_warehouse

    duck_rows, pg_rows = parse_size(size)
    bench_dir = settings.home_abs / "bench" / "warehouse"
    bench_dir.mkdir(parents=True, exist_ok=True)
    schema = episode_view_schema()
    big = bench_dir / f"rows-{duck_rows}-v{GENERATOR_VERSION}.duckdb"
    generate_s = _ensure_duckdb(big, schema, duck_rows)
    same = bench_dir / f"rows-{pg_rows}-v{GENERATOR_VERSION}.duckdb"
    _ensure_duckdb(same, schema, pg_rows)

    con = open_warehouse(big, read_only=True)
    try:
        alone = {name: _paired(partial(_duck_query, con, sql))["duckdb"] for name, sql in QUERIES.items()}
    finally:
        con.close()
    con = open_warehouse(same, read_only=True)
    try:
        with _postgres(settings.home_abs / "bench" / "warehouse-pg", schema, pg_rows) as (cur, load):
            # interleaved, query by query, so that both engines meet the same load on a shared machine
            plain = {
                name: _paired(partial(_duck_query, con, sql), partial(_pg_query, cur, sql))
                for name, sql in QUERIES.items()
            }
            cur.execute(f"CREATE INDEX ON {TABLE} (vendor, state, gap_rate_max)")
            cur.execute(f"ANALYZE {TABLE}")
            btree = _paired(
                partial(_duck_query, con, QUERIES["filter"]), partial(_pg_query, cur, QUERIES["filter"])
            )
    finally:
        con.close()

    results: dict[str, Any] = {
        "duckdb_speedup": round(min(plain[name]["speedup"] for name in QUERIES), 2),
        "duckdb_speedup_filter": plain["filter"]["speedup"],
        "duckdb_speedup_aggregate": plain["aggregate"]["speedup"],
        "duckdb_speedup_filter_vs_btree": btree["speedup"],
        "columns": len(schema),
        "duckdb_rows": duck_rows,
        "postgres_rows": pg_rows,
        "duckdb_filter_s": plain["filter"]["duckdb"]["median_s"],
        "duckdb_aggregate_s": plain["aggregate"]["duckdb"]["median_s"],
        "postgres_filter_s": plain["filter"]["postgres"]["median_s"],
        "postgres_filter_btree_s": btree["postgres"]["median_s"],
        "postgres_aggregate_s": plain["aggregate"]["postgres"]["median_s"],
        "postgres_table_bytes": load["table_bytes"],
        "postgres_load_s": load["seconds"],
        f"duckdb_{_label(duck_rows)}_filter_s": alone["filter"]["median_s"],
        f"duckdb_{_label(duck_rows)}_aggregate_s": alone["aggregate"]["median_s"],
        "duckdb_generate_s": generate_s,
        "duckdb_file_bytes": big.stat().st_size,
        "detail": {"same_rows": plain, "filter_vs_btree": btree, f"duckdb_alone_{_label(duck_rows)}": alone},
        "note": (
            f"Postgres at {pg_rows:,} rows and DuckDB on the same rows, interleaved (speedups = median of "
            f"paired ratios); DuckDB alone at {duck_rows:,} rows"
        ),
    }
    log.info("warehouse bench: %s", {k: v for k, v in results.items() if k != "detail"})
    return results


def _label(rows: int) -> str:
    return f"{rows // 1_000_000}m" if rows % 1_000_000 == 0 else str(rows)


# -- the generated table ---------------------------------------------------------------------------------


def episode_view_schema() -> list[tuple[str, str]]:
    """(column, DuckDB type) of ``episode_view``, read from the view on an empty in-memory warehouse."""
    import duckdb

    from pipeline.warehouse.tables import CATALOG_SCHEMA, synced_tables
    from pipeline.warehouse.views import EPISODE_VIEW, apply_views

    con = duckdb.connect()
    try:
        con.execute(f"CREATE SCHEMA {CATALOG_SCHEMA}")
        for table in synced_tables():
            con.execute(table.create_sql())
        apply_views(con)
        return [(row[0], row[1]) for row in con.execute(f"DESCRIBE {EPISODE_VIEW}").fetchall()]
    finally:
        con.close()


def arrow_schema(schema: list[tuple[str, str]]) -> pa.Schema:
    return pa.schema([(name, _arrow_type(kind)) for name, kind in schema])


def generated(schema: list[tuple[str, str]], rows: int) -> pa.RecordBatchReader:
    """The first ``rows`` rows of the generated table as a stream (chunk k is always the same data)."""
    return pa.RecordBatchReader.from_batches(arrow_schema(schema), chunks(schema, rows))


def chunks(schema: list[tuple[str, str]], rows: int) -> Iterator[pa.RecordBatch]:
    """The first ``rows`` rows of the generated table, chunk by chunk."""
    target = arrow_schema(schema)
    for index, start in enumerate(range(0, rows, CHUNK_ROWS)):
        n = min(CHUNK_ROWS, rows - start)
        rng = np.random.default_rng([SEED, index])
        full = _chunk(schema, start, CHUNK_ROWS, rng)  # whole chunk, then cut: a prefix never changes data
        yield pa.record_batch([full[name].slice(0, n) for name, _ in schema], schema=target)


def _arrow_type(kind: str) -> pa.DataType:
    simple = {"BIGINT": pa.int64(), "INTEGER": pa.int32(), "DOUBLE": pa.float64(), "FLOAT": pa.float32(),
              "VARCHAR": pa.string(), "BOOLEAN": pa.bool_(), "TIMESTAMP": pa.timestamp("us"),
              "TIMESTAMP WITH TIME ZONE": pa.timestamp("us", tz="UTC"), "VARCHAR[]": pa.list_(pa.string()),
              "BIGINT[]": pa.list_(pa.int64()), "JSON": pa.json_()}  # fmt: skip
    if kind not in simple:
        raise UnknownChoiceError("episode_view column type", kind, simple)
    return simple[kind]


def _chunk(
    schema: list[tuple[str, str]], start: int, n: int, rng: np.random.Generator
) -> dict[str, pa.Array]:
    ids = np.arange(start, start + n, dtype=np.int64)
    duration_s = 5.0 + rng.random(n) * 60.0
    start_ns = _EPOCH_NS + ids * 60_000_000_000 + rng.integers(0, 10**9, n)  # one a minute; fits int64 to 1e8
    special: dict[str, Callable[[], pa.Array]] = {
        "episode_id": lambda: pa.array(ids),
        "vendor": lambda: _pick(_VENDORS, rng.integers(0, len(_VENDORS), n)),
        "state": lambda: _pick(_STATES, rng.choice(len(_STATES), n, p=_STATE_P)),
        "task": lambda: _pick(_TASKS, rng.integers(0, len(_TASKS), n)),
        "kind": lambda: _pick(["mcap", "video"], (ids % 5 == 0).astype(np.int64)),
        "robot_id": lambda: _strings([b"robot_", _digits(ids % 500, 3)]),
        "session_id": lambda: _strings([b"session_", _digits(ids // 20, 9)]),
        "episode_key": lambda: _strings([b"ep_", _digits(ids, 10)]),
        "start_time_ns": lambda: pa.array(start_ns),
        "end_time_ns": lambda: pa.array(start_ns + (duration_s * 1e9).astype(np.int64)),
        "duration_s": lambda: pa.array(duration_s),
        "gap_rate_max": lambda: pa.array(rng.random(n) * 0.1),
        "source_path": lambda: _strings([b"drops/2024/", _hex(rng, n, 16), b".mcap"]),
        "raw_uri": lambda: _strings([b"file:///store/raw/", _hex(rng, n, 64)]),
        "transcoded_uri": lambda: _strings(
            [b"file:///store/derived/transcode/", _hex(rng, n, 16), b"/", _digits(ids, 10), b"/episode.mcap"]
        ),
        "annotations": lambda: _strings([b'{"quality_sync":0.', _digits(rng.integers(0, 100, n), 2), b"}"]),
    }
    out: dict[str, pa.Array] = {}
    for name, kind in schema:
        make = special.get(name) or _by_type(name, kind, rng, n)
        array = make()
        if kind == "JSON":
            out[name] = pa.ExtensionArray.from_storage(pa.json_(), array.cast(pa.string()))
        else:
            out[name] = array.cast(_arrow_type(kind))
    return out


def _by_type(name: str, kind: str, rng: np.random.Generator, n: int) -> Callable[[], pa.Array]:
    if kind == "VARCHAR" and ("sha256" in name or "fingerprint" in name):
        return lambda: _strings([_hex(rng, n, 64 if "sha256" in name else 16)])
    if kind == "VARCHAR":  # statuses, keys, config hashes: a few hundred distinct values at most
        return lambda: _pick([f"{name}_{i:03d}" for i in range(200)], rng.integers(0, 200, n))
    if kind == "BIGINT":  # ids, counts and nanosecond figures
        return lambda: pa.array(rng.integers(0, 1_000_000_000, n))
    if kind in ("DOUBLE", "FLOAT"):
        return lambda: pa.array(rng.random(n))
    if kind == "BOOLEAN":
        return lambda: pa.array(rng.random(n) < 0.5)
    if kind.startswith("TIMESTAMP"):
        return lambda: pa.array(_EPOCH_NS // 1000 + rng.integers(0, 365 * 86_400 * 10**6, n))
    if kind == "VARCHAR[]":
        return lambda: _lists(rng, n)
    if kind == "BIGINT[]":
        return lambda: pa.ListArray.from_arrays(
            pa.array(np.arange(n + 1, dtype=np.int32)), pa.array(rng.integers(0, 10**9, n))
        )
    raise UnknownChoiceError("episode_view column type", kind, _PG_TYPES)


def _pick(values: list[str], index: np.ndarray) -> pa.Array:
    return pc.take(pa.array(values), pa.array(index))


def _hex(rng: np.random.Generator, n: int, width: int) -> np.ndarray:
    raw = np.frombuffer(rng.bytes(n * (width // 2)), dtype=np.uint8)
    return _HEX_PAIRS[raw].view(np.uint8).reshape(n, width)


def _digits(values: np.ndarray, width: int) -> np.ndarray:
    powers = 10 ** np.arange(width - 1, -1, -1, dtype=np.int64)
    return ((values[:, None] // powers) % 10 + 48).astype(np.uint8)


def _strings(parts: list[bytes | np.ndarray]) -> pa.Array:
    """Fixed-width strings from byte constants and (n, w) uint8 matrices, built without Python objects."""
    n = next(p.shape[0] for p in parts if isinstance(p, np.ndarray))
    blocks = [
        np.broadcast_to(np.frombuffer(p, np.uint8), (n, len(p))) if isinstance(p, bytes) else p for p in parts
    ]
    matrix = np.ascontiguousarray(np.concatenate(blocks, axis=1))
    width = matrix.shape[1]
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(matrix)])


def _lists(rng: np.random.Generator, n: int) -> pa.Array:
    lengths = rng.integers(0, 4, n, dtype=np.int32)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    values = _pick(_TOPICS, rng.integers(0, len(_TOPICS), int(offsets[-1])))
    return pa.ListArray.from_arrays(pa.array(offsets), values)


# -- DuckDB ----------------------------------------------------------------------------------------------


def _ensure_duckdb(path: Path, schema: list[tuple[str, str]], rows: int) -> float:
    """Generate the table into ``path`` unless a complete one is there; returns seconds spent."""
    from pipeline.warehouse.connection import open_warehouse

    if path.exists():
        con = open_warehouse(path, read_only=True)
        try:
            found = con.execute(f"SELECT count(*) FROM {TABLE}").fetchall()[0][0]
        except Exception:  # an interrupted earlier run: no table
            found = -1
        finally:
            con.close()
        if found == rows:
            return 0.0
        path.unlink()
    started = time.monotonic()
    tmp = path.with_name(path.name + ".partial")
    tmp.unlink(missing_ok=True)
    con = open_warehouse(tmp, read_only=False)
    try:
        columns = ", ".join(f'"{name}" {kind}' for name, kind in schema)
        con.execute(f"CREATE TABLE {TABLE} ({columns})")
        con.register("generated", generated(schema, rows))
        con.execute(f"INSERT INTO {TABLE} SELECT * FROM generated")
        con.unregister("generated")
        con.execute("CHECKPOINT")
    finally:
        con.close()
    tmp.rename(path)
    shutil.rmtree(tmp.with_name(tmp.name + ".tmp"), ignore_errors=True)
    return round(time.monotonic() - started, 2)


def _paired(duckdb: Callable[[], pa.Table], postgres: Callable[[], pa.Table] | None = None) -> dict[str, Any]:
    """Time the query in DuckDB (and Postgres) :data:`REPEATS` times, alternating, after a warm-up run.

    With ``postgres``, the two answers must agree (rows and checksums) and ``speedup`` is the median over the
    repeats of Postgres' time / DuckDB's time.
    """
    calls = {"duckdb": duckdb} if postgres is None else {"duckdb": duckdb, "postgres": postgres}
    answers = {engine: call() for engine, call in calls.items()}  # warm-up, and the answers to compare
    sums = {engine: _checksum(table) for engine, table in answers.items()}
    if postgres is not None and sums["duckdb"] != sums["postgres"]:
        raise SluiceError(f"DuckDB and Postgres disagree on the same query and data: {sums}")
    times: dict[str, list[float]] = {engine: [] for engine in calls}
    for _ in range(REPEATS):
        for engine, call in calls.items():
            started = time.perf_counter()
            call()
            times[engine].append(time.perf_counter() - started)
    out: dict[str, Any] = {}
    for engine, runs in times.items():
        out[engine] = {
            "median_s": round(statistics.median(runs), 4),
            "runs_s": [round(t, 4) for t in runs],
            "rows": answers[engine].num_rows,
        }
    if postgres is not None:
        ratios = [pg / duck for duck, pg in zip(times["duckdb"], times["postgres"], strict=True)]
        out["speedup"] = round(statistics.median(ratios), 2)
    return out


def _checksum(table: pa.Table) -> list[Any]:
    """Engine-independent fingerprint of a result: rows, and per column a count and a rounded sum."""
    out: list[Any] = [table.num_rows]
    for column in table.columns:
        if (
            pa.types.is_integer(column.type)
            or pa.types.is_floating(column.type)
            or pa.types.is_decimal(column.type)
        ):
            total = pc.sum(column.cast(pa.float64(), safe=False)).as_py() or 0.0
            out.append(float(f"{total:.9g}"))
        else:
            out.append(pc.count_distinct(column).as_py())
    return out


# -- Postgres --------------------------------------------------------------------------------------------


@contextmanager
def _postgres(root: Path, schema: list[tuple[str, str]], rows: int) -> Iterator[tuple[Any, dict[str, Any]]]:
    """A tuned throwaway Postgres holding the first ``rows`` generated rows: (cursor, load figures)."""
    import adbc_driver_postgresql.dbapi as adbc

    from pipeline.pgserver import LocalPostgres
    from pipeline.warehouse.source import libpq_url

    server = LocalPostgres(root, fast=True)
    server.destroy()  # a leftover of an interrupted run
    root.parent.mkdir(parents=True, exist_ok=True)
    try:
        server.up()
        with adbc.connect(libpq_url(server.url()), autocommit=True) as conn, conn.cursor() as cur:
            for key, value in _PG_TUNING.items():
                cur.execute(f"ALTER SYSTEM SET {key} = '{value}'")  # constants of this module
        server.down()
        with adbc.connect(libpq_url(server.up()), autocommit=True) as conn, conn.cursor() as cur:
            started = time.monotonic()
            columns = ", ".join(f'"{name}" {_PG_TYPES[kind]}' for name, kind in schema)
            cur.execute(f"CREATE TABLE {TABLE} ({columns})")
            cur.adbc_ingest(TABLE, generated(schema, rows), mode="append")
            cur.execute(f"VACUUM (FREEZE, ANALYZE) {TABLE}")  # hint bits, visibility map, statistics
            load_s = round(time.monotonic() - started, 2)
            cur.execute(f"SELECT pg_total_relation_size('{TABLE}')")
            size_row = cur.fetchone()
            yield cur, {"seconds": load_s, "table_bytes": int(size_row[0]) if size_row else None}
    finally:
        server.destroy()


def _duck_query(con: Any, sql: str) -> pa.Table:
    return con.sql(sql).to_arrow_table()


def _pg_query(cur: Any, sql: str) -> pa.Table:
    cur.execute(sql)
    return cur.fetch_arrow_table()
