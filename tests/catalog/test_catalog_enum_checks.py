"""Every enum CHECK in the migrated database matches the current enums, and the database enforces them."""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator
from enum import StrEnum

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection

import pipeline.enums
from pipeline.catalog.models import EnumCheck, enum_checks

pytestmark = pytest.mark.integration

#: How Postgres prints each shape of enum CHECK (pg_get_constraintdef), capturing the column and the list.
SHAPES = {
    "scalar": re.compile(r"CHECK \(\((\w+) = ANY \(ARRAY\[(.*)\]\)\)\)"),
    "array": re.compile(r"CHECK \(\((\w+) <@ ARRAY\[(.*)\]\)\)"),
    "keys": re.compile(r"CHECK \(\(\((\w+) - ARRAY\[(.*)\]\) = '\{\}'::jsonb\)\)"),
}
LITERAL = re.compile(r"'((?:[^']|'')*)'::text")
COMPARISON = re.compile(r"\((\w+) (?:=|<>) '((?:[^']|'')*)'::text\)")


def _checks(conn: Connection) -> Iterator[tuple[str, str, str]]:
    rows = conn.execute(
        sa.text(
            "SELECT cl.relname, c.conname, pg_get_constraintdef(c.oid) FROM pg_constraint c "
            "JOIN pg_class cl ON cl.oid = c.conrelid JOIN pg_namespace n ON n.oid = cl.relnamespace "
            "WHERE c.contype = 'c' AND n.nspname = 'public' ORDER BY 1, 2"
        )
    )
    yield from rows.tuples()


def enum_check_mismatches(conn: Connection) -> list[str]:
    """Each way the database's CHECKs disagree with the current enums (empty: they agree)."""
    expected: dict[str, EnumCheck] = {spec.constraint_name: spec for spec in enum_checks()}
    by_column = {(spec.table, spec.column): spec.enum for spec in expected.values()}
    problems = []
    for table, name, definition in _checks(conn):
        spec = expected.pop(name, None)
        if spec is None:
            if "ARRAY[" in definition:
                problems.append(f"{name}: a list of allowed values that mirrors no enum: {definition}")
            # A single enum value spelled out in another CHECK must still be a member.
            for col, literal in COMPARISON.findall(definition):
                enum = by_column.get((table, col))
                if enum is not None and literal not in {m.value for m in enum}:
                    problems.append(
                        f"{name}: {table}.{col} compared with {literal!r}, not in {enum.__name__}"
                    )
            continue
        match = SHAPES[spec.shape].fullmatch(definition)
        if match is None or match.group(1) != spec.column:
            problems.append(f"{name}: expected a {spec.shape} CHECK on {spec.column}, found {definition}")
            continue
        allowed = {literal.replace("''", "'") for literal in LITERAL.findall(match.group(2))}
        members = {m.value for m in spec.enum}
        if allowed != members:
            problems.append(
                f"{table}.{spec.column}: the database allows {sorted(allowed)} but {spec.enum.__name__} "
                f"has {sorted(members)} (missing {sorted(members - allowed)}, "
                f"extra {sorted(allowed - members)}): add a migration"
            )
    problems += [f"{name}: in the models, missing in the database" for name in expected]
    return problems


def test_every_check_matches_the_current_enums(migrated_database_url: str) -> None:
    engine = sa.create_engine(migrated_database_url)
    try:
        with engine.connect() as conn:
            assert enum_check_mismatches(conn) == []
    finally:
        engine.dispose()


def test_every_enum_is_mirrored_by_a_check() -> None:
    mirrored = {spec.enum for spec in enum_checks()}
    declared = {
        obj
        for _, obj in inspect.getmembers(pipeline.enums, inspect.isclass)
        if issubclass(obj, StrEnum) and obj.__module__ == pipeline.enums.__name__
    }
    assert declared - mirrored == set()


def test_a_member_added_without_a_migration_is_caught(migrated_database_url: str) -> None:
    """Simulate an enum that grew: the database's list lacks one member the code has."""
    engine = sa.create_engine(migrated_database_url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("ALTER TABLE episodes DROP CONSTRAINT ck_episodes_state_enum"))
            conn.execute(
                sa.text(
                    "ALTER TABLE episodes ADD CONSTRAINT ck_episodes_state_enum "
                    "CHECK (state IN ('pending', 'accepted', 'accepted_with_flags', 'quarantined'))"
                )
            )
            conn.execute(
                sa.text("ALTER TABLE episodes ADD CONSTRAINT ck_episodes_zombie CHECK (state <> 'zombie')")
            )
            conn.execute(
                sa.text("ALTER TABLE streams ADD CONSTRAINT ck_streams_stray CHECK (role IN ('x', 'y'))")
            )
            problems = enum_check_mismatches(conn)
    finally:
        engine.dispose()
    assert len(problems) == 3
    assert "episodes.state" in problems[0] and "missing ['duplicate']" in problems[0]
    assert problems[1].startswith("ck_episodes_zombie") and "'zombie', not in FileState" in problems[1]
    assert problems[2].startswith("ck_streams_stray")


# -- the database itself refuses bad values (raw SQL, past the Python validation) ---------------------------


@pytest.fixture
def seeded(migrated_database_url: str) -> Iterator[Connection]:
    """A connection with one vendor, blob, source file and episode (ids 1) and an open transaction."""
    engine = sa.create_engine(migrated_database_url)
    with engine.connect() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO vendors (name, kind, config_hash, config) VALUES ('v', 'mcap', 'h', '{}');"
                "INSERT INTO blobs (sha256, size_bytes, raw_uri) VALUES (repeat('ab', 32), 1, 'raw/x');"
                "INSERT INTO source_files (vendor_id, path, blob_id) VALUES (1, 'a.mcap', 1);"
                "INSERT INTO episodes (vendor_id, source_file_id, blob_id, kind) VALUES (1, 1, 1, 'mcap');"
            )
        )
        yield conn
    engine.dispose()


def _refused(conn: Connection, statement: str) -> str:
    """Run ``statement`` in a savepoint and return the constraint that refused it."""
    with pytest.raises(sa.exc.IntegrityError) as caught, conn.begin_nested():
        conn.execute(sa.text(statement))
    return caught.value.orig.diag.constraint_name


@pytest.mark.parametrize(
    ("statement", "constraint"),
    [
        ("UPDATE episodes SET state = 'lost'", "ck_episodes_state_enum"),
        ("UPDATE episodes SET reasons = ARRAY['truncated', 'gremlins']", "ck_episodes_reasons_enum"),
        ("UPDATE episodes SET reasons = ARRAY['truncated', NULL]", "ck_episodes_reasons_enum"),
        ("UPDATE episodes SET state = 'duplicate'", "ck_episodes_duplicate_names_original"),
        ("UPDATE episodes SET kind = 'lidar'", "ck_episodes_kind_enum"),
        ("UPDATE episodes SET start_time_ns = 10, end_time_ns = 5", "ck_episodes_time_range_ordered"),
        (
            "INSERT INTO step_runs (episode_id, step, config_hash, status) VALUES (1, 'ingest', 'h', 'done')",
            "ck_step_runs_status_enum",
        ),
        (
            "INSERT INTO step_runs (episode_id, step, config_hash, status) "
            "VALUES (1, 'upload', 'h', 'failed')",
            "ck_step_runs_step_enum",
        ),
        (
            "INSERT INTO check_results (episode_id, gate, check_name, config_hash, status, reason) "
            "VALUES (1, 'quality_pre', 'crc', 'h', 'failed', 'bad_vibes')",
            "ck_check_results_reason_enum",
        ),
        (
            "INSERT INTO pipeline_runs (vendor_id, dag_id, run_id, config_hash, step_toggles) "
            "VALUES (1, 'd', 'r', 'h', '{\"ingest\": true, \"upload\": false}')",
            "ck_pipeline_runs_step_toggles_enum",
        ),
        (
            "INSERT INTO blobs (sha256, size_bytes, raw_uri) VALUES (repeat('AB', 32), 1, 'raw/y')",
            "ck_blobs_sha256_hex",
        ),
    ],
)
def test_the_database_refuses_a_value_outside_its_enum(
    seeded: Connection, statement: str, constraint: str
) -> None:
    assert _refused(seeded, statement) == constraint


def test_a_null_sha256_is_refused(seeded: Connection) -> None:
    with pytest.raises(sa.exc.IntegrityError, match="not-null") as caught, seeded.begin_nested():
        seeded.execute(sa.text("INSERT INTO blobs (sha256, size_bytes, raw_uri) VALUES (NULL, 1, 'raw/z')"))
    assert caught.value.orig.diag.column_name == "sha256"


def test_valid_values_are_accepted(seeded: Connection) -> None:
    """The refusals above are about the values, not the statements."""
    seeded.execute(
        sa.text("UPDATE episodes SET state = 'accepted_with_flags', reasons = ARRAY['crc_absent']")
    )
    seeded.execute(
        sa.text(
            "INSERT INTO pipeline_runs (vendor_id, dag_id, run_id, config_hash, step_toggles) "
            "VALUES (1, 'd', 'r', 'h', '{\"ingest\": true, \"annotate\": false}')"
        )
    )
    assert seeded.execute(sa.text("SELECT state, reasons FROM episodes")).one() == (
        "accepted_with_flags",
        ["crc_absent"],
    )
