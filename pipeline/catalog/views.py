"""Read-side queries of the Sluice view, ``sluice status`` and ``sluice report``: runs, file states,
quarantines, failed steps.

Every function takes an open :class:`~sqlalchemy.orm.Session` and only reads. :func:`read_only_engine` makes
an engine whose transactions Postgres itself keeps read-only, so even a session opened with the owner's URL
cannot write through these pages.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import create_engine, func, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from pipeline.catalog.engine import connect_args
from pipeline.catalog.errors import CatalogMissingError
from pipeline.catalog.models import (
    Blob,
    DatasetVersion,
    DatasetVersionEpisode,
    Episode,
    Manifest,
    PipelineRun,
    SourceFile,
    StepRun,
    Vendor,
)
from pipeline.catalog.queries import failed_checks
from pipeline.enums import FileState, ManifestFormat, RunOutcome, Split, StepName, StepStatus

#: Connections a viewer process keeps: page requests are short reads, a handful at a time.
READER_POOL_SIZE = 2
#: Latest runs shown by default (a page and a terminal both show about this many rows).
DEFAULT_RUN_LIMIT = 20
#: Quarantined files listed per query by default; the counts by reason are always complete.
DEFAULT_FILE_LIMIT = 200
#: Dataset versions listed by default (the newest).
DEFAULT_VERSION_LIMIT = 20


def read_only_engine(url: str, *, application_name: str = "sluice-view") -> Engine:
    """An engine on the catalog at ``url`` whose every transaction is READ ONLY (set by the server).

    Use the curation reader's URL when there is one; the read-only transactions are the second fence.
    """
    return create_engine(
        url,
        pool_size=READER_POOL_SIZE,
        # A viewer (the Airflow API server) outlives Postgres restarts.
        pool_pre_ping=True,
        connect_args=connect_args(
            url, application_name=application_name, options="-c default_transaction_read_only=on"
        ),
    )


@dataclass(frozen=True)
class RunSummary:
    """One pipeline run: its toggles, outcome, what broke it (failures) and what did not (warnings)."""

    id: int
    vendor: str
    dag_id: str
    run_id: str
    config_hash: str
    step_toggles: dict[str, bool]
    outcome: str
    failures: list[dict[str, Any]]
    warnings: list[dict[str, Any]]
    started_at: datetime
    ended_at: datetime | None
    #: step -> status -> episodes, from the step runs recorded under this run
    step_counts: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def duration_s(self) -> float | None:
        return None if self.ended_at is None else (self.ended_at - self.started_at).total_seconds()

    @property
    def steps_off(self) -> list[str]:
        return [step for step, on in self.step_toggles.items() if not on]

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["duration_s"] = self.duration_s
        return data


def _run_summary(row: Any, counts: dict[str, dict[str, int]]) -> RunSummary:
    # every key a reader of an entry uses: a note of a run-level task (discover's source_empty) has no
    # batches or item counts
    entries = [
        {"step": "?", "detail": "", "failed_items": 0, "batches": [], **e}
        for e in (row.warnings or [])
        if isinstance(e, dict)
    ]
    # finalize() stores both kinds in one list; `critical` tells a failure from a warning.
    failures = [e for e in entries if e.get("critical")]
    warnings = [e for e in entries if not e.get("critical")]
    toggles = dict(row.step_toggles or {})
    ordered = {s.value: bool(toggles[s.value]) for s in StepName if s.value in toggles}
    return RunSummary(
        id=row.id,
        vendor=row.vendor,
        dag_id=row.dag_id,
        run_id=row.run_id,
        config_hash=row.config_hash,
        step_toggles=ordered,
        outcome=row.outcome,
        failures=failures,
        warnings=warnings,
        started_at=row.started_at,
        ended_at=row.ended_at,
        step_counts=counts,
    )


def _run_select() -> Any:
    return select(
        PipelineRun.id,
        Vendor.name.label("vendor"),
        PipelineRun.dag_id,
        PipelineRun.run_id,
        PipelineRun.config_hash,
        PipelineRun.step_toggles,
        PipelineRun.outcome,
        PipelineRun.warnings,
        PipelineRun.started_at,
        PipelineRun.ended_at,
    ).join(Vendor, Vendor.id == PipelineRun.vendor_id)


def latest_runs(
    session: Session, *, limit: int = DEFAULT_RUN_LIMIT, vendor: str | None = None
) -> list[RunSummary]:
    """The most recently started runs (of ``vendor`` only, when given), newest first, with step counts."""
    stmt = _run_select().order_by(PipelineRun.started_at.desc(), PipelineRun.id.desc()).limit(limit)
    if vendor is not None:
        stmt = stmt.where(Vendor.name == vendor)
    rows = session.execute(stmt).all()
    counts = step_counts(session, [r.id for r in rows])
    return [_run_summary(r, counts.get(r.id, {})) for r in rows]


def get_run(session: Session, pipeline_run_id: int) -> RunSummary:
    """One run by its catalog id (:class:`CatalogMissingError` when there is none)."""
    row = session.execute(_run_select().where(PipelineRun.id == pipeline_run_id)).one_or_none()
    if row is None:
        raise CatalogMissingError("pipeline run", pipeline_run_id)
    return _run_summary(row, step_counts(session, [row.id]).get(row.id, {}))


def find_runs(session: Session, ref: str) -> list[RunSummary]:
    """Runs named by ``ref``: a catalog id, an Airflow ``run_id``, ``dag_id/run_id``, or ``latest``."""
    stmt = _run_select()
    if ref == "latest":
        stmt = stmt.order_by(PipelineRun.started_at.desc(), PipelineRun.id.desc()).limit(1)
    elif ref.isdigit():
        stmt = stmt.where(PipelineRun.id == int(ref))
    else:
        dag_id, sep, run_id = ref.partition("/")
        if sep:
            stmt = stmt.where(PipelineRun.dag_id == dag_id, PipelineRun.run_id == run_id)
        else:
            stmt = stmt.where(PipelineRun.run_id == ref)
        stmt = stmt.order_by(PipelineRun.id)
    rows = session.execute(stmt).all()
    counts = step_counts(session, [r.id for r in rows])
    return [_run_summary(r, counts.get(r.id, {})) for r in rows]


def step_counts(session: Session, run_ids: Sequence[int]) -> dict[int, dict[str, dict[str, int]]]:
    """Per run, per step (pipeline order), episodes by step status."""
    if not run_ids:
        return {}
    rows = session.execute(
        select(StepRun.pipeline_run_id, StepRun.step, StepRun.status, func.count())
        .where(StepRun.pipeline_run_id.in_(run_ids))
        .group_by(StepRun.pipeline_run_id, StepRun.step, StepRun.status)
    ).all()
    order = {s.value: i for i, s in enumerate(StepName)}
    out: dict[int, dict[str, dict[str, int]]] = {}
    for run_id, step, status, count in sorted(rows, key=lambda r: (r[0], order.get(r[1], 99), r[2])):
        out.setdefault(run_id, {}).setdefault(step, {})[status] = int(count)
    return out


def run_episode_ids(session: Session, pipeline_run_id: int) -> set[int]:
    """Episodes a run's steps touched (from the step runs recorded under it)."""
    return set(
        session.execute(
            select(StepRun.episode_id).where(StepRun.pipeline_run_id == pipeline_run_id).distinct()
        ).scalars()
    )


@dataclass(frozen=True)
class StateCount:
    vendor: str
    state: str
    files: int


def file_state_counts(session: Session, *, episode_ids: Iterable[int] | None = None) -> list[StateCount]:
    """Files per vendor and state (every state of :class:`FileState`, zeros left out)."""
    stmt = (
        select(Vendor.name, Episode.state, func.count())
        .join(Vendor, Vendor.id == Episode.vendor_id)
        .group_by(Vendor.name, Episode.state)
    )
    if episode_ids is not None:
        stmt = stmt.where(Episode.id.in_(list(episode_ids)))
    order = {s.value: i for i, s in enumerate(FileState)}
    rows = sorted(session.execute(stmt).all(), key=lambda r: (r[0], order.get(r[1], 99)))
    return [StateCount(vendor, state, int(n)) for vendor, state, n in rows]


@dataclass(frozen=True)
class ReasonCount:
    vendor: str
    reason: str
    files: int


def quarantine_reasons(
    session: Session, *, vendor: str | None = None, episode_ids: Iterable[int] | None = None
) -> list[ReasonCount]:
    """Quarantined files per vendor and reason code, most frequent first (a file counts once per reason)."""
    reason = func.unnest(Episode.reasons).label("reason")
    inner = (
        select(Vendor.name.label("vendor"), reason)
        .join(Vendor, Vendor.id == Episode.vendor_id)
        .where(Episode.state == FileState.QUARANTINED.value)
    )
    if vendor is not None:
        inner = inner.where(Vendor.name == vendor)
    if episode_ids is not None:
        inner = inner.where(Episode.id.in_(list(episode_ids)))
    sub = inner.subquery()
    rows = session.execute(
        select(sub.c.vendor, sub.c.reason, func.count())
        .group_by(sub.c.vendor, sub.c.reason)
        .order_by(sub.c.vendor, func.count().desc(), sub.c.reason)
    ).all()
    return [ReasonCount(v, r, int(n)) for v, r, n in rows]


@dataclass(frozen=True)
class HeldFile:
    """A quarantined (or flagged) file: where it came from, why, and every check that did not pass."""

    episode_id: int
    vendor: str
    path: str
    sha256: str
    size_bytes: int
    state: str
    reasons: list[str]
    detail: str | None
    checks: list[dict[str, Any]]
    updated_at: datetime

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def held_files(
    session: Session,
    *,
    state: FileState | str = FileState.QUARANTINED,
    vendor: str | None = None,
    episode_ids: Iterable[int] | None = None,
    limit: int = DEFAULT_FILE_LIMIT,
) -> list[HeldFile]:
    """Files in ``state`` (quarantined by default), most recently changed first, with their failed checks."""
    stmt = (
        select(
            Episode.id,
            Vendor.name,
            SourceFile.path,
            Blob.sha256,
            Blob.size_bytes,
            Episode.state,
            Episode.reasons,
            Episode.detail,
            Episode.updated_at,
        )
        .join(Vendor, Vendor.id == Episode.vendor_id)
        .join(SourceFile, SourceFile.id == Episode.source_file_id)
        .join(Blob, Blob.id == Episode.blob_id)
        .where(Episode.state == FileState(state).value)
        .order_by(Episode.updated_at.desc(), Episode.id.desc())
        .limit(limit)
    )
    if vendor is not None:
        stmt = stmt.where(Vendor.name == vendor)
    if episode_ids is not None:
        stmt = stmt.where(Episode.id.in_(list(episode_ids)))
    rows = session.execute(stmt).all()
    checks = failed_checks(session, [r.id for r in rows])
    return [
        HeldFile(
            episode_id=r.id,
            vendor=r.name,
            path=r.path,
            sha256=r.sha256,
            size_bytes=r.size_bytes,
            state=r.state,
            reasons=list(r.reasons),
            detail=r.detail,
            checks=checks.get(r.id, []),
            updated_at=r.updated_at,
        )
        for r in rows
    ]


@dataclass(frozen=True)
class StepProblem:
    """A step run that did not succeed: an infrastructure failure or a recorded rejection."""

    episode_id: int
    vendor: str
    path: str
    step: str
    status: str
    reason: str | None
    detail: str | None
    attempt: int
    pipeline_run_id: int | None
    ended_at: datetime | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def step_problems(
    session: Session,
    *,
    statuses: Iterable[StepStatus | str] = (StepStatus.FAILED,),
    pipeline_run_id: int | None = None,
    limit: int = DEFAULT_FILE_LIMIT,
) -> list[StepProblem]:
    """Step runs in ``statuses`` (failed by default), newest first."""
    wanted = [StepStatus(s).value for s in statuses]
    stmt = (
        select(
            StepRun.episode_id,
            Vendor.name,
            SourceFile.path,
            StepRun.step,
            StepRun.status,
            StepRun.reason,
            StepRun.detail,
            StepRun.attempt,
            StepRun.pipeline_run_id,
            StepRun.ended_at,
        )
        .join(Episode, Episode.id == StepRun.episode_id)
        .join(Vendor, Vendor.id == Episode.vendor_id)
        .join(SourceFile, SourceFile.id == Episode.source_file_id)
        .where(StepRun.status.in_(wanted))
        .order_by(StepRun.ended_at.desc().nulls_first(), StepRun.id.desc())
        .limit(limit)
    )
    if pipeline_run_id is not None:
        stmt = stmt.where(StepRun.pipeline_run_id == pipeline_run_id)
    return [
        StepProblem(
            episode_id=r.episode_id,
            vendor=r.name,
            path=r.path,
            step=r.step,
            status=r.status,
            reason=r.reason,
            detail=r.detail,
            attempt=r.attempt,
            pipeline_run_id=r.pipeline_run_id,
            ended_at=r.ended_at,
        )
        for r in session.execute(stmt)
    ]


def needs_attention(runs: Sequence[RunSummary]) -> list[RunSummary]:
    """The runs among ``runs`` that failed or succeeded only with warnings."""
    bad = {RunOutcome.FAILED.value, RunOutcome.SUCCEEDED_WITH_WARNINGS.value}
    return [r for r in runs if r.outcome in bad]


def pending_files(session: Session) -> int:
    """Files not yet in a terminal state (still being processed, or left behind by a crash)."""
    return int(
        session.execute(
            select(func.count()).select_from(Episode).where(Episode.state == FileState.PENDING.value)
        ).scalar_one()
    )


@dataclass(frozen=True)
class VersionSummary:
    """A dataset version with its manifests (one per format) and its episodes per split."""

    id: int
    name: str
    version: str
    spec_hash: str
    created_at: datetime
    row_count: int  # rows of its manifest (episodes in all splits when no manifest is recorded)
    split_episodes: dict[str, int]  # episodes per split (a video episode is several manifest rows)
    manifests: list[dict[str, Any]]  # format, uri, sha256, size_bytes, row_count

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"ref": self.ref}


def dataset_versions(session: Session, *, limit: int = DEFAULT_VERSION_LIMIT) -> list[VersionSummary]:
    """The newest dataset versions, newest first, in three queries whatever their number."""
    rows = (
        session.execute(select(DatasetVersion).order_by(DatasetVersion.id.desc()).limit(limit))
        .scalars()
        .all()
    )
    ids = [r.id for r in rows]
    if not ids:
        return []
    manifests: dict[int, list[dict[str, Any]]] = {}
    order = {f.value: i for i, f in enumerate(ManifestFormat)}
    for m in session.execute(select(Manifest).where(Manifest.dataset_version_id.in_(ids))).scalars():
        manifests.setdefault(m.dataset_version_id, []).append(
            {
                "format": m.format,
                "uri": m.uri,
                "sha256": m.sha256,
                "size_bytes": m.size_bytes,
                "row_count": m.row_count,
            }
        )
    splits: dict[int, dict[str, int]] = {}
    for version_id, split, count in session.execute(
        select(DatasetVersionEpisode.dataset_version_id, DatasetVersionEpisode.split, func.count())
        .where(DatasetVersionEpisode.dataset_version_id.in_(ids))
        .group_by(DatasetVersionEpisode.dataset_version_id, DatasetVersionEpisode.split)
    ):
        splits.setdefault(version_id, {})[split] = int(count)
    out = []
    for r in rows:
        files = sorted(manifests.get(r.id, []), key=lambda m: order.get(m["format"], 99))
        counts = {s.value: splits.get(r.id, {}).get(s.value, 0) for s in Split}
        out.append(
            VersionSummary(
                id=r.id,
                name=r.name,
                version=r.version,
                spec_hash=r.spec_hash,
                created_at=r.created_at,
                row_count=files[0]["row_count"] if files else sum(counts.values()),
                split_episodes=counts,
                manifests=files,
            )
        )
    return out
