"""Colour: the post-gates' ``colour`` check quarantines with ``colour_mismatch``.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-05

The reason-code CHECKs of ``episodes.reasons``, ``episode_state_changes.reasons``, ``check_results.reason``
and ``step_runs.reason`` are made again with the new code. A downgrade makes them without it, and refuses,
saying how many rows of each hold it, while any does.

Snapshot rule as in 0001: enum values are literals of this revision.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: The codes before this revision (0002's).
REASON_CODES_0003 = (
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
REASON_CODES = (*REASON_CODES_0003, "colour_mismatch")

#: (table, column, whether the column is a text[] of codes or one code)
REASON_COLUMNS = (
    ("episodes", "reasons", True),
    ("episode_state_changes", "reasons", True),
    ("check_results", "reason", False),
    ("step_runs", "reason", False),
)


def _reason_checks(codes: Sequence[str]) -> None:
    for table, col, many in REASON_COLUMNS:
        name = f"ck_{table}_{col}_enum"
        if many:
            expr = sa.column(col, pg.ARRAY(sa.Text)).contained_by(pg.array(codes, type_=sa.Text))
        else:
            expr = sa.column(col).in_(codes)
        op.drop_constraint(name, table, type_="check")
        op.create_check_constraint(name, table, expr)


def upgrade() -> None:
    _reason_checks(REASON_CODES)


def downgrade() -> None:
    # Say which rows hold the code, rather than the first CHECK Postgres finds violated.
    held = []
    for table, col, many in REASON_COLUMNS:
        where = f"'colour_mismatch' = ANY({col})" if many else f"{col} = 'colour_mismatch'"
        count = op.get_bind().execute(sa.text(f"SELECT count(*) FROM {table} WHERE {where}")).scalar_one()
        if count:
            held.append(f"{table}.{col}: {count} row(s)")
    if held:
        raise RuntimeError(
            "cannot go below 0004 while rows hold the reason colour_mismatch (" + "; ".join(held) + "); "
            "they are history the catalog keeps (state changes are append-only, a final step outcome "
            "cannot change): restore a backup taken before 0004 instead"
        )
    _reason_checks(REASON_CODES_0003)
