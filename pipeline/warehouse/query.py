"""Read-only SQL over the warehouse (``sluice query``): scenario search by vendor, robot, condition, time
window, quality or annotation.

Two fences: the statement must be one SELECT (or EXPLAIN), which gives a clear message for the common
mistake; and the connection itself is read-only and sandboxed (:mod:`.connection`), which holds even for SQL
that passes the first fence, such as a ``read_csv('/etc/passwd')`` inside a SELECT. Values go in as bound
parameters (``$name`` with ``params={"name": ...}``), never pasted into the text.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.warehouse.connection import WarehouseLimits, open_warehouse, statement_deadline
from pipeline.warehouse.errors import QueryError

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

#: Statement types ``sluice query`` runs; DESCRIBE, SHOW and SUMMARIZE parse as SELECT.
ALLOWED_STATEMENTS = ("SELECT", "EXPLAIN")
#: Rows fetched when the caller gives no cap: a terminal cannot show more, and a careless
#: ``SELECT * FROM catalog.streams`` must not pull millions of rows into memory.
DEFAULT_MAX_ROWS = 10_000
#: Rows per Arrow batch pulled from DuckDB while filling the result (DuckDB's vector size multiple).
FETCH_BATCH_ROWS = 8_192


@dataclass(frozen=True)
class QueryResult:
    table: pa.Table
    truncated: bool  # more rows matched than ``max_rows``
    duration_s: float


def check_statement(sql: str) -> None:
    """Refuse anything but exactly one SELECT or EXPLAIN statement (:class:`QueryError`)."""
    import duckdb

    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryError(sql, _first_line(exc)) from None
    if len(statements) != 1:
        raise QueryError(sql, f"{len(statements)} statements given; exactly one SELECT is allowed")
    kind = statements[0].type.name
    if kind not in ALLOWED_STATEMENTS:
        raise QueryError(sql, f"{kind} statements are not allowed; allowed: {', '.join(ALLOWED_STATEMENTS)}")


def run_query(
    warehouse_path: Path | str,
    sql: str,
    params: Mapping[str, Any] | None = None,
    *,
    max_rows: int | None = DEFAULT_MAX_ROWS,
    limits: WarehouseLimits | None = None,
) -> QueryResult:
    """Run one read-only SELECT over the warehouse; at most ``max_rows`` rows come back (None: all)."""
    import duckdb
    import pyarrow  # noqa: F401 - imported before the clock starts: a first import can take seconds

    check_statement(sql)
    started = time.monotonic()
    limits = limits or WarehouseLimits()
    con = open_warehouse(warehouse_path, read_only=True, limits=limits)
    try:
        with statement_deadline(con, limits, sql):
            table, truncated = _fetch(con, sql, params, max_rows)
    except duckdb.Error as exc:
        raise QueryError(sql, _first_line(exc)) from None
    finally:
        con.close()
    return QueryResult(table=table, truncated=truncated, duration_s=round(time.monotonic() - started, 3))


def _fetch(
    con: duckdb.DuckDBPyConnection, sql: str, params: Mapping[str, Any] | None, max_rows: int | None
) -> tuple[pa.Table, bool]:
    import pyarrow as pa

    relation = con.sql(sql, params=dict(params) if params else None)
    reader = relation.to_arrow_reader(FETCH_BATCH_ROWS)
    batches: list[pa.RecordBatch] = []
    kept = 0
    truncated = False
    for batch in reader:
        if max_rows is not None and kept + batch.num_rows > max_rows:
            batches.append(batch.slice(0, max_rows - kept))
            truncated = True
            break
        batches.append(batch)
        kept += batch.num_rows
    return pa.Table.from_batches(batches, schema=reader.schema), truncated


#: DuckDB's advice to raise a setting (``Use "SET max_expression_depth TO x" to increase ...``), which the
#: sandbox refuses: its settings are locked (:mod:`.connection`).
_SET_ADVICE = re.compile(r'\s*Use "SET (?P<name>\w+) TO [^"]*" to [^."]*\.?\s*$')
#: What to do instead, where there is something: the setting's limit is met by a differently written query.
_INSTEAD = {
    "max_expression_depth": "write a long chain of OR, AND or + as an IN list, a join or a sum over rows",
}


def _first_line(exc: BaseException) -> str:
    """The error's first line, less any advice to raise a setting, which the sandbox would refuse."""
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    advice = _SET_ADVICE.search(line)
    if advice is None:
        return line
    name = advice["name"]
    instead = _INSTEAD.get(name, "change the query")
    return f"{line[: advice.start()]} (a warehouse query cannot SET {name}: {instead})"
