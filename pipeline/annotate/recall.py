"""Recall: a check that lands after the data did, applied to everything already delivered.

``sluice recall --check NAME [--version V]`` (:func:`run_recall`), per vendor that configures the annotator
``NAME``:

1. **score** exactly the vendor's accepted episodes that have no ``NAME`` annotation at version ``V``, through
   the annotate step (its resume rule, its catalog rows and artifacts) with only that annotator configured,
   so an interrupted recall picks up where it stopped and a second one scores nothing;
2. **judge** every scored episode by the bounds the vendor config puts on ``NAME.*`` keys: the cascade's
   ``require`` bounds and those of the most lenient rank tier (failing it is the fallback rank);
3. **record** the recall and the episodes it rejects, with why (``recalls``, ``recall_episodes``);
4. **trace** them to every dataset version, manifest and shard that holds one (:func:`recall_impact`).

``sluice dataset build --exclude-recalled`` then cuts a version without them, and records which left and
why (:mod:`pipeline.datasets.build`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from pipeline.errors import SluiceError
from pipeline.steps.annotate import ANNOTATED_STATES, AnnotateStep
from pipeline.steps.base import WorkItem

if TYPE_CHECKING:
    from pipeline.config import VendorConfig
    from pipeline.config.scoring import ScoreBound
    from pipeline.steps.base import StepContext

log = logging.getLogger(__name__)


class RecallError(SluiceError):
    """A recall cannot run as asked (the check is not configured, or nothing judges its scores)."""


@dataclass
class RecallReport:
    """What one recall of one vendor found."""

    vendor: str
    check: str
    version: str
    bounds: list[dict[str, Any]]
    accepted: int  # the vendor's accepted episodes
    scored: int  # scored by this recall (they had no score at this version)
    already_scored: int
    unscored: int  # the check could not score them (its failure is in the annotate step run)
    rejected: dict[int, list[str]] = field(default_factory=dict)  # episode id -> failed bounds
    datasets: list[dict[str, Any]] = field(default_factory=list)
    shards: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "vendor": self.vendor,
            "check": self.check,
            "version": self.version,
            "bounds": self.bounds,
            "accepted": self.accepted,
            "scored": self.scored,
            "already_scored": self.already_scored,
            "unscored": self.unscored,
            "rejected": {str(k): v for k, v in sorted(self.rejected.items())},
            "datasets": self.datasets,
            "shards": self.shards,
        }


class _RecallStep(AnnotateStep):
    """The annotate step over given episodes (not a batch's paths)."""

    def items(self, batch_items: Sequence[WorkItem]) -> list[WorkItem]:
        return list(batch_items)


def check_bounds(vendor: VendorConfig, name: str) -> list[ScoreBound]:
    """The bounds ``vendor``'s config puts on the keys of annotator ``name``: cascade stages' ``require``
    and the most lenient rank tier's (an episode failing that tier gets the fallback rank)."""
    options = vendor.annotate
    candidates = [b for stage in options.stages for b in stage.require]
    if options.rank is not None:
        candidates += options.rank.tiers[-1].require
    out: list[ScoreBound] = []
    for bound in candidates:
        if bound.key.startswith(f"{name}.") and bound not in out:
            out.append(bound)
    return out


def run_recall(vendor: VendorConfig, ctx: StepContext, name: str, version: str | None = None) -> RecallReport:
    """Score the episodes ``name`` at ``version`` has not scored, judge them all, record and trace them."""
    from pipeline.catalog import make_session_factory, session_scope
    from pipeline.config import VendorConfig
    from pipeline.config.scoring import unmet_bounds
    from pipeline.steps.runner import run_step

    configured = vendor.annotate.annotators.get(name)
    if configured is None:
        allowed = ", ".join(sorted(vendor.annotate.annotators)) or "none"
        raise RecallError(f"vendor {vendor.name} configures no annotator {name!r} (it has: {allowed})")
    version = version or configured.version
    bounds = check_bounds(vendor, name)
    if not bounds:
        raise RecallError(
            f"vendor {vendor.name}: no bound in annotate.stages or the last annotate.rank tier reads a "
            f"{name}.* key, so nothing says which scores {name} rejects; add one"
        )
    data = vendor.model_dump(mode="json")
    data["annotate"] = {"annotators": {name: {**configured.model_dump(mode="json"), "version": version}}}
    step = _RecallStep(VendorConfig.model_validate(data), ctx)

    factory = make_session_factory(ctx.engine)
    with session_scope(factory) as session:
        accepted = _accepted_episodes(session, step.vendor_id)
        done = _scored(session, accepted, name, version)
    todo = [e for e in accepted if e not in done]
    log.info(
        "recall %s v%s of %s: %d of %d accepted episodes to score",
        name,
        version,
        vendor.name,
        len(todo),
        len(accepted),
    )
    if todo:
        run_step(step, [WorkItem(key=str(e), episode_id=e) for e in todo])
    with session_scope(factory) as session:
        values = _values(session, accepted, name, version)
        rejected = {e: unmet for e, v in values.items() if (unmet := unmet_bounds(bounds, v))}
        recall_id = _record(session, step.vendor_id, name, version, bounds, len(todo), rejected)
        datasets, shards = recall_impact(session, rejected)
    log.info(
        "recall %d (%s v%s of %s) rejects %d episode(s)", recall_id, name, version, vendor.name, len(rejected)
    )
    return RecallReport(
        vendor=vendor.name,
        check=name,
        version=version,
        bounds=[b.model_dump(mode="json", exclude_none=True) for b in bounds],
        accepted=len(accepted),
        scored=len(todo),
        already_scored=len(done),
        unscored=len(accepted) - len(values),
        rejected=rejected,
        datasets=datasets,
        shards=shards,
    )


def _accepted_episodes(session: Session, vendor_id: int) -> list[int]:
    from pipeline.catalog.models import Episode

    rows = session.execute(
        select(Episode.id)
        .where(Episode.vendor_id == vendor_id, Episode.state.in_(ANNOTATED_STATES))
        .order_by(Episode.id)
    ).scalars()
    return list(rows)


def _scored(session: Session, episodes: list[int], name: str, version: str) -> set[int]:
    from pipeline.catalog.models import Annotation

    if not episodes:
        return set()
    rows = session.execute(
        select(Annotation.episode_id)
        .where(
            Annotation.annotator == name,
            Annotation.annotator_version == version,
            Annotation.episode_id.in_(episodes),
        )
        .distinct()
    ).scalars()
    return set(rows)


def _values(session: Session, episodes: list[int], name: str, version: str) -> dict[int, dict[str, Any]]:
    from pipeline.catalog.models import Annotation

    out: dict[int, dict[str, Any]] = {}
    if not episodes:
        return out
    rows = session.execute(
        select(Annotation.episode_id, Annotation.key, Annotation.value).where(
            Annotation.annotator == name,
            Annotation.annotator_version == version,
            Annotation.episode_id.in_(episodes),
        )
    ).all()
    for r in rows:
        out.setdefault(r.episode_id, {})[r.key] = r.value
    return out


def _record(
    session: Session,
    vendor_id: int,
    name: str,
    version: str,
    bounds: list[ScoreBound],
    scored: int,
    rejected: dict[int, list[str]],
) -> int:
    from pipeline.catalog.models import Recall, RecallEpisode, table_of

    dumped = [b.model_dump(mode="json", exclude_none=True) for b in bounds]
    ins = insert(table_of(Recall)).values(
        vendor_id=vendor_id, check_name=name, check_version=version, bounds=dumped, n_scored=scored
    )
    recall_id: int = session.execute(
        ins.on_conflict_do_update(
            index_elements=["vendor_id", "check_name", "check_version"],
            set_={"bounds": ins.excluded.bounds, "n_scored": ins.excluded.n_scored, "updated_at": func.now()},
        ).returning(table_of(Recall).c.id)
    ).scalar_one()
    if rejected:
        rows = [{"recall_id": recall_id, "episode_id": e, "reasons": r} for e, r in sorted(rejected.items())]
        ins_e = insert(table_of(RecallEpisode)).values(rows)
        session.execute(
            ins_e.on_conflict_do_update(
                index_elements=["recall_id", "episode_id"], set_={"reasons": ins_e.excluded.reasons}
            )
        )
    return recall_id


def recall_impact(
    session: Session, episodes: Iterable[int]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every dataset version (with its manifests) and every shard that holds one of ``episodes``, with how
    many of them each holds."""
    from pipeline.catalog.models import (
        Artifact,
        ArtifactInput,
        DatasetVersion,
        DatasetVersionEpisode,
        Episode,
        Manifest,
        Shard,
    )

    ids = sorted(set(episodes))
    if not ids:
        return [], []
    dve = DatasetVersionEpisode
    versions = session.execute(
        select(
            DatasetVersion.id,
            DatasetVersion.name,
            DatasetVersion.version,
            func.count().filter(dve.episode_id.in_(ids)).label("tainted"),
            func.count().label("episodes"),
        )
        .join(dve, dve.dataset_version_id == DatasetVersion.id)
        .group_by(DatasetVersion.id)
        .having(func.count().filter(dve.episode_id.in_(ids)) > 0)
        .order_by(DatasetVersion.name, DatasetVersion.id)
    ).all()
    manifests: dict[int, list[str]] = {}
    if versions:
        for m in session.execute(
            select(Manifest.dataset_version_id, Manifest.uri)
            .where(Manifest.dataset_version_id.in_([v.id for v in versions]))
            .order_by(Manifest.uri)
        ):
            manifests.setdefault(m.dataset_version_id, []).append(m.uri)
    datasets = [
        {
            "dataset": f"{v.name}@{v.version}",
            "rejected_episodes": int(v.tainted),
            "episodes": int(v.episodes),
            "manifests": manifests.get(v.id, []),
        }
        for v in versions
    ]
    # A shard's samples are its inputs: derived artifacts of an episode, or raw blobs of one.
    source = Artifact.__table__.alias("source")
    holder = (
        select(ArtifactInput.artifact_id.label("artifact_id"), Episode.id.label("episode_id"))
        .select_from(ArtifactInput)
        .outerjoin(source, source.c.id == ArtifactInput.input_artifact_id)
        .join(
            Episode,
            (Episode.id == source.c.episode_id) | (Episode.blob_id == ArtifactInput.input_blob_id),
        )
        .where(Episode.id.in_(ids))
        .distinct()
        .subquery()
    )
    shard_rows = session.execute(
        select(
            Artifact.uri,
            Shard.split,
            Shard.shard_index,
            DatasetVersion.name,
            DatasetVersion.version,
            func.count(holder.c.episode_id).label("tainted"),
            Shard.n_episodes,
        )
        .join(Artifact, Artifact.id == Shard.artifact_id)
        .join(holder, holder.c.artifact_id == Shard.artifact_id)
        .outerjoin(DatasetVersion, DatasetVersion.id == Shard.dataset_version_id)
        .group_by(Artifact.uri, Shard.id, DatasetVersion.name, DatasetVersion.version)
        .order_by(Artifact.uri)
    ).all()
    shards = [
        {
            "uri": s.uri,
            "dataset": f"{s.name}@{s.version}" if s.name else None,
            "split": s.split,
            "shard_index": s.shard_index,
            "rejected_episodes": int(s.tainted),
            "episodes": int(s.n_episodes),
        }
        for s in shard_rows
    ]
    return datasets, shards


def recalled_episodes(session: Session) -> dict[int, list[str]]:
    """Every episode some recall rejects -> why (``"<check>@<version>: <bound>"``), for dataset builds."""
    from pipeline.catalog.models import Recall, RecallEpisode

    out: dict[int, list[str]] = {}
    rows = session.execute(
        select(RecallEpisode.episode_id, RecallEpisode.reasons, Recall.check_name, Recall.check_version)
        .join(Recall, Recall.id == RecallEpisode.recall_id)
        .order_by(RecallEpisode.episode_id, Recall.id)
    ).all()
    for r in rows:
        out.setdefault(r.episode_id, []).extend(f"{r.check_name}@{r.check_version}: {x}" for x in r.reasons)
    return out


def open_recalls(session: Session) -> list[dict[str, Any]]:
    """Recalls whose rejected episodes are still in the latest version of some dataset (newest first):
    what the view lists until every such dataset has been rebuilt without them."""
    from pipeline.catalog.models import DatasetVersion, DatasetVersionEpisode, Recall, RecallEpisode, Vendor

    latest = select(func.max(DatasetVersion.id).label("id")).group_by(DatasetVersion.name).subquery()
    rows = session.execute(
        select(
            Recall.id,
            Vendor.name.label("vendor"),
            Recall.check_name,
            Recall.check_version,
            Recall.updated_at,
            DatasetVersion.name,
            DatasetVersion.version,
            func.count(func.distinct(RecallEpisode.episode_id)).label("held"),
        )
        .join(Vendor, Vendor.id == Recall.vendor_id)
        .join(RecallEpisode, RecallEpisode.recall_id == Recall.id)
        .join(DatasetVersionEpisode, DatasetVersionEpisode.episode_id == RecallEpisode.episode_id)
        .join(DatasetVersion, DatasetVersion.id == DatasetVersionEpisode.dataset_version_id)
        .join(latest, latest.c.id == DatasetVersion.id)
        .group_by(Recall.id, Vendor.name, DatasetVersion.name, DatasetVersion.version)
        .order_by(Recall.updated_at.desc(), Recall.id.desc(), DatasetVersion.name)
    ).all()
    out: dict[int, dict[str, Any]] = {}
    for r in rows:
        entry = out.setdefault(
            r.id,
            {
                "vendor": r.vendor,
                "check": f"{r.check_name}@{r.check_version}",
                "updated_at": r.updated_at,
                "datasets": [],
            },
        )
        entry["datasets"].append({"dataset": f"{r.name}@{r.version}", "rejected_episodes": int(r.held)})
    return list(out.values())
