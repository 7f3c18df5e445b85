"""The role matrix against the real Postgres: what the ingest writer and the curation reader may do."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from pipeline.catalog.models import Base
from pipeline.catalog.roles import RoleNames, RoleUrls, ensure_roles, grant_privileges

pytestmark = pytest.mark.integration

TABLES = sorted(Base.metadata.tables)
SHA = "ab" * 32


@pytest.fixture
def writer(role_urls: RoleUrls) -> Iterator[Connection]:
    engine = sa.create_engine(role_urls.writer_url)
    with engine.connect() as conn:
        yield conn
    engine.dispose()


@pytest.fixture
def reader(role_urls: RoleUrls) -> Iterator[Connection]:
    engine = sa.create_engine(role_urls.reader_url)
    with engine.connect() as conn:
        yield conn
    engine.dispose()


def _denied(conn: Connection, statement: str) -> bool:
    """True when Postgres refuses ``statement`` for lack of privilege, or because it would rewrite history
    (a guard's integrity_constraint_violation); run in a savepoint."""
    try:
        with conn.begin_nested():
            conn.execute(sa.text(statement))
    except (sa.exc.ProgrammingError, sa.exc.IntegrityError) as exc:
        if exc.orig.pgcode in ("42501", "23000"):  # insufficient_privilege, integrity_constraint_violation
            return True
        raise
    return False


def _seed(conn: Connection) -> None:
    conn.execute(
        sa.text(
            "INSERT INTO vendors (name, kind, config_hash, config) VALUES ('v', 'mcap', 'h1', '{}');"
            f"INSERT INTO blobs (sha256, size_bytes, raw_uri) VALUES ('{SHA}', 1, 'raw/{SHA}')"
        )
    )


def test_writer_may_not_update_blobs_delete_truncate_or_create(writer: Connection) -> None:
    _seed(writer)
    assert _denied(writer, "UPDATE blobs SET verified_at = now()")
    assert _denied(
        writer,
        f"INSERT INTO blobs (sha256, size_bytes, raw_uri) VALUES ('{SHA}', 1, 'r') "
        "ON CONFLICT (sha256) DO UPDATE SET raw_uri = EXCLUDED.raw_uri",
    )
    denied = {
        table: (_denied(writer, f"DELETE FROM {table}"), _denied(writer, f"TRUNCATE {table}"))
        for table in TABLES
    }
    assert denied == dict.fromkeys(TABLES, (True, True))
    assert _denied(writer, "CREATE TABLE sneaky (id int)")
    assert _denied(writer, "CREATE SCHEMA sneaky")
    assert _denied(writer, "DELETE FROM alembic_version")
    assert _denied(writer, "UPDATE alembic_version SET version_num = 'x'")


def test_writer_may_insert_and_upsert(writer: Connection) -> None:
    _seed(writer)
    writer.execute(
        sa.text(
            "INSERT INTO vendors (name, kind, config_hash, config) VALUES ('v', 'mcap', 'h2', '{}') "
            "ON CONFLICT (name) DO UPDATE SET config_hash = EXCLUDED.config_hash"
        )
    )
    inserted = writer.execute(
        sa.text(
            f"INSERT INTO blobs (sha256, size_bytes, raw_uri) VALUES ('{SHA}', 1, 'raw/{SHA}') "
            "ON CONFLICT (sha256) DO NOTHING RETURNING id"
        )
    ).all()
    assert inserted == []
    writer.execute(sa.text("INSERT INTO source_files (vendor_id, path, blob_id) VALUES (1, 'a.mcap', 1)"))
    writer.execute(
        sa.text("INSERT INTO episodes (vendor_id, source_file_id, blob_id, kind) VALUES (1, 1, 1, 'mcap')")
    )
    writer.execute(sa.text("UPDATE episodes SET robot_id = 'r1', task = 'pick'"))
    writer.execute(
        sa.text("SELECT sluice_set_episode_state(1, 'accepted', '{}', NULL, NULL, false, 'quality_pre', 'h')")
    )
    writer.execute(sa.text("UPDATE source_files SET source_state = '{\"size\": 1}'"))
    assert writer.execute(sa.text("SELECT config_hash FROM vendors")).scalar_one() == "h2"
    assert writer.execute(sa.text("SELECT state FROM episodes")).scalar_one() == "accepted"
    selectable = {table: not _denied(writer, f"SELECT * FROM {table}") for table in TABLES}
    assert selectable == dict.fromkeys(TABLES, True)


def test_reader_may_only_select(reader: Connection, migrated_database_url: str) -> None:
    admin = sa.create_engine(migrated_database_url)
    with admin.begin() as conn:
        _seed(conn)
    admin.dispose()
    assert reader.execute(sa.text("SELECT name FROM vendors")).scalar_one() == "v"
    matrix = {
        table: {
            "select": not _denied(reader, f"SELECT * FROM {table}"),
            "insert": _denied(reader, f"INSERT INTO {table} DEFAULT VALUES"),
            "update": _denied(reader, f"UPDATE {table} SET {_first_column(table)} = {_first_column(table)}"),
            "delete": _denied(reader, f"DELETE FROM {table}"),
            "truncate": _denied(reader, f"TRUNCATE {table}"),
        }
        for table in TABLES
    }
    everything = {"select": True, "insert": True, "update": True, "delete": True, "truncate": True}
    assert matrix == dict.fromkeys(TABLES, everything)
    assert _denied(reader, "CREATE TABLE sneaky (id int)")


def _first_column(table: str) -> str:
    return next(iter(Base.metadata.tables[table].columns)).name


def test_ensure_roles_is_idempotent_and_resets_passwords(
    migrated_database_url: str, role_urls: RoleUrls, role_passwords: tuple[str, str]
) -> None:
    again = ensure_roles(migrated_database_url, *role_passwords)
    assert again == role_urls
    assert grant_privileges(migrated_database_url) == TABLES
    changed = ensure_roles(migrated_database_url, "new-writer-pw", "new-reader-pw")
    try:
        for url in (changed.writer_url, changed.reader_url):
            engine = sa.create_engine(url)
            with engine.connect() as conn:
                assert conn.execute(sa.text("SELECT count(*) FROM vendors")).scalar_one() == 0
            engine.dispose()
        old = sa.create_engine(role_urls.writer_url)
        with pytest.raises(sa.exc.OperationalError, match="password authentication failed"):
            old.connect()
        old.dispose()
    finally:
        ensure_roles(migrated_database_url, *role_passwords)
    assert "password" not in repr(changed) and "new-writer-pw" not in repr(changed)


def test_role_names_are_configurable(migrated_database_url: str) -> None:
    names = RoleNames(writer="other_writer", reader="other_reader")
    urls = ensure_roles(migrated_database_url, "w-pw", "r-pw", names)
    engine = sa.create_engine(urls.reader_url)
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT current_user")).scalar_one() == "other_reader"
        assert _denied(
            conn, "INSERT INTO vendors (name, kind, config_hash, config) VALUES ('v', 'mcap', 'h', '{}')"
        )
    engine.dispose()


def _seed_history(conn: Connection) -> None:
    """An episode already gated (quarantined), a second one that is a duplicate of it, and final and
    unfinished step runs: the history the writer must not rewrite."""
    _seed(conn)
    other = "cd" * 32
    conn.execute(
        sa.text(
            f"INSERT INTO blobs (sha256, size_bytes, raw_uri) VALUES ('{other}', 1, 'raw/{other}');"
            "INSERT INTO source_files (vendor_id, path, blob_id) VALUES (1, 'a.mcap', 1), (1, 'b.mcap', 1);"
            "INSERT INTO episodes (vendor_id, source_file_id, blob_id, kind) VALUES (1, 1, 1, 'mcap'), "
            "(1, 2, 1, 'mcap');"
            "SELECT sluice_set_episode_state(1, 'quarantined', '{bad_magic}', 'x', NULL, false, 'quality_pre', 'h');"
            "SELECT sluice_set_episode_state(2, 'duplicate', '{}', NULL, 1, false, 'ingest', 'h');"
            "INSERT INTO step_runs (episode_id, step, config_hash, status) VALUES (1, 'quality_pre', 'h', "
            "'rejected'), (1, 'transcode', 'h', 'running')"
        )
    )


def test_writer_cannot_change_a_recorded_state_repoint_a_file_or_rewrite_an_outcome(
    writer: Connection,
) -> None:
    _seed_history(writer)
    # States: never by UPDATE, only through the function, which keeps duplicates and never goes back.
    assert _denied(writer, "UPDATE episodes SET state = 'accepted'")
    assert _denied(writer, "UPDATE episodes SET reasons = '{}'")
    assert _denied(writer, "UPDATE episodes SET blob_id = 2")
    assert _denied(writer, "UPDATE episodes SET duplicate_of_id = NULL")
    assert _denied(
        writer, "SELECT sluice_set_episode_state(2, 'accepted', '{}', NULL, NULL, false, NULL, NULL)"
    )
    assert _denied(
        writer, "SELECT sluice_set_episode_state(1, 'pending', '{}', NULL, NULL, false, NULL, NULL)"
    )
    # Files: a path's bytes are never repointed.
    assert _denied(writer, "UPDATE source_files SET blob_id = 2")
    assert _denied(writer, "UPDATE source_files SET path = 'c.mcap'")
    # Step outcomes: a final one stays; an unfinished one may end, but never move.
    assert _denied(writer, "UPDATE step_runs SET status = 'succeeded' WHERE step = 'quality_pre'")
    assert _denied(writer, "UPDATE step_runs SET detail = 'fine' WHERE step = 'quality_pre'")
    assert _denied(
        writer,
        "INSERT INTO step_runs (episode_id, step, config_hash, status) VALUES (1, 'quality_pre', 'h', "
        "'succeeded') ON CONFLICT (episode_id, step, config_hash) DO UPDATE SET status = EXCLUDED.status",
    )
    assert _denied(writer, "UPDATE step_runs SET episode_id = 2 WHERE step = 'transcode'")
    writer.execute(sa.text("UPDATE step_runs SET status = 'succeeded' WHERE step = 'transcode'"))
    # History: append-only, and not by hand.
    for statement in (
        "UPDATE episode_state_changes SET to_state = 'accepted'",
        "DELETE FROM episode_state_changes",
        "INSERT INTO episode_state_changes (episode_id, from_state, to_state, reasons, changed_by) "
        "VALUES (1, 'pending', 'accepted', '{}', 'me')",
    ):
        assert _denied(writer, statement), statement
    rows = writer.execute(
        sa.text(
            "SELECT episode_id, from_state, to_state, step, changed_by FROM episode_state_changes ORDER BY id"
        )
    ).all()
    assert [tuple(r) for r in rows] == [
        (1, "pending", "quarantined", "quality_pre", "sluice_ingest"),
        (2, "pending", "duplicate", "ingest", "sluice_ingest"),
    ]
    recorded = writer.execute(sa.text("SELECT id, state, reasons FROM episodes ORDER BY id")).all()
    assert [tuple(r) for r in recorded] == [(1, "quarantined", ["bad_magic"]), (2, "duplicate", [])]


def test_reader_may_not_change_states(reader: Connection, migrated_database_url: str) -> None:
    admin = sa.create_engine(migrated_database_url)
    with admin.begin() as conn:
        _seed_history(conn)
    admin.dispose()
    assert _denied(
        reader, "SELECT sluice_set_episode_state(1, 'accepted', '{}', NULL, NULL, false, NULL, NULL)"
    )
