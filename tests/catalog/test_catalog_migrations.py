"""Migrations against the real Postgres: up, down to nothing, up again; the models match the result."""

from __future__ import annotations

import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy.dialects.postgresql import ExcludeConstraint

from pipeline.catalog import migrate
from pipeline.catalog.models import Base
from pipeline.errors import DatabaseError

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def _schema_objects(url: str) -> dict[str, list[str]]:
    """Every table, type and extension of the database that is not Postgres' own."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            tables = conn.execute(
                sa.text("SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1")
            ).scalars()
            types = conn.execute(
                sa.text(
                    "SELECT t.typname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace "
                    "WHERE n.nspname = 'public' ORDER BY 1"
                )
            ).scalars()
            extensions = conn.execute(sa.text("SELECT extname FROM pg_extension ORDER BY 1")).scalars()
            return {"tables": list(tables), "types": list(types), "extensions": list(extensions)}
    finally:
        engine.dispose()


def test_up_down_up(fresh_database_url) -> None:
    url = fresh_database_url()
    assert migrate.current(url) is None

    migrate.upgrade(url)
    assert migrate.current(url) == migrate.head()
    migrated = _schema_objects(url)
    assert set(Base.metadata.tables) <= set(migrated["tables"])
    assert "btree_gist" in migrated["extensions"]

    migrate.downgrade(url, "base")
    assert migrate.current(url) is None
    left = _schema_objects(url)
    # Only Alembic's own bookkeeping table (and its row type) survives a downgrade to base.
    assert left["tables"] == ["alembic_version"]
    assert set(left["types"]) == {"alembic_version", "_alembic_version"}
    assert left["extensions"] == ["plpgsql"]

    migrate.upgrade(url)
    assert migrate.current(url) == migrate.head()
    assert _schema_objects(url) == migrated


def test_models_match_the_migrated_schema(migrated_database_url: str) -> None:
    """Tables, columns, types, nullability, defaults, indexes and unique constraints agree."""
    engine = sa.create_engine(migrated_database_url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(
                conn, opts={"compare_type": True, "compare_server_default": True}
            )
            with warnings.catch_warnings():
                # Alembic cannot compare generated columns' expressions and says so; the rest it compares.
                warnings.filterwarnings("ignore", message="Computed default")
                diffs = compare_metadata(context, Base.metadata)
            db_checks = set(
                conn.execute(
                    sa.text(
                        "SELECT conname FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace "
                        "WHERE n.nspname = 'public' AND c.contype IN ('c', 'x')"
                    )
                ).scalars()
            )
    finally:
        engine.dispose()
    assert diffs == []
    model_checks = {
        str(c.name)
        for table in Base.metadata.tables.values()
        for c in table.constraints
        if isinstance(c, sa.CheckConstraint | ExcludeConstraint)
    }
    assert db_checks == model_checks


def test_migration_error_names_the_database(fresh_database_url) -> None:
    url = sa.make_url(fresh_database_url()).set(password="wrong").render_as_string(hide_password=False)
    with pytest.raises(DatabaseError, match=r"\*\*\*"):
        migrate.upgrade(url)


def test_concurrent_upgrades_wait_for_each_other(fresh_database_url) -> None:
    """Two processes migrating one database at once: the second waits, then finds it at head.

    (Processes, not threads: Alembic's ``op`` and ``context`` are process-wide.)
    """
    url = fresh_database_url()
    engine = sa.create_engine(url)
    code = "import sys; from pipeline.catalog import migrate; migrate.upgrade(sys.argv[1])"
    with engine.connect() as conn:
        # Hold the migrators' lock so that both are provably waiting on it before either runs.
        conn.execute(sa.text("SELECT pg_advisory_lock(:key)"), {"key": migrate.MIGRATION_LOCK_KEY})
        workers = [subprocess.Popen([sys.executable, "-c", code, url], cwd=REPO) for _ in range(2)]
        waiting = 0
        deadline = time.monotonic() + 60
        while waiting < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
            waiting = conn.execute(
                sa.text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
            ).scalar_one()
        conn.execute(sa.text("SELECT pg_advisory_unlock(:key)"), {"key": migrate.MIGRATION_LOCK_KEY})
    engine.dispose()
    assert waiting == 2
    assert [w.wait(timeout=120) for w in workers] == [0, 0]
    assert migrate.current(url) == migrate.head()


def test_make_revision_finds_nothing_to_add(migrated_database_url: str, tmp_path: Path) -> None:
    """The developer tool autogenerates against the models: at head there is nothing to migrate."""
    written = migrate.make_revision(migrated_database_url, "nothing", version_path=tmp_path)
    text = written.read_text()
    assert written.parent == tmp_path
    assert f"down_revision: str | Sequence[str] | None = {migrate.head()!r}" in text
    assert "op." not in text


def test_0002_turns_version_aliases_into_versions_and_back(fresh_database_url) -> None:
    """0001's code registered a path's later content as ``<path>#sha256=<16 hex of its blob>``; 0002 makes
    those versions of the path, and leaves a name that only contains the text as it is."""
    url = fresh_database_url()
    migrate.upgrade(url, "0001")
    a, b, c = "a" * 64, "b" * 64, "c" * 64
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO vendors (name, kind, config_hash, config) VALUES ('v', 'mcap', 'h', '{}');"
                f"INSERT INTO blobs (sha256, size_bytes, raw_uri) VALUES ('{a}', 1, 'r'), ('{b}', 1, 'r'), "
                f"('{c}', 1, 'r');"
                "INSERT INTO source_files (vendor_id, path, blob_id) VALUES (1, 'x.mcap', 1), "
                f"(1, 'x.mcap#sha256={b[:16]}', 2), (1, 'y#sha256={a[:16]}', 3)"
            )
        )
    try:
        migrate.upgrade(url)
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT path, version, blob_id FROM source_files ORDER BY id")).all()
        assert [tuple(r) for r in rows] == [("x.mcap", 1, 1), ("x.mcap", 2, 2), (f"y#sha256={a[:16]}", 1, 3)]
        migrate.downgrade(url, "0001")
        with engine.connect() as conn:
            paths = conn.execute(sa.text("SELECT path FROM source_files ORDER BY id")).scalars().all()
        assert paths == ["x.mcap", f"x.mcap#sha256={b[:16]}", f"y#sha256={a[:16]}"]
    finally:
        engine.dispose()


def test_0004_refuses_to_go_back_while_a_row_holds_its_reason(fresh_database_url) -> None:
    """Below 0004 the reason CHECKs no longer allow ``colour_mismatch``: the downgrade says which rows
    hold it, and goes once none does."""
    url = fresh_database_url()
    migrate.upgrade(url)
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO vendors (name, kind, config_hash, config) VALUES ('v', 'mcap', 'h', '{}');"
                    "INSERT INTO blobs (sha256, size_bytes, raw_uri) VALUES (repeat('ab', 32), 1, 'raw/x');"
                    "INSERT INTO source_files (vendor_id, path, blob_id) VALUES (1, 'a.mcap', 1);"
                    "INSERT INTO episodes (vendor_id, source_file_id, blob_id, kind, reasons) "
                    "VALUES (1, 1, 1, 'mcap', ARRAY['colour_mismatch'])"
                )
            )
        with pytest.raises(Exception, match=r"colour_mismatch \(episodes\.reasons: 1 row\(s\)\)"):
            migrate.downgrade(url, "0003")
        assert migrate.current(url) == "0004"
        with engine.begin() as conn:
            conn.execute(sa.text("UPDATE episodes SET reasons = '{}'"))
        migrate.downgrade(url, "0003")
        assert migrate.current(url) == "0003"
    finally:
        engine.dispose()
