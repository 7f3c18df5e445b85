"""Row-for-row comparison of a catalog table and its warehouse copy."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
from sqlalchemy import select
from sqlalchemy.engine import Engine

from pipeline.catalog.models import Base
from pipeline.warehouse import open_warehouse
from pipeline.warehouse.tables import synced_table


def catalog_rows(engine: Engine, table: str) -> list[dict[str, Any]]:
    """Every row of a catalog table (the warehouse's columns), by primary key; JSON parsed by psycopg2."""
    wt = synced_table(table)
    source = Base.metadata.tables[table]
    stmt = select(*(source.c[c] for c in wt.column_names)).order_by(*(source.c[k] for k in wt.primary_key))
    with engine.connect() as conn:
        return [dict(row._mapping) for row in conn.execute(stmt)]


def warehouse_rows(path: Path, table: str) -> list[dict[str, Any]]:
    """Every row of the warehouse copy, by primary key; JSON text parsed to compare with the catalog's."""
    wt = synced_table(table)
    json_columns = {c.name for c in wt.columns if c.duckdb_type == "JSON"}
    keys = ", ".join(wt.primary_key)
    con = open_warehouse(path, read_only=True)
    try:
        arrow: pa.Table = con.sql(
            f"SELECT {wt.column_list()} FROM {wt.qualified} ORDER BY {keys}"
        ).to_arrow_table()
    finally:
        con.close()
    rows = arrow.to_pylist()
    for row in rows:
        for name in json_columns:
            if row[name] is not None:
                row[name] = json.loads(row[name])
    return rows
