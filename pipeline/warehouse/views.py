"""The curation views (``sql/duckdb/views.sql``) and the names of the ones other code relies on."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pipeline

if TYPE_CHECKING:
    import duckdb

#: The curation SQL lives at the repository root beside the catalog's migrations.
VIEWS_SQL = Path(pipeline.__file__).resolve().parent.parent / "sql" / "duckdb" / "views.sql"

#: One row per episode, every figure curation filters on: what dataset specs select from.
EPISODE_VIEW = "episode_view"
#: Every view the file defines (a test checks the two agree).
VIEWS = (
    "stream_stats",
    "latest_checks",
    "check_stats",
    "annotation_values",
    "annotation_stats",
    "dedup_groups",
    "episode_clips",
    "episode_lineage",
    EPISODE_VIEW,
)


def views_sql() -> str:
    try:
        return VIEWS_SQL.read_text(encoding="utf-8")
    except OSError as exc:
        from pipeline.errors import InfrastructureError

        raise InfrastructureError(
            f"cannot read the warehouse views at {VIEWS_SQL} ({exc.strerror or exc}); expected "
            "sql/duckdb/views.sql beside the pipeline package (run from a source checkout)"
        ) from exc


def apply_views(con: duckdb.DuckDBPyConnection) -> None:
    """(Re)create the views on a writable connection, inside the caller's transaction.

    Views of the main schema that the file no longer defines (renamed or removed in a newer release) are
    dropped first: a curation query must not keep reading a view nobody maintains. The warehouse is a
    replica that sync owns; nobody else creates views in it.
    """
    stale = [
        name
        for (name,) in con.execute(
            "SELECT view_name FROM duckdb_views() WHERE NOT internal AND schema_name = 'main'"
        ).fetchall()
        if name not in VIEWS
    ]
    for name in stale:
        con.execute(f'DROP VIEW IF EXISTS main."{name}"')
    con.execute(views_sql())
