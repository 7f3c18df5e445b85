"""Which catalog tables the warehouse copies, and their DuckDB shape, derived from the catalog's models.

The warehouse holds one DuckDB table per catalog table, in the schema :data:`CATALOG_SCHEMA`, with the same
name and columns (minus :data:`EXCLUDED_COLUMNS`), so that a new column in the models reaches the warehouse
without a second schema to keep in step. Each table's :attr:`WarehouseTable.schema_hash` is stored with its
watermark: when the models change, the next sync reloads that table from scratch.

Identifiers in the generated SQL come from the models only, never from input, and are quoted anyway.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import lru_cache

from sqlalchemy import ARRAY, JSON, BigInteger, Boolean, DateTime, Float, Integer, String, Table
from sqlalchemy.types import TypeEngine

from pipeline.catalog.models import Base

#: DuckDB schema holding the copies of the catalog tables; the curation views live in ``main``.
CATALOG_SCHEMA = "catalog"
#: DuckDB schema of the sync's own bookkeeping.
META_SCHEMA = "sluice"
SYNC_STATE_TABLE = f"{META_SCHEMA}.sync_state"

#: Catalog columns the warehouse does not copy, with the reason.
EXCLUDED_COLUMNS: dict[tuple[str, str], str] = {
    # A vendor's config names its source location and may carry credentials; curation never needs it, and
    # the warehouse is readable by everyone who may curate.
    ("vendors", "config"): "may carry source credentials",
}


def quote_ident(name: str) -> str:
    """A SQL identifier, double-quoted (the same rule in Postgres and DuckDB)."""
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class WarehouseColumn:
    name: str
    duckdb_type: str


@dataclass(frozen=True)
class WarehouseTable:
    """One catalog table as the warehouse stores it."""

    name: str
    columns: tuple[WarehouseColumn, ...]
    primary_key: tuple[str, ...]

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    @property
    def qualified(self) -> str:
        """``catalog."<name>"`` in DuckDB."""
        return f"{CATALOG_SCHEMA}.{quote_ident(self.name)}"

    @property
    def schema_hash(self) -> str:
        """Changes whenever a column, its type or the key changes (the sync then reloads the table)."""
        shape = {"columns": [[c.name, c.duckdb_type] for c in self.columns], "key": list(self.primary_key)}
        return hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()

    def create_sql(self) -> str:
        columns = ", ".join(f"{quote_ident(c.name)} {c.duckdb_type}" for c in self.columns)
        return f"CREATE TABLE {self.qualified} ({columns})"

    def column_list(self, prefix: str = "") -> str:
        return ", ".join(prefix + quote_ident(c) for c in self.column_names)


def duckdb_type(sa_type: TypeEngine[object]) -> str:
    """The DuckDB type that holds a catalog column of SQLAlchemy type ``sa_type`` without loss."""
    if isinstance(sa_type, ARRAY):
        return f"{duckdb_type(sa_type.item_type)}[]"
    if isinstance(sa_type, JSON):  # JSONB derives from JSON
        return "JSON"
    if isinstance(sa_type, Boolean):
        return "BOOLEAN"
    if isinstance(sa_type, BigInteger):  # before Integer, which it derives from
        return "BIGINT"
    if isinstance(sa_type, Integer):
        return "INTEGER"
    if isinstance(sa_type, Float):
        return "DOUBLE"
    if isinstance(sa_type, DateTime):
        return "TIMESTAMPTZ" if sa_type.timezone else "TIMESTAMP"
    if isinstance(sa_type, String):  # Text derives from String
        return "VARCHAR"
    raise TypeError(f"no DuckDB type for catalog column type {sa_type!r}; add it to duckdb_type()")


def warehouse_table(table: Table) -> WarehouseTable:
    columns = tuple(
        WarehouseColumn(column.name, duckdb_type(column.type))
        for column in table.columns
        if (table.name, column.name) not in EXCLUDED_COLUMNS
    )
    return WarehouseTable(table.name, columns, tuple(c.name for c in table.primary_key.columns))


@lru_cache(maxsize=1)
def synced_tables() -> tuple[WarehouseTable, ...]:
    """Every catalog table, parents before children (the order the sync copies them in)."""
    return tuple(warehouse_table(t) for t in Base.metadata.sorted_tables)


def synced_table(name: str) -> WarehouseTable:
    from pipeline.errors import UnknownChoiceError

    for table in synced_tables():
        if table.name == name:
            return table
    raise UnknownChoiceError("catalog table", name, [t.name for t in synced_tables()])
