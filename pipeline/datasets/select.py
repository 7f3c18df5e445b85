"""Choosing a dataset version's rows in the warehouse: filter, sample, group, split, limit, order.

The steps, all deterministic (same spec + same warehouse + same frozen set = same rows in the same order):

1. **Filter**: rows of ``episode_view`` matching ``filter.where`` with its parameters bound. Rows that cannot
   be trained on (neither a transcoded episode nor clips, no start or end time) are dropped and counted as
   ``unusable``.
2. **Near-duplicates** (``near_duplicates: keep_one``, the default): of each near-duplicate group
   (``dedup_group``, recorded by :mod:`pipeline.dedup`) only one usable match is kept: a frozen evaluation
   episode if the group holds any (all frozen ones are kept), else the group's ``representative`` if it
   matched, else the lowest episode id among the members that matched. Episodes without a group are kept.
   Which episode kept which is reported (:attr:`Selection.near_duplicates`), the others are counted as
   ``near_duplicates_dropped``. ``keep_all`` skips this step.
3. **Sample**: keep an episode when ``sha256("<seed>:<episode id>")``, read as a number in [0, 1), is below
   ``sample.fraction``. Independent per episode; the same episode keeps its fate across versions.
4. **Group** (:mod:`.groups`), then **split** by ``sha256("<seed>:<group key>")`` in [0, 1):
   ``eval`` below ``eval_fraction``, ``val`` below ``eval_fraction + val_fraction``, else ``train``.
5. **Frozen evaluation**: once a version of this dataset has eval episodes, that set is frozen. Later
   versions put those episodes in eval whatever the spec now says (sampling does not drop them; if the
   filter no longer matches one, it is dropped and counted as ``eval_dropped``), add no new episode to eval,
   and hold out (leave out of every split, counted as ``held_out``) any other episode of a group that holds a
   frozen one, so that nothing near an evaluation episode is trained on. New groups whose hash falls in the
   eval range are shared between val and train in the spec's val : train proportion.
6. **Limits**, in sample order (frozen eval first): at most ``max_episodes_per_group`` per group, then at
   most ``max_episodes`` and ``max_total_duration_s`` in all. Frozen eval episodes are never cut.
7. **Order**: train, then val, then eval; within each, sample order (a stable pseudo-random order, so
   contiguous rank slices mix sessions), then episode id.
8. **Rows**: one per robot episode (its transcoded MCAP); one per clip of a video episode (its latest
   transcode's clips, in clip order, with windows from its ``clips.json``: :mod:`.clips`). Every step above
   works on episodes, so a video's clips share its split, group, sample fate and limits.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.datasets.clips import DocumentReader, clip_windows
from pipeline.datasets.errors import DatasetBuildError
from pipeline.datasets.groups import group_keys
from pipeline.datasets.spec import DatasetSpec, select_sql
from pipeline.enums import Split
from pipeline.manifest import format as mf

if TYPE_CHECKING:
    import duckdb

log = logging.getLogger(__name__)

#: Hex digits of a sha256 read as a number: 15 digits = 60 bits, exact in DuckDB's UBIGINT and a DOUBLE's
#: 53-bit mantissa loses only sub-2^-53 detail.
HASH_HEX_DIGITS = 15
HASH_SCALE = float(16**HASH_HEX_DIGITS)

#: Columns kept after the manifest's required ones (the split group too, so users can audit the splits),
#: then the clip columns, null on a robot episode's row (see :mod:`.clips`).
EXTRA_COLUMNS = (
    "robot_id", "session_id", "task", "group_key", "clip_index", "source_start_ns", "source_end_ns",
)  # fmt: skip
#: Lineage columns carried alongside the rows but not written into the manifest file.
LINEAGE_COLUMNS = ("episode_id_int", "transcoded_artifact_id", "blob_id")

# Temp relations on the (read-only, sandboxed) build connection.
_MATCHED = "_sluice_matched"
_FROZEN = "_sluice_frozen"
_GROUPS = "_sluice_groups"
_ASSIGNED = "_sluice_assigned"
_NEAR_DUPLICATES = "_sluice_near_duplicates"
_EPISODES = "_sluice_episodes"
_CLIP_WINDOWS = "_sluice_clip_windows"


@dataclass(frozen=True)
class Selection:
    """The rows of a version (manifest columns + :data:`LINEAGE_COLUMNS`) and what each step dropped.

    ``near_duplicates`` names, per near-duplicate group that lost members, the episode kept and the ones
    dropped: ``{"group": "g12", "kept": 12, "dropped": [15, 40]}``, ordered by kept episode id.
    """

    table: pa.Table
    counts: dict[str, int] = field(default_factory=dict)
    near_duplicates: list[dict[str, Any]] = field(default_factory=list)

    def manifest_table(self) -> pa.Table:
        return self.table.drop_columns(list(LINEAGE_COLUMNS))

    def split_rows(self) -> dict[str, int]:
        """Manifest rows per split (a video episode has a row per clip)."""
        return {s.value: _count_split(self.table, s) for s in Split}

    def split_episodes(self) -> dict[str, int]:
        """Episodes per split."""
        episodes = self.table.group_by([mf.SPLIT, "episode_id_int"]).aggregate([]).column(mf.SPLIT)
        return {s.value: int(pc.sum(pc.equal(episodes, s.value)).as_py() or 0) for s in Split}


def _count_split(table: pa.Table, split: Split) -> int:
    return int(pc.sum(pc.equal(table.column(mf.SPLIT), split.value)).as_py() or 0)


def hash_unit(column_sql: str, seed_param: str) -> str:
    """SQL for ``sha256("<seed>:<value>")`` read as a number in [0, 1) (see :func:`unit_hash`)."""
    digest = f"sha256(concat(${seed_param}, ':', {column_sql}))"
    return f"('0x' || left({digest}, {HASH_HEX_DIGITS}))::UBIGINT / {HASH_SCALE!r}"


def unit_hash(seed: int, value: object) -> float:
    """The Python twin of :func:`hash_unit`, for tests and audits."""
    import hashlib

    digest = hashlib.sha256(f"{seed}:{value}".encode()).hexdigest()
    return int(digest[:HASH_HEX_DIGITS], 16) / HASH_SCALE


def select_rows(
    con: duckdb.DuckDBPyConnection,
    spec: DatasetSpec,
    frozen_eval: Iterable[int] | None,
    read_documents: DocumentReader,
) -> Selection:
    """The rows of a new version of ``spec`` on a warehouse connection (see the module doc).

    ``frozen_eval`` is the frozen evaluation set of this dataset, or None when no version has one yet.
    ``read_documents`` reads the ``clips.json`` lists of the selected video episodes (by URI, e.g.
    :func:`pipeline.datasets.clips.store_reader`); it is only called when the selection holds one.
    """
    import duckdb

    frozen_ids = sorted(set(frozen_eval)) if frozen_eval is not None else []
    try:
        matched, unusable = _match(con, spec)
        con.register(_FROZEN, pa.table({"episode_id": pa.array(frozen_ids, pa.int64())}))
        near_duplicates = _drop_near_duplicates(con) if spec.near_duplicates == "keep_one" else []
        dropped = sum(len(g["dropped"]) for g in near_duplicates)
        sampled = _sample(con, spec)
        keys = group_keys(sampled, spec.splits.group_by)
        con.register(_GROUPS, pa.table({"episode_id": sampled.column("episode_id"), "group_key": keys}))
        held_out = _split_and_limit(con, spec, eval_frozen=frozen_eval is not None)
        episodes, kept_frozen = con.execute(
            f"SELECT count(*), count(*) FILTER (WHERE split = 'eval') FROM {_EPISODES}"
        ).fetchall()[0]
        table = _rows(con, spec, read_documents)
    except (duckdb.InterruptException, duckdb.OutOfMemoryException):
        raise  # the caller's limits stopped it (pipeline.warehouse.connection.statement_deadline says why)
    except duckdb.Error as exc:
        text = str(exc).strip().splitlines()[0]
        raise DatasetBuildError(spec.name, f"selecting episodes in the warehouse failed: {text}") from None
    finally:
        _drop_staging(con)
    kept_frozen = kept_frozen if frozen_eval is not None else 0
    counts = {
        "matched": matched,
        "unusable": unusable,
        "near_duplicates_dropped": dropped,
        "sampled_out": matched - unusable - dropped - sampled.num_rows,
        "held_out": held_out,
        "limited_out": sampled.num_rows - held_out - episodes,
        "eval_dropped": len(frozen_ids) - kept_frozen,
        "rows": table.num_rows,
    }
    log.info("dataset %s: %s", spec.name, counts)
    return Selection(table=table, counts=counts, near_duplicates=near_duplicates)


def _match(con: duckdb.DuckDBPyConnection, spec: DatasetSpec) -> tuple[int, int]:
    """Stage the filter's matches in a temp table; returns (matched, unusable)."""
    columns = (
        "episode_id, vendor, robot_id, session_id, task, content_fingerprint, duplicate_of_id, "
        "dedup_group, representative, "
        "start_time_ns, end_time_ns, duration_s, source_sha256, blob_id, transcoded_uri, "
        "transcoded_sha256, transcoded_artifact_id, n_clips, clips_uri, quality_sync, quality_completeness, quality_visual, "
        "quality_motion, quality_transcode, "
        "(transcoded_uri IS NOT NULL OR n_clips > 0) AND start_time_ns IS NOT NULL "
        "AND end_time_ns IS NOT NULL AS usable, "
        f"{hash_unit('episode_id', '_sample_seed')} AS sample_u"
    )
    query = f"CREATE OR REPLACE TEMP TABLE {_MATCHED} AS {select_sql(spec.filter.where, columns)}"
    params = {**spec.filter.bound_params(), "_sample_seed": str(spec.sample.seed)}
    con.execute(query, params)
    rows = con.execute(f"SELECT count(*), count(*) FILTER (WHERE NOT usable) FROM {_MATCHED}").fetchall()
    return int(rows[0][0]), int(rows[0][1])


_NEAR_DUPLICATES_SQL = f"""
CREATE OR REPLACE TEMP TABLE {_NEAR_DUPLICATES} AS
WITH members AS (
    SELECT m.episode_id, m.dedup_group, f.episode_id IS NOT NULL AS frozen,
           row_number() OVER (
               PARTITION BY m.dedup_group
               ORDER BY f.episode_id IS NOT NULL DESC, coalesce(m.representative = m.episode_id, false) DESC,
                        m.episode_id
           ) AS rank_in_group
    FROM {_MATCHED} AS m
    LEFT JOIN {_FROZEN} AS f USING (episode_id)
    WHERE m.usable AND m.dedup_group IS NOT NULL
), kept AS (
    SELECT dedup_group, episode_id AS kept_id FROM members WHERE rank_in_group = 1
)
SELECT m.episode_id, m.dedup_group, k.kept_id
FROM members AS m
JOIN kept AS k USING (dedup_group)
WHERE m.rank_in_group > 1 AND NOT m.frozen
"""


def _drop_near_duplicates(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """Keep one usable match per near-duplicate group (module doc, step 2); returns who kept whom."""
    con.execute(_NEAR_DUPLICATES_SQL)
    rows = con.execute(
        f"SELECT dedup_group, kept_id, list(episode_id ORDER BY episode_id) FROM {_NEAR_DUPLICATES} "
        "GROUP BY dedup_group, kept_id ORDER BY kept_id"
    ).fetchall()
    con.execute(f"DELETE FROM {_MATCHED} WHERE episode_id IN (SELECT episode_id FROM {_NEAR_DUPLICATES})")
    return [
        {"group": group, "kept": int(kept), "dropped": [int(e) for e in ids]} for group, kept, ids in rows
    ]


def _sample(con: duckdb.DuckDBPyConnection, spec: DatasetSpec) -> pa.Table:
    """The usable matches kept by sampling (frozen eval episodes always), with the grouping columns."""
    columns = ", ".join(("m.episode_id", "m.duplicate_of_id", *(f"m.{c}" for c in spec.splits.group_by)))
    query = (
        f"SELECT {columns} FROM {_MATCHED} AS m LEFT JOIN {_FROZEN} AS f USING (episode_id) "
        "WHERE m.usable AND (f.episode_id IS NOT NULL OR m.sample_u < $fraction) ORDER BY m.episode_id"
    )
    return con.sql(query, params={"fraction": spec.sample.fraction}).to_arrow_table()


_ASSIGN_SQL = f"""
CREATE OR REPLACE TEMP TABLE {_ASSIGNED} AS
WITH grouped AS (
    SELECT m.*, g.group_key, f.episode_id IS NOT NULL AS frozen,
           bool_or(f.episode_id IS NOT NULL) OVER (PARTITION BY g.group_key) AS group_frozen,
           {hash_unit("g.group_key", "split_seed")} AS split_u
    FROM {_MATCHED} AS m
    JOIN {_GROUPS} AS g USING (episode_id)
    LEFT JOIN {_FROZEN} AS f USING (episode_id)
)
SELECT *, CASE
    WHEN frozen THEN 'eval'
    WHEN group_frozen THEN NULL
    WHEN split_u < $eval_fraction AND NOT $eval_frozen THEN 'eval'
    WHEN split_u < $eval_fraction THEN
        CASE WHEN split_u / $eval_fraction < $val_share THEN 'val' ELSE 'train' END
    WHEN split_u < $eval_fraction + $val_fraction THEN 'val'
    ELSE 'train'
END AS split
FROM grouped
"""

_LIMIT_SQL = f"""
CREATE OR REPLACE TEMP TABLE {_EPISODES} AS
WITH per_group AS (
    SELECT *, row_number() OVER (PARTITION BY group_key ORDER BY frozen DESC, sample_u, episode_id) AS in_group
    FROM {_ASSIGNED}
    WHERE split IS NOT NULL
), capped AS (
    SELECT * FROM per_group WHERE frozen OR $max_per_group IS NULL OR in_group <= $max_per_group
), running AS (
    SELECT *,
        row_number() OVER sample_order AS n_running,
        sum(duration_s) OVER (sample_order ROWS UNBOUNDED PRECEDING) AS duration_s_running
    FROM capped
    WINDOW sample_order AS (ORDER BY frozen DESC, sample_u, episode_id)
)
SELECT * FROM running
WHERE frozen OR (
    ($max_episodes IS NULL OR n_running <= $max_episodes)
    AND ($max_duration_s IS NULL OR duration_s_running <= $max_duration_s)
)
"""

# One row per robot episode, one per clip of a video episode (its transcode wrote clips, not an episode).
_ROWS_SQL = f"""
SELECT
    CAST(e.episode_id AS VARCHAR) AS {mf.EPISODE_ID},
    coalesce(c.clip_uri, e.transcoded_uri) AS {mf.URI},
    CASE WHEN c.clip_uri IS NULL THEN e.start_time_ns ELSE 0 END AS {mf.START_NS},
    CASE WHEN c.clip_uri IS NULL THEN e.end_time_ns ELSE w.duration_ns END AS {mf.END_NS},
    CASE WHEN c.clip_uri IS NULL THEN e.duration_s ELSE w.duration_ns / 1e9 END AS {mf.DURATION_S},
    e.vendor AS {mf.VENDOR},
    CAST(e.quality_sync AS FLOAT) AS {mf.QUALITY_SYNC},
    CAST(e.quality_completeness AS FLOAT) AS {mf.QUALITY_COMPLETENESS},
    CAST(e.quality_visual AS FLOAT) AS {mf.QUALITY_VISUAL},
    CAST(e.quality_motion AS FLOAT) AS {mf.QUALITY_MOTION},
    CAST(e.quality_transcode AS FLOAT) AS {mf.QUALITY_TRANSCODE},
    e.split AS {mf.SPLIT},
    e.source_sha256 AS {mf.SOURCE_SHA256},
    coalesce(c.clip_sha256, e.transcoded_sha256) AS {mf.URI_SHA256},
    e.robot_id, e.session_id, e.task, e.group_key,
    w.clip_index, w.source_start_ns, w.source_end_ns,
    e.episode_id AS episode_id_int,
    coalesce(c.clip_artifact_id, e.transcoded_artifact_id) AS transcoded_artifact_id,
    e.blob_id
FROM {_EPISODES} AS e
LEFT JOIN episode_clips AS c ON e.transcoded_uri IS NULL AND c.episode_id = e.episode_id
LEFT JOIN {_CLIP_WINDOWS} AS w ON w.clips_uri = c.clips_uri AND w.clip_file = c.clip_file
ORDER BY CASE e.split WHEN 'train' THEN 0 WHEN 'val' THEN 1 ELSE 2 END, e.sample_u, e.episode_id, w.clip_index
"""

# Recorded clips whose list does not name them with the recorded sha256 (the store and catalog disagree).
_UNLISTED_SQL = f"""
SELECT c.clip_uri, c.clip_sha256, w.listed_sha256
FROM {_EPISODES} AS e
JOIN episode_clips AS c ON e.transcoded_uri IS NULL AND c.episode_id = e.episode_id
LEFT JOIN {_CLIP_WINDOWS} AS w ON w.clips_uri = c.clips_uri AND w.clip_file = c.clip_file
WHERE w.listed_sha256 IS DISTINCT FROM c.clip_sha256
ORDER BY c.clip_uri
LIMIT 5
"""


def _split_and_limit(con: duckdb.DuckDBPyConnection, spec: DatasetSpec, *, eval_frozen: bool) -> int:
    """Stage the version's episodes with their splits; returns how many were held out next to frozen
    evaluation ones."""
    splits, limits = spec.splits, spec.limits
    assign = {
        "split_seed": str(splits.seed),
        "eval_fraction": splits.eval_fraction,
        "val_fraction": splits.val_fraction,
        "eval_frozen": eval_frozen,
        # New groups in the eval range once eval is frozen: val's share of what is not eval.
        "val_share": splits.val_fraction / (1.0 - splits.eval_fraction),
    }
    con.execute(_ASSIGN_SQL, assign)
    held_out = con.execute(f"SELECT count(*) FROM {_ASSIGNED} WHERE split IS NULL").fetchall()[0][0]
    bounds = {
        "max_per_group": limits.max_episodes_per_group,
        "max_episodes": limits.max_episodes,
        "max_duration_s": limits.max_total_duration_s,
    }
    con.execute(_LIMIT_SQL, bounds)
    return int(held_out)


def _rows(con: duckdb.DuckDBPyConnection, spec: DatasetSpec, read_documents: DocumentReader) -> pa.Table:
    """The manifest rows of the staged episodes, in manifest order, with the clip lists of video episodes
    read through ``read_documents``."""
    uris = [
        row[0]
        for row in con.execute(
            f"SELECT DISTINCT clips_uri FROM {_EPISODES} "
            "WHERE transcoded_uri IS NULL AND clips_uri IS NOT NULL ORDER BY clips_uri"
        ).fetchall()
    ]
    documents = read_documents(uris) if uris else {}
    missing = [u for u in uris if u not in documents]
    if missing:
        raise DatasetBuildError(spec.name, f"clip lists not found: {missing[:5]}")
    con.register(_CLIP_WINDOWS, clip_windows(spec.name, documents))
    unlisted = con.execute(_UNLISTED_SQL).fetchall()
    if unlisted:
        shown = [f"{uri} (recorded {sha}, listed {listed})" for uri, sha, listed in unlisted]
        raise DatasetBuildError(
            spec.name, f"recorded clips that their clips.json does not list with the same sha256: {shown}"
        )
    return con.sql(_ROWS_SQL).to_arrow_table()


def _drop_staging(con: duckdb.DuckDBPyConnection) -> None:
    import duckdb

    for name in (_FROZEN, _GROUPS, _CLIP_WINDOWS):
        with contextlib.suppress(duckdb.Error):  # not registered when the build failed before
            con.unregister(name)
    for name in (_MATCHED, _ASSIGNED, _NEAR_DUPLICATES, _EPISODES):
        con.execute(f"DROP TABLE IF EXISTS {name}")
