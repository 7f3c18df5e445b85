"""Engines and sessions for the catalog: made once by an entry point and passed down."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import create_engine
from sqlalchemy.engine import Engine
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from pipeline.errors import DatabaseError

#: Connections one process keeps open: a worker runs one step at a time, the CLI one command.
DEFAULT_POOL_SIZE = 5
#: How long a connection attempt may take (libpq's ``connect_timeout``). Without one, a host that drops
#: packets holds every command for the kernel's SYN retries (about two minutes) before it says anything.
CONNECT_TIMEOUT_S = 10


def connect_args(url: str, **args: str) -> dict[str, str | int]:
    """psycopg2's connection arguments: ``args``, plus :data:`CONNECT_TIMEOUT_S` unless the URL's query or
    ``PGCONNECT_TIMEOUT`` already says how long to wait."""
    from sqlalchemy.engine import make_url

    out: dict[str, str | int] = dict(args)
    if "connect_timeout" not in make_url(url).query and not os.environ.get("PGCONNECT_TIMEOUT"):
        out["connect_timeout"] = CONNECT_TIMEOUT_S
    return out


def make_engine(url: str, *, pool_size: int = DEFAULT_POOL_SIZE, application_name: str = "sluice") -> Engine:
    """An engine for the catalog at ``url`` (``postgresql+psycopg2://...``).

    The isolation level is pinned to READ COMMITTED: the upserts insert with ``ON CONFLICT DO NOTHING`` and
    then read the winner's row, which a later statement of the same transaction only sees at this level.
    """
    return create_engine(
        url,
        pool_size=pool_size,
        # Long-lived Airflow and Ray workers outlive server restarts and idle timeouts.
        pool_pre_ping=True,
        isolation_level="READ COMMITTED",
        connect_args=connect_args(url, application_name=application_name),
    )


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    """Sessions whose loaded rows stay readable after commit (results are handed to the caller)."""
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def session_scope(factory: sessionmaker[Session]) -> Iterator[Session]:
    """One transaction: commit on success, roll back on error; connection faults become DatabaseError.

    A :class:`~pipeline.errors.DatabaseError` is an infrastructure fault, so the orchestrator retries;
    the upserts make the retry harmless.
    """
    session = factory()
    where = factory.kw.get("bind")
    try:
        with session.begin():
            yield session
    except (OperationalError, InterfaceError) as exc:
        url = where.url.render_as_string(hide_password=True) if isinstance(where, Engine) else "?"
        raise DatabaseError(f"catalog at {url} failed: {exc.orig}") from exc
    finally:
        session.close()
