"""Near-duplicate grouping against the catalog: read fingerprints from annotations, record the groups.

Every fingerprinted episode gets three annotation keys under annotator :data:`GROUP_ANNOTATOR` (version =
the thresholds, :attr:`DedupParams.version`):

* ``dedup.group`` – ``g<smallest episode id of the group>``; an episode with no duplicate is its own group;
* ``dedup.group_size`` – how many episodes the group holds;
* ``dedup.representative`` – the episode kept by default (:func:`pick_representatives`); a dataset spec
  keeps one episode per group by default (the spec option ``near_duplicates: keep_one``) and says which it kept.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from pipeline.dedup.grouping import (
    DedupParams,
    Fingerprint,
    Group,
    group_near_duplicates,
    pick_representatives,
)

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine
    from sqlalchemy.orm import Session

GROUP_ANNOTATOR = "dedup"
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
    """Record every fingerprinted episode's group (see the module docstring); returns rows written."""
    from pipeline.catalog.outputs import record_annotation

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


def run_dedup(
    engine: Engine,
    params: DedupParams | None = None,
    *,
    episode_ids: Sequence[int] | None = None,
    scores: Mapping[int, float] | None = None,
) -> tuple[list[Group], dict[str, int]]:
    """Group the annotated episodes, record the groups, and return (groups, kept episode per group)."""
    from pipeline.catalog import make_session_factory, session_scope

    params = params or DedupParams()
    factory = make_session_factory(engine)
    with session_scope(factory) as session:
        prints = load_fingerprints(session, episode_ids)
    groups = group_near_duplicates(prints, params)
    kept = pick_representatives(groups, scores)
    with session_scope(factory) as session:
        record_groups(session, prints, groups, kept, params)
    return groups, kept
