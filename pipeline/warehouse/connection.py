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

Every connection has a memory limit and a spill limit, and every read of caller SQL a time limit
(:class:`WarehouseLimits`, :func:`statement_deadline`): a cross join or a ``WITH RECURSIVE`` that never
ends is stopped, not left to take the node.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from pipeline.warehouse.errors import (
    QueryResourceError,
    QueryTimeoutError,
    WarehouseBusyError,
    WarehouseMissingError,
    WarehouseUncreatableError,
    WarehouseUnreadableError,
)

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


#: DuckDB's own default is 80% of RAM, which one careless query then takes from every Airflow task and
#: training job on the node. 2 GiB runs the curation queries of the warehouse benchmark (1M episodes, the
#: 67-column view) without spilling; larger sorts and joins spill to <file>.tmp.
DEFAULT_MEMORY_LIMIT_BYTES = 2 << 30
#: What a query may spill beside the warehouse (DuckDB's default: 90% of the free disk).
DEFAULT_SPILL_LIMIT_BYTES = 8 << 30
#: Longest a read may run: curation queries over millions of episodes take seconds (bench warehouse:
#: 0.2-1 s at 1M rows), a dataset build's selection a few more; five minutes is a query gone wrong.
DEFAULT_TIMEOUT_S = 300.0
#: Longest time limit anyone may set: a week is far past any query meant to finish, and the watchdog's wait
#: cannot take an unbounded one (an infinite or 1e300 s timeout overflows the clock in its thread).
MAX_TIMEOUT_S = 7 * 24 * 3600.0
#: Largest memory or spill limit anyone may set (a PiB, past any node's memory): DuckDB refuses values past
#: 2^63 bytes with a parser error when the connection opens.
MAX_LIMIT_BYTES = 1 << 50


class WarehouseLimits(BaseModel):
    """Resources one warehouse connection (and each read on it) may use."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # None: DuckDB's default of one thread per core. Airflow workers sharing a node should set fewer.
    threads: int | None = Field(default=None, ge=1)
    # Past the limit DuckDB spills to <file>.tmp, up to spill_limit_bytes; past that the query fails.
    memory_limit_bytes: int = Field(default=DEFAULT_MEMORY_LIMIT_BYTES, ge=64 << 20, le=MAX_LIMIT_BYTES)
    spill_limit_bytes: int = Field(default=DEFAULT_SPILL_LIMIT_BYTES, ge=0, le=MAX_LIMIT_BYTES)
    # None: no limit (the sync, which writes; never a read of SQL someone typed).
    timeout_s: float | None = Field(default=DEFAULT_TIMEOUT_S, gt=0, le=MAX_TIMEOUT_S)


#: After the deadline the watchdog interrupts again this often until the statement has stopped: DuckDB 2.0
#: loses an interruption that arrives between two rounds of a recursive CTE (measured here: one call
#: stopped an endless WITH RECURSIVE in some runs and never in others).
INTERRUPT_EVERY_S = 0.05


@contextlib.contextmanager
def statement_deadline(con: duckdb.DuckDBPyConnection, limits: WarehouseLimits, sql: str) -> Iterator[None]:
    """Interrupt what runs on ``con`` inside the block once ``limits.timeout_s`` have passed: the SQL's
    statements and the fetching of their rows. DuckDB has no statement timeout of its own; a watchdog
    thread calls :meth:`~duckdb.DuckDBPyConnection.interrupt` (again every :data:`INTERRUPT_EVERY_S` until
    the block is left), and the interruption becomes a :class:`~pipeline.warehouse.errors.QueryTimeoutError`;
    running out of memory and spill space a :class:`~pipeline.warehouse.errors.QueryResourceError`."""
    import duckdb

    left = threading.Event()
    fired = threading.Event()

    def watch(timeout_s: float) -> None:
        if left.wait(timeout_s):
            return
        fired.set()
        while not left.is_set():
            con.interrupt()
            left.wait(INTERRUPT_EVERY_S)

    watchdog = None
    if limits.timeout_s is not None:
        watchdog = threading.Thread(
            target=watch, args=(limits.timeout_s,), name="warehouse-deadline", daemon=True
        )
        watchdog.start()
    try:
        yield
    except duckdb.InterruptException:
        if not fired.is_set():
            raise
        raise QueryTimeoutError(sql, limits.timeout_s or 0.0) from None
    except duckdb.OutOfMemoryException as exc:
        raise QueryResourceError(sql, str(exc).strip().splitlines()[0], limits) from None
    finally:
        left.set()
        if watchdog is not None:
            watchdog.join()


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
        from pipeline.paths import make_folder

        why_not = make_folder(path.parent)
        if why_not is not None:  # SLUICE_HOME under a file or where nothing can be made
            raise WarehouseUncreatableError(path, why_not)
    config: dict[str, str | bool | int | float | list[str]] = {
        "temp_directory": str(spill_dir(path)),
        "autoinstall_known_extensions": False,
        "autoload_known_extensions": False,
        "allow_community_extensions": False,
    }
    if limits.threads is not None:
        config["threads"] = limits.threads
    config["memory_limit"] = f"{limits.memory_limit_bytes}B"
    config["max_temp_directory_size"] = f"{limits.spill_limit_bytes}B"
    try:
        con = duckdb.connect(str(path), read_only=read_only, config=config)
    except duckdb.IOException as exc:
        if "lock" in str(exc).lower():
            raise WarehouseBusyError(path, str(exc).splitlines()[0]) from exc
        raise WarehouseUnreadableError(path, str(exc).splitlines()[0]) from exc
    except duckdb.ConnectionException as exc:
        # this process already holds the file open in the other mode
        raise WarehouseBusyError(path, str(exc).splitlines()[0]) from exc
    for statement in SANDBOX_STATEMENTS:
        con.execute(statement)
    log.debug("opened warehouse %s (read_only=%s)", path, read_only)
    return con
