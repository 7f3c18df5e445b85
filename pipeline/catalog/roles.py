"""The catalog's two database roles: an ingest writer and a read-only curation reader.

What each may do, on the catalog's tables (not ``alembic_version``, which both may only read):

* **writer** (``sluice_ingest``, the role every step connects as): SELECT and INSERT everywhere, UPDATE
  everywhere except where history lives. Upserts with ``ON CONFLICT DO UPDATE`` need UPDATE on their
  table, so they work everywhere but on ``blobs``, whose upsert is ``DO NOTHING`` (INSERT is enough): a raw
  object's row is write-once. On ``source_files`` it may update ``source_state`` only (a path is never
  repointed to other bytes), on ``episodes`` the metadata columns only: a state changes through
  ``sluice_set_episode_state()`` (a SECURITY DEFINER function that refuses to leave ``duplicate`` or go
  back to ``pending``, and appends each change to ``episode_state_changes``, which the writer may only
  read). A trigger keeps a final step outcome from being rewritten by anyone. No DELETE, no TRUNCATE, no
  CREATE in the schema.
* **reader** (``sluice_curation``): SELECT only.

Why this is a separate step and not a migration: roles belong to the whole cluster while migrations belong
to one database (the test suite migrates many databases on one cluster, and a downgrade must not drop a
role another database still uses); role passwords are secrets that do not belong in versioned files; and
a managed Postgres may refuse ``CREATE ROLE`` to the application. So :func:`create_roles` is cluster-level
and optional (create the roles in the provider's console instead), and :func:`grant_privileges` is
database-level, run by the catalog's owner after every migration (a new table gets no grants by itself).
:func:`ensure_roles` does both and is idempotent.

Passwords are hashed on the client (SCRAM, :func:`psycopg2.extensions.encrypt_password`), so the plain
text never reaches the server or its statement log.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import psycopg2
from psycopg2 import errors as pg_errors
from psycopg2 import sql
from psycopg2.extensions import connection as PgConnection
from psycopg2.extensions import encrypt_password
from sqlalchemy import make_url

from pipeline.catalog.errors import RoleSetupError
from pipeline.catalog.models import Base, Blob, EpisodeStateChange, SourceFile
from pipeline.catalog.models import Episode as EpisodeModel
from pipeline.catalog.sources import EPISODE_METADATA

if TYPE_CHECKING:
    from pipeline.settings import Settings

log = logging.getLogger(__name__)

#: Tables whose rows are write-once: the writer may insert but never update them.
WRITE_ONCE_TABLES = frozenset({Blob.__tablename__})
VERSION_TABLE = "alembic_version"
WRITER_PRIVILEGES = sql.SQL("SELECT, INSERT, UPDATE")
WRITE_ONCE_PRIVILEGES = sql.SQL("SELECT, INSERT")
#: Tables whose rows the writer may change in these columns only.
WRITER_UPDATE_COLUMNS: dict[str, tuple[str, ...]] = {
    SourceFile.__tablename__: ("source_state",),
    EpisodeModel.__tablename__: (*EPISODE_METADATA, "updated_at"),
}
#: History the writer may only read (the state function appends to it as the catalog's owner).
WRITER_READ_ONLY_TABLES = frozenset({EpisodeStateChange.__tablename__})
#: How the writer changes an episode's state (created by migration 0002).
STATE_FUNCTION = "sluice_set_episode_state(bigint, text, text[], text, bigint, boolean, text, text)"


@dataclass(frozen=True)
class RoleNames:
    writer: str = "sluice_ingest"
    reader: str = "sluice_curation"


@dataclass(frozen=True)
class RoleUrls:
    """Connection URLs of the two roles (same host and database as the admin URL); not shown in repr."""

    writer_url: str = field(repr=False)
    reader_url: str = field(repr=False)


def ensure_roles(
    admin_url: str, writer_password: str, reader_password: str, names: RoleNames = RoleNames()
) -> RoleUrls:
    """Create or reset both roles, grant their privileges on the catalog at ``admin_url``, return their URLs.

    ``admin_url`` must be allowed to create roles (superuser or CREATEROLE) and own the catalog tables.
    Safe to call again and from several processes at once.
    """
    create_roles(admin_url, writer_password, reader_password, names)
    grant_privileges(admin_url, names)
    return role_urls(admin_url, writer_password, reader_password, names)


def role_urls(
    admin_url: str, writer_password: str, reader_password: str, names: RoleNames = RoleNames()
) -> RoleUrls:
    url = make_url(admin_url)
    return RoleUrls(
        writer_url=url.set(username=names.writer, password=writer_password).render_as_string(
            hide_password=False
        ),
        reader_url=url.set(username=names.reader, password=reader_password).render_as_string(
            hide_password=False
        ),
    )


def create_roles(
    admin_url: str, writer_password: str, reader_password: str, names: RoleNames = RoleNames()
) -> None:
    """Create both login roles if absent and (re)set their attributes and passwords (cluster-wide)."""
    for role, password in ((names.writer, writer_password), (names.reader, reader_password)):
        if not password:
            raise RoleSetupError(f"empty password for role {role!r}; give a non-empty one")
    # Autocommit: a CREATE that lost a race to another process must not abort the statements after it.
    with _connect(admin_url, autocommit=True) as conn, conn.cursor() as cur:
        for role, password in ((names.writer, writer_password), (names.reader, reader_password)):
            cur.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,))
            if cur.fetchone() is None:
                try:
                    cur.execute(sql.SQL("CREATE ROLE {}").format(sql.Identifier(role)))
                    log.info("created role %s", role)
                except (pg_errors.DuplicateObject, pg_errors.UniqueViolation):
                    pass  # another process created it between our check and our CREATE
                except pg_errors.InsufficientPrivilege as exc:
                    raise RoleSetupError(
                        f"cannot create role {role!r} with the admin connection ({exc.pgerror.strip()}); "
                        "create it in your Postgres provider's console, then call grant_privileges()"
                    ) from exc
            hashed = encrypt_password(password, role, conn)
            cur.execute(
                sql.SQL(
                    "ALTER ROLE {} WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS "
                    "PASSWORD %s"
                ).format(sql.Identifier(role)),
                (hashed,),
            )


def missing_roles(admin_url: str, names: RoleNames = RoleNames()) -> list[str]:
    """The two roles that do not exist on the server at ``admin_url`` (none, one or both)."""
    wanted = [names.writer, names.reader]
    with _connect(admin_url) as conn, conn.cursor() as cur:
        cur.execute("SELECT rolname FROM pg_roles WHERE rolname = ANY(%s)", (wanted,))
        present = {row[0] for row in cur.fetchall()}
    return [role for role in wanted if role not in present]


def grant_privileges(admin_url: str, names: RoleNames = RoleNames()) -> list[str]:
    """Grant the two roles their privileges on the catalog tables of the database at ``admin_url``.

    Resets what the admin granted them before, so it also takes back privileges that a new release no
    longer gives. Returns the tables granted on.
    """
    writer, reader = sql.Identifier(names.writer), sql.Identifier(names.reader)
    with _connect(admin_url) as conn, conn.cursor() as cur:
        cur.execute("SELECT current_database(), current_schema()")
        database, schema = cur.fetchone()
        cur.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,))
        present = {row[0] for row in cur.fetchall()}
        tables = sorted(t for t in Base.metadata.tables if t in present)
        both = sql.SQL("{}, {}").format(writer, reader)
        cur.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(sql.Identifier(database), both))
        # Postgres before 15 lets every role CREATE in the public schema; nobody but the owner should.
        cur.execute(sql.SQL("REVOKE CREATE ON SCHEMA {} FROM PUBLIC").format(sql.Identifier(schema)))
        cur.execute(sql.SQL("REVOKE ALL ON SCHEMA {} FROM {}").format(sql.Identifier(schema), both))
        cur.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(schema), both))
        for table in tables:
            target = sql.Identifier(schema, table)
            cur.execute(sql.SQL("REVOKE ALL ON TABLE {} FROM {}").format(target, both))
            cur.execute(
                sql.SQL("GRANT {} ON TABLE {} TO {}").format(_writer_privileges(table), target, writer)
            )
            if table in WRITER_UPDATE_COLUMNS:
                columns = sql.SQL(", ").join(sql.Identifier(c) for c in WRITER_UPDATE_COLUMNS[table])
                cur.execute(sql.SQL("GRANT UPDATE ({}) ON TABLE {} TO {}").format(columns, target, writer))
            cur.execute(sql.SQL("GRANT SELECT ON TABLE {} TO {}").format(target, reader))
        cur.execute("SELECT to_regprocedure(%s) IS NOT NULL", (STATE_FUNCTION,))
        if cur.fetchone()[0]:
            function = sql.SQL(STATE_FUNCTION)  # a constant of this module, not user input
            cur.execute(sql.SQL("REVOKE ALL ON FUNCTION {} FROM PUBLIC, {}").format(function, both))
            cur.execute(sql.SQL("GRANT EXECUTE ON FUNCTION {} TO {}").format(function, writer))
        if VERSION_TABLE in present:
            target = sql.Identifier(schema, VERSION_TABLE)
            cur.execute(sql.SQL("REVOKE ALL ON TABLE {} FROM {}").format(target, both))
            cur.execute(sql.SQL("GRANT SELECT ON TABLE {} TO {}").format(target, both))
    log.info(
        "granted %s and %s on %d catalog tables of %s", names.writer, names.reader, len(tables), database
    )
    return tables


def _writer_privileges(table: str) -> sql.Composable:
    if table in WRITER_READ_ONLY_TABLES:
        return sql.SQL("SELECT")
    if table in WRITE_ONCE_TABLES or table in WRITER_UPDATE_COLUMNS:
        return WRITE_ONCE_PRIVILEGES
    return WRITER_PRIVILEGES


def step_database_url(settings: Settings) -> str:
    """The URL steps connect to the catalog with: the ingest (writer) role's.

    ``SLUICE_INGEST_DATABASE_URL`` when set; on the local cluster, the writer's URL built from the passwords
    ``sluice db migrate`` keeps beside it; with only ``SLUICE_DATABASE_URL`` set, that URL (logged as a
    warning: its role is usually the catalog's owner, which may rewrite history).
    """
    import json

    from pipeline.pgserver import ROLES_FILE, local_cluster

    if settings.ingest_database_url:
        return settings.ingest_database_url
    if settings.database_url:
        if settings.database_url not in _warned:
            _warned.add(settings.database_url)
            log.warning(
                "SLUICE_INGEST_DATABASE_URL is not set: steps connect as SLUICE_DATABASE_URL's role (%s), "
                "not as the ingest role",
                make_url(settings.database_url).username,
            )
        return settings.database_url
    cluster = local_cluster(settings)
    try:
        passwords = json.loads((cluster.root / ROLES_FILE).read_text())
    except FileNotFoundError:
        # migrate needs the cluster running: name both steps when it is not
        steps = (
            "`sluice db migrate`" if cluster.status().running else "`sluice db up`, then `sluice db migrate`"
        )
        raise RoleSetupError(
            f"the catalog's roles are not set up on the local cluster ({cluster.root / ROLES_FILE} is "
            f"missing): run {steps}"
        ) from None
    return role_urls(cluster.url(), passwords["writer"], passwords["reader"]).writer_url


_warned: set[str] = set()


@contextmanager
def _connect(url: str, *, autocommit: bool = False) -> Iterator[PgConnection]:
    """A psycopg2 connection (one transaction unless ``autocommit``); privilege errors name the cause."""
    parsed = make_url(url)
    try:
        conn = psycopg2.connect(
            host=parsed.host,
            port=parsed.port,
            user=parsed.username,
            password=parsed.password,
            dbname=parsed.database,
            **{str(k): str(val) for k, val in parsed.query.items()},
        )
    except psycopg2.OperationalError as exc:
        safe = parsed.render_as_string(hide_password=True)
        raise RoleSetupError(f"cannot connect to {safe} to set up roles: {str(exc).strip()}") from exc
    conn.autocommit = autocommit
    try:
        with conn:
            yield conn
    except pg_errors.InsufficientPrivilege as exc:
        raise RoleSetupError(
            f"the admin connection may not set up roles and grants ({exc.pgerror.strip()}); connect as the "
            "catalog's owner (and a role with CREATEROLE to create roles)"
        ) from exc
    finally:
        conn.close()
