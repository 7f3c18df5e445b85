"""Near-duplicate grouping against the catalog: read fingerprints from annotations, record the groups.

Every fingerprinted episode gets three annotation keys under annotator :data:`GROUP_ANNOTATOR` (version =
the thresholds, :attr:`DedupParams.version`):

* ``dedup.group`` – ``g<smallest episode id of the group>``; an episode with no duplicate is its own group;
* ``dedup.group_size`` – how many episodes the group holds;
* ``dedup.representative`` – the episode kept by default (:func:`pick_representatives`); a dataset spec
  keeps one episode per group by default (the spec option ``near_duplicates: keep_one``) and says which it kept.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from pipeline.dedup.grouping import (
    DedupParams,
    Fingerprint,
    Group,
    find_groups,
    pick_representatives,
)

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine
    from sqlalchemy.orm import Session

log = logging.getLogger(__name__)

GROUP_ANNOTATOR = "dedup"
#: First key of the grouping's advisory lock (``pg_advisory_xact_lock(int4, int4)``); any fixed int4 not
#: used by another lock (datasets use 0x0DA7A5E7).
DEDUP_LOCK_NAMESPACE = 0x0DED0B

PHASH_KEY = "video_phash.hashes"
MESSAGE_KEY = "message_fingerprint.combined"


def load_fingerprints(session: Session, episode_ids: Sequence[int] | None = None) -> list[Fingerprint]:
    """Fingerprints of the given episodes (all annotated ones when None), from the latest annotation rows."""
    from sqlalchemy import select

    from pipeline.catalog.models import Annotation, Episode, Vendor

    stmt = (
        select(Annotation.episode_id, Annotation.key, Annotation.value, Vendor.name)
        .join(Episode, Episode.id == Annotation.episode_id)
        .join(Vendor, Vendor.id == Episode.vendor_id)
        .where(Annotation.key.in_([PHASH_KEY, MESSAGE_KEY]))
        .order_by(Annotation.episode_id, Annotation.key, Annotation.updated_at, Annotation.id)
    )
    if episode_ids is not None:
        stmt = stmt.where(Annotation.episode_id.in_(list(episode_ids)))
    latest: dict[tuple[int, str], object] = {}
    vendors: dict[int, str] = {}
    for row in session.execute(stmt):
        latest[(row.episode_id, row.key)] = row.value  # ordered: the latest row wins
        vendors[row.episode_id] = row.name
    out = []
    for episode_id in sorted(vendors):
        hashes: object = latest.get((episode_id, PHASH_KEY)) or []
        digest = latest.get((episode_id, MESSAGE_KEY))
        out.append(
            Fingerprint(
                episode_id=episode_id,
                vendor=vendors[episode_id],
                phashes=tuple(int(str(h), 16) for h in (hashes if isinstance(hashes, list) else [])),
                message_digest=str(digest) if digest else None,
            )
        )
    return out


def record_groups(
    session: Session,
    fingerprints: Sequence[Fingerprint],
    groups: Sequence[Group],
    representatives: Mapping[str, int],
    params: DedupParams,
) -> int:
    """Record every fingerprinted episode's group (see the module docstring); returns rows written.

    A value already recorded under the same thresholds, in the episode's latest grouping, is not written
    again: a nightly run over every fingerprinted episode writes only what changed.
    """
    from pipeline.catalog.outputs import record_annotation

    current = _current_values(session, params.version)
    group_of = {e: g for g in groups for e in g.episode_ids}
    rows = 0
    for f in fingerprints:
        group = group_of.get(f.episode_id)
        values = {
            "dedup.group": group.group_id if group else f"g{f.episode_id}",
            "dedup.group_size": len(group.episode_ids) if group else 1,
            "dedup.representative": representatives[group.group_id] if group else f.episode_id,
        }
        for key, value in values.items():
            if current.get((f.episode_id, key), _UNSET) == value:
                continue
            record_annotation(
                session,
                episode_id=f.episode_id,
                annotator=GROUP_ANNOTATOR,
                annotator_version=params.version,
                key=key,
                value=value,
            )
            rows += 1
    return rows


_UNSET = object()


def _current_values(session: Session, version: str) -> dict[tuple[int, str], object]:
    """(episode, key) -> value of the dedup annotations of episodes whose latest grouping is ``version``."""
    from sqlalchemy import select

    from pipeline.catalog.models import Annotation

    rows = session.execute(
        select(Annotation.episode_id, Annotation.annotator_version, Annotation.key, Annotation.value)
        .where(Annotation.annotator == GROUP_ANNOTATOR)
        .order_by(Annotation.episode_id, Annotation.updated_at, Annotation.id)
    ).all()
    latest_version = {r.episode_id: r.annotator_version for r in rows}  # ordered: the latest row wins
    return {
        (r.episode_id, r.key): r.value
        for r in rows
        if r.annotator_version == version and latest_version[r.episode_id] == version
    }


def run_dedup(
    engine: Engine,
    params: DedupParams | None = None,
    *,
    episode_ids: Sequence[int] | None = None,
    scores: Mapping[int, float] | None = None,
) -> tuple[list[Group], dict[str, int]]:
    """Group the annotated episodes, record the groups, and return (groups, kept episode per group).

    One transaction under an advisory lock: two vendors' runs finishing together group one after the
    other, each over everything fingerprinted so far, instead of interleaving their writes.
    """
    groups, kept, _ = run_dedup_counted(engine, params, episode_ids=episode_ids, scores=scores)
    return groups, kept


def run_dedup_counted(
    engine: Engine,
    params: DedupParams | None = None,
    *,
    episode_ids: Sequence[int] | None = None,
    scores: Mapping[int, float] | None = None,
) -> tuple[list[Group], dict[str, int], dict[str, int]]:
    """:func:`run_dedup`, with counts for a task's result: episodes, groups, pairs compared, rows written."""
    from sqlalchemy import func, select

    from pipeline.catalog import make_session_factory, session_scope

    params = params or DedupParams()
    with session_scope(make_session_factory(engine)) as session:
        session.execute(select(func.pg_advisory_xact_lock(DEDUP_LOCK_NAMESPACE, 0)))
        prints = load_fingerprints(session, episode_ids)
        grouping = find_groups(prints, params)
        kept = pick_representatives(grouping.groups, scores)
        written = record_groups(session, prints, grouping.groups, kept, params)
    counts = {
        "episodes": len(prints),
        "groups": len(grouping.groups),
        "grouped_episodes": sum(len(g.episode_ids) for g in grouping.groups),
        "pairs_compared": grouping.compared,
        "rows_written": written,
    }
    log.info("near-duplicate grouping (%s): %s", params.version, counts)
    return grouping.groups, kept, counts
