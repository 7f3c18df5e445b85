"""The system-of-record schema as SQLAlchemy 2 declarative models.

These models describe the *current* schema; the migrations under ``sql/migrations/`` build it (each one a
snapshot with its own literal values). ``tests/catalog`` checks that the migrated database matches these
models and that every enum CHECK matches the enums in :mod:`pipeline.enums`.

Conventions: ids are ``bigint`` identity columns; wall-clock times are ``timestamptz``; log times are
integers in nanoseconds (``*_ns``, the MCAP unit); every status, kind and reason column is CHECKed against
its enum by a constraint named ``ck_<table>_<column>_enum`` (see :func:`enum_checks`).
"""

from __future__ import annotations

from sqlalchemy import CheckConstraint

from pipeline.catalog.models.base import (
    NAMING_CONVENTION,
    SHA256_PATTERN,
    Base,
    EnumCheck,
    table_of,
)
from pipeline.catalog.models.outputs import (
    Annotation,
    Artifact,
    ArtifactInput,
    DatasetVersion,
    DatasetVersionEpisode,
    Manifest,
    Recall,
    RecallEpisode,
    Shard,
)
from pipeline.catalog.models.runs import Batch, CheckResult, PipelineRun, StepRun
from pipeline.catalog.models.sources import (
    Blob,
    Calibration,
    Episode,
    EpisodeStateChange,
    PassedOverFile,
    SourceFile,
    Stream,
    Vendor,
)
from pipeline.enums import ManifestFormat

__all__ = [
    "NAMING_CONVENTION",
    "SHA256_PATTERN",
    "Annotation",
    "Artifact",
    "ArtifactInput",
    "Base",
    "Batch",
    "Blob",
    "Calibration",
    "CheckResult",
    "DatasetVersion",
    "DatasetVersionEpisode",
    "EnumCheck",
    "Episode",
    "EpisodeStateChange",
    "Manifest",
    "ManifestFormat",
    "PassedOverFile",
    "PipelineRun",
    "Recall",
    "RecallEpisode",
    "Shard",
    "SourceFile",
    "StepRun",
    "Stream",
    "Vendor",
    "enum_checks",
    "table_of",
]


def enum_checks() -> list[EnumCheck]:
    """Every enum CHECK of the current models (what the migrated database must match)."""
    found = []
    for table in Base.metadata.sorted_tables:
        for constraint in table.constraints:
            info = constraint.info
            if isinstance(constraint, CheckConstraint) and "enum" in info:
                found.append(EnumCheck(table.name, info["column"], info["enum"], info["shape"]))
    return found
