"""Catalog writers for what the pipeline made: artifacts and their lineage, annotations, shards, dataset
versions, manifests and manifest lineage.

Same contract as :mod:`pipeline.catalog.sources`. Artifacts, dataset versions and manifests are
write-once: their URI or (name, version) names one content forever, so a different sha256 or spec for a
recorded key raises :class:`~pipeline.catalog.errors.CatalogConflictError`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from itertools import islice
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from pipeline.catalog import _values as v
from pipeline.catalog.errors import CatalogConflictError
from pipeline.catalog.models import (
    Annotation,
    Artifact,
    ArtifactInput,
    DatasetVersion,
    DatasetVersionEpisode,
    Manifest,
    ManifestFormat,
    Shard,
    table_of,
)
from pipeline.enums import ArtifactKind, Split, StepName

#: Rows per multi-row INSERT: well under Postgres' 65,535 bind parameters at 3 columns a row.
INSERT_CHUNK_ROWS = 5_000


def record_artifact(
    session: Session,
    *,
    kind: ArtifactKind | str,
    uri: str,
    sha256: str,
    size_bytes: int,
    step: StepName | str | None,
    config_hash: str,
    code_version: str,
    episode_id: int | None = None,
    input_artifact_ids: Iterable[int] = (),
    input_blob_ids: Iterable[int] = (),
) -> int:
    """Record a published derived object and the inputs it was made from; returns the artifact id.

    Call it after the object is verified and published at ``uri``. ``step`` is None for objects made
    outside the per-batch steps (curation, exports).
    """
    stmt = (
        insert(table_of(Artifact))
        .values(
            kind=v.member(ArtifactKind, kind, "artifact kind").value,
            uri=v.nonempty(uri, "artifact uri"),
            sha256=v.sha256_hex(sha256),
            size_bytes=v.nonnegative(size_bytes, "size_bytes"),
            step=None if step is None else v.member(StepName, step, "step").value,
            config_hash=v.nonempty(config_hash, "config hash"),
            code_version=v.nonempty(code_version, "code version"),
            episode_id=episode_id,
        )
        .on_conflict_do_nothing(index_elements=[Artifact.uri])
        .returning(Artifact.id)
    )
    artifact_id = session.execute(stmt).scalar_one_or_none()
    if artifact_id is None:
        recorded = session.execute(select(Artifact.id, Artifact.sha256).where(Artifact.uri == uri)).one()
        if recorded.sha256 != sha256:
            raise CatalogConflictError("sha256 of artifact", uri, recorded.sha256, sha256)
        artifact_id = recorded.id
    _record_inputs(session, artifact_id, ArtifactInput.input_artifact_id, input_artifact_ids)
    _record_inputs(session, artifact_id, ArtifactInput.input_blob_id, input_blob_ids)
    return artifact_id


def _record_inputs(session: Session, artifact_id: int, column: Any, input_ids: Iterable[int]) -> None:
    rows = [{"artifact_id": artifact_id, column.key: input_id} for input_id in sorted(set(input_ids))]
    if not rows:
        return
    stmt = (
        insert(table_of(ArtifactInput))
        .values(rows)
        .on_conflict_do_nothing(
            index_elements=[column, ArtifactInput.artifact_id], index_where=column.is_not(None)
        )
    )
    session.execute(stmt)


def artifact_inputs(session: Session, artifact_id: int) -> tuple[list[int], list[int]]:
    """The recorded inputs of an artifact: (input artifact ids, input blob ids), each sorted."""
    rows = session.execute(
        select(ArtifactInput.input_artifact_id, ArtifactInput.input_blob_id).where(
            ArtifactInput.artifact_id == artifact_id
        )
    ).all()
    artifacts = sorted(r.input_artifact_id for r in rows if r.input_artifact_id is not None)
    blobs = sorted(r.input_blob_id for r in rows if r.input_blob_id is not None)
    return artifacts, blobs


def record_annotation(
    session: Session,
    *,
    episode_id: int,
    annotator: str,
    annotator_version: str,
    key: str,
    value: Any,
    artifact_id: int | None = None,
) -> int:
    """Record one annotation value (a re-run of the same annotator version overwrites it); returns its id.

    A new ``annotator_version`` adds rows next to the old ones, so curation can choose a version.
    """
    ins = insert(table_of(Annotation)).values(
        episode_id=episode_id,
        annotator=v.nonempty(annotator, "annotator"),
        annotator_version=v.nonempty(annotator_version, "annotator version"),
        key=v.nonempty(key, "annotation key"),
        value=value,
        artifact_id=artifact_id,
    )
    new = ins.excluded
    stmt = ins.on_conflict_do_update(
        index_elements=[
            Annotation.episode_id,
            Annotation.annotator,
            Annotation.annotator_version,
            Annotation.key,
        ],
        set_={
            "value": new.value,
            "artifact_id": func.coalesce(new.artifact_id, Annotation.artifact_id),
            "updated_at": func.now(),
        },
    ).returning(Annotation.id)
    return session.execute(stmt).scalar_one()


def create_dataset_version(
    session: Session, *, name: str, version: str, spec_hash: str, spec: Mapping[str, Any]
) -> int:
    """Record a dataset version (frozen: the same name and version with another spec is refused)."""
    stmt = (
        insert(table_of(DatasetVersion))
        .values(
            name=v.nonempty(name, "dataset name"),
            version=v.nonempty(version, "dataset version"),
            spec_hash=v.nonempty(spec_hash, "spec hash"),
            spec=dict(spec),
        )
        .on_conflict_do_nothing(index_elements=[DatasetVersion.name, DatasetVersion.version])
        .returning(DatasetVersion.id)
    )
    dataset_version_id = session.execute(stmt).scalar_one_or_none()
    if dataset_version_id is not None:
        return dataset_version_id
    recorded = session.execute(
        select(DatasetVersion.id, DatasetVersion.spec_hash).where(
            DatasetVersion.name == name, DatasetVersion.version == version
        )
    ).one()
    if recorded.spec_hash != spec_hash:
        raise CatalogConflictError(
            "spec hash of dataset version", f"{name}@{version}", recorded.spec_hash, spec_hash
        )
    return recorded.id


def add_dataset_episodes(
    session: Session, dataset_version_id: int, episodes: Iterable[tuple[int, Split | str]]
) -> int:
    """Record manifest lineage: (episode id, split) pairs of a dataset version; returns pairs offered."""
    count = 0
    pairs = iter(episodes)
    while chunk := list(islice(pairs, INSERT_CHUNK_ROWS)):
        rows = [
            {
                "dataset_version_id": dataset_version_id,
                "episode_id": episode_id,
                "split": v.member(Split, split, "split").value,
            }
            for episode_id, split in chunk
        ]
        session.execute(insert(table_of(DatasetVersionEpisode)).values(rows).on_conflict_do_nothing())
        count += len(rows)
    return count


def record_shard(
    session: Session,
    *,
    artifact_id: int,
    n_episodes: int,
    n_samples: int,
    dataset_version_id: int | None = None,
    split: Split | str | None = None,
    shard_index: int | None = None,
) -> int:
    """Record a shard (its bytes are the artifact ``artifact_id``); placing it in a dataset version later
    updates the same row. Returns the shard id."""
    ins = insert(table_of(Shard)).values(
        artifact_id=artifact_id,
        n_episodes=v.nonnegative(n_episodes, "n_episodes"),
        n_samples=v.nonnegative(n_samples, "n_samples"),
        dataset_version_id=dataset_version_id,
        split=v.optional_member(Split, split, "split"),
        shard_index=None if shard_index is None else v.nonnegative(shard_index, "shard_index"),
    )
    new = ins.excluded
    stmt = ins.on_conflict_do_update(
        index_elements=[Shard.artifact_id],
        set_={
            "n_episodes": new.n_episodes,
            "n_samples": new.n_samples,
            "dataset_version_id": func.coalesce(new.dataset_version_id, Shard.dataset_version_id),
            "split": func.coalesce(new.split, Shard.split),
            "shard_index": func.coalesce(new.shard_index, Shard.shard_index),
        },
    ).returning(Shard.id)
    return session.execute(stmt).scalar_one()


def record_manifest(
    session: Session,
    *,
    dataset_version_id: int,
    format: ManifestFormat | str,
    uri: str,
    sha256: str,
    size_bytes: int,
    row_count: int,
) -> int:
    """Record a frozen manifest file of a dataset version; returns its id."""
    stmt = (
        insert(table_of(Manifest))
        .values(
            dataset_version_id=dataset_version_id,
            format=v.member(ManifestFormat, format, "manifest format").value,
            uri=v.nonempty(uri, "manifest uri"),
            sha256=v.sha256_hex(sha256),
            size_bytes=v.nonnegative(size_bytes, "size_bytes"),
            row_count=v.nonnegative(row_count, "row_count"),
        )
        .on_conflict_do_nothing()
        .returning(Manifest.id)
    )
    manifest_id = session.execute(stmt).scalar_one_or_none()
    if manifest_id is not None:
        return manifest_id
    recorded = session.execute(
        select(Manifest.id, Manifest.uri, Manifest.sha256).where(
            Manifest.dataset_version_id == dataset_version_id, Manifest.format == format
        )
    ).one_or_none()
    if recorded is None or recorded.uri != uri or recorded.sha256 != sha256:
        offered = (uri, sha256)
        raise CatalogConflictError(
            "manifest", uri, None if recorded is None else (recorded.uri, recorded.sha256), offered
        )
    return recorded.id
