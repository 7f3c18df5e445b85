"""The DuckDB warehouse: a columnar copy of the catalog for curation.

* :func:`sync` – copy the catalog into the warehouse file incrementally (:mod:`.replicate`, :mod:`.source`);
* :func:`open_warehouse` – a sandboxed DuckDB connection (:mod:`.connection`);
* :func:`run_query` – read-only SQL over the warehouse, as Arrow (:mod:`.query`);
* ``sql/duckdb/views.sql`` – the curation views, above all ``episode_view`` (:mod:`.views`).
"""

from pipeline.warehouse.connection import WarehouseLimits, open_warehouse
from pipeline.warehouse.errors import (
    QueryError,
    SyncSourceError,
    WarehouseBusyError,
    WarehouseMissingError,
    WarehouseUnreadableError,
)
from pipeline.warehouse.query import QueryResult, run_query
from pipeline.warehouse.replicate import SyncReport, TableSync, sync
from pipeline.warehouse.views import EPISODE_VIEW

__all__ = [
    "EPISODE_VIEW",
    "QueryError",
    "QueryResult",
    "SyncReport",
    "SyncSourceError",
    "TableSync",
    "WarehouseBusyError",
    "WarehouseLimits",
    "WarehouseMissingError",
    "WarehouseUnreadableError",
    "open_warehouse",
    "run_query",
    "sync",
]
