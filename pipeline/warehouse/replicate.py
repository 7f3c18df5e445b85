"""Incremental sync of the catalog (Postgres) into the warehouse (DuckDB).

:func:`sync` copies every catalog table into the warehouse file inside one DuckDB transaction, from one
Postgres snapshot (:class:`~pipeline.warehouse.source.CatalogSnapshot`), so readers see either the previous
sync or this one, never half of each. Per table it keeps a watermark (see :mod:`.source` for why it is a
transaction id and not a time) in ``sluice.sync_state``:

* first sync, a changed table shape, or a watermark too old to trust: the table is reloaded whole;
* otherwise only rows written since the watermark move: they replace their older copies (matched on the
  primary key) or are added;
* deletes: the writer role cannot delete, but an operator can. When the catalog holds fewer rows than the
  warehouse after the upsert, the catalog's keys are fetched and the rows that left are deleted. Equal
  counts need no key scan: the upsert has already put every catalog row in the warehouse.

The Airflow ``warehouse_sync`` task calls :func:`sync`; so does ``sluice dataset sync``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from sqlalchemy.engine import URL, Engine

from pipeline.warehouse.connection import WarehouseLimits, open_warehouse
from pipeline.warehouse.source import MAX_WATERMARK_AGE_XIDS, CatalogSnapshot
from pipeline.warehouse.tables import (
    CATALOG_SCHEMA,
    META_SCHEMA,
    SYNC_STATE_TABLE,
    WarehouseTable,
    quote_ident,
    synced_tables,
)
from pipeline.warehouse.views import apply_views

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

log = logging.getLogger(__name__)

# Names the sync registers on its own connection for the Arrow streams it inserts from.
_STREAM = "_sluice_stream"
_DELTA = "_sluice_delta"


@dataclass(frozen=True)
class TableSync:
    """What one sync did to one table."""

    table: str
    mode: Literal["full", "incremental"]
    rows_moved: int  # rows copied from the catalog: all of them (full) or the new and changed ones
    rows_deleted: int  # rows removed because the catalog no longer has them
    rows_total: int  # rows in the warehouse table afterwards
    watermark_xid: int  # the next sync copies rows written by this transaction id or later


@dataclass(frozen=True)
class SyncReport:
    """The outcome of one :func:`sync`."""

    warehouse_path: Path
    tables: tuple[TableSync, ...]
    snapshot_xmin: int
    snapshot_xmax: int
    duration_s: float

    @property
    def rows_moved(self) -> int:
        return sum(t.rows_moved for t in self.tables)

    def table(self, name: str) -> TableSync:
        for entry in self.tables:
            if entry.table == name:
                return entry
        raise KeyError(name)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["warehouse_path"] = str(self.warehouse_path)
        data["rows_moved"] = self.rows_moved
        return data


@dataclass(frozen=True)
class _State:
    watermark_xid: int
    schema_hash: str


def sync(
    engine_or_url: Engine | URL | str,
    warehouse_path: Path | str,
    *,
    full: bool = False,
    limits: WarehouseLimits | None = None,
) -> SyncReport:
    """Bring the warehouse at ``warehouse_path`` up to date with the catalog; ``full`` reloads every table.

    Reading needs only SELECT on the catalog (the curation role is enough). Raises
    :class:`~pipeline.warehouse.errors.SyncSourceError` when the catalog cannot be read and
    :class:`~pipeline.warehouse.errors.WarehouseBusyError` when another process holds the warehouse.
    """
    started = time.monotonic()
    path = Path(warehouse_path).expanduser().absolute()
    with CatalogSnapshot(engine_or_url) as snapshot:
        con = open_warehouse(path, read_only=False, limits=limits)
        try:
            con.execute("BEGIN TRANSACTION")
            _ensure_meta(con)
            states = _load_states(con)
            results = tuple(
                _sync_table(con, snapshot, table, None if full else states.get(table.name))
                for table in synced_tables()
            )
            apply_views(con)
            con.execute("COMMIT")
        except BaseException:
            _rollback(con)
            raise
        finally:
            con.close()
    report = SyncReport(
        warehouse_path=path,
        tables=results,
        snapshot_xmin=snapshot.xmin,
        snapshot_xmax=snapshot.xmax,
        duration_s=round(time.monotonic() - started, 3),
    )
    log.info("warehouse sync moved %d rows into %s in %.2f s", report.rows_moved, path, report.duration_s)
    return report


def _sync_table(
    con: duckdb.DuckDBPyConnection, snapshot: CatalogSnapshot, table: WarehouseTable, state: _State | None
) -> TableSync:
    reason = _reload_reason(con, snapshot, table, state)
    if reason is None:
        assert state is not None
        moved = _upsert_changed(con, snapshot, table, state.watermark_xid)
        deleted, complete = _remove_deleted(con, snapshot, table)
        if not complete:
            reason = "the warehouse missed catalog rows"
            log.warning("table %s: %s; reloading it", table.name, reason)
    if reason is not None:
        log.info("table %s: full load (%s)", table.name, reason)
        moved, deleted = _reload(con, snapshot, table), 0
    total = _count(con, table.qualified)
    _save_state(con, table, snapshot.xmin, total)
    return TableSync(
        table=table.name,
        mode="incremental" if reason is None else "full",
        rows_moved=moved,
        rows_deleted=deleted,
        rows_total=total,
        watermark_xid=snapshot.xmin,
    )


def _reload_reason(
    con: duckdb.DuckDBPyConnection, snapshot: CatalogSnapshot, table: WarehouseTable, state: _State | None
) -> str | None:
    if state is None:
        return "first sync or a full sync was asked"
    if state.schema_hash != table.schema_hash:
        return "the catalog table's columns changed"
    if snapshot.xmax - state.watermark_xid >= MAX_WATERMARK_AGE_XIDS:
        return "the watermark is older than 2^31 transactions"
    exists = _scalar(
        con,
        "SELECT count(*) FROM duckdb_tables() WHERE schema_name = ? AND table_name = ?",
        [CATALOG_SCHEMA, table.name],
    )
    if not exists:
        return "the warehouse table is missing"
    return None


def _reload(con: duckdb.DuckDBPyConnection, snapshot: CatalogSnapshot, table: WarehouseTable) -> int:
    con.execute(f"DROP TABLE IF EXISTS {table.qualified}")
    con.execute(table.create_sql())
    return _insert_stream(con, table, snapshot.rows(table, since_xid=None))


def _insert_stream(
    con: duckdb.DuckDBPyConnection, table: WarehouseTable, stream: pa.RecordBatchReader
) -> int:
    columns = table.column_list()
    con.register(_STREAM, stream)
    try:
        return _scalar(con, f"INSERT INTO {table.qualified} ({columns}) SELECT {columns} FROM {_STREAM}")
    finally:
        con.unregister(_STREAM)


def _upsert_changed(
    con: duckdb.DuckDBPyConnection, snapshot: CatalogSnapshot, table: WarehouseTable, since_xid: int
) -> int:
    """Replace or add the rows written since ``since_xid``; returns how many came over."""
    columns = table.column_list()
    con.register(_STREAM, snapshot.rows(table, since_xid=since_xid))
    try:
        con.execute(f"CREATE OR REPLACE TEMP TABLE {_DELTA} AS SELECT {columns} FROM {_STREAM}")
    finally:
        con.unregister(_STREAM)
    try:
        moved = _count(con, _DELTA)
        if moved:
            matches = " AND ".join(f"w.{quote_ident(k)} = d.{quote_ident(k)}" for k in table.primary_key)
            con.execute(f"DELETE FROM {table.qualified} AS w USING {_DELTA} AS d WHERE {matches}")
            con.execute(f"INSERT INTO {table.qualified} ({columns}) SELECT {columns} FROM {_DELTA}")
    finally:
        con.execute(f"DROP TABLE IF EXISTS {_DELTA}")
    return moved


def _remove_deleted(
    con: duckdb.DuckDBPyConnection, snapshot: CatalogSnapshot, table: WarehouseTable
) -> tuple[int, bool]:
    """Delete warehouse rows the catalog no longer has; returns (rows deleted, warehouse complete)."""
    in_catalog = snapshot.count(table)
    in_warehouse = _count(con, table.qualified)
    if in_warehouse == in_catalog:
        return 0, True
    if in_warehouse < in_catalog:
        return 0, False
    keys = ", ".join(quote_ident(k) for k in table.primary_key)
    matches = " AND ".join(f"k.{quote_ident(k)} = w.{quote_ident(k)}" for k in table.primary_key)
    con.register(_STREAM, snapshot.keys(table))
    try:
        con.execute(f"CREATE OR REPLACE TEMP TABLE {_DELTA} AS SELECT {keys} FROM {_STREAM}")
    finally:
        con.unregister(_STREAM)
    try:
        deleted = _scalar(
            con,
            f"DELETE FROM {table.qualified} AS w WHERE NOT EXISTS (SELECT 1 FROM {_DELTA} AS k WHERE {matches})",
        )
    finally:
        con.execute(f"DROP TABLE IF EXISTS {_DELTA}")
    log.info("table %s: %d row(s) deleted from the catalog since the last sync", table.name, deleted)
    return deleted, True


def _count(con: duckdb.DuckDBPyConnection, relation: str) -> int:
    return _scalar(con, f"SELECT count(*) FROM {relation}")


def _scalar(con: duckdb.DuckDBPyConnection, sql: str, params: list[object] | None = None) -> int:
    # fetchall, not fetchone: DuckDB refuses further work on a connection with an unfinished result
    rows = con.execute(sql, params).fetchall()
    return int(rows[0][0]) if rows and rows[0][0] is not None else 0


def _ensure_meta(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(f"CREATE SCHEMA IF NOT EXISTS {CATALOG_SCHEMA}")
    con.execute(f"CREATE SCHEMA IF NOT EXISTS {META_SCHEMA}")
    con.execute(
        f"CREATE TABLE IF NOT EXISTS {SYNC_STATE_TABLE} (table_name VARCHAR, watermark_xid BIGINT, "
        "schema_hash VARCHAR, rows_total BIGINT, synced_at TIMESTAMPTZ)"
    )


def _load_states(con: duckdb.DuckDBPyConnection) -> dict[str, _State]:
    rows = con.execute(f"SELECT table_name, watermark_xid, schema_hash FROM {SYNC_STATE_TABLE}").fetchall()
    return {name: _State(int(xid), schema_hash) for name, xid, schema_hash in rows}


def _save_state(
    con: duckdb.DuckDBPyConnection, table: WarehouseTable, watermark_xid: int, total: int
) -> None:
    con.execute(f"DELETE FROM {SYNC_STATE_TABLE} WHERE table_name = ?", [table.name])
    con.execute(
        f"INSERT INTO {SYNC_STATE_TABLE} VALUES (?, ?, ?, ?, now())",
        [table.name, watermark_xid, table.schema_hash, total],
    )


def _rollback(con: duckdb.DuckDBPyConnection) -> None:
    try:
        con.execute("ROLLBACK")
    except Exception:  # the original error matters more than a failed rollback
        log.debug("warehouse rollback failed", exc_info=True)
