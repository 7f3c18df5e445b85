"""Errors of the warehouse layer (children of the tree in :mod:`pipeline.errors`)."""

from __future__ import annotations

from pathlib import Path

from pipeline.errors import DatabaseError, InfrastructureError, SluiceError


class WarehouseBusyError(InfrastructureError):
    """The warehouse file is locked by another process (a sync writes it, or a reader holds it open)."""

    def __init__(self, path: Path, detail: str) -> None:
        self.path = path
        super().__init__(
            f"warehouse {path} is in use by another process ({detail}); DuckDB allows one writing process "
            "or several reading ones at a time: retry when the running sync or query has finished"
        )


class WarehouseMissingError(SluiceError, FileNotFoundError):
    """A read was asked of a warehouse that was never synced."""

    def __init__(self, path: Path) -> None:
        self.path = path
        super().__init__(f"no warehouse at {path}; create it with `sluice dataset sync` (or warehouse sync)")


class WarehouseUnreadableError(SluiceError):
    """The warehouse path holds something DuckDB cannot open: a folder, an empty or foreign file, or a
    database written by a newer DuckDB."""

    def __init__(self, path: Path, detail: str) -> None:
        self.path = path
        super().__init__(
            f"warehouse {path} cannot be opened ({detail}); the warehouse is a copy of the catalog: move "
            "the file aside and build it again with `sluice warehouse sync`"
        )


class WarehouseUncreatableError(SluiceError):
    """The warehouse's folder cannot be made: a file is in the way, or the filesystem refuses it."""

    def __init__(self, path: Path, why: str) -> None:
        self.path = path
        super().__init__(f"the warehouse {path} cannot be created: {why}")


class SyncSourceError(DatabaseError):
    """The catalog cannot be read for a sync (unreachable, or its schema is behind the code's)."""


class QueryError(SluiceError, ValueError):
    """A warehouse query was refused or failed: bad SQL, a missing parameter, or the sandbox said no."""

    def __init__(self, sql: str, detail: str) -> None:
        self.sql = sql
        self.detail = detail
        shown = sql if len(sql) <= 200 else sql[:197] + "..."
        super().__init__(f"query refused or failed: {detail}\n  query: {shown}")


class QueryTimeoutError(QueryError):
    """A warehouse read ran past its time limit and was interrupted."""

    def __init__(self, sql: str, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        super().__init__(
            sql,
            f"stopped after {timeout_s:g} s, the time limit of a warehouse query (raise it with --timeout-s "
            "or SLUICE_WAREHOUSE_TIMEOUT_S if the query is meant to take that long)",
        )


class QueryResourceError(QueryError):
    """A warehouse read needed more memory (and spill space) than its limits allow."""

    def __init__(self, sql: str, detail: str, limits: object) -> None:
        memory = getattr(limits, "memory_limit_bytes", None)
        spill = getattr(limits, "spill_limit_bytes", None)
        super().__init__(
            sql,
            f"{detail} (limits: {memory} bytes of memory, {spill} bytes of spill; raise them with "
            "--memory-limit-bytes or SLUICE_WAREHOUSE_MEMORY_LIMIT_BYTES)",
        )
