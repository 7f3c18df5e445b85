"""Tables of what the pipeline made: artifacts and lineage, annotations, datasets, shards, manifests."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, CheckConstraint, ForeignKey, Index, Integer, UniqueConstraint, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from pipeline.catalog.models.base import (
    Base,
    enum_check,
    fk_column,
    id_column,
    now_column,
    sha256_check,
)
from pipeline.enums import ArtifactKind, ManifestFormat, Split, StepName


class Artifact(Base):
    """A derived object in the store; ``step`` is NULL for objects made outside the per-batch steps."""

    __tablename__ = "artifacts"
    __table_args__ = (
        enum_check("kind", ArtifactKind),
        enum_check("step", StepName),
        sha256_check(),
        CheckConstraint("size_bytes >= 0", name="size_bytes_nonnegative"),
        Index(None, "step", "config_hash"),
    )

    id: Mapped[int] = id_column()
    kind: Mapped[str]
    uri: Mapped[str] = mapped_column(unique=True)
    sha256: Mapped[str]
    size_bytes: Mapped[int]
    step: Mapped[str | None]
    config_hash: Mapped[str]
    code_version: Mapped[str]
    episode_id: Mapped[int | None] = fk_column("episodes.id", nullable=True, index=True)
    created_at: Mapped[datetime] = now_column()


class ArtifactInput(Base):
    """Lineage: one input (another artifact or a raw blob) of an artifact."""

    __tablename__ = "artifact_inputs"
    __table_args__ = (
        CheckConstraint("num_nonnulls(input_artifact_id, input_blob_id) = 1", name="exactly_one_input"),
        CheckConstraint("input_artifact_id <> artifact_id", name="not_own_input"),
        # Unique per (input, artifact); led by the input so that "what was made from X" uses it too.
        Index(
            "uq_artifact_inputs_input_artifact_id_artifact_id",
            "input_artifact_id",
            "artifact_id",
            unique=True,
            postgresql_where=text("input_artifact_id IS NOT NULL"),
        ),
        Index(
            "uq_artifact_inputs_input_blob_id_artifact_id",
            "input_blob_id",
            "artifact_id",
            unique=True,
            postgresql_where=text("input_blob_id IS NOT NULL"),
        ),
    )

    id: Mapped[int] = id_column()
    artifact_id: Mapped[int] = fk_column("artifacts.id", index=True)
    input_artifact_id: Mapped[int | None] = fk_column("artifacts.id", nullable=True)
    input_blob_id: Mapped[int | None] = fk_column("blobs.id", nullable=True)


class Annotation(Base):
    """One key of one annotator version on one episode; a new annotator version adds rows."""

    __tablename__ = "annotations"
    __table_args__ = (
        UniqueConstraint("episode_id", "annotator", "annotator_version", "key"),
        Index(None, "annotator", "key"),
    )

    id: Mapped[int] = id_column()
    episode_id: Mapped[int] = fk_column("episodes.id")
    annotator: Mapped[str]
    annotator_version: Mapped[str]
    key: Mapped[str]
    value: Mapped[Any] = mapped_column(JSONB)
    artifact_id: Mapped[int | None] = fk_column("artifacts.id", nullable=True, index=True)
    created_at: Mapped[datetime] = now_column()
    updated_at: Mapped[datetime] = now_column()


class DatasetVersion(Base):
    __tablename__ = "dataset_versions"
    __table_args__ = (UniqueConstraint("name", "version"),)

    id: Mapped[int] = id_column()
    name: Mapped[str]
    version: Mapped[str]
    spec_hash: Mapped[str]
    spec: Mapped[dict[str, Any]] = mapped_column(server_default=text("'{}'::jsonb"))
    created_at: Mapped[datetime] = now_column()


class Shard(Base):
    """A shard file (its bytes are an artifact); in a dataset version once curation places it there."""

    __tablename__ = "shards"
    __table_args__ = (
        UniqueConstraint("dataset_version_id", "split", "shard_index"),
        enum_check("split", Split),
        CheckConstraint("shard_index >= 0", name="shard_index_nonnegative"),
    )

    id: Mapped[int] = id_column()
    artifact_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("artifacts.id"), unique=True)
    dataset_version_id: Mapped[int | None] = fk_column("dataset_versions.id", nullable=True)
    split: Mapped[str | None]
    shard_index: Mapped[int | None] = mapped_column(Integer)
    n_episodes: Mapped[int]
    n_samples: Mapped[int]
    created_at: Mapped[datetime] = now_column()


class Manifest(Base):
    __tablename__ = "manifests"
    __table_args__ = (
        UniqueConstraint("dataset_version_id", "format"),
        enum_check("format", ManifestFormat),
        sha256_check(),
        CheckConstraint("row_count >= 0", name="row_count_nonnegative"),
        CheckConstraint("size_bytes >= 0", name="size_bytes_nonnegative"),
    )

    id: Mapped[int] = id_column()
    dataset_version_id: Mapped[int] = fk_column("dataset_versions.id")
    format: Mapped[str]
    uri: Mapped[str] = mapped_column(unique=True)
    sha256: Mapped[str]
    size_bytes: Mapped[int]
    row_count: Mapped[int]
    created_at: Mapped[datetime] = now_column()


class DatasetVersionEpisode(Base):
    """Manifest lineage: which episodes a dataset version holds, and in which split."""

    __tablename__ = "dataset_version_episodes"
    __table_args__ = (enum_check("split", Split),)

    dataset_version_id: Mapped[int] = mapped_column(ForeignKey("dataset_versions.id"), primary_key=True)
    episode_id: Mapped[int] = mapped_column(ForeignKey("episodes.id"), primary_key=True, index=True)
    split: Mapped[str]


class Recall(Base):
    """A check applied after the fact (``sluice recall``): an annotator version and the bounds it is judged
    by, per vendor; :class:`RecallEpisode` lists the episodes it rejects."""

    __tablename__ = "recalls"
    __table_args__ = (UniqueConstraint("vendor_id", "check_name", "check_version"),)

    id: Mapped[int] = id_column()
    vendor_id: Mapped[int] = fk_column("vendors.id")
    check_name: Mapped[str]
    check_version: Mapped[str]
    bounds: Mapped[list[Any]] = mapped_column(JSONB)
    n_scored: Mapped[int]  # episodes the latest recall run scored (the others already had this version)
    created_at: Mapped[datetime] = now_column()
    updated_at: Mapped[datetime] = now_column()


class RecallEpisode(Base):
    """One episode a recall rejects, and why (the bounds its scores fail)."""

    __tablename__ = "recall_episodes"

    recall_id: Mapped[int] = mapped_column(ForeignKey("recalls.id"), primary_key=True)
    episode_id: Mapped[int] = mapped_column(ForeignKey("episodes.id"), primary_key=True, index=True)
    reasons: Mapped[list[Any]] = mapped_column(JSONB)
