"""Tables of what vendors deliver: vendors, blobs, source files, calibrations, episodes, streams."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Computed,
    Float,
    ForeignKey,
    Index,
    Integer,
    UniqueConstraint,
    column,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ExcludeConstraint
from sqlalchemy.orm import Mapped, mapped_column

from pipeline.catalog.models.base import Base, enum_check, fk_column, id_column, now_column, sha256_check
from pipeline.enums import FileState, PassOverReason, ReasonCode, SourceKind, StepName, StreamRole


class Vendor(Base):
    __tablename__ = "vendors"
    __table_args__ = (enum_check("kind", SourceKind),)

    id: Mapped[int] = id_column()
    name: Mapped[str] = mapped_column(unique=True)
    kind: Mapped[str]
    config_hash: Mapped[str]
    config: Mapped[dict[str, Any]]
    created_at: Mapped[datetime] = now_column()
    updated_at: Mapped[datetime] = now_column()


class Blob(Base):
    """A raw object, content-addressed and write-once: inserted once, never updated by the pipeline."""

    __tablename__ = "blobs"
    __table_args__ = (sha256_check(), CheckConstraint("size_bytes >= 0", name="size_bytes_nonnegative"))

    id: Mapped[int] = id_column()
    sha256: Mapped[str] = mapped_column(unique=True)
    size_bytes: Mapped[int]
    raw_uri: Mapped[str]
    landed_at: Mapped[datetime] = now_column()
    verified_at: Mapped[datetime | None]


class SourceFile(Base):
    """One content a vendor path held: an alias of a blob (several paths may name the same content).

    ``path`` is the file name's bytes encoded injectively as text (:func:`pipeline.steps.ingest.
    catalog_path`); ``version`` counts the different contents seen under it (1 = the first). A row never
    changes but for ``source_state``: what the file looked like when its content was last hashed, which
    tells a later run that it need not hash it again.
    """

    __tablename__ = "source_files"
    __table_args__ = (
        UniqueConstraint("vendor_id", "path", "version"),
        UniqueConstraint("vendor_id", "path", "blob_id"),
        CheckConstraint("version >= 1", name="version_positive"),
    )

    id: Mapped[int] = id_column()
    vendor_id: Mapped[int] = fk_column("vendors.id")
    path: Mapped[str]
    version: Mapped[int] = mapped_column(Integer, server_default="1")
    blob_id: Mapped[int] = fk_column("blobs.id", index=True)
    source_state: Mapped[dict[str, Any] | None]
    first_seen_at: Mapped[datetime] = now_column()


class PassedOverFile(Base):
    """A file under a vendor root that was not taken (a link out, a hard link, a FIFO), and why."""

    __tablename__ = "passed_over_files"
    __table_args__ = (UniqueConstraint("vendor_id", "path"), enum_check("why", PassOverReason))

    id: Mapped[int] = id_column()
    vendor_id: Mapped[int] = fk_column("vendors.id")
    path: Mapped[str]
    why: Mapped[str]
    detail: Mapped[str]
    first_seen_at: Mapped[datetime] = now_column()
    last_seen_at: Mapped[datetime] = now_column()


class Calibration(Base):
    """A robot's camera calibration and the log-time window it is valid for (``valid_to_ns`` NULL: open)."""

    __tablename__ = "calibrations"
    __table_args__ = (
        UniqueConstraint("vendor_id", "calibration_key"),
        CheckConstraint("valid_to_ns IS NULL OR valid_to_ns > valid_from_ns", name="window_ordered"),
        # One calibration per robot at any instant; needs the btree_gist extension for `=` on scalars.
        ExcludeConstraint(
            (column("vendor_id"), "="),
            (column("robot_id"), "="),
            (func.int8range(column("valid_from_ns"), column("valid_to_ns")), "&&"),
            using="gist",
            name="ex_calibrations_window_overlap",
        ),
    )

    id: Mapped[int] = id_column()
    vendor_id: Mapped[int] = fk_column("vendors.id")
    calibration_key: Mapped[str]
    robot_id: Mapped[str]
    valid_from_ns: Mapped[int]
    valid_to_ns: Mapped[int | None]
    cameras: Mapped[dict[str, Any]]
    created_at: Mapped[datetime] = now_column()
    updated_at: Mapped[datetime] = now_column()


class Episode(Base):
    """One row per input (source file): its metadata and the one state it ends in."""

    __tablename__ = "episodes"
    __table_args__ = (
        enum_check("kind", SourceKind),
        enum_check("state", FileState),
        enum_check("reasons", ReasonCode, "array"),
        CheckConstraint("end_time_ns >= start_time_ns", name="time_range_ordered"),
        CheckConstraint("duplicate_of_id <> id", name="not_own_duplicate"),
        CheckConstraint(
            "state <> 'duplicate' OR duplicate_of_id IS NOT NULL", name="duplicate_names_original"
        ),
        Index(None, "vendor_id", "state"),
        Index(None, "robot_id", "start_time_ns"),
        Index("ix_episodes_reasons", "reasons", postgresql_using="gin"),
    )

    id: Mapped[int] = id_column()
    vendor_id: Mapped[int] = fk_column("vendors.id")
    source_file_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("source_files.id"), unique=True)
    blob_id: Mapped[int] = fk_column("blobs.id", index=True)
    kind: Mapped[str]
    robot_id: Mapped[str | None]
    session_id: Mapped[str | None] = mapped_column(index=True)
    episode_key: Mapped[str | None]
    task: Mapped[str | None]
    content_fingerprint: Mapped[str | None] = mapped_column(index=True)
    start_time_ns: Mapped[int | None]
    end_time_ns: Mapped[int | None]
    duration_s: Mapped[float | None] = mapped_column(
        Float, Computed("(end_time_ns - start_time_ns)::double precision / 1e9", persisted=True)
    )
    calibration_id: Mapped[int | None] = fk_column("calibrations.id", nullable=True, index=True)
    state: Mapped[str] = mapped_column(server_default=FileState.PENDING.value)
    reasons: Mapped[list[str]] = mapped_column(server_default=text("'{}'::text[]"))
    detail: Mapped[str | None]
    duplicate_of_id: Mapped[int | None] = fk_column("episodes.id", nullable=True, index=True)
    created_at: Mapped[datetime] = now_column()
    updated_at: Mapped[datetime] = now_column()


class EpisodeStateChange(Base):
    """Append-only history of episode states: one row per change, written by ``sluice_set_episode_state``
    (the only way the ingest role can change a state); nobody but the catalog's owner may alter a row."""

    __tablename__ = "episode_state_changes"
    __table_args__ = (
        enum_check("from_state", FileState),
        enum_check("to_state", FileState),
        enum_check("reasons", ReasonCode, "array"),
        enum_check("step", StepName),
    )

    id: Mapped[int] = id_column()
    episode_id: Mapped[int] = fk_column("episodes.id", index=True)
    from_state: Mapped[str]
    to_state: Mapped[str]
    reasons: Mapped[list[str]]
    detail: Mapped[str | None]
    duplicate_of_id: Mapped[int | None] = fk_column("episodes.id", nullable=True)
    step: Mapped[str | None]
    config_hash: Mapped[str | None]
    changed_by: Mapped[str]
    changed_at: Mapped[datetime] = now_column()


class Stream(Base):
    """Statistics of one topic of one episode, as read by ingest."""

    __tablename__ = "streams"
    __table_args__ = (
        UniqueConstraint("episode_id", "topic"),
        enum_check("role", StreamRole),
        CheckConstraint("message_count >= 0", name="message_count_nonnegative"),
        CheckConstraint("gap_rate >= 0", name="gap_rate_nonnegative"),
    )

    id: Mapped[int] = id_column()
    episode_id: Mapped[int] = fk_column("episodes.id")
    topic: Mapped[str]
    role: Mapped[str]
    encoding: Mapped[str | None]
    schema_name: Mapped[str | None]
    schema_hash: Mapped[str | None]
    message_count: Mapped[int]
    first_time_ns: Mapped[int | None]
    last_time_ns: Mapped[int | None]
    rate_hz: Mapped[float | None]
    gap_rate: Mapped[float | None]
    backward_steps: Mapped[int] = mapped_column(server_default="0")
    duplicate_timestamps: Mapped[int] = mapped_column(server_default="0")
    max_jump_ns: Mapped[int | None]
    # log time minus the hardware stamp in the payload, where the payload carries one
    skew_median_ns: Mapped[int | None]
    skew_p99_ns: Mapped[int | None]
    skew_max_ns: Mapped[int | None]
