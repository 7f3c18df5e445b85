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
    """(Re)create the views on a writable connection, inside the caller's transaction."""
    con.execute(views_sql())
