"""Run the catalog's Alembic migrations without an ``alembic.ini``.

The scripts live in ``sql/migrations`` at the repository root, found relative to the ``pipeline`` package.
Each command opens its own connection and runs in one transaction (Postgres DDL is transactional), so a
failed migration leaves the database as it was. Processes that migrate one database at once are serialised
by an advisory lock; within one process, migrate from one thread only (Alembic's ``op`` and ``context``
are process-wide).
"""

from __future__ import annotations

import io
import logging
import os
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, make_url
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import NullPool

import pipeline
from pipeline.catalog.engine import connect_args
from pipeline.errors import DatabaseError, UnknownChoiceError

log = logging.getLogger(__name__)

#: Advisory lock held by a migration for its whole transaction, so that two workers migrating one
#: database at once run one after the other; any fixed bigint nobody else locks.
MIGRATION_LOCK_KEY = 0x51_55_1C_E0

MIGRATIONS_DIR = Path(pipeline.__file__).resolve().parent.parent / "sql" / "migrations"


def alembic_config(url: str | None = None) -> Config:
    """An Alembic config pointing at ``sql/migrations`` (``url`` only matters for offline ``--sql`` runs)."""
    if not (MIGRATIONS_DIR / "env.py").is_file():
        raise DatabaseError(
            f"catalog migrations not found at {MIGRATIONS_DIR}; expected sql/migrations/env.py beside the "
            "pipeline package (run from a source checkout)"
        )
    # Alembic prints progress to stdout; the library logs instead.
    config = Config(stdout=io.StringIO())
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("path_separator", "os")
    if url is not None:
        # ConfigParser interpolation would read a '%' in a password as a placeholder.
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def head() -> str:
    """The newest revision in ``sql/migrations``."""
    revision = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if revision is None:
        raise DatabaseError(f"no migration revisions under {MIGRATIONS_DIR / 'versions'}")
    return revision


def behind(revision: str, at: str | None) -> bool:
    """Whether ``revision`` (any form Alembic resolves: a full id, a unique prefix, ``heads``,
    ``0002@head``) lies strictly behind the revision ``at``, where an upgrade to it does nothing."""
    from alembic.util.exc import CommandError

    if at is None or not revision.strip():  # Alembic fails an assertion on an empty one
        return False
    script = ScriptDirectory.from_config(alembic_config())
    try:
        target = script.get_revision(revision)
    except CommandError:  # relative, unknown or ambiguous: the migration itself has said what is wrong
        return False
    if target is None:  # base
        return True
    return target.revision != at and any(
        r.revision == target.revision for r in script.iterate_revisions(at, "base")
    )


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate the database at ``url`` up to ``revision``."""
    _run(url, "upgrade", revision)


def downgrade(url: str, revision: str) -> None:
    """Migrate the database at ``url`` down to ``revision`` (``"base"``: drop the whole catalog)."""
    _run(url, "downgrade", revision)


def current(url: str) -> str | None:
    """The revision the database at ``url`` is at; ``None`` before the first migration."""
    engine = _engine(url)
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    except OperationalError as exc:
        raise DatabaseError(f"cannot read the catalog revision of {_safe(url)}: {exc.orig}") from exc
    finally:
        engine.dispose()


def require_current(engine: Engine) -> None:
    """Raise :class:`~pipeline.catalog.errors.CatalogNotMigratedError` unless the catalog behind ``engine``
    is at :func:`head`: a command on a database that was started but not migrated would otherwise die
    deep in SQL (``relation "episodes" does not exist``)."""
    from pipeline.catalog.errors import CatalogNotMigratedError

    try:
        with engine.connect() as connection:
            revision = MigrationContext.configure(connection).get_current_revision()
    except OperationalError as exc:
        raise DatabaseError(f"cannot read the catalog revision of {_safe_url(engine)}: {exc.orig}") from exc
    wanted = head()
    if revision != wanted:
        raise CatalogNotMigratedError(_safe_url(engine), revision, wanted)


def _safe_url(engine: Engine) -> str:
    return engine.url.render_as_string(hide_password=True)


def make_revision(url: str, message: str, *, version_path: Path | None = None) -> Path:
    """Write a new revision autogenerated from the difference between ``url``'s schema and the models.

    A developer tool (``url``: a database migrated to head). The file goes to ``sql/migrations/versions``
    unless ``version_path`` says otherwise; review it, and write enum lists in it as literal values.
    Returns the path of the file written.
    """
    from pipeline.catalog.models import Base

    config = alembic_config(url)
    if version_path is not None:
        config.set_main_option(
            "version_locations", os.pathsep.join([str(MIGRATIONS_DIR / "versions"), str(version_path)])
        )
    engine = _engine(url)
    try:
        with engine.begin() as connection:
            config.attributes.update(connection=connection, lock_key=MIGRATION_LOCK_KEY)
            config.attributes["target_metadata"] = Base.metadata
            script = command.revision(
                config,
                message=message,
                autogenerate=True,
                version_path=None if version_path is None else str(version_path),
            )
    finally:
        engine.dispose()
    if script is None or isinstance(script, list):
        raise DatabaseError(f"alembic wrote no single revision for {message!r}")
    log.info("wrote catalog revision %s", script.path)
    return Path(script.path)


def _run(url: str, action: str, revision: str) -> None:
    from alembic.util.exc import CommandError

    from pipeline.catalog.errors import CatalogValueError

    config = alembic_config(url)
    if not revision.strip():  # Alembic fails an assertion on it
        raise _unknown_revision(config, revision)
    engine = _engine(url)
    try:
        with engine.begin() as connection:
            config.attributes.update(connection=connection, lock_key=MIGRATION_LOCK_KEY)
            getattr(command, action)(config, revision)
    except OperationalError as exc:
        raise DatabaseError(f"cannot {action} {_safe(url)} to {revision!r}: {exc.orig}") from exc
    except CommandError as exc:
        from alembic.script.revision import ResolutionError

        if isinstance(exc.__cause__, ResolutionError):  # no such revision
            raise _unknown_revision(config, revision) from exc
        # a relative step past either end, a target on the wrong side of the catalog's revision
        raise CatalogValueError(
            "catalog revision", revision, f"one the catalog can {action} to from where it is ({exc})"
        ) from exc
    finally:
        engine.dispose()
    log.info("catalog %s to %s done on %s", action, revision, _safe(url))


def _unknown_revision(config: Config, revision: str) -> UnknownChoiceError:
    revisions = [r.revision for r in ScriptDirectory.from_config(config).walk_revisions()]
    return UnknownChoiceError(
        "catalog revision", revision, ["head", "base", *revisions, "-N/+N (steps from the current one)"]
    )


def _engine(url: str) -> Engine:
    # One connection is all a migration needs; no pool to leave behind.
    return create_engine(url, poolclass=NullPool, connect_args=connect_args(url))


def _safe(url: str) -> str:
    return make_url(url).render_as_string(hide_password=True)
