"""Recalls: checks applied after the fact (``sluice recall``) and the episodes each one rejects.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02

* ``recalls``: one row per (vendor, check name, check version), with the bounds the check is judged by and
  how many episodes its latest run scored.
* ``recall_episodes``: the episodes a recall rejects, with the bounds their scores fail. Rows are only ever
  added (the writer role has no DELETE): a recall at one version is deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "recalls",
        sa.Column("id", sa.BigInteger, sa.Identity(), nullable=False),
        sa.Column("vendor_id", sa.BigInteger, nullable=False),
        sa.Column("check_name", sa.Text, nullable=False),
        sa.Column("check_version", sa.Text, nullable=False),
        sa.Column("bounds", pg.JSONB, nullable=False),
        sa.Column("n_scored", sa.BigInteger, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_recalls"),
        sa.ForeignKeyConstraint(["vendor_id"], ["vendors.id"], name="fk_recalls_vendor_id_vendors"),
        sa.UniqueConstraint(
            "vendor_id", "check_name", "check_version", name="uq_recalls_vendor_id_check_name_check_version"
        ),
    )
    op.create_table(
        "recall_episodes",
        sa.Column("recall_id", sa.BigInteger, nullable=False),
        sa.Column("episode_id", sa.BigInteger, nullable=False),
        sa.Column("reasons", pg.JSONB, nullable=False),
        sa.PrimaryKeyConstraint("recall_id", "episode_id", name="pk_recall_episodes"),
        sa.ForeignKeyConstraint(["recall_id"], ["recalls.id"], name="fk_recall_episodes_recall_id_recalls"),
        sa.ForeignKeyConstraint(["episode_id"], ["episodes.id"], name="fk_recall_episodes_episode_id_episodes"),
    )
    op.create_index("ix_recall_episodes_episode_id", "recall_episodes", ["episode_id"])


def downgrade() -> None:
    op.drop_table("recall_episodes")
    op.drop_table("recalls")
