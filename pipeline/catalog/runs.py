"""Catalog writers for what the pipeline did: runs, batches, step runs, gate check results.

Same contract as :mod:`pipeline.catalog.sources`: idempotent upserts on unique keys, an open session
passed in, the caller commits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import case, func, null, select, text, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from pipeline.catalog import _values as v
from pipeline.catalog.errors import CatalogMissingError, CatalogValueError
from pipeline.catalog.models import Batch, CheckResult, PipelineRun, StepRun, table_of
from pipeline.enums import (
    REASON_SEVERITY,
    CheckStatus,
    Gate,
    ReasonCode,
    RunOutcome,
    Severity,
    StepName,
    StepStatus,
)

#: Statuses a step run keeps once reached under a config: resume skips them, late retries leave them.
FINAL_STEP_STATUSES = frozenset({StepStatus.SUCCEEDED, StepStatus.REJECTED})


class StepRunRef(NamedTuple):
    id: int
    status: StepStatus
    attempt: int


def start_pipeline_run(
    session: Session,
    *,
    vendor_id: int,
    dag_id: str,
    run_id: str,
    config_hash: str,
    step_toggles: Mapping[StepName | str, bool],
) -> int:
    """Open (or re-open, when Airflow clears and re-runs it) the run ``dag_id``/``run_id``; returns its id."""
    toggles = {v.member(StepName, step, "step").value: bool(on) for step, on in step_toggles.items()}
    ins = insert(table_of(PipelineRun)).values(
        vendor_id=vendor_id,
        dag_id=v.nonempty(dag_id, "dag id"),
        run_id=v.nonempty(run_id, "run id"),
        config_hash=v.nonempty(config_hash, "config hash"),
        step_toggles=toggles,
    )
    new = ins.excluded
    stmt = ins.on_conflict_do_update(
        index_elements=[PipelineRun.dag_id, PipelineRun.run_id],
        set_={
            "step_toggles": new.step_toggles,
            "config_hash": new.config_hash,
            "outcome": RunOutcome.RUNNING.value,
            "ended_at": None,
            # A re-run starts over: its tasks record their notes again and finalize its outcome.
            "warnings": text("'[]'::jsonb"),
        },
    ).returning(PipelineRun.id)
    return session.execute(stmt).scalar_one()


#: The key that marks an entry of ``pipeline_runs.warnings`` as a note a run-level task recorded while the
#: run was going (e.g. discover's ``source_empty``), as opposed to one finalize derived from task states.
NOTE_CODE_KEY = "code"


def record_run_notes(
    session: Session, pipeline_run_id: int, step: str, notes: Sequence[Mapping[str, Any]]
) -> None:
    """Replace the notes ``step`` recorded on the run with ``notes`` (each ``{"step", "critical", "code",
    "detail"}``); finalize keeps them beside the entries it derives. Row-locked, so a retry of the task
    replaces its own notes instead of adding to them."""
    for note in notes:
        if note.get("step") != step or NOTE_CODE_KEY not in note:
            raise CatalogValueError(
                "run note", dict(note), f"an entry of step {step!r} with a {NOTE_CODE_KEY!r}"
            )
    current = session.execute(
        select(PipelineRun.warnings).where(PipelineRun.id == pipeline_run_id).with_for_update()
    ).scalar_one_or_none()
    if current is None:
        raise CatalogMissingError("pipeline run", pipeline_run_id)
    kept = [e for e in current if not (NOTE_CODE_KEY in e and e.get("step") == step)]
    session.execute(
        update(table_of(PipelineRun))
        .where(PipelineRun.id == pipeline_run_id)
        .values(warnings=[*kept, *(dict(n) for n in notes)])
    )


def run_notes(session: Session, pipeline_run_id: int) -> list[dict[str, Any]]:
    """The notes run-level tasks recorded on the run (see :func:`record_run_notes`)."""
    current = session.execute(
        select(PipelineRun.warnings).where(PipelineRun.id == pipeline_run_id)
    ).scalar_one_or_none()
    if current is None:
        raise CatalogMissingError("pipeline run", pipeline_run_id)
    return [dict(e) for e in current if isinstance(e, dict) and NOTE_CODE_KEY in e]


def finish_pipeline_run(
    session: Session,
    pipeline_run_id: int,
    outcome: RunOutcome | str,
    *,
    warnings: Sequence[Mapping[str, Any]] = (),
) -> None:
    """Close a run with its outcome and warnings (e.g. ``{"step": "annotate", "detail": ...}`` each)."""
    stmt = (
        update(table_of(PipelineRun))
        .where(PipelineRun.id == pipeline_run_id)
        .values(
            outcome=v.member(RunOutcome, outcome, "run outcome").value,
            warnings=[dict(w) for w in warnings],
            ended_at=func.now(),
        )
        .returning(PipelineRun.id)
    )
    if session.execute(stmt).scalar_one_or_none() is None:
        raise CatalogMissingError("pipeline run", pipeline_run_id)


#: The step a run's abandonment is recorded under in its warnings (no step failed: the run's process died).
ABANDONED = "abandoned"


def close_abandoned_runs(session: Session, *, idle_s: float, vendor_id: int | None = None) -> list[int]:
    """Close every run still ``running`` with no activity for ``idle_s`` (neither its start nor any step
    run of it): the process that ran it was killed (kill -9, a lost node) before it could record an
    outcome, and nothing else ever will. Each becomes ``failed`` with a critical entry saying why; a
    later re-run of the same Airflow run re-opens it. Returns the ids closed."""
    if idle_s <= 0:
        raise CatalogValueError("idle_s", idle_s, "seconds > 0")
    last_step = (
        select(
            func.max(func.greatest(StepRun.started_at, func.coalesce(StepRun.ended_at, StepRun.started_at)))
        )
        .where(StepRun.pipeline_run_id == PipelineRun.id)
        .scalar_subquery()
    )
    last_activity = func.greatest(PipelineRun.started_at, func.coalesce(last_step, PipelineRun.started_at))
    cutoff = func.now() - func.make_interval(0, 0, 0, 0, 0, 0, idle_s)
    entry = func.jsonb_build_object(
        "step",
        ABANDONED,
        "critical",
        True,
        "detail",
        func.concat(
            "no activity since ",
            func.to_char(func.timezone("UTC", last_activity), 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
            f"; the process running it stopped without an outcome (closed after {idle_s:g} s idle)",
        ),
    )
    stmt = (
        update(table_of(PipelineRun))
        .where(PipelineRun.outcome == RunOutcome.RUNNING.value, last_activity < cutoff)
        .values(
            outcome=RunOutcome.FAILED.value,
            ended_at=func.now(),
            warnings=PipelineRun.warnings.op("||")(func.jsonb_build_array(entry)),
        )
        .returning(PipelineRun.id)
    )
    if vendor_id is not None:
        stmt = stmt.where(PipelineRun.vendor_id == vendor_id)
    return sorted(session.execute(stmt).scalars())


def upsert_batch(
    session: Session,
    *,
    pipeline_run_id: int,
    batch_index: int,
    planned_bytes: int,
    n_files: int,
    start_offset_s: float,
) -> int:
    """Record one planned batch of a run (a re-plan of the same run overwrites it); returns its id."""
    if start_offset_s < 0:
        raise CatalogValueError("start_offset_s", start_offset_s, "a number >= 0")
    ins = insert(table_of(Batch)).values(
        pipeline_run_id=pipeline_run_id,
        batch_index=v.nonnegative(batch_index, "batch_index"),
        planned_bytes=v.nonnegative(planned_bytes, "planned_bytes"),
        n_files=v.nonnegative(n_files, "n_files"),
        start_offset_s=start_offset_s,
    )
    new = ins.excluded
    stmt = ins.on_conflict_do_update(
        index_elements=[Batch.pipeline_run_id, Batch.batch_index],
        set_={
            "planned_bytes": new.planned_bytes,
            "n_files": new.n_files,
            "start_offset_s": new.start_offset_s,
        },
    ).returning(Batch.id)
    return session.execute(stmt).scalar_one()


def record_step_run(
    session: Session,
    *,
    episode_id: int,
    step: StepName | str,
    config_hash: str,
    status: StepStatus | str,
    reason: ReasonCode | str | None = None,
    detail: str | None = None,
    pipeline_run_id: int | None = None,
    batch_id: int | None = None,
    started_at: datetime | None = None,
) -> StepRunRef:
    """Record a step's progress on an episode under a config (one row per episode, step, config hash).

    ``running`` starts an attempt (the attempt counter goes up on each start after the first); any other
    status ends it. A row already ``succeeded`` or ``rejected`` is final and left as it is: the returned
    ref then carries the recorded status, which tells a late retry that the work is done.
    """
    new_status = v.member(StepStatus, status, "step status")
    running = new_status is StepStatus.RUNNING
    ins = insert(table_of(StepRun)).values(
        episode_id=episode_id,
        step=v.member(StepName, step, "step").value,
        config_hash=v.nonempty(config_hash, "config hash"),
        status=new_status.value,
        reason=v.optional_member(ReasonCode, reason, "reason code"),
        detail=detail,
        pipeline_run_id=pipeline_run_id,
        batch_id=batch_id,
        started_at=started_at or func.now(),
        ended_at=None if running else func.now(),
    )
    new = ins.excluded
    starts = new.status == StepStatus.RUNNING.value
    stmt = ins.on_conflict_do_update(
        index_elements=[StepRun.episode_id, StepRun.step, StepRun.config_hash],
        set_={
            "status": new.status,
            "attempt": case((starts, StepRun.attempt + 1), else_=StepRun.attempt),
            "started_at": case((starts, new.started_at), else_=StepRun.started_at),
            "ended_at": new.ended_at,
            "reason": new.reason,
            "detail": new.detail,
            "pipeline_run_id": func.coalesce(new.pipeline_run_id, StepRun.pipeline_run_id),
            "batch_id": func.coalesce(new.batch_id, StepRun.batch_id),
        },
        where=StepRun.status.not_in([s.value for s in FINAL_STEP_STATUSES]),
    ).returning(StepRun.id, StepRun.status, StepRun.attempt)
    row = session.execute(stmt).one_or_none()
    if row is None:
        row = session.execute(
            select(StepRun.id, StepRun.status, StepRun.attempt).where(
                StepRun.episode_id == episode_id, StepRun.step == step, StepRun.config_hash == config_hash
            )
        ).one()
    return StepRunRef(row.id, StepStatus(row.status), row.attempt)


def step_status(
    session: Session, *, episode_id: int, step: StepName | str, config_hash: str
) -> StepStatus | None:
    """The recorded status of a step on an episode under a config (None: never started)."""
    status = session.execute(
        select(StepRun.status).where(
            StepRun.episode_id == episode_id,
            StepRun.step == v.member(StepName, step, "step").value,
            StepRun.config_hash == config_hash,
        )
    ).scalar_one_or_none()
    return None if status is None else StepStatus(status)


class CheckRow(NamedTuple):
    """One gate check's result, as :func:`record_checks` stores it."""

    check_name: str
    status: CheckStatus | str
    observed: Mapping[str, Any] | None = None
    reason: ReasonCode | str | None = None
    severity: Severity | str | None = None
    detail: str | None = None


def record_check(
    session: Session,
    *,
    episode_id: int,
    gate: Gate | str,
    check_name: str,
    config_hash: str,
    status: CheckStatus | str,
    observed: Mapping[str, Any] | None = None,
    reason: ReasonCode | str | None = None,
    severity: Severity | str | None = None,
    detail: str | None = None,
    pipeline_run_id: int | None = None,
) -> int:
    """Record one gate check on an episode under a config (a re-evaluation overwrites); returns its id."""
    row = CheckRow(check_name, status, observed, reason, severity, detail)
    return record_checks(
        session,
        episode_id=episode_id,
        gate=gate,
        config_hash=config_hash,
        checks=[row],
        pipeline_run_id=pipeline_run_id,
    )[check_name]


def _severity(check: CheckRow) -> Severity | None:
    """The check's severity, by default the one its reason carries (:data:`REASON_SEVERITY`)."""
    if check.severity is not None or check.reason is None:
        return v.optional_member(Severity, check.severity, "severity")
    return REASON_SEVERITY[v.member(ReasonCode, check.reason, "reason code")]


def record_checks(
    session: Session,
    *,
    episode_id: int,
    gate: Gate | str,
    config_hash: str,
    checks: Sequence[CheckRow],
    pipeline_run_id: int | None = None,
) -> dict[str, int]:
    """Record a gate's checks on an episode in one statement (a re-evaluation overwrites); returns the id of
    each check by name. A name given twice keeps its last row, as recording them one by one would. A check
    with a reason and no severity gets the reason's (:data:`pipeline.enums.REASON_SEVERITY`)."""
    last = {c.check_name: c for c in checks}
    if not last:
        return {}
    gate_value = v.member(Gate, gate, "gate").value
    config_hash = v.nonempty(config_hash, "config hash")
    ins = insert(table_of(CheckResult)).values(
        [
            {
                "episode_id": episode_id,
                "gate": gate_value,
                "check_name": v.nonempty(c.check_name, "check name"),
                "config_hash": config_hash,
                "status": v.member(CheckStatus, c.status, "check status").value,
                "observed": null() if c.observed is None else dict(c.observed),  # SQL NULL, not JSON null
                "reason": v.optional_member(ReasonCode, c.reason, "reason code"),
                "severity": _severity(c),
                "detail": c.detail,
                "pipeline_run_id": pipeline_run_id,
            }
            for c in last.values()
        ]
    )
    new = ins.excluded
    stmt = ins.on_conflict_do_update(
        index_elements=[
            CheckResult.episode_id,
            CheckResult.gate,
            CheckResult.check_name,
            CheckResult.config_hash,
        ],
        set_={
            "status": new.status,
            "observed": new.observed,
            "reason": new.reason,
            "severity": new.severity,
            "detail": new.detail,
            "pipeline_run_id": func.coalesce(new.pipeline_run_id, CheckResult.pipeline_run_id),
            "checked_at": func.now(),
        },
    ).returning(CheckResult.check_name, CheckResult.id)
    return {name: id_ for name, id_ in session.execute(stmt).all()}
