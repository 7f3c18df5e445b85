"""The curation SQL defines exactly the views the code names, and they build on an empty warehouse."""

from __future__ import annotations

import re

import duckdb

from pipeline.warehouse.tables import CATALOG_SCHEMA, synced_tables
from pipeline.warehouse.views import EPISODE_VIEW, VIEWS, apply_views, views_sql


def test_views_named_in_code_are_the_views_the_sql_defines() -> None:
    defined = re.findall(r"CREATE OR REPLACE VIEW (\w+)", views_sql())
    assert tuple(defined) == VIEWS
    assert EPISODE_VIEW in VIEWS and "episode_clips" in VIEWS


def _empty_warehouse() -> duckdb.DuckDBPyConnection:
    """An in-memory warehouse with the synced tables (no rows) and the views."""
    con = duckdb.connect()
    con.execute(f"CREATE SCHEMA {CATALOG_SCHEMA}")
    for table in synced_tables():
        con.execute(table.create_sql())
    apply_views(con)
    return con


def test_clip_columns_are_in_episode_view_on_an_empty_warehouse() -> None:
    con = _empty_warehouse()
    columns = {row[0]: row[1] for row in con.execute(f"DESCRIBE {EPISODE_VIEW}").fetchall()}
    assert columns["n_clips"] == "BIGINT" and columns["clips_uri"] == "VARCHAR"
    clip_columns = [row[0] for row in con.execute("DESCRIBE episode_clips").fetchall()]
    assert clip_columns[:4] == ["episode_id", "clip_artifact_id", "clip_index", "clip_file"]


def test_a_view_the_file_no_longer_defines_is_dropped() -> None:
    con = _empty_warehouse()
    con.execute("CREATE VIEW episode_view_v0 AS SELECT 1 AS retired")  # what an older release defined
    apply_views(con)
    names = {
        row[0] for row in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()
    }
    assert names == set(VIEWS)
