"""The catalog's write API in one place: ``from pipeline.catalog import repo``.

Every writer takes an open :class:`~sqlalchemy.orm.Session` (made by :func:`make_session_factory`, usually
inside :func:`session_scope`) and never commits; every write is an idempotent upsert on a unique
constraint, so at-least-once retries never duplicate a row. The functions live in three modules split by
what they describe: :mod:`~pipeline.catalog.sources` (what vendors deliver), :mod:`~pipeline.catalog.runs`
(what the pipeline did) and :mod:`~pipeline.catalog.outputs` (what it made).
"""

from __future__ import annotations

from pipeline.catalog.engine import make_engine, make_session_factory, session_scope
from pipeline.catalog.outputs import (
    add_dataset_episodes,
    artifact_inputs,
    create_dataset_version,
    record_annotation,
    record_artifact,
    record_manifest,
    record_shard,
)
from pipeline.catalog.runs import (
    FINAL_STEP_STATUSES,
    CheckRow,
    StepRunRef,
    finish_pipeline_run,
    record_check,
    record_checks,
    record_step_run,
    start_pipeline_run,
    step_status,
    upsert_batch,
)
from pipeline.catalog.sources import (
    EPISODE_METADATA,
    EpisodeRef,
    SourceFileRef,
    StreamStats,
    claim_original,
    ensure_episode,
    find_blob,
    find_calibration,
    record_streams,
    register_blob,
    register_source_file,
    set_episode_metadata,
    set_episode_state,
    upsert_calibration,
    upsert_vendor,
)

__all__ = [
    "EPISODE_METADATA",
    "FINAL_STEP_STATUSES",
    "CheckRow",
    "EpisodeRef",
    "SourceFileRef",
    "StepRunRef",
    "StreamStats",
    "add_dataset_episodes",
    "artifact_inputs",
    "claim_original",
    "create_dataset_version",
    "ensure_episode",
    "find_blob",
    "find_calibration",
    "finish_pipeline_run",
    "make_engine",
    "make_session_factory",
    "record_annotation",
    "record_artifact",
    "record_check",
    "record_checks",
    "record_manifest",
    "record_shard",
    "record_step_run",
    "record_streams",
    "register_blob",
    "register_source_file",
    "session_scope",
    "set_episode_metadata",
    "set_episode_state",
    "start_pipeline_run",
    "step_status",
    "upsert_batch",
    "upsert_calibration",
    "upsert_vendor",
]
