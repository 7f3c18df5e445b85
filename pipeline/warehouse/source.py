"""Reading the catalog for a sync: one consistent Postgres snapshot, rows handed over as Arrow streams.

Data moves through ADBC's Postgres driver (binary COPY into Arrow, no Python objects per row); DuckDB's own
Postgres extension would have to be downloaded, which a sandboxed, offline warehouse cannot do.

**Which rows changed.** Every row version in Postgres carries ``xmin``, the id of the transaction that
wrote it: an INSERT and every UPDATE (an episode changing state, a stream re-read, a shard placed into a
dataset) give the row a new ``xmin``. A sync reads inside one REPEATABLE READ snapshot and keeps the
snapshot's *xmin*, the oldest transaction still running, as its watermark; the next sync reads the rows
written by that transaction or any later one. That covers the tables that have no ``updated_at`` (streams,
shards, step runs, batches, runs) and, unlike a time watermark, a long transaction that commits after a
sync (its rows' ``now()`` is its start time, which a time watermark would already have passed). Rows
committed just after the watermark may be read twice; the warehouse replaces them, so that costs a little
work, never a wrong row. ``xmin`` is 32 bits and wraps around; :func:`full_xid` widens it against the
snapshot's 64-bit ``xmax``, exact for rows younger than 2^32 transactions (VACUUM FREEZE keeps the raw
``xmin`` since Postgres 9.4).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from sqlalchemy import BigInteger, Text, bindparam, case, cast, func, literal_column, select
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.sql import Select

from pipeline.catalog.models import Base
from pipeline.warehouse.errors import SyncSourceError
from pipeline.warehouse.tables import WarehouseTable

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

#: Transaction ids below this are special (invalid, bootstrap, frozen) and older than any sync.
FIRST_NORMAL_XID = 3
XID_MODULUS = 2**32
#: A watermark further behind than this cannot be widened safely: the sync reloads the table instead.
MAX_WATERMARK_AGE_XIDS = 2**31

_DIALECT = postgresql.dialect(paramstyle="numeric_dollar")  # ADBC's Postgres driver binds $1, $2, ...


def libpq_url(engine_or_url: Engine | URL | str) -> str:
    """A ``postgresql://`` URI for libpq (ADBC) from a SQLAlchemy engine or URL."""
    url = engine_or_url.url if isinstance(engine_or_url, Engine) else make_url(engine_or_url)
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


def full_xid() -> Any:
    """SQL for the 64-bit id of the transaction that wrote each row, widened against ``:xmax``."""
    raw = cast(cast(literal_column("xmin"), Text), BigInteger)
    xmax = cast(bindparam("xmax"), BigInteger)
    modulus: Any = literal_column(str(XID_MODULUS))
    behind = (xmax.op("&")(literal_column(str(XID_MODULUS - 1))) - raw + modulus) % modulus
    return case((raw < literal_column(str(FIRST_NORMAL_XID)), literal_column("0")), else_=xmax - behind)


def _compile(stmt: Select[Any], **values: int) -> tuple[str, tuple[Any, ...]]:
    compiled = stmt.compile(dialect=_DIALECT)
    params = {**compiled.params, **values}
    return compiled.string, tuple(params[name] for name in compiled.positiontup or ())


class CatalogSnapshot:
    """One read-only REPEATABLE READ transaction on the catalog: every read sees the same snapshot.

    Use as a context manager. ``xmin`` and ``xmax`` are the snapshot's 64-bit transaction ids.
    """

    def __init__(self, engine_or_url: Engine | URL | str) -> None:
        import adbc_driver_postgresql.dbapi as adbc

        self._uri = libpq_url(engine_or_url)
        safe = make_url(self._uri).render_as_string(hide_password=True)
        try:
            self._conn = adbc.connect(self._uri, autocommit=True)
        except Exception as exc:  # the driver raises its own DB-API error classes
            raise SyncSourceError(f"cannot connect to the catalog at {safe}: {exc}") from exc
        self._cursor = self._conn.cursor()
        self._where = safe
        # Statements without values: fixed text, nothing from input.
        self._cursor.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        snapshot = func.pg_current_snapshot()
        xids = select(
            cast(cast(func.pg_snapshot_xmin(snapshot), Text), BigInteger),
            cast(cast(func.pg_snapshot_xmax(snapshot), Text), BigInteger),
        )
        row = self._fetchone(xids)
        self.xmin, self.xmax = int(row[0]), int(row[1])

    def __enter__(self) -> CatalogSnapshot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self._cursor.execute("ROLLBACK")  # read only: nothing to keep
        except Exception:  # closing after a failure must not hide the failure
            log.debug("rollback of the sync snapshot failed", exc_info=True)
        self._cursor.close()
        self._conn.close()

    # -- reads --------------------------------------------------------------------------------------------

    def rows(self, table: WarehouseTable, since_xid: int | None) -> pa.RecordBatchReader:
        """The rows of ``table`` (its warehouse columns), all of them or those written since ``since_xid``."""
        source = Base.metadata.tables[table.name]
        stmt = select(*(source.c[name] for name in table.column_names))
        values: dict[str, int] = {}
        if since_xid is not None:
            stmt = stmt.where(full_xid() >= cast(bindparam("since"), BigInteger))
            values = {"xmax": self.xmax, "since": since_xid}
        return self._reader(stmt, values, table.name)

    def count(self, table: WarehouseTable) -> int:
        source = Base.metadata.tables[table.name]
        return int(self._fetchone(select(func.count()).select_from(source))[0])

    def keys(self, table: WarehouseTable) -> pa.RecordBatchReader:
        """The primary keys of every row of ``table`` (to find rows deleted since the last sync)."""
        source = Base.metadata.tables[table.name]
        return self._reader(select(*(source.c[k] for k in table.primary_key)), {}, table.name)

    # -- internals ----------------------------------------------------------------------------------------

    def _reader(self, stmt: Select[Any], values: dict[str, int], what: str) -> pa.RecordBatchReader:
        sql, params = _compile(stmt, **values)
        try:
            self._cursor.execute(sql, parameters=params or None)
            return self._cursor.fetch_record_batch()
        except Exception as exc:
            raise self._error(exc, what) from exc

    def _fetchone(self, stmt: Select[Any]) -> tuple[Any, ...]:
        sql, params = _compile(stmt)
        try:
            self._cursor.execute(sql, parameters=params or None)
            row = self._cursor.fetchone()
        except Exception as exc:
            raise self._error(exc, "snapshot") from exc
        assert row is not None
        return tuple(row)

    def _error(self, exc: Exception, what: str) -> SyncSourceError:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        hint = ""
        if "does not exist" in text:
            hint = "; the catalog's schema is behind this code: run `sluice db migrate`"
        return SyncSourceError(f"reading {what} from the catalog at {self._where} failed: {text}{hint}")
