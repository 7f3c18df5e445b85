"""Tables of what the pipeline did: runs, batches, step runs, gate check results."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import CheckConstraint, Index, Integer, UniqueConstraint, text
from sqlalchemy.orm import Mapped, mapped_column

from pipeline.catalog.models.base import Base, enum_check, fk_column, id_column, now_column
from pipeline.enums import CheckStatus, Gate, ReasonCode, RunOutcome, Severity, StepName, StepStatus


class PipelineRun(Base):
    """One run of a vendor's DAG (``dag_id``, ``run_id`` as Airflow names them) with its step toggles."""

    __tablename__ = "pipeline_runs"
    __table_args__ = (
        UniqueConstraint("dag_id", "run_id"),
        enum_check("step_toggles", StepName, "keys"),
        enum_check("outcome", RunOutcome),
        CheckConstraint("jsonb_typeof(warnings) = 'array'", name="warnings_is_array"),
    )

    id: Mapped[int] = id_column()
    vendor_id: Mapped[int] = fk_column("vendors.id", index=True)
    dag_id: Mapped[str]
    run_id: Mapped[str]
    step_toggles: Mapped[dict[str, Any]] = mapped_column(server_default=text("'{}'::jsonb"))
    config_hash: Mapped[str]
    outcome: Mapped[str] = mapped_column(server_default=RunOutcome.RUNNING.value)
    warnings: Mapped[list[Any]] = mapped_column(server_default=text("'[]'::jsonb"))
    started_at: Mapped[datetime] = now_column()
    ended_at: Mapped[datetime | None]


class Batch(Base):
    __tablename__ = "batches"
    __table_args__ = (
        UniqueConstraint("pipeline_run_id", "batch_index"),
        CheckConstraint("batch_index >= 0", name="batch_index_nonnegative"),
        CheckConstraint("planned_bytes >= 0", name="planned_bytes_nonnegative"),
        CheckConstraint("n_files >= 0", name="n_files_nonnegative"),
        CheckConstraint("start_offset_s >= 0", name="start_offset_s_nonnegative"),
    )

    id: Mapped[int] = id_column()
    pipeline_run_id: Mapped[int] = fk_column("pipeline_runs.id")
    batch_index: Mapped[int] = mapped_column(Integer)
    planned_bytes: Mapped[int]
    n_files: Mapped[int] = mapped_column(Integer)
    start_offset_s: Mapped[float]
    created_at: Mapped[datetime] = now_column()


class StepRun(Base):
    """The outcome of one step on one episode under one config: what resume reads to skip done work."""

    __tablename__ = "step_runs"
    __table_args__ = (
        UniqueConstraint("episode_id", "step", "config_hash"),
        enum_check("step", StepName),
        enum_check("status", StepStatus),
        enum_check("reason", ReasonCode),
        CheckConstraint("attempt >= 1", name="attempt_positive"),
        Index(None, "step", "status"),
    )

    id: Mapped[int] = id_column()
    episode_id: Mapped[int] = fk_column("episodes.id")
    step: Mapped[str]
    config_hash: Mapped[str]
    status: Mapped[str]
    attempt: Mapped[int] = mapped_column(Integer, server_default="1")
    started_at: Mapped[datetime] = now_column()
    ended_at: Mapped[datetime | None]
    reason: Mapped[str | None]
    detail: Mapped[str | None]
    pipeline_run_id: Mapped[int | None] = fk_column("pipeline_runs.id", nullable=True, index=True)
    batch_id: Mapped[int | None] = fk_column("batches.id", nullable=True, index=True)


class CheckResult(Base):
    """One check of a quality gate on one episode under one config."""

    __tablename__ = "check_results"
    __table_args__ = (
        UniqueConstraint("episode_id", "gate", "check_name", "config_hash"),
        enum_check("gate", Gate),
        enum_check("status", CheckStatus),
        enum_check("reason", ReasonCode),
        enum_check("severity", Severity),
        Index(None, "gate", "check_name", "status"),
    )

    id: Mapped[int] = id_column()
    episode_id: Mapped[int] = fk_column("episodes.id")
    gate: Mapped[str]
    check_name: Mapped[str]
    config_hash: Mapped[str]
    status: Mapped[str]
    observed: Mapped[dict[str, Any] | None]
    reason: Mapped[str | None]
    severity: Mapped[str | None]
    detail: Mapped[str | None]
    pipeline_run_id: Mapped[int | None] = fk_column("pipeline_runs.id", nullable=True, index=True)
    checked_at: Mapped[datetime] = now_column()
