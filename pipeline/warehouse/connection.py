"""Sandboxed DuckDB connections to the warehouse file.

DuckDB runs SQL that people type (``sluice query``) and SQL that dataset specs carry, so every connection is
shut in before any of that SQL runs:

* ``enable_external_access = false``: no file, URL or extension is read or written (``read_csv``,
  ``COPY ... TO``, ``ATTACH``, ``INSTALL`` all fail). Data comes in only as Arrow objects the sync hands
  over; DuckDB never parses vendor bytes.
* no extension is installed or auto-loaded (the built-in JSON and ICU ones are compiled in);
* ``lock_configuration = true``: the SQL cannot turn any of this back on, nor raise its own memory or
  thread limits;
* readers open the file ``read_only``, so a query cannot change the warehouse either.

The only folder DuckDB touches besides its own file is its spill folder beside it (``<file>.tmp``), which
the engine uses internally for sorts and joins larger than the memory limit.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from pipeline.warehouse.errors import WarehouseBusyError, WarehouseMissingError

if TYPE_CHECKING:
    import duckdb

log = logging.getLogger(__name__)

#: Settings applied after the connection opens and before any caller SQL, in this order: the last one
#: freezes them all.
SANDBOX_STATEMENTS = (
    "SET enable_progress_bar = false",
    "SET TimeZone = 'UTC'",
    "SET enable_external_access = false",
    "SET lock_configuration = true",
)


class WarehouseLimits(BaseModel):
    """Resources one warehouse connection may use."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # None: DuckDB's default of one thread per core. Airflow workers sharing a node should set fewer.
    threads: int | None = Field(default=None, ge=1)
    # None: DuckDB's default of 80% of RAM. Past the limit DuckDB spills to <file>.tmp instead of failing.
    memory_limit_bytes: int | None = Field(default=None, ge=64 << 20)


def spill_dir(path: Path) -> Path:
    """Where DuckDB spills sorts and joins that exceed the memory limit (beside the warehouse file)."""
    return path.with_name(path.name + ".tmp")


def open_warehouse(
    path: Path | str, *, read_only: bool, limits: WarehouseLimits | None = None
) -> duckdb.DuckDBPyConnection:
    """A sandboxed connection to the warehouse at ``path``.

    ``read_only=True`` needs an existing file (:class:`WarehouseMissingError` otherwise) and allows
    several readers at once; a writer (the sync) is alone. A file held by another process raises
    :class:`WarehouseBusyError`.
    """
    import duckdb

    limits = limits or WarehouseLimits()
    path = Path(path).expanduser().absolute()
    if read_only and not path.exists():
        raise WarehouseMissingError(path)
    if not read_only:
        path.parent.mkdir(parents=True, exist_ok=True)
    config: dict[str, str | bool | int | float | list[str]] = {
        "temp_directory": str(spill_dir(path)),
        "autoinstall_known_extensions": False,
        "autoload_known_extensions": False,
        "allow_community_extensions": False,
    }
    if limits.threads is not None:
        config["threads"] = limits.threads
    if limits.memory_limit_bytes is not None:
        config["memory_limit"] = f"{limits.memory_limit_bytes}B"
    try:
        con = duckdb.connect(str(path), read_only=read_only, config=config)
    except duckdb.IOException as exc:
        if "lock" in str(exc).lower():
            raise WarehouseBusyError(path, str(exc).splitlines()[0]) from exc
        raise
    except duckdb.ConnectionException as exc:
        # this process already holds the file open in the other mode
        raise WarehouseBusyError(path, str(exc).splitlines()[0]) from exc
    for statement in SANDBOX_STATEMENTS:
        con.execute(statement)
    log.debug("opened warehouse %s (read_only=%s)", path, read_only)
    return con
