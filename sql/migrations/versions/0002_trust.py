"""Trust: content versions of a path, passed-over files, append-only states and step outcomes.

Revision ID: 0002
Revises: 0001
Create Date: 2026-01-20

* ``source_files`` gets ``version`` (a path's contents, counted from 1) and ``source_state`` (what the file
  looked like when last hashed). A later content of a path used to be a row whose path carried a
  ``#sha256=<16 hex>`` suffix; those rows become versions of their path (only rows whose suffix is the
  start of their own blob's sha256: a vendor name that merely contains the text is left alone).
* ``passed_over_files``: files under a vendor root that were not taken, and why.
* ``episode_state_changes`` and ``sluice_set_episode_state()``: the ingest role may no longer UPDATE an
  episode's state (``pipeline.catalog.roles`` grants it the metadata columns only); it changes a state
  through this SECURITY DEFINER function, which refuses to leave ``duplicate`` or to go back to
  ``pending`` and appends every change to the history table.
* A trigger keeps a final step outcome (succeeded, rejected) from ever being rewritten.

Snapshot rule as in 0001: enum values are literals of this revision.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FILE_STATES = ("pending", "accepted", "accepted_with_flags", "quarantined", "duplicate")
STEP_NAMES = ("ingest", "quality_pre", "transcode", "quality_post", "annotate", "shard")
PASS_OVER_REASONS = ("outside_root", "link", "hard_link", "not_regular", "unreadable", "not_ready")
FINAL_STEP_STATUSES = ("succeeded", "rejected")
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

SET_STATE = "sluice_set_episode_state"
GUARD = "sluice_step_runs_keep_final"


def _one_of(table: str, col: str, values: Sequence[str]) -> sa.CheckConstraint:
    return sa.CheckConstraint(sa.column(col).in_(values), name=f"ck_{table}_{col}_enum")


def _now(name: str) -> sa.Column:
    return sa.Column(name, sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False)


def _schema() -> str:
    return str(op.get_bind().execute(sa.text("SELECT current_schema()")).scalar_one())


def upgrade() -> None:
    schema = _schema()
    # -- source file versions --------------------------------------------------------------------------
    op.add_column("source_files", sa.Column("version", sa.Integer, server_default="1", nullable=False))
    op.add_column("source_files", sa.Column("source_state", pg.JSONB, nullable=True))
    op.drop_constraint("uq_source_files_vendor_id_path", "source_files")
    op.execute(
        r"""
        WITH aliases AS (
            SELECT sf.id, substring(sf.path FROM '^(.*)#sha256=[0-9a-f]{16}$') AS base
            FROM source_files sf JOIN blobs b ON b.id = sf.blob_id
            WHERE sf.path ~ '#sha256=[0-9a-f]{16}$' AND b.sha256 LIKE right(sf.path, 16) || '%'
        ), numbered AS (
            SELECT sf.id, coalesce(a.base, sf.path) AS base,
                   row_number() OVER (PARTITION BY sf.vendor_id, coalesce(a.base, sf.path) ORDER BY sf.id)
                       AS version
            FROM source_files sf LEFT JOIN aliases a ON a.id = sf.id
        )
        UPDATE source_files sf SET path = n.base, version = n.version
        FROM numbered n WHERE n.id = sf.id AND (sf.path <> n.base OR sf.version <> n.version)
        """
    )
    op.create_unique_constraint(
        "uq_source_files_vendor_id_path_version", "source_files", ["vendor_id", "path", "version"]
    )
    op.create_unique_constraint(
        "uq_source_files_vendor_id_path_blob_id", "source_files", ["vendor_id", "path", "blob_id"]
    )
    op.create_check_constraint("ck_source_files_version_positive", "source_files", "version >= 1")

    op.create_table(
        "passed_over_files",
        sa.Column("id", sa.BigInteger, sa.Identity(), nullable=False),
        sa.Column("vendor_id", sa.BigInteger, nullable=False),
        sa.Column("path", sa.Text, nullable=False),
        sa.Column("why", sa.Text, nullable=False),
        sa.Column("detail", sa.Text, nullable=False),
        _now("first_seen_at"),
        _now("last_seen_at"),
        sa.PrimaryKeyConstraint("id", name="pk_passed_over_files"),
        sa.UniqueConstraint("vendor_id", "path", name="uq_passed_over_files_vendor_id_path"),
        sa.ForeignKeyConstraint(["vendor_id"], ["vendors.id"], name="fk_passed_over_files_vendor_id_vendors"),
        _one_of("passed_over_files", "why", PASS_OVER_REASONS),
    )

    # -- append-only episode states ----------------------------------------------------------------------
    op.create_table(
        "episode_state_changes",
        sa.Column("id", sa.BigInteger, sa.Identity(), nullable=False),
        sa.Column("episode_id", sa.BigInteger, nullable=False),
        sa.Column("from_state", sa.Text, nullable=False),
        sa.Column("to_state", sa.Text, nullable=False),
        sa.Column("reasons", pg.ARRAY(sa.Text), nullable=False),
        sa.Column("detail", sa.Text, nullable=True),
        sa.Column("duplicate_of_id", sa.BigInteger, nullable=True),
        sa.Column("step", sa.Text, nullable=True),
        sa.Column("config_hash", sa.Text, nullable=True),
        sa.Column("changed_by", sa.Text, nullable=False),
        _now("changed_at"),
        sa.PrimaryKeyConstraint("id", name="pk_episode_state_changes"),
        sa.ForeignKeyConstraint(
            ["episode_id"], ["episodes.id"], name="fk_episode_state_changes_episode_id_episodes"
        ),
        sa.ForeignKeyConstraint(
            ["duplicate_of_id"], ["episodes.id"], name="fk_episode_state_changes_duplicate_of_id_episodes"
        ),
        _one_of("episode_state_changes", "from_state", FILE_STATES),
        _one_of("episode_state_changes", "to_state", FILE_STATES),
        _one_of("episode_state_changes", "step", STEP_NAMES),
        sa.CheckConstraint(
            sa.column("reasons", pg.ARRAY(sa.Text)).contained_by(pg.array(REASON_CODES, type_=sa.Text)),
            name="ck_episode_state_changes_reasons_enum",
        ),
    )
    op.create_index("ix_episode_state_changes_episode_id", "episode_state_changes", ["episode_id"])
    op.execute(
        f"""
        CREATE FUNCTION {SET_STATE}(
            p_episode_id bigint, p_state text, p_reasons text[], p_detail text, p_duplicate_of_id bigint,
            p_merge_reasons boolean, p_step text, p_config_hash text
        ) RETURNS text[]
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = {schema}, pg_temp
        AS $fn$
        DECLARE
            old episodes%ROWTYPE;
            new_reasons text[];
        BEGIN
            SELECT * INTO old FROM episodes WHERE id = p_episode_id FOR UPDATE;
            IF NOT FOUND THEN
                RAISE EXCEPTION 'episode % does not exist', p_episode_id USING ERRCODE = 'no_data_found';
            END IF;
            IF old.state = 'duplicate'
               AND (p_state <> 'duplicate' OR p_duplicate_of_id IS DISTINCT FROM old.duplicate_of_id) THEN
                RAISE EXCEPTION 'episode % is recorded as a duplicate of episode %; it stays one',
                    p_episode_id, old.duplicate_of_id USING ERRCODE = 'integrity_constraint_violation';
            END IF;
            IF p_state = 'pending' AND old.state <> 'pending' THEN
                RAISE EXCEPTION 'episode % is %; a recorded state never goes back to pending',
                    p_episode_id, old.state USING ERRCODE = 'integrity_constraint_violation';
            END IF;
            SELECT coalesce(array_agg(DISTINCT r COLLATE "C" ORDER BY r COLLATE "C"), '{{}}') INTO new_reasons
            FROM unnest(CASE WHEN p_merge_reasons THEN old.reasons || p_reasons ELSE p_reasons END) AS r;
            IF (old.state, old.reasons, old.detail, old.duplicate_of_id)
               IS DISTINCT FROM (p_state, new_reasons, p_detail, p_duplicate_of_id) THEN
                UPDATE episodes SET state = p_state, reasons = new_reasons, detail = p_detail,
                    duplicate_of_id = p_duplicate_of_id, updated_at = now()
                WHERE id = p_episode_id;
                INSERT INTO episode_state_changes (
                    episode_id, from_state, to_state, reasons, detail, duplicate_of_id, step, config_hash,
                    changed_by
                ) VALUES (
                    p_episode_id, old.state, p_state, new_reasons, p_detail, p_duplicate_of_id, p_step,
                    p_config_hash, session_user
                );
            END IF;
            RETURN new_reasons;
        END
        $fn$
        """
    )
    # Functions are executable by PUBLIC by default; pipeline.catalog.roles grants it to the writer.
    op.execute(
        f"REVOKE ALL ON FUNCTION {SET_STATE}(bigint, text, text[], text, bigint, boolean, text, text) FROM PUBLIC"
    )

    # -- final step outcomes -----------------------------------------------------------------------------
    finals = ", ".join(f"'{s}'" for s in FINAL_STEP_STATUSES)
    op.execute(
        f"""
        CREATE FUNCTION {GUARD}() RETURNS trigger LANGUAGE plpgsql SET search_path = {schema}, pg_temp
        AS $fn$
        BEGIN
            IF OLD.status IN ({finals}) THEN
                RAISE EXCEPTION 'step run % (% of episode % under config %) ended %; a final outcome is never '
                    'rewritten', OLD.id, OLD.step, OLD.episode_id, OLD.config_hash, OLD.status
                    USING ERRCODE = 'integrity_constraint_violation';
            END IF;
            IF (NEW.episode_id, NEW.step, NEW.config_hash) IS DISTINCT FROM
               (OLD.episode_id, OLD.step, OLD.config_hash) THEN
                RAISE EXCEPTION 'step run % may not move to another episode, step or config', OLD.id
                    USING ERRCODE = 'integrity_constraint_violation';
            END IF;
            RETURN NEW;
        END
        $fn$
        """
    )
    op.execute(f"REVOKE ALL ON FUNCTION {GUARD}() FROM PUBLIC")
    op.execute(
        f"CREATE TRIGGER step_runs_keep_final BEFORE UPDATE ON step_runs FOR EACH ROW EXECUTE FUNCTION {GUARD}()"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER step_runs_keep_final ON step_runs")
    op.execute(f"DROP FUNCTION {GUARD}()")
    op.execute(f"DROP FUNCTION {SET_STATE}(bigint, text, text[], text, bigint, boolean, text, text)")
    op.drop_table("episode_state_changes")
    op.drop_table("passed_over_files")
    op.drop_constraint("ck_source_files_version_positive", "source_files")
    op.drop_constraint("uq_source_files_vendor_id_path_blob_id", "source_files")
    op.drop_constraint("uq_source_files_vendor_id_path_version", "source_files")
    # Later versions become aliases again, as 0001's code wrote them.
    op.execute(
        """
        UPDATE source_files sf SET path = sf.path || '#sha256=' || left(b.sha256, 16)
        FROM blobs b WHERE b.id = sf.blob_id AND sf.version > 1
        """
    )
    op.create_unique_constraint("uq_source_files_vendor_id_path", "source_files", ["vendor_id", "path"])
    op.drop_column("source_files", "source_state")
    op.drop_column("source_files", "version")
