"""The system-of-record catalog: sources, runs, outputs.

Revision ID: 0001
Revises:
Create Date: 2025-11-29

A migration is a snapshot: the enum CHECK lists below are literal values as of this revision, never
imported from ``pipeline.enums`` (tests/catalog compares every CHECK of the migrated database with the
current enums, so adding a member without a migration fails the suite).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SOURCE_KINDS = ("mcap", "video")
FILE_STATES = ("pending", "accepted", "accepted_with_flags", "quarantined", "duplicate")
SEVERITIES = ("flag", "quarantine")
REASON_CODES = (
    "zero_bytes",
    "bad_magic",
    "truncated",
    "crc_mismatch",
    "crc_absent",
    "record_too_large",
    "unknown_compression",
    "container_error",
    "disallowed_container",
    "outside_vendor_root",
    "unsupported_encoding",
    "missing_required_topic",
    "no_messages",
    "schema_drift",
    "no_calibration",
    "missing_metadata",
    "non_monotonic_time",
    "duplicate_timestamps",
    "clock_jump",
    "clock_skew",
    "gap_rate_high",
    "decode_error",
    "no_video_stream",
    "blank_video",
    "missing_leading_keyframe",
    "too_few_frames",
    "rotated",
    "interlaced",
    "variable_frame_rate",
    "letterboxed",
    "resolution_out_of_bounds",
    "frame_rate_out_of_bounds",
    "duration_out_of_bounds",
    "probe_timeout",
    "probe_resource_limit",
    "near_duplicate",
    "transcode_failed",
    "gop_mismatch",
    "frame_count_mismatch",
    "duration_mismatch",
    "psnr_below_threshold",
    "resample_error",
    "annotator_failed",
    "shard_verify_failed",
)
STEP_NAMES = ("ingest", "quality_pre", "transcode", "quality_post", "annotate", "shard")
STEP_STATUSES = ("running", "succeeded", "rejected", "failed", "skipped")
RUN_OUTCOMES = ("running", "succeeded", "succeeded_with_warnings", "failed")
GATES = ("quality_pre", "quality_post")
CHECK_STATUSES = ("passed", "warned", "failed")
STREAM_ROLES = ("camera", "state", "action", "calibration", "other")
ARTIFACT_KINDS = ("transcoded_episode", "clip", "annotation", "shard", "manifest", "export")
SPLITS = ("train", "val", "eval")
MANIFEST_FORMATS = ("arrow_ipc", "parquet")

SHA256_PATTERN = "^[0-9a-f]{64}$"


def _one_of(table: str, col: str, values: Sequence[str]) -> sa.CheckConstraint:
    return sa.CheckConstraint(sa.column(col).in_(values), name=f"ck_{table}_{col}_enum")


def _all_of(table: str, col: str, values: Sequence[str]) -> sa.CheckConstraint:
    """Every element of a text[] among ``values`` (``<@`` is false for a NULL element)."""
    expr = sa.column(col, pg.ARRAY(sa.Text)).contained_by(pg.array(values, type_=sa.Text))
    return sa.CheckConstraint(expr, name=f"ck_{table}_{col}_enum")


def _keys_of(table: str, col: str, values: Sequence[str]) -> sa.CheckConstraint:
    """A JSON object whose keys are all among ``values``."""
    expr = sa.column(col, pg.JSONB).op("-")(pg.array(values, type_=sa.Text)) == sa.text("'{}'::jsonb")
    return sa.CheckConstraint(expr, name=f"ck_{table}_{col}_enum")


def _sha256(table: str) -> sa.CheckConstraint:
    return sa.CheckConstraint(sa.column("sha256").regexp_match(SHA256_PATTERN), name=f"ck_{table}_sha256_hex")


def _nonnegative(table: str, col: str) -> sa.CheckConstraint:
    return sa.CheckConstraint(f"{col} >= 0", name=f"ck_{table}_{col}_nonnegative")


def _id() -> sa.Column:
    return sa.Column("id", sa.BigInteger, sa.Identity(), nullable=False)


def _pk(table: str, *cols: str) -> sa.PrimaryKeyConstraint:
    return sa.PrimaryKeyConstraint(*(cols or ("id",)), name=f"pk_{table}")


def _fk(table: str, col: str, target: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint([col], [f"{target}.id"], name=f"fk_{table}_{col}_{target}")


def _uq(table: str, *cols: str) -> sa.UniqueConstraint:
    return sa.UniqueConstraint(*cols, name=f"uq_{table}_{'_'.join(cols)}")


def _ix(table: str, *cols: str, **kwargs: object) -> None:
    op.create_index(f"ix_{table}_{'_'.join(cols)}", table, list(cols), **kwargs)


def _now(name: str) -> sa.Column:
    return sa.Column(name, sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False)


def _text(name: str, *, nullable: bool = False) -> sa.Column:
    return sa.Column(name, sa.Text, nullable=nullable)


def _bigint(name: str, *, nullable: bool = False, default: str | None = None) -> sa.Column:
    return sa.Column(name, sa.BigInteger, nullable=nullable, server_default=default)


def _jsonb(name: str, *, nullable: bool = False, default: str | None = None) -> sa.Column:
    server_default = sa.text(default) if default else None
    return sa.Column(name, pg.JSONB, nullable=nullable, server_default=server_default)


def upgrade() -> None:
    # Trusted extension (Postgres >= 13): the database owner may create it; the calibration windows'
    # exclusion constraint needs its gist operator class for `=` on bigint and text.
    op.execute("CREATE EXTENSION IF NOT EXISTS btree_gist")

    # -- sources ------------------------------------------------------------------------------------------
    op.create_table(
        "vendors",
        _id(),
        _text("name"),
        _text("kind"),
        _text("config_hash"),
        _jsonb("config"),
        _now("created_at"),
        _now("updated_at"),
        _pk("vendors"),
        _uq("vendors", "name"),
        _one_of("vendors", "kind", SOURCE_KINDS),
    )
    op.create_table(
        "blobs",
        _id(),
        _text("sha256"),
        _bigint("size_bytes"),
        _text("raw_uri"),
        _now("landed_at"),
        sa.Column("verified_at", sa.DateTime(timezone=True), nullable=True),
        _pk("blobs"),
        _uq("blobs", "sha256"),
        _sha256("blobs"),
        _nonnegative("blobs", "size_bytes"),
    )
    op.create_table(
        "source_files",
        _id(),
        _bigint("vendor_id"),
        _text("path"),
        _bigint("blob_id"),
        _now("first_seen_at"),
        _pk("source_files"),
        _uq("source_files", "vendor_id", "path"),
        _fk("source_files", "vendor_id", "vendors"),
        _fk("source_files", "blob_id", "blobs"),
    )
    _ix("source_files", "blob_id")
    op.create_table(
        "calibrations",
        _id(),
        _bigint("vendor_id"),
        _text("calibration_key"),
        _text("robot_id"),
        _bigint("valid_from_ns"),
        _bigint("valid_to_ns", nullable=True),
        _jsonb("cameras"),
        _now("created_at"),
        _now("updated_at"),
        _pk("calibrations"),
        _uq("calibrations", "vendor_id", "calibration_key"),
        _fk("calibrations", "vendor_id", "vendors"),
        sa.CheckConstraint(
            "valid_to_ns IS NULL OR valid_to_ns > valid_from_ns", name="ck_calibrations_window_ordered"
        ),
        pg.ExcludeConstraint(
            (sa.column("vendor_id"), "="),
            (sa.column("robot_id"), "="),
            (sa.func.int8range(sa.column("valid_from_ns"), sa.column("valid_to_ns")), "&&"),
            using="gist",
            name="ex_calibrations_window_overlap",
        ),
    )
    op.create_table(
        "episodes",
        _id(),
        _bigint("vendor_id"),
        _bigint("source_file_id"),
        _bigint("blob_id"),
        _text("kind"),
        _text("robot_id", nullable=True),
        _text("session_id", nullable=True),
        _text("episode_key", nullable=True),
        _text("task", nullable=True),
        # Order-independent digest of the episode's messages: equal for the same content re-chunked.
        _text("content_fingerprint", nullable=True),
        _bigint("start_time_ns", nullable=True),
        _bigint("end_time_ns", nullable=True),
        sa.Column(
            "duration_s",
            sa.Float,
            sa.Computed("(end_time_ns - start_time_ns)::double precision / 1e9", persisted=True),
            nullable=True,
        ),
        _bigint("calibration_id", nullable=True),
        sa.Column("state", sa.Text, server_default="pending", nullable=False),
        sa.Column("reasons", pg.ARRAY(sa.Text), server_default=sa.text("'{}'::text[]"), nullable=False),
        _text("detail", nullable=True),
        _bigint("duplicate_of_id", nullable=True),
        _now("created_at"),
        _now("updated_at"),
        _pk("episodes"),
        _uq("episodes", "source_file_id"),
        _fk("episodes", "vendor_id", "vendors"),
        _fk("episodes", "source_file_id", "source_files"),
        _fk("episodes", "blob_id", "blobs"),
        _fk("episodes", "calibration_id", "calibrations"),
        _fk("episodes", "duplicate_of_id", "episodes"),
        _one_of("episodes", "kind", SOURCE_KINDS),
        _one_of("episodes", "state", FILE_STATES),
        _all_of("episodes", "reasons", REASON_CODES),
        sa.CheckConstraint("end_time_ns >= start_time_ns", name="ck_episodes_time_range_ordered"),
        sa.CheckConstraint("duplicate_of_id <> id", name="ck_episodes_not_own_duplicate"),
        sa.CheckConstraint(
            "state <> 'duplicate' OR duplicate_of_id IS NOT NULL", name="ck_episodes_duplicate_names_original"
        ),
    )
    _ix("episodes", "blob_id")
    _ix("episodes", "session_id")
    _ix("episodes", "content_fingerprint")
    _ix("episodes", "calibration_id")
    _ix("episodes", "duplicate_of_id")
    _ix("episodes", "vendor_id", "state")
    _ix("episodes", "robot_id", "start_time_ns")
    _ix("episodes", "reasons", postgresql_using="gin")
    op.create_table(
        "streams",
        _id(),
        _bigint("episode_id"),
        _text("topic"),
        _text("role"),
        _text("encoding", nullable=True),
        _text("schema_name", nullable=True),
        _text("schema_hash", nullable=True),
        _bigint("message_count"),
        _bigint("first_time_ns", nullable=True),
        _bigint("last_time_ns", nullable=True),
        sa.Column("rate_hz", sa.Float, nullable=True),
        sa.Column("gap_rate", sa.Float, nullable=True),
        _bigint("backward_steps", default="0"),
        _bigint("duplicate_timestamps", default="0"),
        _bigint("max_jump_ns", nullable=True),
        _bigint("skew_median_ns", nullable=True),
        _bigint("skew_p99_ns", nullable=True),
        _bigint("skew_max_ns", nullable=True),
        _pk("streams"),
        _uq("streams", "episode_id", "topic"),
        _fk("streams", "episode_id", "episodes"),
        _one_of("streams", "role", STREAM_ROLES),
        _nonnegative("streams", "message_count"),
        _nonnegative("streams", "gap_rate"),
    )

    # -- runs ---------------------------------------------------------------------------------------------
    op.create_table(
        "pipeline_runs",
        _id(),
        _bigint("vendor_id"),
        _text("dag_id"),
        _text("run_id"),
        _jsonb("step_toggles", default="'{}'::jsonb"),
        _text("config_hash"),
        sa.Column("outcome", sa.Text, server_default="running", nullable=False),
        _jsonb("warnings", default="'[]'::jsonb"),
        _now("started_at"),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        _pk("pipeline_runs"),
        _uq("pipeline_runs", "dag_id", "run_id"),
        _fk("pipeline_runs", "vendor_id", "vendors"),
        _keys_of("pipeline_runs", "step_toggles", STEP_NAMES),
        _one_of("pipeline_runs", "outcome", RUN_OUTCOMES),
        sa.CheckConstraint("jsonb_typeof(warnings) = 'array'", name="ck_pipeline_runs_warnings_is_array"),
    )
    _ix("pipeline_runs", "vendor_id")
    op.create_table(
        "batches",
        _id(),
        _bigint("pipeline_run_id"),
        sa.Column("batch_index", sa.Integer, nullable=False),
        _bigint("planned_bytes"),
        sa.Column("n_files", sa.Integer, nullable=False),
        sa.Column("start_offset_s", sa.Float, nullable=False),
        _now("created_at"),
        _pk("batches"),
        _uq("batches", "pipeline_run_id", "batch_index"),
        _fk("batches", "pipeline_run_id", "pipeline_runs"),
        _nonnegative("batches", "batch_index"),
        _nonnegative("batches", "planned_bytes"),
        _nonnegative("batches", "n_files"),
        _nonnegative("batches", "start_offset_s"),
    )
    op.create_table(
        "step_runs",
        _id(),
        _bigint("episode_id"),
        _text("step"),
        _text("config_hash"),
        _text("status"),
        sa.Column("attempt", sa.Integer, server_default="1", nullable=False),
        _now("started_at"),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        _text("reason", nullable=True),
        _text("detail", nullable=True),
        _bigint("pipeline_run_id", nullable=True),
        _bigint("batch_id", nullable=True),
        _pk("step_runs"),
        _uq("step_runs", "episode_id", "step", "config_hash"),
        _fk("step_runs", "episode_id", "episodes"),
        _fk("step_runs", "pipeline_run_id", "pipeline_runs"),
        _fk("step_runs", "batch_id", "batches"),
        _one_of("step_runs", "step", STEP_NAMES),
        _one_of("step_runs", "status", STEP_STATUSES),
        _one_of("step_runs", "reason", REASON_CODES),
        sa.CheckConstraint("attempt >= 1", name="ck_step_runs_attempt_positive"),
    )
    _ix("step_runs", "pipeline_run_id")
    _ix("step_runs", "batch_id")
    _ix("step_runs", "step", "status")
    op.create_table(
        "check_results",
        _id(),
        _bigint("episode_id"),
        _text("gate"),
        _text("check_name"),
        _text("config_hash"),
        _text("status"),
        _jsonb("observed", nullable=True),
        _text("reason", nullable=True),
        _text("severity", nullable=True),
        _text("detail", nullable=True),
        _bigint("pipeline_run_id", nullable=True),
        _now("checked_at"),
        _pk("check_results"),
        _uq("check_results", "episode_id", "gate", "check_name", "config_hash"),
        _fk("check_results", "episode_id", "episodes"),
        _fk("check_results", "pipeline_run_id", "pipeline_runs"),
        _one_of("check_results", "gate", GATES),
        _one_of("check_results", "status", CHECK_STATUSES),
        _one_of("check_results", "reason", REASON_CODES),
        _one_of("check_results", "severity", SEVERITIES),
    )
    _ix("check_results", "pipeline_run_id")
    _ix("check_results", "gate", "check_name", "status")

    # -- outputs ------------------------------------------------------------------------------------------
    op.create_table(
        "artifacts",
        _id(),
        _text("kind"),
        _text("uri"),
        _text("sha256"),
        _bigint("size_bytes"),
        _text("step", nullable=True),
        _text("config_hash"),
        _text("code_version"),
        _bigint("episode_id", nullable=True),
        _now("created_at"),
        _pk("artifacts"),
        _uq("artifacts", "uri"),
        _fk("artifacts", "episode_id", "episodes"),
        _one_of("artifacts", "kind", ARTIFACT_KINDS),
        _one_of("artifacts", "step", STEP_NAMES),
        _sha256("artifacts"),
        _nonnegative("artifacts", "size_bytes"),
    )
    _ix("artifacts", "episode_id")
    _ix("artifacts", "step", "config_hash")
    op.create_table(
        "artifact_inputs",
        _id(),
        _bigint("artifact_id"),
        _bigint("input_artifact_id", nullable=True),
        _bigint("input_blob_id", nullable=True),
        _pk("artifact_inputs"),
        _fk("artifact_inputs", "artifact_id", "artifacts"),
        _fk("artifact_inputs", "input_artifact_id", "artifacts"),
        _fk("artifact_inputs", "input_blob_id", "blobs"),
        sa.CheckConstraint(
            "num_nonnulls(input_artifact_id, input_blob_id) = 1", name="ck_artifact_inputs_exactly_one_input"
        ),
        sa.CheckConstraint("input_artifact_id <> artifact_id", name="ck_artifact_inputs_not_own_input"),
    )
    _ix("artifact_inputs", "artifact_id")
    op.create_index(
        "uq_artifact_inputs_input_artifact_id_artifact_id",
        "artifact_inputs",
        ["input_artifact_id", "artifact_id"],
        unique=True,
        postgresql_where=sa.text("input_artifact_id IS NOT NULL"),
    )
    op.create_index(
        "uq_artifact_inputs_input_blob_id_artifact_id",
        "artifact_inputs",
        ["input_blob_id", "artifact_id"],
        unique=True,
        postgresql_where=sa.text("input_blob_id IS NOT NULL"),
    )
    op.create_table(
        "annotations",
        _id(),
        _bigint("episode_id"),
        _text("annotator"),
        _text("annotator_version"),
        _text("key"),
        _jsonb("value"),
        _bigint("artifact_id", nullable=True),
        _now("created_at"),
        _now("updated_at"),
        _pk("annotations"),
        _uq("annotations", "episode_id", "annotator", "annotator_version", "key"),
        _fk("annotations", "episode_id", "episodes"),
        _fk("annotations", "artifact_id", "artifacts"),
    )
    _ix("annotations", "artifact_id")
    _ix("annotations", "annotator", "key")
    op.create_table(
        "dataset_versions",
        _id(),
        _text("name"),
        _text("version"),
        _text("spec_hash"),
        _jsonb("spec", default="'{}'::jsonb"),
        _now("created_at"),
        _pk("dataset_versions"),
        _uq("dataset_versions", "name", "version"),
    )
    op.create_table(
        "shards",
        _id(),
        _bigint("artifact_id"),
        _bigint("dataset_version_id", nullable=True),
        _text("split", nullable=True),
        sa.Column("shard_index", sa.Integer, nullable=True),
        _bigint("n_episodes"),
        _bigint("n_samples"),
        _now("created_at"),
        _pk("shards"),
        _uq("shards", "artifact_id"),
        _uq("shards", "dataset_version_id", "split", "shard_index"),
        _fk("shards", "artifact_id", "artifacts"),
        _fk("shards", "dataset_version_id", "dataset_versions"),
        _one_of("shards", "split", SPLITS),
        _nonnegative("shards", "shard_index"),
    )
    op.create_table(
        "manifests",
        _id(),
        _bigint("dataset_version_id"),
        _text("format"),
        _text("uri"),
        _text("sha256"),
        _bigint("size_bytes"),
        _bigint("row_count"),
        _now("created_at"),
        _pk("manifests"),
        _uq("manifests", "uri"),
        _uq("manifests", "dataset_version_id", "format"),
        _fk("manifests", "dataset_version_id", "dataset_versions"),
        _one_of("manifests", "format", MANIFEST_FORMATS),
        _sha256("manifests"),
        _nonnegative("manifests", "row_count"),
        _nonnegative("manifests", "size_bytes"),
    )
    op.create_table(
        "dataset_version_episodes",
        _bigint("dataset_version_id"),
        _bigint("episode_id"),
        _text("split"),
        _pk("dataset_version_episodes", "dataset_version_id", "episode_id"),
        _fk("dataset_version_episodes", "dataset_version_id", "dataset_versions"),
        _fk("dataset_version_episodes", "episode_id", "episodes"),
        _one_of("dataset_version_episodes", "split", SPLITS),
    )
    _ix("dataset_version_episodes", "episode_id")


TABLES_CHILDREN_FIRST = (
    "dataset_version_episodes",
    "manifests",
    "shards",
    "dataset_versions",
    "annotations",
    "artifact_inputs",
    "artifacts",
    "check_results",
    "step_runs",
    "batches",
    "pipeline_runs",
    "streams",
    "episodes",
    "calibrations",
    "source_files",
    "blobs",
    "vendors",
)


def downgrade() -> None:
    for table in TABLES_CHILDREN_FIRST:
        op.drop_table(table)
    # Created by upgrade(); RESTRICT (the default) refuses if something outside the catalog came to use it.
    op.execute("DROP EXTENSION IF EXISTS btree_gist")
